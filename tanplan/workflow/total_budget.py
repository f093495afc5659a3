"""The total ε a workflow will release on the private set, bounded before any training, and its refusal.

With [tuning] data = "private" every proxy run (sweep trial and re-run, ladder or fit run, frontier
candidate) trains on the private training set, and each is a release on it: S Poisson-subsampled Gaussian
steps at its own (q' = B'/N, σ', S), and DP-SNIP's one release when pruning.method = "dp_snip". With public
tuning data only the launch touches the private set. Before any of them trains, `TotalPlan` lists what the
workflow WILL release on the private set as dp-accounting DpEvents (each run's `RunPlan.events`: the
events its ledger will hold once all its planned steps are taken) and composes them with
tanplan.privacy.accounting (runs of equal (q, σ) are one event), under the config's accountant and
neighbouring relation (PLD falls back to RDP where a proxy's σ' is below PLD's domain, as the totals of
tanplan.workflow.privacy_spent do). `check` refuses (BudgetExceeded, exit 3) when that composition
exceeds privacy.total_epsilon (0: privacy.epsilon), before anything is written.

Guarantee: the figure checked is an upper bound on the total the workflow's ledgers can reach.
- A sweep trains at most `trials` trials and min(top_k, trials) × seeds re-runs, each at most S steps
  (a pruned or diverged trial takes fewer; a resumed one continues its own run: no release twice).
- A fit with explicit sizes trains each size × fit.seeds.
- The ladder (tanplan.workflow.ladder.next_step) climbs rungs start·2^k with `seeds` runs each while the
  next rung fits its budget Σ B' ≤ per_step (in a `tanplan run`: what fit.compute_budget leaves after the
  sweep's Σ B'), then a rung with fewer runs (two at least) or single runs at rungs already climbed, each
  within the budget left. `ladder_counts` charges every example of budget left after the climb to runs at the
  smallest rung: at constant η_step every rung has the same q'/σ', so a smaller rung has a smaller σ' and
  costs at least as much ε per run, and it buys the most runs per example (every rung is a multiple of
  the smallest). tests/workflow/test_total_budget.py checks the bound against every other way of
  spending that budget, and against ladders driven to their end.
- The launch releases the target's events.
Releases already made (a sweep's runs under `launch --best`) enter as their ledgers, exactly.
- The runs [init]'s weights descend from (tanplan.privacy.init_provenance: a tanplan run that may have
  trained on the private set, and the runs it started from in turn) enter as their releases, exactly, each
  once however many ledgers inherited it (`check` adds them from the config: every gate has them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from tanplan.config import Config
from tanplan.errors import BudgetExceeded, UsageError
from tanplan.outcomes.privacy_spent import PlannedTotal
from tanplan.privacy import accounting, init_provenance
from tanplan.privacy.accounting import dp_sgd_event
from tanplan.privacy.ledger import inherited_events_of
from tanplan.privacy.plan import Plan, default_delta
from tanplan.privacy.run_plan import RunPlan
from tanplan.workflow.fit_members import data_members, steps_members


@dataclass(frozen=True, kw_only=True)
class Planned:
    """`runs` runs of one kind, and the DpEvents of all of them."""

    what: str  # "sweep trials", "ladder runs (at most)", "the launch", ...
    runs: int
    events: tuple = ()


@dataclass(frozen=True, kw_only=True)
class TotalPlan:
    """Everything a workflow will release on the private set: planned runs, and ledgers already written."""

    parts: tuple[Planned, ...]
    delta: float
    accountant: str = "pld"
    neighbouring: str = "add_remove"
    spent: tuple = field(default=())  # Ledgers of releases already made
    inherited: tuple = field(default=())  # ledger.Inherited groups of the runs [init]'s weights descend from

    @property
    def runs(self) -> int:
        return sum(p.runs for p in self.parts) + len(self.spent) + self.init_runs

    @property
    def init_runs(self) -> int:
        """The runs [init]'s weights descend from whose releases compose (not already among `spent`)."""
        return sum(1 for g in self.inherited if g.composed and g.releases)

    def events(self) -> list:
        """Every planned release, every release of the ledgers already written and every composed release
        they and [init] inherited, each once."""
        return ([e for p in self.parts for e in p.events] + [e for ledger in self.spent for e in ledger.events()]
                + inherited_events_of(self.spent, self.inherited))

    def epsilon(self, within: float | None = None) -> tuple[float | None, str | None, str | None]:
        """(ε of the whole composition, the accountant that gave it, a note): the accountant of record,
        RDP where PLD cannot run (add/remove-one; under replace-one ε is then None, with the note).

        within: a budget. Under add/remove-one, RDP comes first (milliseconds, where PLD takes seconds
        for each distinct (q, σ)); when it is within the budget it is the figure returned: an upper bound
        too (for these subsampled Gaussians it lies above PLD's)."""
        events = self.events()
        if within is not None and self.neighbouring == "add_remove" and self.accountant == "pld" and events:
            rdp = accounting.epsilon_of_events(events, self.delta, "rdp")
            if rdp <= within:
                return rdp, "rdp", "RDP, within the budget: PLD (tighter) was not needed"
        return accounting.epsilon_with_fallback(events, self.delta, self.accountant, self.neighbouring)

    def describe(self) -> str:
        """"4 sweep trials, 6 re-runs, at most 26 ladder runs and the launch"."""
        items = [f"{p.runs} {p.what}" if p.what != "the launch" else p.what for p in self.parts if p.runs]
        if self.spent:
            items.insert(0, f"{len(self.spent)} runs already trained")
        if self.init_runs:
            items.insert(0, f"the {self.init_runs} runs [init]'s weights descend from")
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def limit_of(cfg: Config) -> float:
    """privacy.total_epsilon, or privacy.epsilon where it is 0 (the default)."""
    return init_provenance.limit(cfg)


def check(total: TotalPlan, cfg: Config) -> PlannedTotal:
    """The planned total (its keys join the workflow's JSON); BudgetExceeded (one line: the figure, what it
    composes, the alternatives) when it exceeds privacy.total_epsilon. Call it before anything is written.
    The releases of the runs cfg's [init] descends from that may be on the private set are added here."""
    total = with_init(total, cfg)
    limit = limit_of(cfg)
    eps, accountant, note = total.epsilon(within=limit)
    given = (f"privacy.total_epsilon = {limit:g}" if cfg.privacy.total_epsilon else
             f"privacy.total_epsilon = {limit:g} (its default, privacy.epsilon)")
    if eps is None:
        raise UsageError(f"the total ε on the private set cannot be bounded under privacy.neighbouring = "
                         f"{cfg.privacy.neighbouring!r}: {note}; tune on public data (tuning.data = \"public\") or "
                         "use privacy.neighbouring = \"add_remove\"")
    if eps > limit:
        relation = "" if total.neighbouring == "add_remove" else ", replace-one"
        raise BudgetExceeded(
            f"the workflow would release up to ε = {eps:.4g} ({accountant.upper()}{relation}, δ = {total.delta:.3g}) "
            f"on the private set ({total.describe()}: {total.runs} runs composed), above {given}; nothing was "
            "trained: tune on public data (tuning.data = \"public\", or --tune-data public), plan fewer proxy runs "
            "(sweep.trials, sweep.top_k × sweep.seeds, fit.max_proxy_fraction or fit.seeds), or use random-count "
            "tuning; or raise privacy.total_epsilon" + ("; or start from weights trained on other data"
                                                        if total.init_runs else ""))
    return PlannedTotal(epsilon_total_planned=eps, epsilon_total_planned_accountant=accountant,
                        epsilon_total_planned_runs=total.runs, epsilon_total_budget=limit,
                        epsilon_total_planned_note=note)


def with_init(total: TotalPlan, cfg: Config) -> TotalPlan:
    """total with the composed releases of the runs cfg's [init] weights descend from
    (tanplan.privacy.init_provenance.read, judged against cfg's data): none for public weights."""
    prov = init_provenance.read(cfg) if cfg.privacy.private else None
    groups = tuple(g for g in prov.groups if g.composed) if prov is not None else ()
    return replace(total, inherited=total.inherited + groups) if groups else total


# ---------------------------------------------------------------------------------------------------
# What each stage will release (its runs' events). Each takes the target's RunPlan on the private set,
# resolved once at the stage's entry; a proxy's is RunPlan.at(B') of it.


def _runs(target: RunPlan, proxy_batch_size: int, count: int, what: str) -> Planned:
    """`count` runs of the target's proxy at B' (σ' = σ·B'/B, the same S): each run's events, all of them."""
    run = target.at(int(proxy_batch_size))
    return Planned(what=what, runs=count, events=tuple(run.events()) * count)


def launch_part(target: RunPlan) -> Planned:
    """The launch: the target's releases (DP-SGD, and DP-SNIP's when configured)."""
    return Planned(what="the launch", runs=1, events=tuple(target.events()))


def sweep_parts(target: RunPlan, proxy_batch_size: int, trials: int, top_k: int, seeds: int) -> list[Planned]:
    """A sweep's trials and re-runs (the top min(top_k, trials) configurations × seeds)."""
    reruns = min(top_k, trials) * seeds
    parts = [_runs(target, proxy_batch_size, trials, "sweep trials")]
    if reruns:
        parts.append(_runs(target, proxy_batch_size, reruns, "sweep re-runs"))
    return parts


def fit_parts(target: RunPlan, batch_sizes: Sequence[int], seeds: int) -> list[Planned]:
    """A fit over explicit sizes: each size × seeds."""
    parts = [_runs(target, b, seeds, f"fit runs at B'={b}") for b in sorted(set(batch_sizes))]
    return [Planned(what="fit runs", runs=sum(p.runs for p in parts), events=sum((p.events for p in parts), ()))]


def vary_parts(target: Plan, vary: str, factors, proxy_batch_size: int, seeds: int,
               available: int | None = None) -> list[Planned]:
    """`fit --vary steps` (members (B/k, S·k²) at σ, each by its proxy B'/k) or `--vary data` (members on
    N' = k·N examples at (B, σ, S), each by its proxy B'), `seeds` runs a member: the members of
    tanplan.workflow.fit_members.steps_members / data_members. target: the members' Plan on the private N
    (tanplan.privacy.plan.plan_from_config, as the members are derived)."""
    dataset_size = target.dataset_size
    events: tuple = ()
    if vary == "steps":
        members = steps_members(target, factors, proxy_batch_size)
        for _, b, s, proxy_b in members:
            events += (dp_sgd_event(proxy_b / dataset_size, target.sigma * proxy_b / b, s),) * seeds
    else:
        members = data_members(target, factors, available or dataset_size)
        for _, n in members:
            b = proxy_batch_size
            events += (dp_sgd_event(b / n, target.sigma * b / target.batch_size, target.steps),) * seeds
    return [Planned(what=f"--vary {vary} runs", runs=len(members) * seeds, events=events)]


def ladder_counts(budget) -> dict[int, int]:
    """{B': runs} of the costliest ladder its budget allows (see the module docstring): the rungs it
    climbs with `seeds` runs each, and every example of budget left charged to runs at the smallest rung.

        >>> from tanplan.workflow.ladder import Budget
        >>> ladder_counts(Budget(16, 4096, 4, 1024, 0.3))  # 4 × (16 + 32 + 64 + 128) = 960 of 1024
        {16: 8, 32: 4, 64: 4, 128: 4}
    """
    counts: dict[int, int] = {}
    left = budget.per_step
    for b in budget.sizes:  # the climb: a rung while its seeds fit (ladder.next_step)
        if budget.seeds * b > left:
            break
        counts[b] = budget.seeds
        left -= budget.seeds * b
    if counts:  # then single runs at climbed rungs, each within the budget left
        smallest = min(counts)
        counts[smallest] += int(left // smallest)
    return counts


def ladder_part(target: RunPlan, budget) -> Planned:
    """The ladder's runs, at most (ladder_counts of its budget: tanplan.workflow.ladder.budget_of, after the
    sweep's Σ B' in a `tanplan run`)."""
    counts = ladder_counts(budget)
    events: tuple = ()
    for b, n in counts.items():
        events += _runs(target, b, n, "").events
    return Planned(what="ladder runs at most", runs=sum(counts.values()), events=events)


def pipeline_plan(target: RunPlan, tuning_data: str, *, sweep_batch_size: int, trials: int, top_k: int, seeds: int,
                  fit_batch_sizes, fit_seeds: int, ladder_budget=None, launch: bool = True) -> TotalPlan:
    """`tanplan run`: the sweep, the ladder (fit_batch_sizes "auto": ladder_budget, what the sweep's Σ B'
    leaves) or the explicit fit, and the launch; with public tuning data the launch alone."""
    parts: list[Planned] = []
    if tuning_data == "private":
        parts += sweep_parts(target, sweep_batch_size, trials, top_k, seeds)
        if fit_batch_sizes == "auto":
            parts.append(ladder_part(target, ladder_budget))
        else:
            parts += fit_parts(target, list(fit_batch_sizes), fit_seeds)
    if launch:
        parts.append(launch_part(target))
    return of_target(target, parts)


def optimize_plan(cfg: Config, dataset_size: int, candidates, window, seeds: int, extend: int, proxy_batch_size,
                  launch: bool) -> TotalPlan:
    """`tanplan optimize` with private tuning data: the costliest set of runs it can train. The window's
    candidates, each simulated by `seeds` proxies (proxy_batch_size(c): its B'); then up to `extend` more,
    one at a time beyond an end of the simulated range (every split of them between the two ends is
    composed); with launch, the recommendation, which is one of the simulated candidates (each tried).
    The costliest is chosen by RDP (fast; PLD of each would take minutes), then checked as usual.
    Candidates carry their own (B, S, σ) calibrated to privacy.epsilon (tanplan.privacy.frontier)."""
    delta = cfg.privacy.delta or default_delta(dataset_size)
    ordered = sorted(candidates, key=lambda c: c.steps)
    steps = [c.steps for c in ordered]
    low, high = steps.index(min(c.steps for c in window)), steps.index(max(c.steps for c in window))

    def proxies(c) -> tuple:
        b = proxy_batch_size(c)
        return (dp_sgd_event(b / dataset_size, c.sigma * b / c.batch_size, c.steps),) * seeds

    worst = None
    for below in range(extend + 1):
        chosen = ordered[max(0, low - below):high + 1 + (extend - below)]
        simulated = Planned(what="proxy runs of simulated candidates at most", runs=len(chosen) * seeds,
                            events=sum((proxies(c) for c in chosen), ()))
        launches = [Planned(what="the launch", runs=1, events=(dp_sgd_event(c.batch_size / dataset_size, c.sigma,
                                                                             c.steps),)) for c in chosen]
        for extra in (launches if launch else [None]):
            plan = TotalPlan(parts=(simulated,) + ((extra,) if extra else ()), delta=delta,
                             accountant=cfg.privacy.accountant, neighbouring=cfg.privacy.neighbouring)
            eps = accounting.epsilon_of_events(plan.events(), delta, "rdp")  # ranked by RDP: fast
            if worst is None or eps > worst[0]:
                worst = (eps, plan)
    return worst[1]


def of_target(target: RunPlan, parts: Sequence[Planned], spent: Sequence = ()) -> TotalPlan:
    """A TotalPlan at the target's δ, accountant and relation."""
    return TotalPlan(parts=tuple(parts), delta=target.delta, accountant=target.accountant,
                     neighbouring=target.neighbouring, spent=tuple(spent))


__all__ = ["Planned", "TotalPlan", "limit_of", "check", "with_init", "launch_part", "sweep_parts", "fit_parts",
           "vary_parts", "ladder_counts",
           "ladder_part", "pipeline_plan", "optimize_plan", "of_target"]
