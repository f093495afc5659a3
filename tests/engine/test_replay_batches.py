"""No public file of a run holds a noiseless function of its sampled batches: an attack that replays the
run's secret must find none.

Whoever holds the secret (checkpoint/run_secret.json) can replay every Poisson batch; their sizes are
private (with N public, their sum alone is a (0.23, 1/N) release at the demo's target). The attack below
computes functions of the replayed sizes (sums from each step on, the examples seen by each evaluation,
the sum of squares, the extremes, the layout a batch forced) and looks for each among the numbers of every
public file (config, metrics, ledger, summary, model card), and among the products and ratios of any two
of their measured (non-integer) figures: `samples_per_second × train_seconds` is how the sampled count
leaked before (4762.0 in a demo launch). The planned layout is made too small here, so every batch
outgrows it: the summary must still show the planned one. The attack is shown to catch that old leak.
"""

import json
import math
import re

import pytest
from helpers import tiny_overrides

from tanplan.config import load_config
from tanplan.dp import sampling
from tanplan.dp.secret import BATCH, RunSecret
from tanplan.engine.loop import train_and_evaluate
from tanplan.job import job_of

N, B, S = 240, 32, 8
PLANNED = sampling.BatchLayout(1, 16)  # every Poisson batch (≈ 32 rows) outgrows it


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A hex digest (params_checksum) is no figure: its digit runs would match small statistics by chance.
HEX_DIGEST = re.compile(r"(?<![\w.+-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}(?![\w.+-])")


def _numbers(text: str) -> list[float]:
    return [float(t) for t in NUMBER.findall(text)]


def _event_scalars(path) -> str:
    """A TensorBoard event file's scalars as text, one `tag step value` a line: its bytes read as text would
    show the digit runs of its binary floats, which match small statistics by chance ('2\ufffd61' once)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path))
    events.Reload()
    return "\n".join(f"{tag} {e.step} {e.value!r}" for tag in events.Tags()["scalars"] for e in events.Scalars(tag))


def _public_numbers(run_dir) -> dict[float, str]:
    """Every number written in a file of the run outside its private checkpoint folder (binary arrays aside;
    TensorBoard's scalars read as the values they are), with the file and the text around it."""
    found = {}
    for path in run_dir.rglob("*"):
        if path.is_file() and (run_dir / "checkpoint") not in path.parents and path.suffix not in (".npz", ".png"):
            text = _event_scalars(path) if path.name.startswith("events.out.tfevents") else \
                path.read_text(encoding="utf-8", errors="replace")
            text = HEX_DIGEST.sub("#", text)
            for m in NUMBER.finditer(text):
                found.setdefault(float(m.group()), f"{path.name}: ...{text[max(0, m.start() - 40):m.end()]}")
    return found


def _statistics(sizes: list[int]) -> dict[str, float]:
    """Functions of the sampled batch sizes that a careless run could publish."""
    stats = {f"examples from step {k + 1} on": float(sum(sizes[k:])) for k in range(len(sizes) - 1)}
    stats |= {f"examples in steps 1..{k}": float(sum(sizes[:k])) for k in range(2, len(sizes) + 1)}
    stats |= {"sum of squares": float(sum(s * s for s in sizes)), "largest batch": float(max(sizes)),
              "smallest batch": float(min(sizes)), "mean batch": sum(sizes) / len(sizes),
              "grown layout rows": float(PLANNED.grown_to(max(sizes)).capacity),
              "grown layout chunks": float(PLANNED.grown_to(max(sizes)).chunks)}
    return stats


def _attack(public: dict[float, str], stats: dict[str, float], explained: set[float]) -> list[str]:
    """The statistics found among the public numbers, or the products and ratios of two measured figures.
    A statistic that public information predicts (a multiple of B, a config number) proves nothing: skipped."""
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)  # noqa: E731
    targets = {name: v for name, v in stats.items()
               if not any(close(v, e) for e in explained) and not close(v / B, round(v / B))}
    # figures public information predicts (the config's, the plan's PLD grid) are not measurements: a product
    # or ratio of two of them is as public as they are (0.3 / 0.005 met a sampled count by chance)
    measured = sorted({x for x in public if x != 0 and not float(x).is_integer()
                       and not any(close(x, e) for e in explained)})
    derived = dict(public)
    derived |= {x * y: f"{x!r} × {y!r}" for x in measured for y in measured}
    derived |= {x / y: f"{x!r} / {y!r}" for x in measured for y in measured}
    return sorted(f"{name} = {v!r}: {how}" for name, v in targets.items() for x, how in derived.items() if close(v, x))


@pytest.fixture(scope="module")
def finished(tiny_npz, tmp_path_factory):
    """A finished run whose batches all outgrew its planned layout: (folder, summary, replayed sizes)."""
    # vmap: the per-example route's choice (self-check, costing: tests/engine/test_routes.py) is not tested here
    cfg = load_config(None, tiny_overrides(tiny_npz, f"train.steps={S}", "train.eval_every=3",
                                           "train.checkpoint_every=4", "train.grad_method=vmap"))
    out = tmp_path_factory.mktemp("replay") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(sampling, "batch_layout", lambda *args, **kwargs: PLANNED)
    try:
        summary = train_and_evaluate(job_of(cfg), out, progress=False)
    finally:
        mp.undo()
    secret = RunSecret.load(out / "checkpoint")
    sizes = [len(sampling.poisson_batch(N, B / N, secret.batch_rng(BATCH, t))) for t in range(S)]
    return out, summary, sizes


def _explained(out) -> set[float]:
    """Numbers public information gives: the config's, N, B, S, the test set's size, the input's length, the
    PLD grid the plan chose (tanplan.privacy.accounting.pld_grid: a function of q, σ, S and δ), and the model's
    trainable and frozen parameter counts (its structure: 154 met a sampled count by chance)."""
    grid = json.loads((out / "ledger.json").read_text()).get("pld_interval")
    summary = json.loads((out / "summary.json").read_text())
    counts = {float(summary[k]) for k in ("trainable_parameters", "frozen_parameters")}
    return set(_numbers((out / "config.toml").read_text())) | {N, B, S, 80.0, 16.0} | ({grid} if grid else set()) | counts


def test_no_public_figure_is_a_function_of_the_sampled_batches(finished):
    out, summary, sizes = finished
    assert max(sizes) > PLANNED.capacity  # the layout grew, privately
    assert summary.layout.to_dict() == {"chunks": PLANNED.chunks, "chunk_size": PLANNED.chunk_size}
    assert summary.samples_per_second * summary.train_seconds == pytest.approx(B * (S - 1), rel=1e-9)
    assert _attack(_public_numbers(out), _statistics(sizes), _explained(out)) == []


def test_the_attack_catches_the_sampled_count_of_earlier_versions(finished):
    out, summary, sizes = finished
    public, stats, explained = _public_numbers(out), _statistics(sizes), _explained(out)
    # Earlier versions published (examples sampled after the first step) / train_seconds. Should that count
    # happen to equal a public number in this draw, the same leak from a later step is the one to catch.
    k = next(k for k in range(1, S - 1)
             if _attack({float(sum(sizes[k:])): ""}, {"leak": float(sum(sizes[k:]))}, explained))
    old_throughput = sum(sizes[k:]) / summary.train_seconds
    assert any(leak.startswith(f"examples from step {k + 1} on") for leak in
               _attack({**public, old_throughput: "samples_per_second"}, stats, explained))
