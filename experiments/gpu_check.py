"""The device check (issue #32): what tanplan costs on the accelerator it runs on, in one short run.

Measures, and writes as a Markdown table (OUT/gpu_check.md) and JSON (OUT/gpu_check.json):
1. the DP step ÷ fastest non-private step ratio (tanplan.engine.bench) for cnn1d, WRN-16-4 at B 256,
   ViT (vit_tiny) and NF-ResNet;
2. steps/s of a CIFAR-shaped WRN-16-4 run (synthetic 32×32×3 data, crop_flip, AugMult 4) through THE loop,
   with train.compute_dtype float32 and bfloat16;
3. a tiny end-to-end `tanplan launch` (mnist1d): that it completes, and in how long.
--dry-run does the same with the smallest sizes (cnn1d, a narrow cnn2d instead of WRN-16-4, a few steps)
so that a CPU runs it in well under a minute: it checks the script, not the device.
Run it through experiments/gpu_check.sh (which installs the wheels carried beside it, with no network).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from tanplan import api
from tanplan.engine.bench import bench_model
from tanplan.runtime import configure_process

ROOT = Path(__file__).resolve().parents[1]
RATIOS = [("cnn1d", 256, 0), ("wrn16_4", 256, 0), ("vit_tiny", 256, 0), ("nf_resnet", 64, 0)]
DRY_RATIOS = [("cnn1d", 8, 0), ("cnn2d", 4, 4)]


def ratio_rows(dry: bool) -> list[dict]:
    rows = []
    for model, batch, width in DRY_RATIOS if dry else RATIOS:
        r = bench_model(model, batch, repeats=1 if dry else 5, warmup=1 if dry else 2, width=width)
        rows.append({"measure": f"DP ÷ non-private step, {model} B {batch}", "value": round(r.ratio, 3),
                     "detail": f"route {r.route}; DP {r.dp_samples_per_second:.0f} samples/s; "
                               f"non-private ({r.nonprivate_route}) {r.nonprivate_samples_per_second:.0f}"})
    return rows


def synthetic_cifar(path: Path, n: int) -> Path:
    """A CIFAR-shaped .npz of random uint8 pixels and labels: speed only, nothing to learn."""
    rng = np.random.default_rng(0)
    np.savez(path, x_train=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), y_train=rng.integers(0, 10, n),
             x_test=rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8), y_test=rng.integers(0, 10, 64))
    return path


def precision_rows(dry: bool, work: Path) -> list[dict]:
    n, batch, steps = (256, 16, 2) if dry else (50_000, 256, 20)
    model = ["model.name=cnn2d", "model.width=4"] if dry else ["model.name=wrn16_4"]
    data = synthetic_cifar(work / "cifar_synthetic.npz", n)
    rows = []
    for dtype in ("float32", "bfloat16"):
        summary = api.train(None, overrides=[
            "data.dataset=npz", f'data.path="{data}"', "data.augmentation=crop_flip", "data.aug_mult=4", *model,
            f"train.batch_size={batch}", f"train.physical_batch_size={batch}", f"train.steps={steps}",
            f"train.eval_every={steps}", "privacy.sigma=1.0", "privacy.epsilon=1000000", "train.learning_rate=0.5",
            f"train.compute_dtype={dtype}", "train.eval_batch_size=64"])
        rows.append({"measure": f"steps/s, {'cnn2d (dry)' if dry else 'WRN-16-4'} B {batch} AugMult 4, {dtype}",
                     "value": round(summary.steps_this_run / max(summary.train_seconds, 1e-9), 3),
                     "detail": f"route {summary.grad_method}; {summary.samples_per_second:.0f} samples/s"})
    return rows


def launch_row(dry: bool, work: Path) -> dict:
    sets = ["data.num_samples=1000", "train.batch_size=64", "train.steps=2" if dry else "train.steps=20",
            "model.width=8", "train.eval_every=2" if dry else "train.eval_every=20", "privacy.sigma=1.0",
            "privacy.epsilon=100"]
    cmd = [sys.executable, "-m", "tanplan", "launch", "--config", str(ROOT / "experiments" / "mnist1d.toml"),
           "--out", str(work / "launch"), "--json", *sum([["--set", s] for s in sets], [])]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    ok = proc.returncode == 0
    return {"measure": "tiny end-to-end launch (mnist1d)", "value": "ok" if ok else f"exit {proc.returncode}",
            "detail": f"{seconds:.0f} s wall" + ("" if ok else f"; {proc.stderr.strip().splitlines()[-1:]}")}


def table(rows: list[dict], device: str) -> str:
    lines = [f"Device: {device}", "", "| measure | value | detail |", "|---|---|---|"]
    lines += [f"| {r['measure']} | {r['value']} | {r['detail']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="smallest sizes: checks the script on a CPU")
    parser.add_argument("--out", default=None, help="folder for gpu_check.md and gpu_check.json")
    args = parser.parse_args(argv)
    configure_process()  # the CPU flag where JAX runs on the CPU alone, the compilation cache
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu_check-"))
    out.mkdir(parents=True, exist_ok=True)
    device = f"{jax.devices()[0].device_kind} ({jax.default_backend()}, {jax.device_count()} device(s))"
    with tempfile.TemporaryDirectory() as work:
        rows = ratio_rows(args.dry_run) + precision_rows(args.dry_run, Path(work)) + [launch_row(args.dry_run,
                                                                                                    Path(work))]
    (out / "gpu_check.json").write_text(json.dumps({"device": device, "dry_run": args.dry_run, "rows": rows},
                                                   indent=2), encoding="utf-8")
    (out / "gpu_check.md").write_text(table(rows, device), encoding="utf-8")
    print(table(rows, device))
    return 0 if all(r["value"] != "" and not str(r["value"]).startswith("exit") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
