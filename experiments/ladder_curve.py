"""Measure accuracy against the proxy batch size B' at the target's η_step and S, over several seeds.

    .venv/bin/python experiments/ladder_curve.py --config experiments/mnist1d.toml --sizes 16,32,64,128,256 \
        --seeds 0,1,2,3,4,5 --out curve.jsonl [--set privacy.epsilon=1.0 --set train.batch_size=2048]

One JSON line per run (b, seed, acc, sigma, wall), appended as each run ends, in one process so that
compiled code is shared. experiments/ladder_error_rates.py --measured curve.jsonl bootstraps the proxy
ladder's decisions from such a file (docs/ladder.md).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--sizes", required=True, help="comma-separated B'")
    parser.add_argument("--seeds", default="0,1", help="comma-separated experiment seeds")
    parser.add_argument("--out", required=True, help="JSON lines, appended")
    args = parser.parse_args()

    from tanplan.runtime import configure_process

    configure_process()
    from tanplan.config import load_config
    from tanplan.engine.loop import train_and_evaluate

    cfg = load_config(args.config, args.set)
    for seed in (int(s) for s in args.seeds.split(",")):
        for b in (int(s) for s in args.sizes.split(",")):
            started = time.perf_counter()
            summary = train_and_evaluate(cfg.with_overrides({"train.proxy_batch_size": b, "experiment.seed": seed}),
                                         None, progress=False)
            row = {"b": b, "seed": seed, "acc": summary["test_accuracy"], "sigma": summary["sigma"],
                   "wall": time.perf_counter() - started}
            print(json.dumps(row), flush=True)
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
