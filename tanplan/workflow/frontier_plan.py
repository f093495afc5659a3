"""The budget frontier alone (`tanplan plan --compute`, tanplan.frontier): every (B, S, σ) with B·S ≤ C at an ε
budget (tanplan.privacy.frontier), with C given in examples or as device hours × 3600 × a throughput.

JAX-free: the planner imports this module; only measuring a throughput (`--device-hours` without
`--samples-per-second`) needs the train extra. `tanplan optimize` (tanplan.workflow.optimize) trains on it.
"""

from __future__ import annotations

from typing import Callable

from tanplan.errors import UsageError
from tanplan.outcomes.planning import FrontierResult, Throughput
from tanplan.privacy.frontier import check_budget, frontier
from tanplan.privacy.plan import default_delta

SECONDS_PER_HOUR = 3600


def measure_throughput(model: str) -> float:
    """DP-SGD samples per second of one device for `model` (tanplan.engine.bench.bench_model)."""
    from tanplan.engine.bench import bench_model  # lazy: the engine (train extra); the planner imports this module

    return float(bench_model(model).dp_samples_per_second)


def frontier_entry(dataset_size: int, epsilon: float, *, compute: int | None, device_hours: float | None,
                   samples_per_second: float | None, delta: float | None, model: str, min_batch_size: int,
                   steps_factor: float, accountant: str) -> FrontierResult:
    """The stage of tanplan.api.frontier: the command line's choices checked, then frontier_plan."""
    if accountant not in ("rdp", "pld"):
        raise UsageError(f"accountant {accountant!r} is not allowed: use pld or rdp")
    if steps_factor <= 1:
        raise UsageError(f"--steps-factor {steps_factor:g} is not allowed: must be > 1")
    if samples_per_second is not None and device_hours is None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    return frontier_plan(dataset_size, epsilon, delta, compute=compute, device_hours=device_hours,
                         samples_per_second=samples_per_second, model=model, min_batch_size=min_batch_size,
                         factor=steps_factor, accountant=accountant)


def frontier_plan(dataset_size: int, epsilon: float, delta: float | None = None, *, compute: int | None = None,
                  device_hours: float | None = None, samples_per_second: float | None = None,
                  model: str = "cnn1d", min_batch_size: int = 1, factor: float = 2.0,
                  measure: Callable[[str], float] | None = None, accountant: str = "pld") -> FrontierResult:
    """The budget frontier; C = compute, or device_hours·3600·throughput.

    The throughput is samples_per_second, or measured by the DP-step benchmark of `model`. Every other
    input is checked before that measurement.
    """
    if (compute is None) == (device_hours is None):
        raise UsageError("give exactly one compute budget: --compute C or --device-hours H")
    delta = default_delta(dataset_size) if delta is None else delta
    check_budget(dataset_size, epsilon, compute or min_batch_size, delta, min_batch_size, factor, accountant)
    throughput = None
    if device_hours is not None:
        measured = samples_per_second is None
        if measured:
            from tanplan.models import available_models  # lazy: flax; the planner imports this module

            if model not in available_models():
                raise UsageError(f"--model {model!r} is not known: use one of {', '.join(available_models())}")
            samples_per_second = (measure or measure_throughput)(model)
        compute = int(device_hours * SECONDS_PER_HOUR * samples_per_second)
        throughput = Throughput(device_hours=device_hours, samples_per_second=samples_per_second, measured=measured,
                                model=model if measured else None)
    front = frontier(dataset_size, epsilon, compute, delta, min_batch_size=min_batch_size, factor=factor,
                     accountant=accountant)
    notes = []
    if delta >= 1.0 / dataset_size:
        notes.append(f"delta={delta:g} is ≥ 1/N={1.0 / dataset_size:.3g}: such a δ allows releasing "
                     f"an example outright (training commands refuse it without privacy.allow_large_delta)")
    return FrontierResult(dataset_size=front.dataset_size, epsilon=front.epsilon, delta=front.delta,
                          compute=front.compute, accountant=front.accountant, candidates=front.candidates,
                          dropped=front.dropped, throughput=throughput, notes=tuple(notes))


__all__ = ["SECONDS_PER_HOUR", "frontier_entry", "frontier_plan", "measure_throughput"]
