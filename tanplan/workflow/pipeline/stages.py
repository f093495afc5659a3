"""The stages of `tanplan run`, each with its progress line: plan, tuning data, sweep, ladder or fit, launch."""

from __future__ import annotations

from pathlib import Path

from tanplan.config import Config
from tanplan.data.dataset import same_test_set
from tanplan.engine.setup import load_data
from tanplan.outcomes.fit import FitResult, LadderResult, ProxyRun
from tanplan.outcomes.launch import LaunchResult
from tanplan.outcomes.privacy_spent import PlannedTotal
from tanplan.privacy.plan import Plan
from tanplan.privacy.run_plan import RunPlan
from tanplan.reports.plan import write_plan_report
from tanplan.workflow import fit as fit_module
from tanplan.workflow.ladder import check_ladder, run_ladder
from tanplan.workflow import launch
from tanplan.workflow.members import Members
from tanplan.workflow.sweep import search as sweep
from tanplan.workflow.sweep.study import STUDY_FILE
from tanplan.workflow.tuning import Tuning


class Progress:
    """Numbered progress lines: [2/5] ladder: ... (launch False: the stages up to the law alone)."""

    def __init__(self, baselines: bool, log, launch: bool = True):
        self.total = 3 + int(launch) + int(baselines and launch)
        self.done = 0
        self.log = log

    def next(self, text: str) -> None:
        self.done += 1
        self.log(f"[{self.done}/{self.total}] {text}")


def launch_plan(runs: Members, dataset) -> RunPlan:
    """The RunPlan the launch will run, its target, on the loaded private set (UsageError for a δ, σ or budget
    it cannot take): the total ε's proxies are RunPlan.at(B') of it."""
    return runs.target_plan(dataset.num_train)


def eval_sets(tune: Tuning, dataset) -> tuple[int | None, int | None]:
    """(the proxies' test-set size, the launch's) when they differ; (None, None) when the proxies are evaluated
    on the launch's own test set (the interval then has no test-set term). Uses the set tuning loaded."""
    proxy_data = tune.proxy_data if tune.proxy_data is not None else load_data(tune.proxy_cfg.data)
    same = same_test_set(proxy_data, dataset)  # in-memory arrays, or sources read in slices
    return (None, None) if same else (int(proxy_data.num_test), int(dataset.num_test))


def prepare_sweep(cfg: Config, proxy_batch_size: int, trials):
    """The sweep's spec, checked (space, proxy, Ray address form) before any proxy trains."""
    return sweep.prepare(cfg, proxy_batch_size=proxy_batch_size, trials=trials, dataset=None)


def plan_stage(cfg: Config, plan: Plan, out: Path, progress: Progress) -> Plan:
    progress.next(f"plan: N={plan.dataset_size}, B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}, "
                  f"ε={plan.epsilon():.4g} ({plan.accountant.upper()}; RDP {plan.epsilon('rdp'):.4g}), "
                  f"δ={plan.delta:.3g}, regime {plan.regime.value}")
    write_plan_report(plan, out / "plan", ("pld", "rdp"), title=f"Plan: {cfg.experiment.name}")
    return plan


def tuning_stage(tune: Tuning, planned: PlannedTotal | None, progress: Progress) -> Tuning:
    """Where the proxies learn (tanplan.workflow.tuning), said on one line; with private tuning data, the
    bound on the total checked before training."""
    line = f"  proxies learn on {tune.source}"
    if tune.data == "public" and tune.sizes_differ:
        line += (f"; N_pub = {tune.tuning_size} differs from N = {tune.private_size}: σ' keeps the target's σ/B "
                 "(the noise on the mean gradient); the law is extrapolated across data sizes too"
                 + (", with a data-size term measured on half of the public set" if tune.tuning_size < tune.private_size
                    else ""))
    elif tune.data == "private":
        line += ": every proxy's release is composed into the total ε"
    progress.log(line)
    if planned and tune.data == "private":
        progress.log(f"  planned total ε on the private set: at most {planned.epsilon_total_planned:.4g} "
                     f"({planned.epsilon_total_planned_accountant.upper()}, {planned.epsilon_total_planned_runs} "
                     f"runs) within privacy.total_epsilon = {planned.epsilon_total_budget:g}")
    return tune


def sweep_stage(spec, proxy_batch_size: int, out: Path, progress: Progress,
                address) -> tuple[dict, list[tuple[int, int]]]:
    """The sweep's best overrides, and the (B', S) of every proxy run it trained (trials and re-runs)."""
    progress.next(f"sweep: {spec.trials} trials at B'={proxy_batch_size} (σ'={spec.proxy.sigma:.4g})")
    resume = (out / "sweep" / STUDY_FILE).is_file()  # a rerun continues (or reuses) the same sweep
    result = sweep.run_sweep(spec, out / "sweep", address=address, resume=resume,
                             log=lambda line: progress.log(f"  {line}"))
    # every trial and re-run trains in a run folder of its own below trials/, with its ledger
    trained = sum(1 for _ in (out / "sweep" / "trials").rglob("ledger.json"))
    run = (int(spec.proxy.batch_size), int(spec.proxy.steps))
    return (dict(result.best.overrides) if result.best else {}), [run] * trained


def law_stage(cfg: Config, out: Path, progress: Progress, test_sizes, sweep_spent: float = 0.0,
              data_sizes: tuple[int, int] | None = None) -> tuple[LadderResult | None, FitResult, list[tuple[int, int]]]:
    """(the ladder's result or None, the fit result, the (B', S) of every run of the law): the ladder with
    fit.batch_sizes = "auto" (within what fit.compute_budget leaves after the sweep's Σ B', sweep_spent),
    else the fit on the explicit sizes. data_sizes: (N_pub, N) where the proxies learn on a public set of
    another size: with N_pub < N, the prediction carries the measured data-size term (data_size_stage)."""
    if cfg.fit.batch_sizes != "auto":
        ladder, fit_result = None, fit_stage(cfg, out, progress, test_sizes)
        points = fit_result.points or ()
    else:
        ladder = ladder_stage(cfg, out, progress, test_sizes, sweep_spent)
        fit_result = ladder_fit_result(ladder, out, cfg.fit.max_half_width / 100, cfg.fit.spread_ratio)
        points = _ladder_runs(ladder)
    fit_result, extra = data_size_stage(cfg, out, progress, fit_result, ladder, test_sizes, data_sizes)
    return ladder, fit_result, [(p.batch_size, p.steps) for p in (*points, *extra)]


def data_size_stage(cfg: Config, out: Path, progress: Progress, fit_result: FitResult, ladder: LadderResult | None,
                    test_sizes, data_sizes: tuple[int, int] | None) -> tuple[FitResult, list[ProxyRun]]:
    """The law's prediction with the data-size term (tanplan.workflow.fit.with_data_size) where its proxies learned on
    fewer public examples than the private set holds; as it was otherwise. (The fit result, its runs.)"""
    if data_sizes is None:
        return fit_result, []
    f = cfg.fit
    level, law = (ladder.prediction.level, ladder.law_setting) if ladder is not None and ladder.prediction else \
        (f.level, f.law)
    sizes = ladder.test_sizes if ladder is not None else test_sizes
    return fit_module.with_data_size(cfg, fit_result, *data_sizes, out / "fit", level=level, law=law,
                                     test_sizes=sizes, log=progress.log)


def _ladder_runs(ladder: LadderResult) -> list[ProxyRun]:
    """The ladder's own runs (its points may hold others it was given)."""
    return [p for p in ladder.points if p.source == "ladder"]


def ladder_stage(cfg: Config, out: Path, progress: Progress, test_sizes, sweep_spent: float = 0.0) -> LadderResult:
    f, budget = cfg.fit, check_ladder(cfg, sweep_spent, "the sweep's")
    progress.next(f"ladder: the chosen configuration's proxies, B' from {f.ladder_start} doubled × {f.ladder_seeds} "
                  "seeds, then rungs or seeds while the law's part of the interval is wide "
                  f"(≤ {budget.per_step:g}·S examples, {budget.per_step / cfg.train.batch_size:.3g} of the target's "
                  "compute)")
    result = run_ladder(cfg, out / "ladder", log=progress.log, test_sizes=test_sizes, spent_before=sweep_spent)
    progress.log(f"  {result.reason}")
    return result


def ladder_fit_result(ladder: LadderResult, out: Path, max_half_width: float = 0.0,
                      spread_ratio: float = 0.0) -> FitResult:
    """The fit result of the ladder's law: its rows, the prediction, the verdict (max_half_width: accuracy;
    spread_ratio: fit.spread_ratio, as the ladder's own predictions used it)."""
    rows = _ladder_runs(ladder)
    if ladder.prediction is None:
        return FitResult(law_holds=False, verdict=ladder.reason, what_to_change=ladder.what_to_change,
                         points=tuple(rows))
    # the same rows, law setting, level and test sets as the ladder's last prediction: the same decision
    return fit_module.fit_rows(rows, ladder.target_batch_size, out / "fit", level=ladder.prediction.level,
                               law=ladder.law_setting, test_sizes=ladder.test_sizes, max_half_width=max_half_width,
                               spread_ratio=spread_ratio)


def fit_stage(cfg: Config, out: Path, progress: Progress, test_sizes) -> FitResult:
    """The law on the explicit fit.batch_sizes, each trained with fit.seeds seeds of the chosen configuration."""
    f = cfg.fit
    progress.next(f"fit: B' in {list(f.batch_sizes)} × {f.seeds} seeds, with the chosen configuration")
    return fit_module.fit_batch_law(cfg, list(f.batch_sizes), f.seeds, out / "fit", level=f.level, law=f.law,
                                    log=progress.log, test_sizes=test_sizes, max_half_width=f.max_half_width / 100,
                                    spread_ratio=f.spread_ratio)


def launch_stage(best_cfg: Config, plan: Plan, out: Path, progress: Progress) -> LaunchResult:
    progress.next(f"launch: B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}")
    # A rerun into the same folder continues (or, when it finished, reuses) the full-scale run.
    return launch.launch(best_cfg, out / "launch", progress=True, resume=(out / "launch" / "checkpoint").is_dir())
