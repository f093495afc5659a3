"""`tanplan fit`: train proxies at several batch sizes (constant η_step and S), fit the batch law and predict
one launch at the target (tanplan.workflow.batch_law); the privacy-parameter search at constant η and σ (TAN
§4.3, Tables 3-4) and the dataset-size study (§4.4, Table 5). A sweep's best.json is read by
tanplan.workflow.best.

Every run is one call of the engine (tanplan.engine.loop.train_and_evaluate) on a config derived from the
experiment's: a proxy is `train.proxy_batch_size = B'`, so σ' = σ·B'/B comes from the one Plan.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from tanplan.config import MAX_STEPS, Config, config_to_toml
from tanplan.data.dataset import with_train_examples
from tanplan.engine import loop
from tanplan.engine.setup import load_data
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.fit import DataMember, FitResult, ProxyRun, StepsMember
from tanplan.outcomes.run_summary import RunSummary
from tanplan.privacy.plan import plan_from_config, with_dataset_size
from tanplan.reports.fit import figure_scaling
from tanplan.workflow.batch_law import forms_of, predict, verdict
from tanplan.workflow.proxy_devices import each_on_one_device


def _default_train_fn():
    return loop.train_and_evaluate  # read when called: a test may put a fake engine there


def train_points(cfg: Config, batch_sizes, seeds: int, out: Path | None, *, train_fn: Callable | None = None,
                 log=print, label: str = "fit", seed_offset: int = 0) -> list[ProxyRun]:
    """Train the proxy at each batch size with `seeds` seeds (experiment seeds seed_offset, ... above the
    config's); one row per run."""
    jobs = [(int(b), seed) for b in batch_sizes for seed in range(seed_offset, seed_offset + seeds)]
    return train_runs(cfg, jobs, out, train_fn=train_fn, log=log, label=label)


def train_runs(cfg: Config, jobs: Sequence[tuple[int, int]], out: Path | None, *, train_fn: Callable | None = None,
               log=print, label: str = "fit") -> list[ProxyRun]:
    """Train the proxy runs (batch size, seed offset) given, one device each and as many at once as there
    are devices (tanplan.workflow.proxy_devices); one row per run, in the jobs' order."""
    train_fn = train_fn or _default_train_fn()

    def one(job) -> ProxyRun:
        b, seed = job
        run_cfg = cfg.with_overrides({"train.proxy_batch_size": b, "experiment.seed": cfg.experiment.seed + seed})
        workdir = out / "runs" / f"{label}_b{b}_s{seed}" if out is not None else None
        # resume: a rerun into the same folder reuses a finished run as it is, and continues a stopped one
        # from its checkpoint: no new release, no step trained twice
        summary = finished_run(workdir, run_cfg) or train_fn(run_cfg, workdir, progress=False, resume=True)
        log(f"  {label}: B'={b} seed={seed} σ'={summary.sigma:.4g} "
            f"accuracy={summary.test_accuracy:.4f} ({summary.wall_seconds:.1f} s)")
        return ProxyRun(batch_size=b, seed=seed, test_accuracy=float(summary.test_accuracy),
                        sigma=float(summary.sigma), steps=int(summary.steps), wall_seconds=float(summary.wall_seconds))

    return each_on_one_device(jobs, one)


def finished_run(workdir: Path | None, cfg: Config) -> RunSummary | None:
    """The RunSummary (summary.json, read back) of a run that finished in workdir with exactly this config (its
    config.toml, as the engine wrote it), all its planned steps taken; None otherwise (then the engine resumes
    or starts it; a summary.json outside the schema counts as none)."""
    if workdir is None or not (workdir / "summary.json").is_file() or not (workdir / "config.toml").is_file():
        return None
    try:
        if (workdir / "config.toml").read_text(encoding="utf-8") != config_to_toml(cfg):
            return None
        summary = RunSummary.from_dict(json.loads((workdir / "summary.json").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):  # unreadable, or not a summary
        return None
    done = (not summary.interrupted and summary.diverged_at_step is None and summary.steps == summary.planned_steps
            and summary.test_accuracy is not None)
    return summary if done else None


def fit_batch_law(cfg: Config, batch_sizes, seeds: int, out: Path | None, *, level: float = 0.95,
                  law: str = "knee", train_fn: Callable | None = None, log=print, test_sizes=(None, None),
                  max_half_width: float = 0.0) -> FitResult:
    """Train the proxies at the batch sizes given, fit the batch law on them and predict one launch at the
    target B (tanplan.workflow.batch_law; law "auto" chooses the form by held-out error). max_half_width
    (accuracy, > 0): a wider interval is a refusal (the verdict)."""
    check_batch_sizes(batch_sizes, cfg.train.batch_size)
    started = time.perf_counter()
    rows = train_points(cfg, batch_sizes, seeds, out, train_fn=train_fn, log=log)
    return fit_rows(rows, cfg.train.batch_size, out, level=level, law=law, started=started, test_sizes=test_sizes,
                    max_half_width=max_half_width)


def check_batch_sizes(batch_sizes, target_batch_size: int, seeds: int | None = None, seeds_name: str = "--seeds") -> None:
    """UsageError unless the proxies are two or more distinct sizes, none above the target (and two seeds or
    more each: their scatter is the launch's spread)."""
    for b in batch_sizes:
        if b > target_batch_size:
            raise UsageError(f"proxy batch size {b} is not allowed: must be ≤ the target batch size {target_batch_size}")
    if len(set(batch_sizes)) < 2:
        raise UsageError(f"--batch-sizes {','.join(map(str, batch_sizes))} is not allowed: need two or more distinct sizes")
    if seeds is not None and seeds < 2:
        raise UsageError(f"{seeds_name} {seeds} is not allowed for the batch law: need two or more seeds a size "
                         "(their scatter is the launch's own spread)")


def fit_rows(rows: Sequence[ProxyRun], target_b: int, out: Path | None, *, level: float = 0.95, law: str = "knee",
             started: float | None = None, test_sizes=(None, None), max_half_width: float = 0.0) -> FitResult:
    """The law fitted on proxy runs already trained (rows of train_points) and its prediction for one launch
    at target_b: what fit.json holds (batch_law.Prediction.record, the verdict, the runs).

    A prediction outside [0, 1] is not an accuracy: predicted_accuracy and prediction_interval are then
    None (the law's value stays in law_at_target) and the verdict says the law does not hold; an interval
    wider than max_half_width (> 0) is a refusal too, with what to change.
    """
    started = time.perf_counter() if started is None else started
    rows = tuple(rows)
    prediction = predict([(r.batch_size, r.test_accuracy) for r in rows], target_b, level=level, forms=forms_of(law),
                         test_sizes=test_sizes)
    why_not = verdict(prediction, max_half_width)
    recorded = vars(prediction.record())
    if not 0.0 <= prediction.mean <= 1.0:
        recorded.update(predicted_accuracy=None, prediction_interval=None)
    result = FitResult(
        **recorded, law_setting=law, model=prediction.law.form, law_at_target=prediction.mean,
        law_holds=why_not is None, verdict=why_not and why_not[0], what_to_change=why_not and why_not[1],
        points=rows, batch_sizes=tuple(sorted({r.batch_size for r in rows})),
        proxy_examples=sum(r.batch_size * r.steps for r in rows), wall_seconds=time.perf_counter() - started)
    if out is not None:
        write_json_atomic(out / "fit.json", result.to_dict())
        figure_scaling(result, out / "scaling_law.png")
    return result


def steps_members(target, factors, proxy_batch_size: int) -> list[tuple[float, int, int, int]]:
    """(k, B/k, S·k², its proxy B'/k) of each member of the privacy-parameter search that fits the data and
    the accountants' domain; UsageError when none does. Checked before the first member trains."""
    members = []
    for k in factors:
        b_float, s_float = target.batch_size / k, target.steps * k * k
        if not (math.isfinite(s_float) and s_float <= MAX_STEPS and b_float <= target.dataset_size):
            continue  # outside the data, or the accountants' domain
        b, s = max(1, round(b_float)), max(1, round(s_float))
        proxy_b = max(1, round(proxy_batch_size / k))
        if proxy_b <= b:
            members.append((k, b, s, proxy_b))
    if not members:
        raise UsageError(f"--factors {','.join(f'{k:g}' for k in factors)} is not allowed: no factor k gives a member "
                         f"with B/k ≤ N = {target.dataset_size} and S·k² ≤ {MAX_STEPS:.0e} steps")
    return members


def data_members(target, factors, available: int) -> list[tuple[float, int]]:
    """(k, N' = k·N) of each member of the dataset-size study with B ≤ N' ≤ the examples available."""
    sizes = {k: target.dataset_size * k for k in factors}  # no overflow: checked as floats
    return [(k, int(round(n))) for k, n in sizes.items() if math.isfinite(n) and target.batch_size <= round(n) <= available]


def privacy_parameter_search(cfg: Config, factors, proxy_batch_size: int, seeds: int, out: Path | None, *,
                             train_fn: Callable | None = None, log=print) -> FitResult:
    """Constant η and σ: S' = S·k², B' = B/k, learning rate × 1/k², each simulated at proxy scale.

    The proxy of each member keeps the main proxy's savings B/B' (so the proxy σ is the same for all
    k); the report gives the best k and its full-scale (B, S) with the exact ε of that plan.
    """
    dataset = load_data(cfg)
    target = plan_from_config(cfg, dataset.num_train)
    members = steps_members(target, factors, proxy_batch_size)
    rows = []
    for k, b, s, proxy_b in members:
        member = dataclasses.replace(target, batch_size=b, steps=s, target_epsilon=None)
        member_cfg = cfg.with_overrides({
            "train.batch_size": b, "train.steps": s, "privacy.sigma": target.sigma,
            "train.learning_rate": cfg.train.learning_rate * target.steps / s,
        })
        runs = train_points(member_cfg, [proxy_b], seeds, out, train_fn=train_fn, log=log, label=f"k{k:g}")
        accs = [r.test_accuracy for r in runs]
        rows.append(StepsMember(k=k, batch_size=b, steps=s, sigma=target.sigma, eta=member.eta,
                                learning_rate=cfg.train.learning_rate * target.steps / s, proxy_batch_size=proxy_b,
                                mean_accuracy=statistics.fmean(accs), std_accuracy=statistics.pstdev(accs),
                                eps_rdp=member.epsilon("rdp")))
    result = FitResult(members=tuple(rows), best=max(rows, key=lambda r: r.mean_accuracy))
    if out is not None:
        write_json_atomic(out / "privacy_search.json", result.to_dict())
    return result


def dataset_size_study(cfg: Config, factors, proxy_batch_size: int, seeds: int, out: Path | None, *,
                       train_fn: Callable | None = None, log=print) -> FitResult:
    """TAN §4.4, Table 5: N' = k·N at fixed (B, σ, S), δ = 1/N', each simulated at proxy scale.

    q = B/N' and so η fall as N' grows: ε drops while the global signal-to-noise N'·η stays constant.
    Each member trains the proxy (B', σ·B'/B, S) on the first N' training examples (data.train_examples),
    which is the member's own proxy at constant η_step; its accuracy predicts the member at full scale.
    Factors above 1 need more training data than the config uses: they are skipped when absent.
    """
    full = load_data(cfg.with_overrides({"data.train_examples": 0}))
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
        member_cfg = cfg.with_overrides({"data.train_examples": n, "privacy.sigma": target.sigma,
                                         "privacy.delta": member.delta})
        runs = train_points(member_cfg, [proxy_batch_size], seeds, out, train_fn=train_fn, log=log,
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


__all__ = ["fit_batch_law", "fit_rows", "check_batch_sizes", "train_points", "train_runs", "finished_run",
           "steps_members", "data_members", "privacy_parameter_search", "dataset_size_study"]
