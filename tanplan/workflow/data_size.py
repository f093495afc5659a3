"""The runs of the data-size term (tanplan.laws.data_size): where the proxies learn on a public set smaller than
the private one, the law's top rung trained again on half of that public set, so the prediction carries what
the data size does over the doublings it extrapolates. They learn on public examples only (the first ⌊N_pub/2⌋
of the public training split: data.train_examples), at the rung's own (B', σ', S), with as many seeds as it
has (at most MAX_SEEDS): their cost joins the law's proxy compute. tanplan.workflow.fit.with_data_size refits
the law with the term."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from tanplan.laws.data_size import DataSizeTerm, needs_term
from tanplan.outcomes.fit import ProxyRun
from tanplan.workflow.members import Members
from tanplan.workflow.proxy_runs import train_points

MAX_SEEDS = 4
LABEL = "data_size"  # the runs' folders: <out>/data_size_b<B'>_s<seed> (tanplan.workflow.proxy_runs)


def top_rung(rows: Sequence[ProxyRun], half_size: int) -> tuple[int, tuple[float, ...]] | None:
    """(B', its seeds' accuracies) of the largest rung with two seeds or more that half_size examples can
    sample (B' ≤ half_size); None without one."""
    rungs = defaultdict(list)
    for r in rows:
        rungs[int(r.batch_size)].append(float(r.test_accuracy))
    usable = [b for b, accs in rungs.items() if len(accs) >= 2 and b <= half_size]
    if not usable:
        return None
    b = max(usable)
    return b, tuple(rungs[b])


def measure(proxies, rows: Sequence[ProxyRun], public_size: int, private_size: int, out: Path | None, *,
            train_fn: Callable | None = None, log=print) -> tuple[DataSizeTerm | None, list[ProxyRun]]:
    """(the term, the runs it trained): None and no run where the public set holds N examples or more, or no
    rung can train on its half (said in the log)."""
    if not needs_term(public_size, private_size):
        return None, []
    half = public_size // 2
    found = top_rung(rows, half)
    if found is None:
        log(f"  data size: no rung of two seeds fits half of the {public_size} public examples: the prediction "
            f"carries no data-size term for N = {private_size}")
        return None, []
    b, accs = found
    seeds = min(len(accs), MAX_SEEDS)
    log(f"  data size: the public set holds {public_size} examples, the private {private_size}: B'={b} again on "
        f"the first {half} public examples × {seeds} seeds (what halving the data does, carried to N)")
    group = Members.of(proxies).group({"data.train_examples": half})
    runs = train_points(group, [b], seeds, out, train_fn=train_fn, log=log, label=LABEL)
    term = DataSizeTerm(public_size=public_size, private_size=private_size, half_size=half, batch_size=b,
                        public=accs, half=tuple(float(r.test_accuracy) for r in runs))
    log(f"  data size: {100 * term.per_halving:+.2f} points per halving × {term.doublings:.2f} doublings = "
        f"{100 * term.shift:+.2f} points, std {100 * term.variance ** 0.5:.2f} points")
    return term, runs

