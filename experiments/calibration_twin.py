"""The replay of experiments/calibration.py scored against a pool's public twin of the target as well as its
launches: the rung trained at B' = B (the target's B, σ and S on the proxies' public data, which the ladder
never trains), to tell the law's error (prediction against the twin) from the public data's (the twin against
the launches). docs/calibration.md, "Fine-tuning".

    .venv/bin/python experiments/calibration_twin.py [--setting finetune] [--draws 400]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration import evaluate, load_pool, new_rule, sweep_spent  # noqa: E402
from calibration_pools import POOLS, SETTINGS  # noqa: E402

from tanplan.laws.batch_law import forms_of  # noqa: E402

LAWS = ("knee", "noise")


def twin_rows(name: str, draws: int, pools: Path = POOLS) -> list[str]:
    """Markdown rows, one a law: coverage and median error against the twin, then against the launches."""
    pool = load_pool(pools / f"{name}.jsonl", SETTINGS[name].test_sizes)
    if len(pool.rungs.get(pool.target_batch_size, [])) < 2:
        raise SystemExit(f"{name}: no public twin (a rung at B' = {pool.target_batch_size} with 2 runs or more)")
    twin = dataclasses.replace(pool, launches=pool.rungs[pool.target_batch_size])
    spent = sweep_spent(SETTINGS[name])
    rows = []
    for law in LAWS:
        rng = np.random.default_rng(0)  # each law on the same draws
        outcomes = [new_rule(pool, rng, sweep_spent=spent, forms=forms_of(law)) for _ in range(draws)]
        t, l = evaluate(twin, outcomes, law), evaluate(pool, outcomes, law)
        rows.append(f"| {law} | {t.coverage:.3f} | {100 * t.median_error:.2f} | {l.coverage:.3f} | "
                    f"{100 * l.median_error:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", default="finetune", choices=sorted(SETTINGS))
    parser.add_argument("--draws", type=int, default=400)
    args = parser.parse_args()
    pool = load_pool(POOLS / f"{args.setting}.jsonl")
    twin = pool.rungs.get(pool.target_batch_size, [])
    print(f"{args.setting}: twin {statistics.fmean(twin):.3f} ± {statistics.stdev(twin):.3f} ({len(twin)}), "
          f"launches {pool.launch_mean:.3f} ± {pool.launch_std:.3f} ({len(pool.launches)})\n")
    print("| law | coverage of the twin | median \\|pred − twin mean\\| (pts) | coverage of the launches | "
          "median \\|pred − launch mean\\| (pts) |\n|---|---|---|---|---|")
    print("\n".join(twin_rows(args.setting, args.draws)))


if __name__ == "__main__":
    main()
