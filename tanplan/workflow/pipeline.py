"""`tanplan run`: plan → sweep → fit → launch, and one report comparing the prediction with the result.

proxy_compute_fraction = (examples processed by every proxy run: sweep trials, re-runs and fit runs)
÷ (examples the same runs would have processed at the target batch size): Σ B'ᵢ·Sᵢ / Σ B·Sᵢ.
"""

from __future__ import annotations

import time
from pathlib import Path

from tanplan.config import Config
from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.reports.fit import figure_scaling
from tanplan.reports.run import run_report
from tanplan.workflow.sweep.study import STUDY_FILE


def run_pipeline(cfg: Config, out: Path, *, trials: int | None = None, log=print, address: str | None = None,
                 baselines: bool = False, baseline_features: str | None = None,
                 baseline_public: str | None = None) -> dict:
    from tanplan.workflow import fit as fit_stage
    from tanplan.workflow.sweep import search as sweep
    from tanplan.workflow.launch import launch
    from tanplan.reports.plan import write_plan_report
    from tanplan.engine.setup import load_data

    from tanplan.privacy.mechanism import resolve_plan

    validate_inputs(cfg, out, address=address, baselines=baselines, baseline_features=baseline_features,
                    baseline_public=baseline_public)
    started = time.perf_counter()
    stages = 5 if baselines else 4
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = load_data(cfg)
    plan = resolve_plan(cfg.with_overrides({"train.proxy_batch_size": 0}), dataset.num_train).plan

    log(f"[1/{stages}] plan: N={plan.dataset_size}, B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}, "
        f"ε={plan.epsilon('rdp'):.4g} (RDP), regime {plan.regime.value}")
    write_plan_report(plan, out / "plan", ("rdp", "pld"), title=f"Plan: {cfg.experiment.name}")

    fit_cfg = cfg.fit
    sweep_proxy = min(fit_cfg.batch_sizes)
    spec = sweep.prepare(cfg, proxy_batch_size=sweep_proxy, trials=trials, dataset=dataset)
    log(f"[2/{stages}] sweep: {spec.trials} trials at B'={sweep_proxy} (σ'={spec.proxy['sigma']:.4g})")
    resume = (out / "sweep" / STUDY_FILE).is_file()  # a rerun continues (or reuses) the same sweep
    sweep_summary = sweep.run_sweep(spec, out / "sweep", address=address, resume=resume,
                                    log=lambda line: log(f"  {line}"))
    best = sweep_summary["best"] or {}
    best_cfg = cfg.with_overrides(best.get("overrides", {}))

    log(f"[3/{stages}] fit: B' in {list(fit_cfg.batch_sizes)} × {fit_cfg.seeds} seeds")
    fit_result = fit_stage.fit_batch_law(best_cfg, list(fit_cfg.batch_sizes), fit_cfg.seeds, out / "fit",
                                         level=fit_cfg.level, law=fit_cfg.law, log=log)

    log(f"[4/{stages}] launch: B={plan.batch_size}, S={plan.steps}, σ={plan.sigma:.4g}")
    # A rerun into the same folder continues (or, when it finished, reuses) the full-scale run.
    launched = launch(best_cfg, out / "launch", progress=True, resume=(out / "launch" / "checkpoint").is_dir())
    actual = float(launched["summary"]["test_accuracy"])
    figure_scaling(fit_result, out / "scaling_law.png", actual=actual)

    sweep_examples = _sweep_examples(out / "sweep", spec)
    proxy_runs = sweep_examples + [(r["batch_size"], r["steps"]) for r in fit_result["points"]]
    fraction = sum(b * s for b, s in proxy_runs) / sum(plan.batch_size * s for _, s in proxy_runs)
    low, high = fit_result["prediction_interval"]
    summary = {
        "predicted_accuracy": fit_result["predicted_accuracy"], "prediction_interval": [low, high],
        "actual_accuracy": actual, "abs_error": abs(actual - fit_result["predicted_accuracy"]),
        "actual_inside_interval": bool(low <= actual <= high),
        "epsilon_rdp": launched["accounting"]["epsilon_rdp"] if launched["accounting"] else None,
        "epsilon_pld": launched["accounting"]["epsilon_pld"] if launched["accounting"] else None,
        "delta": plan.delta, "sigma": plan.sigma, "batch_size": plan.batch_size, "steps": plan.steps,
        "proxy_compute_fraction": fraction, "proxy_runs": len(proxy_runs),
        "best_overrides": best.get("overrides", {}),
        "fit": {k: fit_result[k] for k in ("a", "b", "r2", "n")},
        "law_holds": fit_result["law_holds"], "verdict": fit_result["verdict"], "model": fit_result["model"],
        "loglinear_prediction": fit_result["loglinear_prediction"],
        "launch_wall_seconds": launched["wall_seconds"],
    }
    baseline_md = ""
    if baselines and summary["epsilon_rdp"] is not None:
        log(f"[5/{stages}] baselines: private heads and DP prototypes on frozen features at ε = {summary['epsilon_rdp']:.4g}")
        summary["baselines"], baseline_md = _baselines(summary["epsilon_rdp"], plan.delta, baseline_features,
                                                       baseline_public, out / "baselines")
    summary["wall_seconds"] = time.perf_counter() - started
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "report.md", run_report(cfg.experiment.name, plan, fit_result, summary, out) + baseline_md)
    return summary


def validate_inputs(cfg: Config, out: Path, *, address: str | None = None, baselines: bool = False,
                    baseline_features: str | None = None, baseline_public: str | None = None) -> None:
    """Every stage's input, checked before the data is loaded and before any stage runs (UsageError):
    a mistake in the last stage's input must not cost the sweep, the fit and the launch's ε first.

    The config's names and paths, the --out folder; the sweep's space, Ray address and study (a rerun
    resumes it); the fit's proxy batch sizes; the baselines' feature files.
    """
    from tanplan.ray_session import check_address
    from tanplan.errors import UsageError
    from tanplan.workflow.inputs import check_config, check_fit_sizes, check_out_dir, check_sweep_space
    from tanplan.workflow.sweep.study import check_study_file

    check_config(cfg)
    check_out_dir(out)
    check_sweep_space(cfg)
    check_address(address)
    check_study_file(Path(out) / "sweep", resume=True)
    check_fit_sizes(cfg, list(cfg.fit.batch_sizes))  # the sweep trains the smallest of them
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


def _baselines(epsilon: float, delta: float, features, public, out: Path) -> tuple[list[dict], str]:
    """The cheaper private methods at the launch's exact ε and δ, for the report's comparison.

    Without a features file they run on tanplan's demo features (an encoder trained on public mnist1d,
    applied to an independent private mnist1d draw): the same task, not the same examples.
    """
    from tanplan.reports.baselines import markdown, write_outputs
    from tanplan.baselines.runner import baseline_rows

    rows, notes = baseline_rows(epsilon, delta, features, public, seed=0)
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
