"""What reading each step's batch from a source costs, against gathering it from in-memory arrays as the loop
did before sources (tanplan.dp.sharding.global_batch): milliseconds per step, host to device included.

    .venv/bin/python experiments/reader_bench.py [--steps 30]

Three ways for the same Poisson batches: `arrays` (global_batch on the arrays), `source` (StepBatches.take
on an ArraySource, prefetch off: the read in the loop's thread), `prefetched` (prefetch on, with a
`--work` ms pause standing for the step's compute, so the read of step t+1 overlaps it; the time shown
is what the loop waits for, the pause excluded). Each figure: the median over --steps steps.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tanplan.runtime import configure_process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--work", type=float, default=50.0, help="ms of 'compute' between steps (prefetched)")
    args = parser.parse_args()
    configure_process()
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
        for t in range(args.steps):
            start = time.perf_counter()
            index, mask = sampling.pad_indices(draw(t), layout)
            jax.block_until_ready(sharding.global_batch(x, y, index, mask, mesh))
            times["arrays"].append(time.perf_counter() - start)
        for key, prefetch in (("source", False), ("prefetched", True)):
            with StepBatches(ArraySource(x, y), draw, mesh, stop=args.steps, num_classes=10,
                             prefetch=prefetch) as reader:
                for t in range(args.steps):
                    start = time.perf_counter()
                    reader.indices(t, layout)
                    jax.block_until_ready(reader.take(t, layout)[1])
                    times[key].append(time.perf_counter() - start)
                    if prefetch:
                        time.sleep(args.work / 1000)  # the step's compute, while step t+1 is read
        print(f"{name} (N = {n:,}, B = {batch}, rows {shape}): " + ", ".join(
            f"{k} {1000 * statistics.median(v[1:]):.1f} ms" for k, v in times.items()))


if __name__ == "__main__":
    main()
