"""Issue 47, item 1's acceptance: are the routes' predictions (`tanplan run --routes`) right about which route to
launch? On experiments/mnist1d_finetune.toml, from weights pretrained on the shifted public set (as
experiments/finetune_compare.py makes them), at each ε:

1. `run --routes scratch,finetune,adapters,heads` (tanplan.compare_routes): each route predicted on public data;
2. `--launches` launches of EVERY route (what the comparison avoids): a DP-SGD route launched with its own
   sweep's best configuration (its routes/<route>/sweep/best.json, as its prediction is of it), experiment.seed
   0, 1, 2 (noise and batches from each run's secret); the head released `--launches` times, fresh noise each.

It prints, per ε, a markdown table (route, prediction [interval], launched mean ± std over the launches, how many
launches fell inside the interval), whether the predicted winner's launched mean is within the launch spread of
the best route's (best mean − winner's mean ≤ 2·√((s_best² + s_winner²)/n), n launches each: the difference is
not significant at about 95%), and the wall time and compute of the comparison (every route's proxies and the
head's releases) against launching every route once. Writes OUT/table.md and OUT/results.json.

    .venv/bin/python experiments/routes_compare.py                       # ε 1 and 4, 3 launches (hours on 2 CPUs)
    .venv/bin/python experiments/routes_compare.py --quick --out /tmp/rq # a smoke run: tiny stages, ~minutes
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tanplan
from tanplan.workflow.pipeline import routes as routes_module

CONFIG = "experiments/mnist1d_finetune.toml"
ROUTES = "scratch,finetune,adapters,heads"
FROZEN = ["Conv_0", "NormAct_0", "Conv_1", "NormAct_1"]  # the finetune route's [init]: docs/finetune.md's run
PRETRAIN = {"train.optimizer": "adam", "train.learning_rate": 0.003, "train.steps": 400, "train.ema_decay": 0.0,
            "train.momentum": 0.0}
QUICK = {"train.steps": 10, "train.eval_every": 10, "sweep.trials": 1, "sweep.top_k": 0, "fit.batch_sizes": [16, 32],
         "fit.seeds": 2, "fit.max_half_width": 50.0, "data.num_samples": 2000}


def pretrained(out: Path, quick: bool) -> Path:
    """The pretrained run folder (built once), on the shifted public set (--quick: 20 steps)."""
    pre = out / "pretrained"
    if (pre / "model" / "params.npz").is_file():
        return pre
    public = out / "mnist1d_shifted.npz"
    if not public.is_file():
        subprocess.run([sys.executable, "experiments/mnist1d_shifted.py", str(public)], check=True)
    sets = {**PRETRAIN, "tuning.path": str(public)}  # not the proxies' public draw: they would learn its task
    if quick:
        sets |= {"train.steps": 20, "data.num_samples": QUICK["data.num_samples"]}
    started = time.perf_counter()
    done = tanplan.pretrain(CONFIG, pre, overrides=sets)
    print(f"pretrained: test accuracy {done.test_accuracy:.3f} on its public set "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    return pre


def launch_every_route(compared, cfg, folder: Path, launches: int) -> dict:
    """{route: (accuracies, wall seconds of one launch on average, its compute)}: `launches` launches of each."""
    found = {}
    for row in compared.routes:
        rcfg = routes_module.route_config(cfg, row.route)
        started, accs = time.perf_counter(), []
        if row.route == "heads":
            s = routes_module.head_setting(rcfg)
            private = routes_module.private_features(s)  # made once: each launch a release, fresh noise
            accs += [routes_module.release_head(s, private).accuracy for _ in range(launches)]
        else:
            best = folder / "compare" / row.folder / "sweep" / "best.json"
            for seed in range(launches):
                run = folder / "launches" / f"{row.route}_{seed}"
                if (run / "summary.json").is_file():  # a rerun keeps the launches that finished
                    accs.append(float(json.loads((run / "summary.json").read_text())["test_accuracy"]))
                    continue
                done = tanplan.launch(rcfg, run, best=best, overrides={"experiment.seed": cfg.experiment.seed + seed})
                accs.append(float(done.summary.test_accuracy))
        found[row.route] = (accs, (time.perf_counter() - started) / launches, row.launch_compute)
        print(f"  launched {row.route} × {launches}: {statistics.mean(accs):.4f} ± {_std(accs):.4f}", flush=True)
    return found


def _std(values) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def report(eps: float, compared, launched: dict, compare_seconds: float, launches: int) -> tuple[str, dict]:
    """The markdown of one ε and its record."""
    lines = [f"### ε = {eps:g}", "", "| route | prediction [interval] | launched mean ± std | inside | standing |",
             "|---|---|---|---|---|"]
    for r in compared.routes:
        accs = launched[r.route][0]
        low, high = r.prediction_interval or (math.nan, math.nan)
        inside = sum(low <= a <= high for a in accs)
        shown = f"{r.predicted_accuracy:.4f} [{low:.4f}, {high:.4f}]" if r.predicted_accuracy is not None else "—"
        lines.append(f"| {r.route} | {shown} | {statistics.mean(accs):.4f} ± {_std(accs):.4f} | {inside}/{len(accs)} "
                     f"| {r.standing} |")
    means = {k: statistics.mean(v[0]) for k, v in launched.items()}
    best, winner = max(means, key=means.get), compared.recommended
    if winner is None:
        verdict = "no route recommended"
    else:
        gap = means[best] - means[winner]
        spread = 2 * math.sqrt((_std(launched[best][0]) ** 2 + _std(launched[winner][0]) ** 2) / launches)
        verdict = (f"recommended {winner} ({means[winner]:.4f} launched), best launched {best} ({means[best]:.4f}): "
                   f"gap {gap:.4f} {'≤' if gap <= spread else '>'} the launch spread {spread:.4f}: "
                   f"{'right' if gap <= spread else 'WRONG'}")
    proxies = sum(r.proxy_compute for r in compared.routes if r.proxy_unit == "example-gradients")
    every = sum(r.launch_compute for r in compared.routes if r.launch_unit == "example-gradients")
    won = next((r for r in compared.routes if r.route == winner), None)
    every_wall = sum(v[1] for v in launched.values())
    then = (f" then the winner's launch: {launched[winner][1]:.0f} s, {won.launch_compute:,} {won.launch_unit}"
            if won else "")
    cost = (f"comparison: {compare_seconds:.0f} s, {proxies:,} example-gradients of proxies (and the head's public "
            f"forward passes){then}; launching every route once instead: {every_wall:.0f} s, {every:,} "
            "example-gradients (and the head's forward passes)")
    lines += ["", verdict, "", cost, ""]
    record = {"epsilon": eps, "compare": compared.to_dict(), "launched": {k: v[0] for k, v in launched.items()},
              "launch_wall_seconds": {k: v[1] for k, v in launched.items()}, "compare_wall_seconds": compare_seconds,
              "verdict": verdict, "cost": cost}
    return "\n".join(lines), record


def _sets(pairs: list[str]) -> dict:
    """--set KEY=VALUE pairs, each value read as TOML (a number, a bool, a quoted string, a list)."""
    import tomllib

    return {key: tomllib.loads(f"v = {value}")["v"] for key, _, value in (p.partition("=") for p in pairs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--out", default="reports/routes")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny stages, one ε, two launches")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every route and launch (e.g. sweep.trials=8)")
    args = parser.parse_args()
    out = Path(args.out)
    epsilons, launches = (args.epsilons[:1], min(args.launches, 2)) if args.quick else (args.epsilons, args.launches)
    pre = pretrained(out, args.quick)
    base = {"init.path": str(pre), "init.frozen": FROZEN, **(QUICK if args.quick else {}),
            **_sets(args.set)}
    sections, records = [], []
    for eps in epsilons:
        folder = out / f"eps{eps:g}"
        cfg = tanplan.as_config(CONFIG, {**base, "privacy.epsilon": eps})
        started = time.perf_counter()
        compared = tanplan.compare_routes(cfg, folder / "compare", ROUTES, log=print,
                                          resume=(folder / "compare" / "run.json").is_file())
        compare_seconds = time.perf_counter() - started
        print(f"ε = {eps:g}: {compared.recommendation} ({compare_seconds:.0f} s)", flush=True)
        text, record = report(eps, compared, launch_every_route(compared, cfg, folder, launches), compare_seconds,
                              launches)
        print(text, flush=True)
        sections.append(text)
        records.append(record)
    (out / "table.md").write_text("\n".join(sections))
    (out / "results.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
