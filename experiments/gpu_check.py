"""The device check (issue #32): what tanplan costs on the accelerator it runs on, in one short run.

One stage per process (`--stage NAME`), each appending its rows to OUT/gpu_check.jsonl as soon as each is
measured, so a stage that fails or runs out of time loses only itself; `--report` turns the rows into
OUT/gpu_check.md and OUT/gpu_check.json. experiments/gpu_check.sh runs the stages in order within 8 minutes.

Stages:
- launch: a tiny end-to-end launch (mnist1d, `api.launch`: accounting, checkpoint, release): that it
  completes, its ε, and in how long;
- precision: steps/s of a CIFAR-shaped WRN-16-4 run (synthetic 32×32×3 uint8 data, crop_flip, AugMult 4)
  through THE loop, with train.compute_dtype float32 and bfloat16;
- ratios: the DP step ÷ fastest non-private step ratio (tanplan.engine.bench) for cnn1d, WRN-16-4 at B 256,
  ViT (vit_tiny) and NF-ResNet;
- accuracy: the demo's target run (experiments/mnist1d.toml: B 4096, 300 steps, ε 0.7, its default learning
  rate and momentum) in float32 and bfloat16, alternating, `--runs` of each: test accuracy mean ± std.
  Every run draws its own secret noise, so the spread is the run-to-run spread.
--dry-run: the smallest sizes on whatever device there is (a CPU: well under a minute a stage); it checks
the script, not the device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "mnist1d.toml"
RATIOS = [("cnn1d", 256, 0), ("wrn16_4", 256, 0), ("vit_tiny", 256, 0), ("nf_resnet", 64, 0)]
DRY_RATIOS = [("cnn1d", 8, 0), ("cnn2d", 4, 4)]
STAGES = ("launch", "precision", "ratios", "accuracy")


def append_row(out: Path, row: dict) -> None:
    """One measurement, written at once (a later stage's failure cannot lose it)."""
    with open(out / "gpu_check.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print(f"| {row['measure']} | {row['value']} | {row['detail']} |", flush=True)


def launch_stage(dry: bool, out: Path, work: Path) -> None:
    from tanplan import api

    sets = ["data.num_samples=1000", "train.batch_size=64", f"train.steps={2 if dry else 20}", "model.width=8",
            f"train.eval_every={2 if dry else 20}", "privacy.sigma=1.0", "privacy.epsilon=100"]
    started = time.perf_counter()
    result = api.launch(str(DEMO), work / "launch", overrides=sets)
    append_row(out, {"measure": "tiny end-to-end launch (mnist1d)", "value": "ok",
                     "detail": f"{time.perf_counter() - started:.0f} s wall with compilation; ε {result.accounting.epsilon:.3g} ({result.accounting.accountant}); "
                               f"route {result.summary.grad_method}; test accuracy {result.summary.test_accuracy:.3f}"})


def synthetic_cifar(path: Path, n: int) -> Path:
    """A CIFAR-shaped .npz of random uint8 pixels and labels: speed only, nothing to learn."""
    rng = np.random.default_rng(0)
    np.savez(path, x_train=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), y_train=rng.integers(0, 10, n),
             x_test=rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8), y_test=rng.integers(0, 10, 64))
    return path


def precision_stage(dry: bool, out: Path, work: Path) -> None:
    from tanplan import api

    n, batch, steps = (256, 16, 3) if dry else (50_000, 256, 30)
    model = ["model.name=cnn2d", "model.width=4"] if dry else ["model.name=wrn16_4"]
    data = synthetic_cifar(work / "cifar_synthetic.npz", n)
    for dtype in ("float32", "bfloat16"):
        summary = api.train(None, overrides=[
            "data.dataset=npz", f'data.path="{data}"', "data.augmentation=crop_flip", "data.aug_mult=4", *model,
            f"train.batch_size={batch}", f"train.physical_batch_size={batch}", f"train.steps={steps}",
            f"train.eval_every={steps}", "privacy.sigma=1.0", "privacy.epsilon=1000000", "train.learning_rate=0.5",
            f"train.compute_dtype={dtype}", "train.eval_batch_size=64"])
        timed = max(summary.steps_this_run - 1, 1)  # train_seconds starts once the first (compiling) step is done
        append_row(out, {"measure": f"steps/s, {'cnn2d (dry)' if dry else 'WRN-16-4'} B {batch} AugMult 4, {dtype}",
                         "value": round(timed / max(summary.train_seconds, 1e-9), 3),
                         "detail": f"route {summary.grad_method}; {timed} steps timed after compilation"})


def ratios_stage(dry: bool, out: Path, work: Path) -> None:
    from tanplan.engine.bench import bench_model

    for model, batch, width in DRY_RATIOS if dry else RATIOS:
        r = bench_model(model, batch, repeats=1 if dry else 5, warmup=1 if dry else 2, width=width)
        append_row(out, {"measure": f"DP ÷ non-private step, {model} B {batch}", "value": round(r.ratio, 3),
                         "detail": f"route {r.route}; DP {r.dp_samples_per_second:.0f} samples/s; "
                                   f"non-private ({r.nonprivate_route}) {r.nonprivate_samples_per_second:.0f}"})


def accuracy_stage(dry: bool, out: Path, work: Path, runs: int) -> None:
    from tanplan import api

    sizes = (["data.num_samples=2000", "train.batch_size=256", "train.steps=3", "train.eval_every=3",
              "privacy.epsilon=50"] if dry else ["train.physical_batch_size=2048", "train.eval_every=300"])
    accuracies: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for i in range(runs):
        for dtype in accuracies:  # alternating: a stage cut short still holds as many runs of each
            summary = api.train(str(DEMO), overrides=[*sizes, f"train.compute_dtype={dtype}"])
            accuracies[dtype].append(summary.test_accuracy)
            append_row(out, {"measure": f"demo target run {i + 1}, {dtype}", "value": round(summary.test_accuracy, 4),
                             "detail": f"route {summary.grad_method}; {summary.train_seconds:.1f} s training"})
    for dtype, values in accuracies.items():
        spread = statistics.stdev(values) if len(values) > 1 else float("nan")
        append_row(out, {"measure": f"demo target accuracy, {dtype} ({len(values)} runs)",
                         "value": f"{statistics.mean(values):.4f} ± {spread:.4f}",
                         "detail": "mean ± std over runs, each with its own secret noise"})


def report(out: Path) -> int:
    rows = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()] if (out / "gpu_check.jsonl").exists() else []
    first = next((r for r in rows if "device" in r), {"device": "unknown", "dry_run": None})
    rows = [r for r in rows if "device" not in r]
    device = first["device"]
    lines = [f"Device: {device}{' (dry run: not performance figures)' if first['dry_run'] else ''}", "",
             "| measure | value | detail |", "|---|---|---|"]
    lines += [f"| {r['measure']} | {r['value']} | {r['detail']} |" for r in rows]
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "gpu_check.json").write_text(json.dumps({"device": device, "dry_run": first["dry_run"], "rows": rows},
                                                   indent=2), encoding="utf-8")
    print("\n".join(lines))
    return 0 if rows and all(str(r["value"]) not in ("", "failed") for r in rows) else 1


def run_stage(name: str, dry: bool, out: Path, runs: int) -> int:
    import jax

    from tanplan.runtime import configure_process

    configure_process()  # the CPU flag where JAX runs on the CPU alone, the compilation cache
    if not (out / "gpu_check.jsonl").exists():
        device = f"{jax.devices()[0].device_kind} ({jax.default_backend()}, {jax.device_count()} device(s))"
        append_row(out, {"device": device, "dry_run": dry, "measure": "device", "value": device,
                         "detail": f"jax {jax.__version__}{' (dry run)' if dry else ''}"})
    stages = {"launch": launch_stage, "precision": precision_stage, "ratios": ratios_stage}
    with tempfile.TemporaryDirectory() as work:
        try:
            if name == "accuracy":
                accuracy_stage(dry, out, Path(work), runs)
            else:
                stages[name](dry, out, Path(work))
        except Exception as err:  # one stage's failure is a row, not the end of the check
            append_row(out, {"measure": f"stage {name}", "value": "failed", "detail": f"{type(err).__name__}: {err}"})
            return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="smallest sizes: checks the script on a CPU")
    parser.add_argument("--out", required=True, help="folder for gpu_check.jsonl, .md and .json")
    parser.add_argument("--stage", choices=STAGES, help="run one stage (appends its rows)")
    parser.add_argument("--runs", type=int, default=3, help="accuracy stage: runs of each dtype")
    parser.add_argument("--report", action="store_true", help="write gpu_check.md and .json from the rows")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        return report(out)
    return run_stage(args.stage, args.dry_run, out, args.runs)


if __name__ == "__main__":
    sys.exit(main())
