"""What reading each step's batch costs: from a source against in-memory arrays, and from an ImageNet-shaped
memmap with 1 and N reader threads, uint8 pixels against float32 rows.

    .venv/bin/python experiments/reader_bench.py [--steps 30] [--sections small,imagenet] [--large]

`small` (mnist1d- and CIFAR-shaped rows in memory): three ways for the same Poisson batches: `arrays`
(tanplan.dp.sharding.global_batch on the arrays, the loop before sources), `source` (StepBatches.take on an
ArraySource, prefetch off: the read in the loop's thread), `prefetched` (prefetch on, with a `--work` ms
pause standing for the step's compute, so the read of step t+1 overlaps it; the time shown is what the loop
waits for, the pause excluded). Each figure: the median over --steps steps, host to device included.

`imagenet`: a synthetic memmap of 224×224×3 uint8 rows that the script writes itself in a temporary folder
(default 512 rows, 77 MB, B ≈ 128; --large: 8192 rows, 1.2 GB, B ≈ 1024; removed at the end), read by
StepBatches.take (prefetch off: read, place, transfer) with 1 and N threads (--threads, default
tanplan.data.reader.default_threads()), the rows as uint8 (to the device as stored, normalised there) and as
float32 (normalised on the host, as before #32). Printed for the median step (draw, read, place, transfer
to the devices): rows/s and MB/s (the real rows' bytes as read and sent: 150,528 a row as uint8, 602,112 as
float32); and, apart, what normalising a uint8 batch costs on the device (inside the step in a run). The file was just written, so it is read from the page cache: this
measures the host's side (copies, threads, transfer), not a disk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from tanplan.runtime import configure_process

IMAGENET = (224, 224, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--work", type=float, default=50.0, help="ms of 'compute' between steps (prefetched)")
    parser.add_argument("--sections", default="small,imagenet", help="comma-separated: small, imagenet")
    parser.add_argument("--large", action="store_true", help="imagenet: 8192 rows (1.2 GB), B = 1024")
    parser.add_argument("--threads", type=int, default=0, help="imagenet: N reader threads (0: the default)")
    args = parser.parse_args()
    configure_process()
    sections = set(args.sections.split(","))
    if "small" in sections:
        small(args.steps, args.work)
    if "imagenet" in sections:
        imagenet(args.steps, *((8192, 1024) if args.large else (512, 128)), args.threads)


def small(steps: int, work: float) -> None:
    import jax

    from tanplan.data.source import ArraySource
    from tanplan.dp import sampling, sharding
    from tanplan.engine.batches import StepBatches

    mesh = sharding.data_mesh()
    for name, n, shape, batch in (("mnist1d", 48_000, (40, 1), 4096), ("cifar10", 20_000, (32, 32, 3), 1024)):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(n, *shape)).astype(np.float32)
        y = rng.integers(0, 10, n).astype(np.int32)
        q = batch / n
        layout = sampling.batch_layout(n, q, batch, mesh.devices.size)
        draw = lambda t: sampling.poisson_batch(n, q, np.random.default_rng([7, t]))  # noqa: E731
        times = {"arrays": [], "source": [], "prefetched": []}
        for t in range(steps):
            start = time.perf_counter()
            index, mask = sampling.pad_indices(draw(t), layout)
            jax.block_until_ready(sharding.global_batch(x, y, index, mask, mesh))
            times["arrays"].append(time.perf_counter() - start)
        for key, prefetch in (("source", False), ("prefetched", True)):
            with StepBatches(ArraySource(x, y), draw, mesh, stop=steps, num_classes=10,
                             prefetch=prefetch) as reader:
                for t in range(steps):
                    start = time.perf_counter()
                    reader.indices(t, layout)
                    jax.block_until_ready(reader.take(t, layout)[1])
                    times[key].append(time.perf_counter() - start)
                    if prefetch:
                        time.sleep(work / 1000)  # the step's compute, while step t+1 is read
        print(f"{name} (N = {n:,}, B = {batch}, rows {shape}): " + ", ".join(
            f"{k} {1000 * statistics.median(v[1:]):.1f} ms" for k, v in times.items()))


def write_memmap(folder: Path, rows: int) -> Path:
    """A memmap folder of `rows` random 224×224×3 uint8 images (and 8 test rows), written 256 rows at a time."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for split, n in (("train", rows), ("test", 8)):
        x = np.lib.format.open_memmap(folder / f"{split}_x.npy", mode="w+", dtype=np.uint8, shape=(n, *IMAGENET))
        for start in range(0, n, 256):
            x[start:start + 256] = rng.integers(0, 256, (min(256, n - start), *IMAGENET), dtype=np.uint8)
        x.flush()
        np.save(folder / f"{split}_y.npy", rng.integers(0, 1000, n).astype(np.int32))
    meta = {"format": "tanplan-memmap", "version": 1, "name": "imagenet-shaped", "num_classes": 1000,
            "input_shape": list(IMAGENET), "dtype": "uint8", "scale": 1 / 255, "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225], "splits": {"train": rows, "test": 8}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def imagenet(steps: int, n: int, batch: int, threads: int = 0) -> None:
    """The imagenet section: n rows written, Poisson batches of expected size `batch` read for `steps` steps."""
    import jax

    from tanplan.data import load_dataset
    from tanplan.data.reader import default_threads
    from tanplan.dp import sampling, sharding
    from tanplan.engine.batches import StepBatches, device_inputs

    many = threads or default_threads()
    folder = Path(tempfile.mkdtemp(prefix="reader-bench-"))
    try:
        source = load_dataset("memmap", path=write_memmap(folder / "mm", n)).train
        mesh = sharding.data_mesh()
        q = batch / n
        layout = sampling.batch_layout(n, q, batch, mesh.devices.size)
        draw = lambda t: sampling.poisson_batch(n, q, np.random.default_rng([7, t]))  # noqa: E731
        print(f"imagenet-shaped memmap (N = {n:,}, B = {batch}, rows {IMAGENET}, page cache warm, "
              f"{mesh.devices.size} device(s)):")
        for dtype in ("uint8", "float32"):
            if dtype == "float32":  # the path before #32: normalised on the host, float32 to the device
                source.pixels, source.row_dtype = None, np.dtype(np.float32)
            row_bytes = int(np.prod(IMAGENET)) * np.dtype(source.row_dtype).itemsize
            for count in sorted({1, many}):
                per_step = []
                with StepBatches(source, draw, mesh, stop=steps, num_classes=1000, prefetch=False,
                                 threads=count) as reader:
                    for t in range(steps):
                        start = time.perf_counter()
                        real = len(reader.indices(t, layout))
                        batch = jax.block_until_ready(reader.take(t, layout.grown_to(real))[1])
                        per_step.append((time.perf_counter() - start, real))
                seconds, real = sorted(per_step)[len(per_step) // 2]  # the median step
                print(f"  {dtype:7s} {count} thread(s): {real / seconds:8,.0f} rows/s, "
                      f"{real * row_bytes / seconds / 1e6:8,.0f} MB/s ({1000 * seconds:.1f} ms a step)")
            if dtype == "uint8":  # what the step adds on the device: the normalisation, apart (the first compiles)
                inputs = jax.jit(device_inputs(source))
                spent = [_timed(lambda: jax.block_until_ready(inputs(batch))) for _ in range(4)][1:]
                print(f"  uint8 normalised on the device ({mesh.devices[0].platform}): "
                      f"{1000 * statistics.median(spent):.1f} ms a batch")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
