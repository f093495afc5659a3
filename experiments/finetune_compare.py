"""The comparison of docs/finetune.md, the three routes on one task: DP-SGD from scratch; DP fine-tuning from
weights pretrained (without privacy) on the shifted public mnist1d set, with 0 / some / all-but-head layers
frozen; and the private heads (DP-LS, DPPL-Public) on the same pretrained encoder's features, at each ε
(the config's δ and accountant), over several seeds. DP-SGD: experiment.seed is the initialisation and the
head, the noise and batches come from each run's secret; heads: each run draws its noise from OS entropy.
Writes reports/finetune/table.md, results.json and finetune.png (accuracy against ε).

    python experiments/finetune_compare.py [--epsilons 0.5 1 4] [--seeds 3] [--out reports/finetune]
        [--routes scratch adapters]   # only the routes (and heads) whose names hold one of these words
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import matplotlib.ticker
import numpy as np

import tanplan
from tanplan.baselines.released import released_features
from tanplan.baselines.runner import run_baseline, warm_imports
from tanplan.engine.setup import load_data
from tanplan.privacy.plan import default_delta
from tanplan.workflow.pretrain import pretrain_config

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

CONFIG = "experiments/mnist1d_finetune.toml"
ROUTES = {  # name -> [init] overrides (None: from scratch)
    "from scratch": None,
    "fine-tune, 0 frozen": {},
    "fine-tune, first 2 blocks frozen": {"init.frozen": ["Conv_0", "NormAct_0", "Conv_1", "NormAct_1"]},
    "fine-tune, all but head frozen": {"init.frozen": ["Conv_*", "NormAct_*"]},
    # LoRA on every Conv and the head's Dense, the base frozen (tanplan.models.adapters); released merged
    "adapters, rank 8": {"init.adapters": ["Conv_*", "Dense_*"], "init.adapters_rank": 8},
}
HEADS = {"DP-LS head": "dp-ls", "DPPL-Public head": "dppl-public"}  # name -> tanplan.baselines method
PRETRAIN = {"train.optimizer": "adam", "train.learning_rate": 0.003, "train.steps": 400, "train.ema_decay": 0.0,
            "train.momentum": 0.0}


def prepare(out: Path):
    """The config pointed at the shifted public set, and the pretrained run folder (both built once)."""
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
    return cfg, pre


def dp_sgd(cfg, pre: Path, eps: float, route: str, seeds: int) -> tuple[list[float], float]:
    """(test accuracies, δ) of `seeds` DP-SGD runs of one route at ε."""
    accs, deltas = [], set()
    for seed in range(seeds):
        sets = {"privacy.epsilon": eps, "experiment.seed": seed}
        if ROUTES[route] is not None:
            sets |= {"init.path": str(pre), **ROUTES[route]}
        summary = tanplan.train(cfg, None, overrides=sets)
        accs.append(summary.test_accuracy)
        deltas.add(summary.delta)
    return accs, deltas.pop() if len(deltas) == 1 else float("nan")


def head_features(cfg, pre: Path):
    """The pretrained encoder's features of the private split (the DP-SGD runs' train/test split) and of
    the public set (DPPL-Public's pool), standardised with the public statistics: extracted once; and the
    pretrained model's own accuracy on the private test split (no private training: the routes' start)."""
    private, public = load_data(cfg.data), load_data(pretrain_config(cfg).data)
    logits = np.asarray(tanplan.load_run(pre).predict(private.x_test))
    as_is = float(np.mean(logits.argmax(1) == private.y_test))
    pool = np.concatenate([public.x_train, public.x_test])
    return released_features(pre, private, pool, data=cfg.data), as_is  # data: judged other data, public weights


def heads(features, eps: float, delta: float, accountant: str, method: str, seeds: int) -> list[float]:
    """Test accuracies of `seeds` releases of one head at (ε, δ), each with fresh secret noise."""
    data, pool = features
    accs = []
    for _ in range(seeds):
        result = run_baseline(method, data, eps, delta, pool, seed=None, accountant=accountant)
        assert result.noise_secret and result.epsilon <= eps * (1 + 1e-9) and result.delta <= delta
        accs.append(result.accuracy)
    return accs


def cell(accs: list[float]) -> str:
    return f"{statistics.mean(accs):.3f} ± {statistics.stdev(accs):.3f}"


def table(results: dict, epsilons: list[float], names: list[str]) -> str:
    lines = ["| ε | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    lines += [f"| {eps:g} | " + " | ".join(cell(results[f"{eps:g}|{r}"]) for r in names) + " |" for eps in epsilons]
    return "\n".join(lines) + "\n"


def figure(results: dict, epsilons: list[float], path: Path, delta: float, as_is: float, names: list[str]) -> None:
    """Test accuracy against ε (log axis), one line per route, ± the sample standard deviation; dotted, the
    pretrained model as it is (no private training)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    ax.axhline(as_is, color="grey", linestyle=":", label="pretrained, as it is (no private data)")
    for name in names:
        runs = [results[f"{eps:g}|{name}"] for eps in epsilons]
        ax.errorbar(epsilons, [statistics.mean(a) for a in runs], yerr=[statistics.stdev(a) for a in runs],
                    marker="o" if name in ROUTES else "s", linestyle="-" if name in ROUTES else "--",
                    capsize=3, label=name)
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())  # only the ε that were run are labelled
    ax.set_xticks(epsilons, [f"{eps:g}" for eps in epsilons])
    ax.set_xlabel(f"ε (δ = {delta:.2g})")
    ax.set_ylabel("test accuracy (private mnist1d task)")
    ax.set_title("mnist1d: from scratch, fine-tuning, private heads")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default="reports/finetune")
    parser.add_argument("--routes", nargs="+", default=[], help="words: only the routes whose names hold one")
    args = parser.parse_args()
    names = [n for n in [*ROUTES, *HEADS] if not args.routes or any(w in n for w in args.routes)]
    out = Path(args.out)
    cfg, pre = prepare(out)
    features, as_is = head_features(cfg, pre)
    print(f"the pretrained model as it is, on the private test split: {as_is:.3f}", flush=True)
    delta = cfg.privacy.delta or default_delta(features[0].x_train.shape[0])
    warm_imports([method for name, method in HEADS.items() if name in names])
    results = {}
    for eps in args.epsilons:
        for name in names:
            started = time.perf_counter()
            if name in ROUTES:
                accs, run_delta = dp_sgd(cfg, pre, eps, name, args.seeds)
                assert math.isclose(run_delta, delta, rel_tol=1e-9), f"DP-SGD's δ {run_delta} ≠ the heads' {delta}"
            else:
                accs = heads(features, eps, delta, cfg.privacy.accountant, HEADS[name], args.seeds)
            results[f"{eps:g}|{name}"] = accs
            print(f"ε = {eps:g}, {name}: {cell(accs)} ({args.seeds} runs, {time.perf_counter() - started:.0f} s)",
                  flush=True)
    (out / "results.json").write_text(json.dumps({"delta": delta, "accountant": cfg.privacy.accountant,
                                                  "pretrained_as_is": as_is, "accuracies": results}, indent=1))
    (out / "table.md").write_text(table(results, args.epsilons, names))
    figure(results, args.epsilons, out / "finetune.png", delta, as_is, names)
    print(table(results, args.epsilons, names), end="")


if __name__ == "__main__":
    main()
