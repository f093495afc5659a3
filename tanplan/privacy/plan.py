"""The Plan: the single source of (N, δ, B, σ, S) that proxy, sweep, fit and launch read.

Nothing downstream recomputes σ on its own: a Plan is built once (σ given, or calibrated from a target
ε with the exact accountant) and passed along; proxies derive from it at constant η_step and S.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from tanplan.config import steps_of_epochs, train_steps
from tanplan.privacy import accounting, tan
from tanplan.errors import UsageError


@dataclass(frozen=True)
class Plan:
    """A DP-SGD privacy plan: Poisson sampling at q = B/N, noise σ·C on the clipped sum, S steps."""

    dataset_size: int
    batch_size: int
    steps: int
    sigma: float
    delta: float
    target_epsilon: float | None = None
    accountant: str = "pld"  # the accountant of record: σ is calibrated and budgets are checked with it
    neighbouring: str = "add_remove"  # the relation of record (add_remove | replace_one)

    def __post_init__(self):
        validate(self.dataset_size, self.batch_size, self.steps, self.sigma, self.delta, self.target_epsilon)

    # Closed-form TAN quantities (heuristics, see tanplan.privacy.tan)
    @property
    def q(self) -> float:
        return tan.sampling_rate(self.batch_size, self.dataset_size)

    @property
    def eta_step(self) -> float:
        return tan.eta_step(self.q, self.sigma)

    @property
    def eta(self) -> float:
        return tan.eta(self.q, self.sigma, self.steps)

    @property
    def tan(self) -> float:
        return 1.0 / self.eta

    @property
    def eps_tan(self) -> float:
        return tan.eps_tan(self.eta, self.delta)

    @property
    def regime(self) -> tan.Regime:
        return tan.regime(self.sigma)

    def epsilon(self, accountant: str | None = None, neighbouring: str | None = None) -> float:
        """Exact ε of this plan under the accountant and relation (the plan's own by default)."""
        return accounting.cached_epsilon(self.q, self.sigma, self.steps, self.delta, accountant or self.accountant,
                                         neighbouring or self.neighbouring)

    @property
    def delta_above_one_over_n(self) -> bool:
        """δ ≥ 1/N: then releasing one random example outright meets the (ε, δ) guarantee."""
        return self.delta >= 1.0 / self.dataset_size

    def proxy(self, batch_size: int) -> "Plan":
        """The constant-TAN proxy (B', σ·B'/B, S): same η_step and S, B/B' times cheaper."""
        if not 1 <= batch_size <= self.batch_size:
            raise UsageError(f"proxy batch size {batch_size} is not allowed: must be in [1, {self.batch_size}] "
                             f"(the target batch size)")
        return dataclasses.replace(self, batch_size=int(batch_size), sigma=self.sigma * batch_size / self.batch_size,
                                   target_epsilon=None)

    def savings(self, proxy: "Plan") -> float:
        """Compute ratio target/proxy (same S, so the ratio of expected batch sizes)."""
        return (self.batch_size * self.steps) / (proxy.batch_size * proxy.steps)

    @classmethod
    def from_budget(cls, dataset_size: int, batch_size: int, steps: int, epsilon: float,
                    delta: float | None = None, accountant: str = "pld", neighbouring: str = "add_remove") -> "Plan":
        """Calibrate σ so that the exact ε (under `accountant` and `neighbouring`) is at most `epsilon`, within 1%."""
        delta = default_delta(dataset_size) if delta is None else delta
        validate(dataset_size, batch_size, steps, None, delta, epsilon)
        sigma = accounting.calibrate_sigma(batch_size / dataset_size, steps, epsilon, delta, accountant, neighbouring)
        return cls(dataset_size, batch_size, steps, sigma, delta, epsilon, accountant, neighbouring)

    def to_dict(self, accountants=("rdp",)) -> dict:
        """Every figure of the plan as plain numbers: exact ε (add/remove-one) for the accountants asked for,
        else None; with "pld" among them, ε under replace-one too (None where PLD cannot run)."""
        return {
            "dataset_size": self.dataset_size,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "sigma": self.sigma,
            "delta": self.delta,
            "q": self.q,
            "eta": self.eta,
            "eta_step": self.eta_step,
            "tan": self.tan,
            "eps_tan": self.eps_tan,
            "eps_rdp": self.epsilon("rdp", "add_remove") if "rdp" in accountants else None,
            "eps_pld": self.epsilon("pld", "add_remove") if "pld" in accountants else None,
            "eps_replace_one": (self.epsilon("pld", "replace_one") if "pld" in accountants
                                and self.sigma >= accounting.PLD_SIGMA_MIN else None),
            "target_epsilon": self.target_epsilon,
            "accountant": self.accountant,
            "neighbouring": self.neighbouring,
            "regime": self.regime.value,
        }


def with_dataset_size(plan: Plan, dataset_size: int) -> Plan:
    """The same (B, σ, S) on N' examples with the default δ = N'^-1.1 (TAN §4.4, Table 5 use 1/N'): q, η and ε fall as N' grows,
    while the global signal-to-noise N'·η stays the same."""
    if not plan.batch_size <= dataset_size:
        raise UsageError(f"dataset size {dataset_size} is not allowed: must be ≥ the batch size {plan.batch_size}")
    return dataclasses.replace(plan, dataset_size=int(dataset_size), delta=default_delta(dataset_size),
                               target_epsilon=None)


DELTA_EXPONENT = 1.1


def default_delta(dataset_size: int) -> float:
    """δ = N^-1.1, well below 1/N. At δ = 1/N the mechanism that publishes one example chosen uniformly at
    random (in the clear) is (0, 1/N)-DP, so such a δ admits releasing an example outright; a power a
    little above 1 excludes it while moving ε little (the demo's σ: 20.2 at δ = 1/N, 21.7 at N^-1.1).

        >>> round(default_delta(16_000), 10)
        2.37393e-05
    """
    return float(dataset_size) ** -DELTA_EXPONENT


def check_delta_below_one_over_n(delta: float, dataset_size: int, allowed: bool, where: str = "privacy.delta") -> None:
    """UsageError when δ ≥ 1/N and the user did not allow it (privacy.allow_large_delta = true)."""
    if not allowed and delta >= 1.0 / dataset_size:
        raise UsageError(f"{where} = {delta:g} is not allowed: it is ≥ 1/N = {1.0 / dataset_size:.3g} (N = "
                         f"{dataset_size}), where releasing one random example outright meets the guarantee; use a "
                         f"smaller delta (0 gives the default N^-{DELTA_EXPONENT:g} = {default_delta(dataset_size):.3g}), or set "
                         "privacy.allow_large_delta = true to accept it")


def validate(dataset_size, batch_size, steps, sigma, delta, epsilon=None) -> None:
    """Raise UsageError naming the first bad value; S and σ must lie where the accountants are trusted
    (tanplan.privacy.accounting: 1 ≤ S ≤ 10^7, 1e-4 ≤ σ ≤ 1e6)."""
    _check_sizes(dataset_size, batch_size)
    if not (isinstance(steps, int) and 1 <= steps <= accounting.MAX_STEPS):
        raise UsageError(f"steps {steps} is not allowed: must be an integer in [1, {accounting.MAX_STEPS:.0e}], "
                         "where the accountants are trusted")
    if sigma is not None and not (math.isfinite(sigma) and accounting.SIGMA_MIN <= sigma <= accounting.SIGMA_MAX):
        raise UsageError(f"sigma {sigma:g} is not allowed: must be in [{accounting.SIGMA_MIN:g}, "
                         f"{accounting.SIGMA_MAX:g}], where the accountants are trusted")
    accounting.check_delta(delta)
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon > 0):
        raise UsageError(f"epsilon {epsilon} is not allowed: must be > 0")


def _check_sizes(dataset_size, batch_size) -> None:
    if not (isinstance(dataset_size, int) and dataset_size >= 1):
        raise UsageError(f"dataset size {dataset_size} is not allowed: must be an integer ≥ 1")
    if not 1 <= batch_size <= dataset_size:
        raise UsageError(f"batch size {batch_size} is not allowed: must be in [1, {dataset_size}] (the dataset size)")


def steps_of(dataset_size, batch_size, steps=None, epochs=None) -> int:
    """S of a plan given by steps or by epochs (exactly one): S = ceil(E·N/B) for E epochs, E passes over the
    N examples in expectation at batch B rounded UP (tanplan.config.steps_of_epochs, the rule train.epochs
    follows), so that the plan never holds fewer passes than asked; S·B/N, the passes S gives, is shown
    beside it."""
    if steps is not None and epochs is not None:
        raise UsageError(f"--steps {steps} and --epochs {epochs:g} are not allowed together: give one (S, or E "
                         "epochs with S = ceil(E·N/B))")
    if epochs is None:
        if steps is None:
            raise UsageError("give --steps S or --epochs E (S = ceil(E·N/B)), not neither")
        return steps
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Real) or not (math.isfinite(epochs) and epochs > 0):
        raise UsageError(f"--epochs {epochs!r} is not allowed: must be a finite number > 0")
    _check_sizes(dataset_size, batch_size)
    return steps_of_epochs(epochs, dataset_size, batch_size, what="--epochs")


def plan_from_config(cfg, dataset_size: int) -> Plan:
    """The target Plan of an experiment config: σ from [privacy] sigma, or calibrated from epsilon.

    Reads cfg.privacy.{epsilon, sigma, delta, accountant, neighbouring} and cfg.train.{batch_size, steps};
    delta = 0 means N^-1.1, sigma = 0 means calibrate from epsilon.
    """
    privacy, train = cfg.privacy, cfg.train
    delta = privacy.delta or default_delta(dataset_size)
    steps = train_steps(train, dataset_size)  # train.steps, or ceil(epochs·N/B)
    if privacy.sigma and privacy.sigma > 0:
        return Plan(dataset_size, int(train.batch_size), steps, float(privacy.sigma), delta,
                    privacy.epsilon or None, privacy.accountant, privacy.neighbouring)
    if not privacy.epsilon:
        raise UsageError("the [privacy] section needs sigma > 0 or a target epsilon > 0")
    return Plan.from_budget(dataset_size, int(train.batch_size), steps, float(privacy.epsilon), delta,
                            privacy.accountant, privacy.neighbouring)


def advice(plan: Plan, accountant: str | None = None) -> list[str]:
    """What to change, in the paper's terms, with the exact ε each change would give."""
    lines = []
    eps_now = plan.epsilon(accountant)
    if plan.regime is not tan.Regime.TAN:
        k = tan.factor_to_tan_regime(plan.sigma)
        new_b = math.ceil(plan.batch_size * k)
        if new_b <= plan.dataset_size:
            scaled = dataclasses.replace(plan, batch_size=new_b, sigma=plan.sigma * new_b / plan.batch_size,
                                         target_epsilon=None)
            lines.append(
                f"multiply B and σ by k={new_b / plan.batch_size:.3g} to reach σ ≥ 2 (B={new_b}, σ={scaled.sigma:.3g}, "
                f"same S and η_step): exact ε drops from {eps_now:.3g} to {scaled.epsilon(accountant):.3g} "
                f"at {new_b / plan.batch_size:.3g}× the compute"
            )
        else:
            lines.append(
                f"σ ≥ 2 needs B={new_b} > N={plan.dataset_size} at this η_step: lower S or accept the overcharge; "
                f"at B=N the best σ is {plan.sigma * plan.dataset_size / plan.batch_size:.3g}"
            )
        if plan.regime is tan.Regime.PRIVACY_WALL:
            lines.append("σ < 0.5 is the privacy wall: no useful guarantee is possible without more noise")
    else:
        lines.append(f"σ ≥ 2: ε ≈ ε_TAN ({plan.eps_tan:.3g}) depends only on η; tune on a proxy "
                     f"(`tanplan proxy`), B/B' times cheaper at the same η_step and S")
        if plan.sigma >= 4 and plan.batch_size >= 2:
            half = dataclasses.replace(plan, batch_size=plan.batch_size // 2,
                                       sigma=plan.sigma * (plan.batch_size // 2) / plan.batch_size,
                                       target_epsilon=None)
            lines.append(f"σ ≥ 4: halving B and σ (B={half.batch_size}, σ={half.sigma:.3g}) costs half the compute "
                         f"and moves exact ε only from {eps_now:.3g} to {half.epsilon(accountant):.3g}")
    return lines
