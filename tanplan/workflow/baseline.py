"""`tanplan baseline`: private heads and DP prototypes on frozen features, at one or more ε (tanplan.baselines).

Every input is checked before the demo encoder trains or any noise is drawn: the methods, each ε, the
folders, the feature files; then the demo features are written (make_features), δ chosen (n^-1.1 of the
training examples used) and the methods run, their results written to `out` when given.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

from tanplan.baselines import runner
from tanplan.baselines.accounting import MAX_EPSILON
from tanplan.baselines.data import imbalanced, load_features, load_public
from tanplan.baselines.features import write_demo_features
from tanplan.errors import UsageError
from tanplan.privacy.plan import default_delta
from tanplan.reports.baselines import write_outputs
from tanplan.workflow.inputs import check_out_dir

FEATURES_REQUIRED = "--features F.npz is required (or --make-features DIR for the demo features)"
EPSILON_REQUIRED = "--epsilon E is required: the target ε (one value or a comma-separated list)"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def check_baseline_inputs(method: str, epsilons: Sequence[float] | None, features: str | None, public: str | None,
                          out: str | None, make_features: str | None) -> list[str]:
    """The methods chosen; UsageError for any input that cannot run, before any work."""
    methods = runner.select_methods(method)  # an unknown name fails before any work
    for eps in epsilons or ():
        if eps > MAX_EPSILON:
            raise UsageError(f"--epsilon {eps:g} is not allowed: must be in (0, {MAX_EPSILON:g}] (above, a release "
                             "protects nothing)")
    check_out_dir(out)  # before the noise is drawn and the results printed
    check_out_dir(make_features, "--make-features")
    if features is None and not make_features:
        raise UsageError(FEATURES_REQUIRED)
    if epsilons is None and not make_features:
        raise UsageError(EPSILON_REQUIRED)
    if features is not None:  # files the user gave: checked before the demo encoder is trained
        given = load_features(features)
        if public:
            load_public(public, given.width)
    return methods


def run_baseline(*, method: str = "all", epsilons: Sequence[float] | None, features: str | None = None,
                 public: str | None = None, delta: float | None = None, imbalance_ratio: float = 1.0,
                 accountant: str = "analytic", repeats: int = 1, seed: int | None = None,
                 make_features: str | None = None, out: str | None = None,
                 log: Callable[[str], None] = _stderr) -> tuple[list[runner.BaselineResult], list[str]] | None:
    """(one result per method and ε, the notes), or None when only the demo features were asked for
    (make_features without epsilons). Progress, warnings and the files written go to `log`."""
    methods = check_baseline_inputs(method, epsilons, features, public, out, make_features)
    if make_features:
        features_path, public_path = write_demo_features(make_features)
        log(f"tanplan: wrote {features_path} and {public_path}")
        features, public = features or str(features_path), public or str(public_path)
        if epsilons is None:
            return None
    if features is None:
        raise UsageError(FEATURES_REQUIRED)
    if epsilons is None:
        raise UsageError(EPSILON_REQUIRED)
    data = load_features(features)
    public_set = load_public(public, data.width) if public else None
    if public_set is None and all(runner.REGISTRY[m].needs_public for m in methods):
        raise UsageError(f"{', '.join(methods)} need a public set: pass --public P.npz")
    n_used = len(imbalanced(data, imbalance_ratio).y_train)
    delta = delta if delta is not None else default_delta(n_used)
    if delta >= 1.0 / n_used:  # a warning, printed once every input is known to be good
        log(f"tanplan: warning: delta={delta:g} is ≥ 1/n={1.0 / n_used:.3g}: such a δ allows releasing "
            "an example outright")

    def progress(r) -> None:
        log(f"tanplan: {r.method} at ε={r.target_epsilon:g}: balanced accuracy {r.balanced_accuracy:.3f} "
            f"({r.wall_seconds:.1f} s)")

    runner.warm_imports(methods)
    results, notes = runner.run_baselines(methods, data, epsilons, delta, public_set, imbalance_ratio, seed, repeats,
                                          accountant, progress=progress)
    for note in notes:
        log(f"tanplan: note: {note}")
    if out:
        title = f"Baselines on {features} (imbalance ratio {imbalance_ratio:g}, δ = {delta:.1e})"
        for path in write_outputs(out, results, notes, title):
            log(f"tanplan: wrote {path}")
    return results, notes
