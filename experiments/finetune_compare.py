"""The fine-tuning comparison of docs/finetune.md: DP-SGD from scratch against DP fine-tuning from weights
pretrained (without privacy) on the shifted public mnist1d set, with 0 / some / all-but-head layers frozen,
at each ε, over several seeds (experiment.seed: the initialisation and the head; the noise and batches come
from each run's secret). Writes reports/finetune/table.md and results.json.

    python experiments/finetune_compare.py [--epsilons 0.5 1 4] [--seeds 3] [--out reports/finetune]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tanplan

CONFIG = "experiments/mnist1d_finetune.toml"
ROUTES = {  # name -> [init] overrides (None: from scratch)
    "from scratch": None,
    "fine-tune, 0 frozen": {},
    "fine-tune, first 2 blocks frozen": {"init.frozen": ["Conv_0", "NormAct_0", "Conv_1", "NormAct_1"]},
    "fine-tune, all but head frozen": {"init.frozen": ["Conv_*", "NormAct_*"]},
}
PRETRAIN = {"train.optimizer": "adam", "train.learning_rate": 0.003, "train.steps": 400, "train.ema_decay": 0.0,
            "train.momentum": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default="reports/finetune")
    args = parser.parse_args()
    out = Path(args.out)
    public = out / "mnist1d_shifted.npz"
    if not public.is_file():
        subprocess.run([sys.executable, "experiments/mnist1d_shifted.py", str(public)], check=True)
    cfg = tanplan.as_config(CONFIG, {"tuning.path": str(public)})
    pre = out / "pretrained"
    if not (pre / "model" / "params.npz").is_file():
        started = time.perf_counter()
        done = tanplan.pretrain(cfg, pre, overrides=PRETRAIN)
        print(f"pretrained on the shifted public set: test accuracy {done.test_accuracy:.3f} on it "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    results = {}
    for eps in args.epsilons:
        for route, init in ROUTES.items():
            accs, started = [], time.perf_counter()
            for seed in range(args.seeds):
                sets = {"privacy.epsilon": eps, "experiment.seed": seed}
                if init is not None:
                    sets |= {"init.path": str(pre), **init}
                accs.append(tanplan.train(cfg, None, overrides=sets).test_accuracy)
            results[f"{eps:g}|{route}"] = accs
            print(f"ε = {eps:g}, {route}: {statistics.mean(accs):.3f} ± {statistics.stdev(accs):.3f} "
                  f"({args.seeds} runs, {time.perf_counter() - started:.0f} s)", flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    lines = ["| ε | " + " | ".join(ROUTES) + " |", "| --- |" + " --- |" * len(ROUTES)]
    for eps in args.epsilons:
        cells = [results[f"{eps:g}|{r}"] for r in ROUTES]
        lines.append(f"| {eps:g} | " + " | ".join(f"{statistics.mean(a):.3f} ± {statistics.stdev(a):.3f}"
                                                  for a in cells) + " |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
