"""`tanplan plan` and `tanplan proxy`: a DP-SGD target (σ given or calibrated to ε), its numbers, regime and
advice, and its constant-η_step proxies (B', σ·B'/B, S). The budget frontier (`plan --compute`) is
tanplan.workflow.frontier_plan.

JAX-free: `import tanplan` and the planner import this module; it reads no data and trains nothing.
"""

from __future__ import annotations

import warnings
from typing import Callable, Iterable

from tanplan.errors import UsageError
from tanplan.outcomes.planning import PlanResult, Proxy
from tanplan.privacy import tan
from tanplan.privacy.plan import Plan, advice, default_delta, steps_of, with_dataset_size
from tanplan.reports.plan import write_plan_report

PROXY_CAVEAT = ("The proxy is a simulation for choosing hyper-parameters: it trains at the target's η_step and S, "
                "so it should behave like the target. Its own ε is no guarantee for anything you release, and it is "
                "not accounted in the target's ε: it is what the proxy costs the data it trains on (large: σ' is "
                "small). Train proxies on public data of the same task (`tanplan run` does by default, [tuning] "
                "data = \"public\"), or count them: with [tuning] data = \"private\" `tanplan run` reports the total "
                "ε, and `tanplan sweep` and `tanplan fit` write privacy_spent.json.")


def plan_entry(dataset_size: int, batch_size: int, steps: int | None, *, epochs: float | None, sigma: float | None,
               epsilon: float | None, delta: float | None, accountant: str, neighbouring: str,
               dataset_sizes: Iterable[int], out, warn: Callable[[str], None] | None) -> PlanResult:
    """The stage of tanplan.api.plan: the target checked and planned, its report written when out is given."""
    target = _target(dataset_size, batch_size, steps_of(dataset_size, batch_size, steps, epochs), sigma, epsilon,
                     delta, accountant, neighbouring, warn)
    accountants = _reported(target)
    sizes = tuple(with_dataset_size(target, int(n)) for n in dataset_sizes) or None
    figures = write_plan_report(target, out, accountants, epochs_asked=epochs) if out is not None else None
    return PlanResult(plan=target, accountants=accountants, regime_text=tan.REGIME_TEXT[target.regime],
                      advice=tuple(advice(target)), dataset_sizes=sizes, figures=figures,
                      epochs_asked=None if epochs is None else float(epochs))


def proxy_entry(dataset_size: int, batch_size: int, steps: int | None, *, epochs: float | None,
                proxy_batch_sizes: Iterable[int], savings: float | None, sigma: float | None, epsilon: float | None,
                delta: float | None, accountant: str, neighbouring: str,
                warn: Callable[[str], None] | None) -> tuple[Proxy, ...]:
    """The stage of tanplan.api.proxy: one proxy per batch size, or B' = B/savings."""
    sizes = list(proxy_batch_sizes)
    if (savings is None) == (not sizes):
        raise UsageError("give proxy batch sizes or a savings factor, not both and not neither")
    target = _target(dataset_size, batch_size, steps_of(dataset_size, batch_size, steps, epochs), sigma, epsilon,
                     delta, accountant, neighbouring, warn)
    if savings is not None:
        if savings < 1:
            raise UsageError(f"--savings {savings:g} is not allowed: must be ≥ 1")
        sizes = [max(1, round(target.batch_size / savings))]
    for b in sizes:
        if b > target.batch_size:
            raise UsageError(f"--proxy-batch-size {b} is not allowed: must be ≤ the target batch size {target.batch_size}")
    rows = []
    for b in sizes:
        p = target.proxy(b)
        rows.append(Proxy(proxy_batch_size=p.batch_size, proxy_sigma=p.sigma, steps=p.steps, eta_step=p.eta_step,
                          savings=target.savings(p), proxy_regime=p.regime.value, dataset_size=target.dataset_size,
                          batch_size=target.batch_size, sigma=target.sigma, delta=target.delta,
                          target_epsilon=target.epsilon(), target_accountant=target.accountant,
                          target_eps_rdp=target.epsilon("rdp"), note=PROXY_CAVEAT))
    return tuple(rows)


def _reported(target) -> tuple[str, ...]:
    """Every accountant reported, the one of record first."""
    return ("rdp", "pld") if target.accountant == "rdp" else ("pld", "rdp")


def _target(n, b, s, sigma, epsilon, delta, accountant, neighbouring, warn):
    """The Plan the arguments describe (σ calibrated when epsilon is given); warns when δ ≥ 1/N, after
    every check (an informational line never precedes an error)."""
    if (sigma is None) == (epsilon is None):
        raise UsageError("give sigma or epsilon (σ is then calibrated to it), not both and not neither")
    if accountant not in ("rdp", "pld", "both"):
        raise UsageError(f"accountant {accountant!r} is not allowed: use pld, rdp or both")
    if neighbouring not in ("add_remove", "replace_one"):
        raise UsageError(f"neighbouring {neighbouring!r} is not allowed: use add_remove or replace_one")
    record = "rdp" if accountant == "rdp" else "pld"
    if isinstance(b, int) and isinstance(n, int) and b > n:
        raise UsageError(f"--batch-size {b} is not allowed: must be ≤ --dataset-size {n}")
    if neighbouring == "replace_one" and record == "rdp":
        raise UsageError("--neighbouring replace_one is not allowed with --accountant rdp: only PLD computes "
                         "replace-one for Poisson sampling")
    chosen = default_delta(n) if delta is None else delta
    if epsilon is not None:
        target = Plan.from_budget(n, b, s, epsilon, chosen, record, neighbouring)
    else:
        target = Plan(n, b, s, sigma, chosen, None, record, neighbouring)
    if target.delta_above_one_over_n:
        (warn or _warn)(f"delta={chosen:g} is ≥ 1/N={1.0 / n:.3g}: such a δ allows releasing an example outright; "
                        "training commands refuse it unless privacy.allow_large_delta = true")
    return target


def _warn(line: str) -> None:
    warnings.warn(line, stacklevel=4)  # attributed to api.plan or api.proxy, past _target and the entry
