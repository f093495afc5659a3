"""Packed proxies against separate ones: K demo proxies at one B' trained as one jitted program
(tanplan.engine.packed), and the same K one after another through the loop (as the ladder trains a rung
on one device), in one process; both wall times, their ratio and each group's test accuracy.

    PYTHONPATH=. .venv/bin/python experiments/packed_proxies.py [--proxies 8] [--batch-size 64] [--out DIR]
        [--form vmap|each] [--step-timing]

The demo's config (experiments/mnist1d.toml: target B = 4096, S = 300, ε = 0.7), its proxies as the ladder
builds them (the [tuning] data, train.proxy_batch_size = B', σ' = σ·B'/B), experiment seeds 0..K-1; every
run has its own secret from OS entropy, so the two groups are independent draws of the same distribution.
One warm-up first (the data, the route's cost), so neither group pays the process's start. Figures:
docs/performance.md, "Packed proxies".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/mnist1d.toml")
    parser.add_argument("--proxies", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=0, help="train.steps (default: the config's; a quick check)")
    parser.add_argument("--out", default="", help="folder for the runs (default: a temporary one)")
    parser.add_argument("--step-timing", action="store_true",
                        help="time the packed step alone in both forms (no run written), not the runs")
    parser.add_argument("--form", choices=["vmap", "each"], default=None,
                        help="the packed step's form (default: the device's, tanplan.engine.packed.pack_form)")
    args = parser.parse_args()

    from tanplan.runtime import configure_process

    configure_process()  # as the command line does: XLA's CPU flag (tanplan.runtime), the compilation cache
    from tanplan.config import load_config
    from tanplan.dp.secret import RunSecret
    from tanplan.engine import loop, packed, setup
    from tanplan.job import job_of
    from tanplan.workflow import tuning
    from tanplan.workflow.members import Members

    cfg = load_config(args.config, [f"train.steps={args.steps}"] if args.steps else [])
    members = Members.of(tuning.for_config(cfg, proxy_batch=args.batch_size).proxy_cfg)  # as the ladder's rungs
    jobs = [job_of(members.proxy(args.batch_size, seed)) for seed in range(args.proxies)]
    out = Path(args.out or tempfile.mkdtemp(prefix="packed_proxies_"))
    setup.build(jobs[0], RunSecret.fresh())  # warm-up: data, the route's self-check and cost; no step, no file
    if args.step_timing:
        step_timing(jobs)
        return

    began = time.perf_counter()
    together = packed.train_packed(jobs, [out / f"packed_s{k}" for k in range(len(jobs))], form=args.form)
    packed_seconds = time.perf_counter() - began
    began = time.perf_counter()
    alone = [loop.train_and_evaluate(job, out / f"separate_s{k}", progress=False) for k, job in enumerate(jobs)]
    separate_seconds = time.perf_counter() - began

    import jax

    form = args.form or packed.pack_form(jax.devices()[0])
    print(f"{len(jobs)} proxies of {args.config} at B' = {args.batch_size}, packed as {form!r} "
          f"(σ' = {together[0].sigma:.4g}, "
          f"S = {together[0].steps}, route {together[0].grad_method}, layout {together[0].layout.chunks}×"
          f"{together[0].layout.chunk_size}); runs in {out}")
    for name, seconds, runs in (("packed", packed_seconds, together), ("separate", separate_seconds, alone)):
        acc = [r.test_accuracy for r in runs]
        print(f"  {name:8s} {seconds:7.1f} s   accuracy {statistics.mean(acc):.4f} ± {statistics.stdev(acc):.4f}   "
              f"ε {runs[0].epsilon:.4g}   [{', '.join(f'{a:.4f}' for a in acc)}]")
    gap = abs(statistics.mean(r.test_accuracy for r in together) - statistics.mean(r.test_accuracy for r in alone))
    spread = max(statistics.stdev(r.test_accuracy for r in g) for g in (together, alone))
    print(f"  packed ÷ separate wall time: {packed_seconds / separate_seconds:.3f}; "
          f"|Δ mean| {gap:.4f} {'within' if gap <= spread else 'OUTSIDE'} the larger spread {spread:.4f}")


def step_timing(jobs) -> None:
    """The K runs' step alone, compiled, on step 0's Poisson batches: median milliseconds of 20 calls of the pack in
    each form, and the cores busy meanwhile (process CPU-s ÷ wall-s)."""
    import jax

    from tanplan.dp import sampling
    from tanplan.dp import step as dp_step
    from tanplan.dp.secret import RunSecret
    from tanplan.engine import batches, packed, setup

    runs = [setup.build(job, RunSecret.fresh()) for job in jobs]
    device = jax.devices()[0]
    layout = sampling.batch_layout(runs[0].dataset.num_train, runs[0].plan.q, jobs[0].perf.physical_batch_size)
    drawn = []
    for run in runs:
        with batches.StepBatches(run.dataset.train, run.mechanism.batch, run.mesh, stop=1,
                                 num_classes=run.label_classes, input_shape=run.dataset.input_shape) as reader:
            drawn.append(reader.take_host(0, layout))
    for form in ("vmap", "each"):
        pack = packed.Pack(form, device)
        step = packed.packed_step(runs, form)
        states = pack.put([dp_step.create_train_state(r.params, r.optimizer, r.job.train.ema_decay) for r in runs])
        batch, roots = pack.batch(drawn), pack.put([r.roots for r in runs])
        began = time.perf_counter()
        states, metrics = step(states, batch, roots)
        jax.block_until_ready(metrics)
        compiled = time.perf_counter() - began
        times, cpu, wall = [], time.process_time(), time.perf_counter()
        for _ in range(20):
            began = time.perf_counter()
            states, metrics = step(states, batch, roots)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - began)
        busy = (time.process_time() - cpu) / (time.perf_counter() - wall)
        print(f"  {form:5s} step of {len(runs)}: {1000 * statistics.median(times):6.1f} ms (median of 20), "
              f"{busy:.2f} cores busy, first call {compiled:.1f} s (compilation)")


if __name__ == "__main__":
    main()
