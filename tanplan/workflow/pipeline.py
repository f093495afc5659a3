"""`tanplan run`: plan → sweep → ladder (the batch law) → launch, and one report comparing prediction and result.

Stages, with `[fit] batch_sizes = "auto"` (the default):

1. plan: the target (B, σ, S) and its exact ε;
2. sweep: hyper-parameters searched on one proxy B'_s (--proxy-batch-size, else [sweep] proxy_batch_size,
   else the ladder's third rung, 4·fit.ladder_start); its best configurations are re-run over
   [sweep] seeds fresh seeds and the one with the best mean is chosen, those whose seeds diverged or
   scatter far more than the others' left aside (tanplan.workflow.sweep.results.ranking);
3. ladder (tanplan.workflow.ladder): proxies of the chosen configuration, rungs B' = 16, 32, ... and seeds
   chosen within the ladder's budget until the interval for one launch is as narrow as proxies can make
   it; the law, the prediction and its interval are tanplan.workflow.batch_law's;
4. launch: the one full-scale run of the chosen configuration.

With an explicit list, the ladder is replaced by the fit: every size trained with `fit.seeds` seeds
(the sweep runs at the smallest size), and the same law and interval.

The ladder trains the configuration that launches, so the law is that configuration's; the sweep's own
runs are not reused in the law (the chosen one won partly by luck: its runs are biased upwards).

Never launch blind: when the verdict says the law does not hold (fewer rungs than the law needs within
the budget, or an interval that leaves [0, 1]) the pipeline stops before the launch. It writes
summary.json (launched: false, the reason, what to change) and report.md, and returns; `tanplan run`
then exits with NotLaunched (4). launch_anyway=True goes on.

Where the proxies learn ([tuning], tanplan.workflow.tuning): on public data of the same task by default,
at the target's η_step, so the launch's ε is the whole cost to the private examples; or on the private
set, and then every release that touched it (sweep trials and re-runs, ladder or fit runs, DP-SNIP,
the launch) is composed from the runs' ledgers into epsilon_total_rdp / epsilon_total_pld. When the
proxies are evaluated on another test set than the launch's, the interval counts the difference of the
two test sets (tanplan.workflow.batch_law.eval_set_variance).

Before anything is written or trained, the total ε the run will release on the private set (with private
tuning its sweep, ladder or fit runs and the launch; with public tuning the launch) is bounded and checked
against privacy.total_epsilon (tanplan.workflow.total_budget): above it, BudgetExceeded (exit 3). The
summary's `epsilon` is the guarantee for the private examples: the composed total whenever the proxies
trained on them, the launch's otherwise (`launch_epsilon` is always the launch's own).

Resume: run.json records what the run was asked (config, options); `resume=True` (`tanplan run --resume`)
continues it: the sweep's study keeps its finished trials, ladder.json its finished runs (each run folder
with a finished summary.json is reused as it is), a run stopped mid-way continues from its checkpoint, and
a finished launch reports again. SIGTERM/SIGINT stop the stages with one line (RunInterrupted), Ray shut
down (tanplan.ray_session).

Compute: every proxy run processes B'·S examples; the summary gives each stage's total as a fraction of
the target's B·S (proxy_compute: sweep, ladder (or fit), total; proxy_compute_fraction is the total).
The ladder is bounded by its budget (fit.max_proxy_fraction, fit.min_proxy_budget); the sweep's cost is
set by [sweep] (trials, re-runs).
"""

from __future__ import annotations

import time
from pathlib import Path

import contextlib
import json
import signal

from tanplan.config import Config, with_tuned
from tanplan.errors import RunInterrupted, UsageError
from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.reports.fit import figure_scaling
from tanplan.reports.run import run_report
from tanplan.workflow import tuning
from tanplan.workflow.privacy_spent import totals
from tanplan.workflow.sweep.study import STUDY_FILE

RUN_FILE = "run.json"  # what a `tanplan run` in this folder was asked: its --resume must ask the same


def run_pipeline(cfg: Config, out: Path, *, trials: int | None = None, log=print, address: str | None = None,
                 baselines: bool = False, baseline_features: str | None = None,
                 baseline_public: str | None = None, proxy_batch_size: int | None = None,
                 launch_anyway: bool = False, resume: bool = False) -> dict:
    """Run every stage into `out`; the summary (also out/summary.json). See the module docstring.

    resume: continue the `tanplan run` in `out` (run.json) of the same config and options: finished sweep
    trials, ladder or fit runs and a finished launch are reused, runs stopped mid-way continue from their
    checkpoints. Without it, a folder that holds a run is refused. SIGTERM/SIGINT stop with RunInterrupted
    (exit 128 + signal), Ray shut down (tanplan.ray_session)."""
    from tanplan.engine.setup import load_data

    started = time.perf_counter()
    out = Path(out)
    auto = cfg.fit.batch_sizes == "auto"
    record = run_record(cfg, trials=trials, proxy_batch_size=proxy_batch_size)  # --launch-anyway may be added
    validate_inputs(cfg, out, address=address, baselines=baselines, baseline_features=baseline_features,
                    baseline_public=baseline_public, proxy_batch_size=proxy_batch_size)
    check_resume(out, record, resume)
    stages = _Stages(baselines, log)
    dataset = load_data(cfg)
    plan = target_plan(cfg, dataset)  # δ, σ and the budget checked: nothing written yet
    tune = tuning.resolve(cfg, plan, private=dataset)  # the public set checked against the private one
    proxies = tune.proxy_cfg  # every proxy (trial, rung, fit run) trains this config: the tuning data
    sweep_b = sweep_batch_size(cfg, proxy_batch_size)
    planned = planned_total(cfg, proxies, plan, tune, sweep_b, trials)  # exit 3 before anything is written
    test_sizes = eval_sets(proxies, dataset)
    prepare_sweep(proxies, sweep_b, trials, None)  # checked (space, proxy, Ray address form) before any proxy trains
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / RUN_FILE, record)
    plan_stage(cfg, plan, out, stages)
    tuning_stage(tune, stages)
    if planned and tune.data == "private":
        stages.log(f"  planned total ε on the private set: at most {planned['epsilon_total_planned']:.4g} "
                   f"({planned['epsilon_total_planned_accountant'].upper()}, {planned['epsilon_total_planned_runs']} "
                   f"runs) within privacy.total_epsilon = {planned['epsilon_total_budget']:g}")
    with interrupted_stage(out):  # SIGTERM/SIGINT from here on: one line, how to go on, Ray shut down
        best_overrides, sweep_examples = sweep_stage(proxies, sweep_b, trials, None, out, stages, address)
        where = "the sweep's best configuration"
        best_proxies, best_cfg = with_tuned(proxies, best_overrides, where), with_tuned(cfg, best_overrides, where)

        if auto:
            ladder = ladder_stage(best_proxies, out, stages, test_sizes)
            fit_result = ladder_fit_result(ladder, out)
            law_runs = [p for p in ladder["points"] if p.get("source") == "ladder"]
        else:
            ladder = None
            fit_result = fit_stage(best_proxies, out, stages, test_sizes)
            law_runs = fit_result["points"]
        compute = _compute(plan, sweep_examples, law_runs, auto)
        if not fit_result["law_holds"] and not launch_anyway:
            return _not_launched(cfg, plan, out, started, tune, stage="ladder" if auto else "fit",
                                 reason=fit_result["verdict"], what_to_change=fit_result["what_to_change"],
                                 ladder=ladder, fit_result=fit_result, best=best_overrides, compute=compute,
                                 planned=planned)

        launched = launch_stage(best_cfg, plan, out, stages)
        actual = float(launched["summary"]["test_accuracy"])
        if fit_result.get("model") is not None:
            figure_scaling(fit_result, out / "scaling_law.png", actual=actual)
        summary = _summary(plan, ladder, fit_result, best_overrides, compute, launched=True, actual=actual,
                           accounting=launched["accounting"], launch_wall=launched["wall_seconds"],
                           anyway=launch_anyway and not fit_result["law_holds"])
        summary["sweep_choice"] = _sweep_choice(out)
        _with_totals(summary, totals(out / "launch", _proxy_folders(out), tune), planned)
        baseline_md = ""
        if baselines and summary["launch_epsilon"] is not None:
            stages.next(f"baselines: private heads and DP prototypes on frozen features at the launch's ε = "
                        f"{summary['launch_epsilon']:.4g}")
            summary["baselines"], baseline_md = _baselines(summary["launch_epsilon"], plan.delta, baseline_features,
                                                           baseline_public, out / "baselines", cfg)
        summary["wall_seconds"] = time.perf_counter() - started
        write_json_atomic(out / "summary.json", summary)
        write_text_atomic(out / "report.md", run_report(cfg.experiment.name, plan, fit_result, summary, out, ladder)
                          + baseline_md)
        return summary


def sweep_batch_size(cfg: Config, proxy_batch_size: int | None) -> int:
    """The sweep's proxy B': --proxy-batch-size, else [sweep] proxy_batch_size, else (ladder) the ladder's third
    rung below the target, else (explicit list) the smallest size."""
    if proxy_batch_size or cfg.sweep.proxy_batch_size:
        return proxy_batch_size or cfg.sweep.proxy_batch_size
    if cfg.fit.batch_sizes != "auto":
        return min(cfg.fit.batch_sizes)
    from tanplan.workflow.ladder import budget_of

    sizes = budget_of(cfg).sizes
    return sizes[min(2, len(sizes) - 1)]


def eval_sets(proxy_cfg: Config, dataset) -> tuple[int | None, int | None]:
    """(the proxies' test-set size, the launch's) when they differ; (None, None) when the proxies are evaluated
    on the launch's own test set (the interval then has no test-set term)."""
    from tanplan.data.dataset import same_test_set
    from tanplan.engine.setup import load_data

    proxy_data = load_data(proxy_cfg)
    same = same_test_set(proxy_data, dataset)  # in-memory arrays, or sources read in slices
    return (None, None) if same else (int(proxy_data.num_test), int(dataset.num_test))


# ---------------------------------------------------------------------------------------------------
# Before any stage: the total budget, the run's record (--resume), interruptions


def planned_total(cfg: Config, proxies: Config, plan, tune, sweep_b: int, trials: int | None) -> dict | None:
    """The bound on the total ε the run will release on the private set (tanplan.workflow.total_budget);
    BudgetExceeded (exit 3) above privacy.total_epsilon. None for a non-private config."""
    from tanplan.workflow import total_budget

    if not cfg.privacy.private:
        return None
    s = cfg.sweep
    total = total_budget.pipeline_plan(cfg, proxies, plan.dataset_size, tune.data, sweep_batch_size=sweep_b,
                                       trials=trials or s.trials, top_k=s.top_k, seeds=s.seeds)
    return total_budget.check(total, cfg)


def run_record(cfg: Config, **options) -> dict:
    """What a run in a folder was asked (run.json): its config and the options that shape its stages."""
    return json.loads(json.dumps({"config": cfg.to_dict(), "options": options}))


def check_resume(out: Path, record: dict, resume: bool) -> None:
    """UsageError unless `out` holds a run exactly when resume is asked, and the same run (config, options)."""
    from tanplan.workflow.sweep.study import _first_difference

    path = Path(out) / RUN_FILE
    if not resume:
        if path.is_file():
            raise UsageError(f"--out {str(out)!r} already holds a `tanplan run` ({RUN_FILE}): pass --resume to "
                             "continue it, or choose another --out")
        return
    if not path.is_file():
        raise UsageError(f"--resume is not allowed: {str(out)!r} holds no `tanplan run` to continue (no {RUN_FILE}); "
                         "leave --resume out to start one")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise UsageError(f"--resume is not allowed: {str(path)!r} is not the JSON a `tanplan run` writes; move it "
                         "away or choose another --out") from None
    if old != record:
        raise UsageError(f"--resume is not allowed: {str(out)!r} holds a run of another config or options "
                         f"({_first_difference(old, record)}); resume with the same --config, --set and options, or "
                         "choose another --out")


@contextlib.contextmanager
def interrupted_stage(out: Path):
    """SIGTERM/SIGINT while the stages run: RunInterrupted (one line, exit 128 + signal) saying how to go on.
    A proxy run or the launch in flight saves its checkpoint (the engine's own handler); a sweep stops its
    Ray Tune run and shuts Ray down (tanplan.ray_session); between runs the stage stops where it is."""
    from tanplan import ray_session

    caught: dict = {}

    def handler(signum, frame):
        caught["signum"] = signum
        raise KeyboardInterrupt

    previous = {}
    try:
        for s in (signal.SIGTERM, signal.SIGINT):
            previous[s] = signal.signal(s, handler)
    except ValueError:  # not the main thread: whoever runs us handles signals
        pass
    how = f"continue with `tanplan run --resume` (the same --config, --set and --out {str(out)!r})"
    try:
        yield
    except KeyboardInterrupt:
        signum = caught.get("signum") or ray_session.last_signal() or signal.SIGINT
        raise RunInterrupted(f"{signal.Signals(signum).name}: `tanplan run` stopped; finished runs are kept in "
                             f"{str(out)!r}: {how}", signum) from None
    except RunInterrupted as err:  # the engine's: the run in flight saved its checkpoint
        text = str(err).removesuffix("; continue with --resume")
        raise RunInterrupted(f"{text}; `tanplan run` stopped: {how}", err.exit_code - 128) from None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ---------------------------------------------------------------------------------------------------
# Stages


class _Stages:
    """Numbered progress lines: [2/5] ladder: ..."""

    def __init__(self, baselines: bool, log):
        self.total = 4 + int(baselines)
        self.done = 0
        self.log = log

    def next(self, text: str) -> None:
        self.done += 1
        self.log(f"[{self.done}/{self.total}] {text}")


def target_plan(cfg: Config, dataset):
    """The target Plan on the loaded private set (UsageError for a δ, σ or budget it cannot take)."""
    from tanplan.privacy.mechanism import resolve_plan

    return resolve_plan(cfg.with_overrides({"train.proxy_batch_size": 0}), dataset.num_train).plan


def plan_stage(cfg: Config, plan, out: Path, stages: _Stages):
    from tanplan.reports.plan import write_plan_report

    stages.next(f"plan: N={plan.dataset_size}, B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}, "
                f"ε={plan.epsilon():.4g} ({plan.accountant.upper()}; RDP {plan.epsilon('rdp'):.4g}), δ={plan.delta:.3g}, "
                f"regime {plan.regime.value}")
    write_plan_report(plan, out / "plan", ("pld", "rdp"), title=f"Plan: {cfg.experiment.name}")
    return plan


def tuning_stage(tune, stages: _Stages):
    """Where the proxies learn (tanplan.workflow.tuning), said on one line."""
    line = f"  proxies learn on {tune.source}"
    if tune.data == "public" and tune.sizes_differ:
        line += (f"; N_pub = {tune.tuning_size} differs from N = {tune.private_size}: σ' keeps the target's η_step, "
                 "and the law is extrapolated across data sizes too")
    elif tune.data == "private":
        line += ": every proxy's release is composed into the total ε"
    stages.log(line)
    return tune


def _proxy_folders(out: Path) -> list[Path]:
    return [out / "sweep" / "trials", out / "ladder", out / "fit"]


def ladder_stage(cfg: Config, out: Path, stages: _Stages, test_sizes) -> dict:
    from tanplan.workflow.ladder import check_ladder, run_ladder

    f, budget = cfg.fit, check_ladder(cfg)
    stages.next(f"ladder: the chosen configuration's proxies, B' from {f.ladder_start} doubled × {f.ladder_seeds} seeds, "
                f"then rungs or seeds while the law's part of the interval is wide (≤ {budget.per_step:g}·S examples, "
                f"{budget.per_step / cfg.train.batch_size:.3g} of the target's compute)")
    result = run_ladder(cfg, out / "ladder", log=stages.log, test_sizes=test_sizes)
    stages.log(f"  {result['reason']}")
    return result


def ladder_fit_result(ladder: dict, out: Path) -> dict:
    """The fit result (fit.json's dict) of the ladder's law: its rows, the prediction, the verdict."""
    from tanplan.workflow import fit as fit_module

    rows = [p for p in ladder["points"] if p.get("source") == "ladder"]
    if ladder["prediction"] is None:
        return {"law_holds": False, "verdict": ladder["reason"], "what_to_change": ladder["what_to_change"],
                "predicted_accuracy": None, "prediction_interval": None, "points": rows, "law": None, "model": None}
    # the same rows, law setting, level and test sets as the ladder's last prediction: the same decision
    return fit_module.fit_rows(rows, ladder["target_batch_size"], out / "fit", level=ladder["prediction"]["level"],
                               law=ladder["law_setting"], test_sizes=ladder["test_sizes"])


def prepare_sweep(cfg: Config, proxy_batch_size: int, trials, dataset):
    from tanplan.workflow.sweep import search as sweep

    return sweep.prepare(cfg, proxy_batch_size=proxy_batch_size, trials=trials, dataset=dataset)


def sweep_stage(cfg: Config, proxy_batch_size: int, trials, dataset, out: Path, stages: _Stages,
                address) -> tuple[dict, list[tuple[int, int]]]:
    """The sweep's best overrides, and the (B', S) of every proxy run it trained."""
    from tanplan.workflow.sweep import search as sweep

    spec = prepare_sweep(cfg, proxy_batch_size, trials, dataset)
    stages.next(f"sweep: {spec.trials} trials at B'={proxy_batch_size} (σ'={spec.proxy['sigma']:.4g})")
    resume = (out / "sweep" / STUDY_FILE).is_file()  # a rerun continues (or reuses) the same sweep
    result = sweep.run_sweep(spec, out / "sweep", address=address, resume=resume,
                             log=lambda line: stages.log(f"  {line}"))
    best = result["best"] or {}
    return dict(best.get("overrides", {})), _sweep_examples(out / "sweep", spec)


def fit_stage(cfg: Config, out: Path, stages: _Stages, test_sizes) -> dict:
    """The law on the explicit fit.batch_sizes, each trained with fit.seeds seeds of the chosen configuration."""
    from tanplan.workflow import fit as fit_module

    f = cfg.fit
    stages.next(f"fit: B' in {list(f.batch_sizes)} × {f.seeds} seeds, with the chosen configuration")
    return fit_module.fit_batch_law(cfg, list(f.batch_sizes), f.seeds, out / "fit", level=f.level, law=f.law,
                                    log=stages.log, test_sizes=test_sizes)


def launch_stage(best_cfg: Config, plan, out: Path, stages: _Stages) -> dict:
    from tanplan.workflow.launch import launch

    stages.next(f"launch: B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}")
    # A rerun into the same folder continues (or, when it finished, reuses) the full-scale run.
    return launch(best_cfg, out / "launch", progress=True, resume=(out / "launch" / "checkpoint").is_dir())


# ---------------------------------------------------------------------------------------------------
# Summary, verdicts and the no-launch path


def _compute(plan, sweep_examples, law_runs, auto: bool) -> dict:
    """Proxy compute of each stage, as a fraction of the target's B·S (each run: B'·S examples)."""
    target = plan.batch_size * plan.steps
    law = sum(p["batch_size"] * p["steps"] for p in law_runs) / target
    parts = {"sweep": sum(b * s for b, s in sweep_examples) / target,
             "ladder": law if auto else 0.0, "fit": 0.0 if auto else law}
    parts["total"] = sum(parts.values())
    parts["runs"] = len(sweep_examples) + len(law_runs)
    return parts


def _sweep_choice(out: Path) -> dict | None:
    """The chosen configuration and its seed spread, from the sweep's best.json."""
    import json

    path = out / "sweep" / "best.json"
    if not path.is_file():
        return None
    best = json.loads(path.read_text()).get("best") or {}
    keys = ("overrides", "mean_accuracy", "std_accuracy", "reruns", "search_accuracy", "flags")
    return {k: best.get(k) for k in keys}


def _summary(plan, ladder, fit_result, best_overrides, compute, *, launched: bool, actual=None, accounting=None,
             launch_wall=None, anyway=False, reason=None, what_to_change=None, stage=None) -> dict:
    predicted = fit_result["predicted_accuracy"] if fit_result else None
    interval = fit_result["prediction_interval"] if fit_result else None
    summary = {
        "launched": launched, "launched_anyway": anyway, "stopped_at": stage, "reason": reason,
        "what_to_change": what_to_change,
        "predicted_accuracy": predicted, "prediction_interval": interval, "actual_accuracy": actual,
        "abs_error": abs(actual - predicted) if actual is not None and predicted is not None else None,
        "actual_inside_interval": bool(interval[0] <= actual <= interval[1]) if actual is not None and interval else None,
        "epsilon_rdp": accounting["epsilon_rdp"] if accounting else None,
        "epsilon_pld": accounting["epsilon_pld"] if accounting else None,
        "epsilon_replace_one": accounting["epsilon_replace_one"] if accounting else None,
        "epsilon": accounting["epsilon"] if accounting else None,
        "accountant": plan.accountant, "neighbouring": plan.neighbouring,
        "delta": plan.delta, "sigma": plan.sigma, "batch_size": plan.batch_size, "steps": plan.steps,
        "proxy_compute": compute, "proxy_compute_fraction": compute["total"] if compute else None,
        "proxy_runs": compute["runs"] if compute else None,
        "best_overrides": best_overrides,
        "ladder": ({k: ladder[k] for k in ("found", "reason", "spent_fraction", "budget_fraction", "seeds", "window",
                                           "law_share")}
                   | {"rungs": {r["batch_size"]: r["seeds"] for r in ladder["rungs"]}}) if ladder else None,
        "law_holds": fit_result["law_holds"] if fit_result else None,
        "verdict": fit_result["verdict"] if fit_result else None,
        "model": fit_result.get("model") if fit_result else None,
        "interval_parts": fit_result.get("std_parts") if fit_result else None,
        "launch_wall_seconds": launch_wall,
    }
    return summary


def _with_totals(summary: dict, total: dict, planned: dict | None) -> dict:
    """summary with the total on the private set (privacy_spent.totals) and the bound checked before training.
    `epsilon` is the guarantee for the private examples: the total whenever the proxies trained on them, the
    launch's otherwise; the launch's own ε of record stays under `launch_epsilon`."""
    summary["launch_epsilon"] = summary["epsilon"]
    summary.update(total)
    summary.update(planned or {})
    if total["tuning_data"] == "private":
        summary["epsilon"] = total["epsilon_total"]
    return summary


def _not_launched(cfg: Config, plan, out: Path, started: float, tune, *, stage: str, reason: str, what_to_change,
                  ladder=None, fit_result=None, best=None, compute=None, planned=None) -> dict:
    """Write summary.json and report.md of a run stopped before its launch; the summary (launched: false)."""
    compute = compute or _compute(plan, [], [], ladder is not None)
    summary = _summary(plan, ladder, fit_result, best or {}, compute, launched=False, reason=reason,
                       what_to_change=what_to_change, stage=stage)
    _with_totals(summary, totals(None, _proxy_folders(out), tune), planned)
    summary["wall_seconds"] = time.perf_counter() - started
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "report.md", run_report(cfg.experiment.name, plan, fit_result, summary, out, ladder))
    return summary


def validate_inputs(cfg: Config, out: Path, *, address: str | None = None, baselines: bool = False,
                    baseline_features: str | None = None, baseline_public: str | None = None,
                    proxy_batch_size: int | None = None) -> None:
    """Every stage's input, checked before the data is loaded and before any stage runs (UsageError):
    a mistake in the last stage's input must not cost the sweep, the fit and the launch's ε first.

    The config's names and paths, the --out folder, the tuning data; the ladder's budget or the fit's
    proxy batch sizes and seeds; the sweep's space, Ray address and study (a rerun resumes it); the baselines'
    feature files.
    """
    from tanplan.ray_session import check_address
    from tanplan.workflow import tuning
    from tanplan.workflow.fit import check_batch_sizes
    from tanplan.workflow.inputs import check_config, check_out_dir, check_sweep_space
    from tanplan.workflow.ladder import check_ladder
    from tanplan.workflow.sweep.study import check_study_file

    check_config(cfg)
    check_out_dir(out)
    tuning.check(cfg)
    target = cfg.train.batch_size
    if cfg.fit.batch_sizes == "auto":
        check_ladder(cfg)
    else:
        check_batch_sizes(list(cfg.fit.batch_sizes), cfg.train.batch_size, cfg.fit.seeds, "fit.seeds =")
    if proxy_batch_size is not None and not 0 < proxy_batch_size <= target:
        raise UsageError(f"--proxy-batch-size {proxy_batch_size} is not allowed: must be between 1 and the target "
                         f"batch train.batch_size = {target}")
    check_sweep_space(cfg)
    check_address(address)
    check_study_file(Path(out) / "sweep", resume=True)
    if (baseline_features or baseline_public) and not baselines:
        raise UsageError("--baseline-features and --baseline-public are not allowed without --baselines")
    if baseline_public and not baseline_features:
        raise UsageError("--baseline-public is not allowed without --baseline-features (the demo features bring "
                         "their own public set)")
    if baselines and not cfg.privacy.private:
        raise UsageError("--baselines is not allowed with privacy.private = false: they are compared at the "
                         "launch's ε")
    if baseline_features:
        from tanplan.baselines.data import load_features, load_public

        features = load_features(baseline_features)
        if baseline_public:
            load_public(baseline_public, features.width)


def _baselines(epsilon: float, delta: float, features, public, out: Path, cfg: Config) -> tuple[list[dict], str]:
    """The cheaper private methods at the launch's exact ε and δ, for the report's comparison.

    Without a features file they run on tanplan's demo features (an encoder trained on public mnist1d,
    applied to an independent private mnist1d draw): the same task, not the same examples.
    """
    from tanplan.reports.baselines import markdown, write_outputs
    from tanplan.baselines.runner import baseline_rows

    # The demo's mnist1d draws never use the user's private draw (data.seed), so they spend nothing on it.
    avoid = {cfg.data.seed} if cfg.data.dataset == "mnist1d" else set()
    rows, notes = baseline_rows(epsilon, delta, features, public, seed=None, avoid_seeds=avoid)  # OS entropy
    source = features or "tanplan's demo features (public-pretrained 1D CNN on an independent mnist1d draw)"
    write_outputs(out, rows, notes, f"Baselines at ε = {epsilon:.4g}, δ = {delta:.2g} on {source}")
    return rows, (f"\n## Cheaper private methods at the same ε\nOn {source}, at ε = {epsilon:.4g}, δ = {delta:.2g} "
                  f"(full results: [baselines/baseline.md](baselines/baseline.md)).\n\n{markdown(rows, notes)}")


def _sweep_examples(sweep_dir: Path, spec) -> list[tuple[int, int]]:
    """(B', S) of every sweep trial and re-run that ran, from the CSVs the sweep wrote."""
    import pandas as pd

    runs = []
    for name in ("sweep.csv", "reruns.csv"):
        path = sweep_dir / name
        if path.is_file() and path.stat().st_size:
            df = pd.read_csv(path)
            runs += [(int(spec.proxy["batch_size"]), int(spec.proxy["steps"]))] * len(df)
    return runs
