"""`tanplan fit`, the stage: train proxies at several batch sizes (constant η_step and S), fit the batch law and
predict one launch at the target (tanplan.laws.batch_law), the sizes given or chosen by the proxy ladder
within its budget (tanplan.workflow.ladder); the privacy-parameter search at constant η and σ (TAN §4.3,
Tables 3-4) and the dataset-size study (§4.4, Table 5). fit_entry is the stage (tanplan.api.fit forwards to
it): every input checked before any data is read, the total ε bounded before any run, the runs, the report.

The runs are proxy runs (tanplan.workflow.proxy_runs), what each mode trains is checked by
tanplan.workflow.fit_members, and a sweep's best.json is read by tanplan.workflow.best.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from tanplan.config import Config, with_tuned
from tanplan.data.dataset import with_train_examples
from tanplan.engine.setup import load_data
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic
from tanplan.laws.batch_law import forms_of, predict, verdict
from tanplan.outcomes.fit import DataMember, FitResult, LadderSummary, ProxyRun, StepsMember
from tanplan.outcomes.privacy_spent import Spent
from tanplan.privacy.plan import plan_from_config, with_dataset_size
from tanplan.privacy.run_plan import RunPlan
from tanplan.reports.fit import figure_scaling, write_fit_report
from tanplan.workflow import data_size, privacy_spent, total_budget, tuning
from tanplan.workflow.best import load_best_overrides, recording
from tanplan.workflow.fit_members import check_batch_sizes, data_members, steps_members
from tanplan.workflow.inputs import check_inputs, check_out_dir
from tanplan.workflow.ladder import budget_of, check_ladder, run_ladder
from tanplan.workflow.members import Members
from tanplan.workflow.pipeline.costs import compute_lines, law_cost, planned_compute, timed
from tanplan.workflow.proxy_runs import train_points

DATA_FACTORS = [0.25, 0.5, 1.0]  # --vary data without --factors: N/4, N/2, N


def fit_entry(cfg: Config, out, *, best, batch_sizes, seeds: int | None, vary: str, factors, proxy_batch_size,
              law: str | None, log: Callable) -> FitResult:
    """The stage of tanplan.api.fit (its docstring says what each mode does). Every input is checked before any
    data is read, the total ε on the private set bounded before any run (private tuning data), the planned
    compute said; then the runs, on the [tuning] data, and what they spent (privacy_spent.json)."""
    if vary not in ("batch", "steps", "data"):
        raise UsageError(f"vary {vary!r} is not allowed: use batch, steps or data")
    cfg = with_tuned(cfg, load_best_overrides(best), f"--best {best}")
    section = cfg.fit
    sizes = batch_sizes or section.batch_sizes
    sizes = sizes if sizes == "auto" else list(sizes)
    seeds = seeds or section.seeds
    factors = list(factors or (DATA_FACTORS if vary == "data" else section.factors))
    out = Path(out)
    proxy_b = _check_fit(cfg, out, vary, sizes, seeds, proxy_batch_size)
    largest = proxy_b or (budget_of(cfg).largest_rung() if sizes == "auto" else max(sizes))  # the public set holds it
    tune = tuning.for_config(cfg, proxy_batch=largest)  # every proxy of every mode trains on the [tuning] data
    planned = {}
    if cfg.privacy.private and tune.data == "private":  # exit 3 before any run when over the total budget
        planned = _planned_total(cfg, tune.target, tune, vary, sizes, seeds, factors, proxy_b)
    if vary == "batch":  # every input checked: the cost, before any of it is spent
        for line in compute_lines(timed(planned_compute(cfg, [law_cost(cfg, sizes, seeds)]), cfg, out,
                                        measure=False)):
            log(line)
    with recording(best, out, "fit --best", private=bool(planned)):  # on the private set: launch --best composes it
        proxies = Members.of(tune.proxy_cfg)  # every member of every mode derives from the [tuning] data's config
        if vary == "batch" and sizes == "auto":
            proxies = proxies.group({"fit.law": law or section.law})  # the ladder reads its law there
        result = _train(proxies, out, vary, sizes, seeds, factors, proxy_b, law or section.law, section, log)
        if vary == "batch" and tune.data == "public":  # public proxies on fewer examples than N: the data size
            result, term_runs = with_data_size(proxies, result, tune.tuning_size, tune.private_size, out,
                                               level=section.level, law=law or section.law, log=log)
            if term_runs:
                write_fit_report(result, out)
    spent = _report_spent(out, tune, log)
    # and the bound on the total checked before any run (private tuning data)
    return dataclasses.replace(result, privacy_spent=spent, tuning=tune.record(), **planned)


def _check_fit(cfg: Config, out: Path, vary: str, sizes, seeds: int, proxy_batch_size: int | None) -> int | None:
    """Every input that needs no data: the config's names and files, the folder, the tuning data, the ladder's
    budget or the sizes; the proxy B' every member of --vary steps or data trains (None for the batch law)."""
    check_inputs(cfg)  # before any data is read
    check_out_dir(out)
    tuning.check(cfg)
    if vary == "batch" and sizes == "auto":
        check_ladder(cfg)
    elif vary == "batch":
        check_batch_sizes(sizes, cfg.train.batch_size, seeds)
    if vary == "batch":
        return None
    if proxy_batch_size is None and sizes == "auto":
        raise UsageError(f"--vary {vary} needs --proxy-batch-size (or explicit --batch-sizes): the proxy B' "
                         "that every member trains")
    return proxy_batch_size or min(sizes)


def _planned_total(cfg: Config, target: RunPlan, tune, vary: str, sizes, seeds: int, factors,
                   proxy_b: int | None) -> dict:
    """The total ε the fit will release on the private set, with the launch's (target: its RunPlan on the
    private set), checked against privacy.total_epsilon (BudgetExceeded, exit 3): the fields it adds to the
    FitResult."""
    n, proxies = tune.private_size, tune.proxy_cfg
    if vary == "batch":
        parts = ([total_budget.ladder_part(target, budget_of(proxies))] if sizes == "auto" else
                 total_budget.fit_parts(target, sizes, seeds))
    else:
        available = load_data(dataclasses.replace(proxies.data, train_examples=0)).num_train if vary == "data" else n
        parts = total_budget.vary_parts(plan_from_config(proxies, n), vary, factors, proxy_b, seeds, available)
    return total_budget.check(total_budget.of_target(target, parts), cfg).to_dict()


def _train(proxies: Members, out: Path, vary: str, sizes, seeds: int, factors, proxy_b: int | None, law: str,
           section, log) -> FitResult:
    """The mode's runs (members of `proxies`, built at the entry) and its files in out."""
    if vary == "data":
        return dataset_size_study(proxies, factors, proxy_b, seeds, out, log=log)
    if vary == "steps":
        return privacy_parameter_search(proxies, factors, proxy_b, seeds, out, log=log)
    if sizes == "auto":
        return ladder_fit(proxies, out, log=log)
    result = fit_batch_law(proxies, sizes, seeds, out, level=section.level, law=law, log=log,
                           max_half_width=section.max_half_width / 100, spread_ratio=section.spread_ratio)
    write_fit_report(result, out)
    return result


def _report_spent(out: Path, tune, log) -> Spent:
    """privacy_spent.json of the fit's runs, and one line saying what it is the cost to."""
    spent = privacy_spent.report(out, out, "proxy runs of this fit", tune)
    whose = (f"the public tuning data ({tune.source}; no private example)" if tune.data == "public"
             else "the private training set")
    log(f"ε of its {spent.runs} runs composed: {privacy_spent.describe(spent)}: the cost to {whose} "
        f"({out / privacy_spent.FILE})")
    return spent


def fit_batch_law(cfg: Config | Members, batch_sizes, seeds: int, out: Path | None, *, level: float = 0.95,
                  law: str = "knee", train_fn: Callable | None = None, log=print, test_sizes=(None, None),
                  max_half_width: float = 0.0, spread_ratio: float = 0.0) -> FitResult:
    """Train the proxies (cfg's members) at the batch sizes given, fit the batch law on them and predict one
    launch at the target B (tanplan.laws.batch_law; law "auto" chooses the form by held-out error).
    max_half_width (accuracy, > 0): a wider interval is a refusal (the verdict); spread_ratio: fit.spread_ratio."""
    proxies = Members.of(cfg)
    check_batch_sizes(batch_sizes, proxies.base.train.batch_size)
    started = time.perf_counter()
    rows = train_points(proxies, batch_sizes, seeds, out, train_fn=train_fn, log=log)
    return fit_rows(rows, proxies.base.train.batch_size, out, level=level, law=law, started=started,
                    test_sizes=test_sizes, max_half_width=max_half_width, spread_ratio=spread_ratio)


def fit_rows(rows: Sequence[ProxyRun], target_b: int, out: Path | None, *, level: float = 0.95, law: str = "knee",
             started: float | None = None, test_sizes=(None, None), max_half_width: float = 0.0,
             spread_ratio: float = 0.0, data_size=None) -> FitResult:
    """The law fitted on proxy runs already trained (rows of train_points) and its prediction for one launch
    at target_b: what fit.json holds (batch_law.Prediction.record, the verdict, the runs).

    A prediction outside [0, 1] is not an accuracy: predicted_accuracy and prediction_interval are then
    None (the law's value stays in law_at_target) and the verdict says the law does not hold; an interval
    wider than max_half_width (> 0) is a refusal too, with what to change. spread_ratio: fit.spread_ratio
    (batch_law.predict; 0, the default, off). data_size: the measured term of proxies on a smaller public set
    (tanplan.laws.data_size.DataSizeTerm, tanplan.workflow.data_size), in the mean and the interval.
    """
    started = time.perf_counter() if started is None else started
    rows = tuple(rows)
    prediction = predict([(r.batch_size, r.test_accuracy) for r in rows], target_b, level=level, forms=forms_of(law),
                         test_sizes=test_sizes, spread_ratio=spread_ratio, data_size=data_size)
    why_not = verdict(prediction, max_half_width)
    recorded = vars(prediction.record())
    if not 0.0 <= prediction.mean <= 1.0:
        recorded.update(predicted_accuracy=None, prediction_interval=None)
    result = FitResult(
        **recorded, law_setting=law, model=prediction.law.form, law_at_target=prediction.law_mean,
        law_holds=why_not is None, verdict=why_not and why_not[0], what_to_change=why_not and why_not[1],
        points=rows, batch_sizes=tuple(sorted({r.batch_size for r in rows})),
        proxy_examples=sum(r.batch_size * r.steps for r in rows), wall_seconds=time.perf_counter() - started)
    if out is not None:
        write_json_atomic(out / "fit.json", result.to_dict())
        figure_scaling(result, out / "scaling_law.png")
    return result


def with_data_size(proxies, fit_result: FitResult, public_size: int, private_size: int, out: Path, *, level: float,
                   law: str, test_sizes=(None, None), log=print) -> tuple[FitResult, list[ProxyRun]]:
    """fit_result refitted on its own rows with the data-size term (tanplan.workflow.data_size; its runs in
    out/data_size/, fit.json in out) where its proxies learned on fewer public examples than the private set
    holds; as it was otherwise (no prediction, or N_pub ≥ N). (The fit result, the runs the term trained.)"""
    if fit_result.predicted_accuracy is None or not fit_result.points:
        return fit_result, []
    term, runs = data_size.measure(proxies, fit_result.points, public_size, private_size, out / "data_size", log=log)
    if term is None:
        return fit_result, []
    base = Members.of(proxies).base
    refit = fit_rows(fit_result.points, base.train.batch_size, out, level=level, law=law, test_sizes=test_sizes,
                     max_half_width=base.fit.max_half_width / 100, spread_ratio=base.fit.spread_ratio,
                     data_size=term)
    return dataclasses.replace(refit, ladder=fit_result.ladder), runs


def ladder_fit(proxies: Config | Members, out: Path | None, *, train_fn: Callable | None = None, log=print,
               test_sizes=(None, None)) -> FitResult:
    """`tanplan fit` with batch_sizes "auto": the ladder (out/ladder/), then its law's fit.json and fit.md in out.

    The fit result (fit_rows) with its `ladder`; when the ladder could not fit a law
    within its budget, only the ladder.
    """
    cfg = Members.of(proxies).base  # the ladder's rungs are its members (tanplan.workflow.proxy_runs)
    check_ladder(cfg)
    found = run_ladder(cfg, out / "ladder" if out is not None else None, train_fn=train_fn, log=log,
                       test_sizes=test_sizes)
    summary = LadderSummary(found=found.found, reason=found.reason, what_to_change=found.what_to_change,
                            spent_fraction=found.spent_fraction, window=found.window)
    if found.prediction is None:
        return FitResult(ladder=summary)
    rows = [p for p in found.points if p.source == "ladder"]
    result = fit_rows(rows, cfg.train.batch_size, out, level=cfg.fit.level, law=cfg.fit.law, test_sizes=test_sizes,
                      max_half_width=cfg.fit.max_half_width / 100, spread_ratio=cfg.fit.spread_ratio)
    if out is not None:
        write_fit_report(result, out)
    return dataclasses.replace(result, ladder=summary)


def privacy_parameter_search(proxies: Config | Members, factors, proxy_batch_size: int, seeds: int, out: Path | None,
                             *, train_fn: Callable | None = None, log=print) -> FitResult:
    """Constant η and σ: S' = S·k², B' = B/k, learning rate × 1/k², each simulated at proxy scale.

    The proxy of each member keeps the main proxy's savings B/B' (so the proxy σ is the same for all
    k); the report gives the best k and its full-scale (B, S) with the exact ε of that plan.
    """
    proxies = Members.of(proxies)
    cfg = proxies.base
    dataset = load_data(cfg.data)
    target = plan_from_config(cfg, dataset.num_train)
    members = steps_members(target, factors, proxy_batch_size)
    rows = []
    for k, b, s, proxy_b in members:
        member = dataclasses.replace(target, batch_size=b, steps=s, target_epsilon=None)
        group = proxies.group({"train.batch_size": b, "train.steps": s, "privacy.sigma": target.sigma,
                               "train.learning_rate": cfg.train.learning_rate * target.steps / s})
        runs = train_points(group, [proxy_b], seeds, out, train_fn=train_fn, log=log, label=f"k{k:g}")
        accs = [r.test_accuracy for r in runs]
        rows.append(StepsMember(k=k, batch_size=b, steps=s, sigma=target.sigma, eta=member.eta,
                                learning_rate=cfg.train.learning_rate * target.steps / s, proxy_batch_size=proxy_b,
                                mean_accuracy=statistics.fmean(accs), std_accuracy=statistics.pstdev(accs),
                                eps_rdp=member.epsilon("rdp")))
    result = FitResult(members=tuple(rows), best=max(rows, key=lambda r: r.mean_accuracy))
    if out is not None:
        write_json_atomic(out / "privacy_search.json", result.to_dict())
    return result


def dataset_size_study(proxies: Config | Members, factors, proxy_batch_size: int, seeds: int, out: Path | None, *,
                       train_fn: Callable | None = None, log=print) -> FitResult:
    """TAN §4.4, Table 5: N' = k·N at fixed (B, σ, S), δ = 1/N', each simulated at proxy scale.

    q = B/N' and so η fall as N' grows: ε drops while the global signal-to-noise N'·η stays constant.
    Each member trains the proxy (B', σ·B'/B, S) on the first N' training examples (data.train_examples),
    which is the member's own proxy at constant η_step; its accuracy predicts the member at full scale.
    Factors above 1 need more training data than the config uses: they are skipped when absent.
    """
    proxies = Members.of(proxies)
    cfg = proxies.base
    full = load_data(dataclasses.replace(cfg.data, train_examples=0))  # every training example there is
    available, base_n = full.num_train, with_train_examples(full, cfg.data.train_examples).num_train
    target = plan_from_config(cfg, base_n)
    sizes = {k: base_n * k for k in factors}  # checked before the first member trains (no overflow)
    usable = data_members(target, factors, available)
    if not usable:
        raise UsageError(f"--factors {','.join(f'{k:g}' for k in factors)} is not allowed: no factor k gives a dataset "
                         f"size B = {target.batch_size} ≤ k·N ≤ {available} (the training examples available; N = "
                         f"{base_n})")
    for k, n in sizes.items():
        if (k, int(round(n)) if math.isfinite(n) else None) not in usable:
            log(f"  data k={k:g}: N'={n:.4g} skipped (needs B={target.batch_size} ≤ N' ≤ {available} available)")
    rows = []
    for k, n in usable:
        member = with_dataset_size(target, n)
        group = proxies.group({"data.train_examples": n, "privacy.sigma": target.sigma, "privacy.delta": member.delta})
        runs = train_points(group, [proxy_batch_size], seeds, out, train_fn=train_fn, log=log,
                            label=f"n{n}")
        accs = [r.test_accuracy for r in runs]
        rows.append(DataMember(k=k, dataset_size=n, batch_size=target.batch_size, steps=target.steps,
                               sigma=target.sigma, delta=member.delta, q=member.q, eta=member.eta,
                               eps_tan=member.eps_tan, eps_rdp=member.epsilon("rdp"), proxy_batch_size=proxy_batch_size,
                               mean_accuracy=statistics.fmean(accs), std_accuracy=statistics.pstdev(accs)))
    result = FitResult(members=tuple(rows))
    if out is not None:
        write_json_atomic(out / "dataset_sizes.json", result.to_dict())
    return result


__all__ = ["fit_entry", "fit_batch_law", "fit_rows", "with_data_size", "ladder_fit", "privacy_parameter_search", "dataset_size_study"]
