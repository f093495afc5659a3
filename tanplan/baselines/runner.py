"""Run baselines: calibrate each method to a target (ε, δ), train it, score it on the test split.

Gaussian methods get the base σ whose composed releases spend at most the target (ε, δ) under the
chosen accountant (tanplan.baselines.accounting); the exponential-mechanism methods run at ε exactly and
report δ = 0. Every guarantee is for add/remove-one neighbours. `run_baselines` is what the
`tanplan baseline` command and the `tanplan run` baseline stage call; it also returns the composed
(ε, δ) of EVERY release it made (methods × ε × repeats, all on one dataset: `composed`), and a result
drawn with a fixed seed says it is not private (`noise_secret` false, and a note).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from tanplan.baselines import METHODS, PUBLIC_METHODS, accounting
from tanplan.baselines import first_order, least_squares, newton, prototypes
from tanplan.baselines.data import (FeatureSet, accuracy, balanced_accuracy, imbalanced, load_features,
                                    load_public, minority_accuracy)
from tanplan.baselines.features import demo_features, demo_spec
from tanplan.errors import UsageError


@dataclass(frozen=True)
class Method:
    """How to calibrate and fit one baseline. relative_multipliers is None for pure ε-DP methods."""

    name: str
    paper: str
    config: Any
    fit: Callable  # fit(x, y, num_classes, σ or ε, rng, config, public) -> head
    relative_multipliers: Callable | None = None
    needs_public: bool = False


def _gaussian_fit(fn):
    return lambda x, y, m, sigma, rng, cfg, public: fn(x, y, m, sigma, rng, cfg)


def _public_fit(x, y, m, epsilon, rng, cfg, public):
    return prototypes.dppl_public(x, y, m, epsilon, public, rng, cfg)


REGISTRY: dict[str, Method] = {
    "dp-ls": Method("dp-ls", "Mehta et al. Alg. 3", least_squares.LSConfig(), _gaussian_fit(least_squares.dp_ls),
                    least_squares.relative_multipliers),
    "dp-newton": Method("dp-newton", "Mehta et al. Alg. 2", newton.NewtonConfig(), _gaussian_fit(newton.dp_newton),
                        newton.relative_multipliers),
    "dp-fc": Method("dp-fc", "Mehta et al. Alg. 4", first_order.FCConfig(), _gaussian_fit(first_order.dp_fc),
                    first_order.fc_relative_multipliers),
    "dp-adam": Method("dp-adam", "Mehta et al. Alg. 1", first_order.AdamConfig(),
                      _gaussian_fit(first_order.dp_adam), first_order.adam_relative_multipliers),
    "dppl-mean": Method("dppl-mean", "Wahdany et al. 4.1", prototypes.MeanConfig(),
                        _gaussian_fit(prototypes.dppl_mean), prototypes.mean_relative_multipliers),
    "dppl-public": Method("dppl-public", "Wahdany et al. Alg. 1", prototypes.PublicConfig(k=1), _public_fit,
                          needs_public=True),
    "dppl-publick": Method("dppl-publick", "Wahdany et al. C.3", prototypes.PublicConfig(k=2), _public_fit,
                           needs_public=True),
}
assert tuple(REGISTRY) == METHODS and all(REGISTRY[m].needs_public for m in PUBLIC_METHODS)


@dataclass
class BaselineResult:
    """One method at one target ε: accuracies (mean over repeats) and what was spent."""

    method: str
    target_epsilon: float
    epsilon: float
    delta: float
    rho: float
    noise_multiplier: float | None
    accuracy: float
    balanced_accuracy: float
    minority_accuracy: float
    wall_seconds: float
    imbalance_ratio: float
    n_train: int
    repeats: int = 1
    accuracy_std: float = 0.0
    balanced_accuracy_std: float = 0.0
    minority_accuracy_std: float = 0.0
    mechanism: str = "gaussian"
    accountant: str = "analytic"
    neighbouring: str = accounting.NEIGHBOURING
    noise_secret: bool = True  # False with a fixed --seed: the noise is reproducible, the result NOT private
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def select_methods(spec: str | list[str]) -> list[str]:
    """'all', one name, or a comma-separated list, in the canonical order; UsageError on unknown names."""
    names = spec if isinstance(spec, list) else [s.strip() for s in str(spec).split(",") if s.strip()]
    if not names or names == ["all"]:
        return list(METHODS)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown method {unknown[0]!r}: use all or one of {', '.join(METHODS)}")
    return [m for m in METHODS if m in names]


def single_threaded_blas():
    """Limit BLAS to one thread: the baselines' matrices are small, and OpenBLAS threads that spin on a
    shared, busy machine made a 64×64 eigh 50× slower. A no-op when threadpoolctl is absent."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _rngs(seed: int | None, count: int) -> list[np.random.Generator]:
    """Independent generators; seed None draws fresh OS entropy (what a real release must do)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(count)]


def run_baseline(name: str, data: FeatureSet, epsilon: float, delta: float, public: np.ndarray | None = None,
                 seed: int | None = None, repeats: int = 1, accountant: str = "analytic",
                 config: Any = None, imbalance_ratio: float = 1.0) -> BaselineResult:
    """Calibrate, train and score one method at target (ε, δ); `repeats` independent noise draws.

    Each repeat is a separate release at the stated (ε, δ): publishing several would spend more.
    """
    method = REGISTRY[name]
    cfg = config if config is not None else method.config
    if method.needs_public and public is None:
        raise UsageError(f"method {name} needs a public set: pass --public P.npz")
    start = time.perf_counter()
    if method.relative_multipliers is None:
        guarantee = accounting.exponential_guarantee(epsilon)
        param = epsilon
    else:
        param, guarantee = accounting.calibrated(method.relative_multipliers(cfg), epsilon, delta, accountant)
    scores = []
    counts = data.class_counts()
    with single_threaded_blas():
        for rng in _rngs(seed, repeats):
            head = method.fit(data.x_train, data.y_train, data.num_classes, param, rng, cfg, public)
            pred = head.predict(data.x_test)
            scores.append((accuracy(data.y_test, pred), balanced_accuracy(data.y_test, pred),
                           minority_accuracy(data.y_test, pred, counts)))
    wall = (time.perf_counter() - start) / repeats
    mean, std = np.mean(scores, axis=0), np.std(scores, axis=0)
    return BaselineResult(
        method=name, target_epsilon=float(epsilon), epsilon=guarantee.epsilon, delta=guarantee.delta,
        rho=guarantee.rho, noise_multiplier=guarantee.noise_multiplier, accuracy=float(mean[0]),
        balanced_accuracy=float(mean[1]), minority_accuracy=float(mean[2]), wall_seconds=wall,
        imbalance_ratio=float(imbalance_ratio), n_train=len(data.y_train), repeats=repeats,
        accuracy_std=float(std[0]), balanced_accuracy_std=float(std[1]), minority_accuracy_std=float(std[2]),
        mechanism=guarantee.mechanism, accountant=guarantee.accountant, noise_secret=seed is None,
        config=asdict(cfg))


def run_baselines(methods: list[str], data: FeatureSet, epsilons: list[float], delta: float,
                  public: np.ndarray | None = None, imbalance_ratio: float = 1.0, seed: int | None = None,
                  repeats: int = 1, accountant: str = "analytic", configs: dict | None = None,
                  progress: Callable[[BaselineResult], None] | None = None):
    """(results, notes): every method at every ε; methods needing a public set are skipped, with a note.

    The training split is first made imbalanced (exponential long tail, largest/smallest = ratio).
    """
    configs = configs or {}
    notes = []
    if public is None:
        skipped = [m for m in methods if REGISTRY[m].needs_public]
        if skipped:
            notes.append(f"skipped {', '.join(skipped)}: no public set given (--public P.npz)")
        methods = [m for m in methods if not REGISTRY[m].needs_public]
    data = imbalanced(data, imbalance_ratio)
    results = []
    for i, eps in enumerate(epsilons):
        for j, name in enumerate(methods):
            run_seed = None if seed is None else [seed, i, j]
            result = run_baseline(name, data, eps, delta, public, run_seed, repeats, accountant,
                                  configs.get(name), imbalance_ratio)
            results.append(result)
            if progress:
                progress(result)
    if seed is not None:
        notes.append(f"the noise comes from --seed {seed}: anyone who knows it can remove the noise, so these "
                     "results are NOT private (reproducible experiments only)")
    if results:
        total = composed(results, delta)
        notes.append(f"composed: every release above ({total['releases']} = methods × ε × repeats, on one dataset) "
                     f"spends ε = {total['epsilon']:.4g} at δ = {delta:.2g} together ({total['accountant']}, "
                     "add/remove-one); each row's ε holds only for someone who sees that row alone")
    return results, notes


def composed(results: list[BaselineResult], delta: float) -> dict:
    """The composed guarantee of every release of `results` (each repeat is one release)."""
    return accounting.composed_guarantee([r.rho for r in results for _ in range(r.repeats)], delta)


def warm_imports(methods: list[str]) -> None:
    """Import dp_accounting (and JAX for dp-adam) up front, so that wall_seconds measures the method."""
    from dp_accounting import dp_event, gaussian_mechanism, mechanism_calibration  # noqa: F401

    if "dp-adam" in methods:
        import jax  # noqa: F401
        import optax  # noqa: F401


def with_overrides(name: str, **changes) -> Any:
    """The default config of a method with some fields changed (for the Python API and tuning)."""
    return replace(REGISTRY[name].config, **changes)



def baselines_on_files(epsilon: float | list[float], delta: float, features=None, public=None, methods="all",
                       imbalance_ratio: float = 1.0, seed: int | None = None, repeats: int = 1,
                       accountant: str = "analytic", avoid_seeds=()) -> tuple[list[BaselineResult], list[str]]:
    """(results, notes) for files on disk: the entry point of a `tanplan run` baseline stage.

    features/public are .npz paths; features=None uses the cached demo features (and their public set)
    built by tanplan.baselines.features, from mnist1d draws whose seeds are none of `avoid_seeds` (the
    user's private mnist1d draw: the demo must neither train its encoder on it nor spend ε on it).
    """
    if features is None:
        features, public = demo_features(demo_spec(avoid_seeds))
    data = load_features(features)
    public_x = load_public(public, data.width) if public is not None else None
    names = select_methods(methods)
    warm_imports(names)
    eps_list = list(epsilon) if isinstance(epsilon, (list, tuple)) else [float(epsilon)]
    return run_baselines(names, data, eps_list, delta, public_x, imbalance_ratio, seed, repeats, accountant)
