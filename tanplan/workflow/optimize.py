"""`tanplan optimize`: the best (B, S, σ) for a privacy budget and a compute budget, chosen from proxies.

1. The frontier (tanplan.privacy.frontier): every (B = ⌊C/S⌋, S) on a geometric grid of S around the
   config's own S (S_ref), σ calibrated to privacy.epsilon with the accountant of record (privacy.accountant).
2. A few candidates (those nearest S_ref, [optimize] candidates, spaced by steps_factor) are simulated
   by their constant-η_step proxies (B', σ·B'/B, S), with [optimize] seeds seeds each, through the engine
   (tanplan.workflow.fit.train_points), on the tuning data ([tuning]: public data of the same task by
   default, tanplan.workflow.tuning). B' = B/savings, one factor for all as in TAN's privacy-parameter
   search (Table 3), but never below min_proxy_batch_size: below the batch law's knee a proxy is held
   back, or helped, by sampling noise its target does not have, by an amount that changes along the
   frontier (mnist1d at ε = 0.7, S = 1200, B = 1024: proxies at B' = 32 reached 79% against 73% at full
   scale; at B' = 64-256, 74-76%). A candidate whose batch is under MIN_SAVINGS × that floor is left off:
   its proxy would cost nearly a launch.
3. Accuracy against ln S is fitted (tanplan.workflow.frontier_law) over the widest run of simulated S
   on which the law passes its lack-of-fit and equal-variance tests, and predicted on the whole grid;
   when the best candidate sits at an end of the simulated range, the next frontier candidate beyond it
   is simulated too ([optimize] extend times at most). The recommendation is the best predicted
   candidate inside the law's range (no extrapolation), with its prediction interval, the runner-up,
   the worst-predicted candidate, and whether the data can tell them apart.
4. With launch=True the recommendation is launched through tanplan.workflow.launch.launch, exactly as
   `tanplan run` launches its target.

Each candidate trains with the config's hyper-parameters, rescaled to its S when [optimize] rescale is
on: learning rate × S_ref/S (TAN §4.3: at constant η, lr ∝ 1/S keeps both the summed signal and the
summed noise of the updates), EMA horizon 1/(1 − decay) and warm-up × S/S_ref.

proxy_compute_fraction = Σ B'·S over every proxy run ÷ the recommendation's B·S (one launch).
Privacy: the proxies learn on the [tuning] data. With public data (the default) they release nothing about the
private set and the launch's ε is the guarantee; with private data every proxy run is composed with the launch
into epsilon_total_rdp / epsilon_total_pld (tanplan.workflow.privacy_spent.totals).
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Callable

from tanplan.config import Config
from tanplan.errors import TrainingDiverged, UsageError
from tanplan.privacy.frontier import Candidate, anchor_steps, check_budget, frontier

SECONDS_PER_HOUR = 3600
MIN_SAVINGS = 4  # a simulated candidate's proxy costs at most a quarter of its launch


# ----------------------------------------------------------------------------------------------------
# The frontier alone (`tanplan plan --compute`): JAX-free unless a throughput has to be measured


def measure_throughput(model: str) -> float:
    """DP-SGD samples per second of one device for `model` (tanplan.engine.bench.bench_model)."""
    from tanplan.engine.bench import bench_model

    return float(bench_model(model).dp_samples_per_second)


def frontier_plan(dataset_size: int, epsilon: float, delta: float | None = None, *, compute: int | None = None,
                  device_hours: float | None = None, samples_per_second: float | None = None,
                  model: str = "cnn1d", min_batch_size: int = 1, factor: float = 2.0,
                  measure: Callable[[str], float] | None = None, accountant: str = "pld") -> dict:
    """The budget frontier as plain numbers; C = compute, or device_hours·3600·throughput.

    The throughput is samples_per_second, or measured by the DP-step benchmark of `model`. Every other
    input is checked before that measurement.
    """
    from tanplan.privacy.plan import default_delta

    if (compute is None) == (device_hours is None):
        raise UsageError("give exactly one compute budget: --compute C or --device-hours H")
    delta = default_delta(dataset_size) if delta is None else delta
    check_budget(dataset_size, epsilon, compute or min_batch_size, delta, min_batch_size, factor, accountant)
    throughput = None
    if device_hours is not None:
        measured = samples_per_second is None
        if measured:
            from tanplan.models import available_models

            if model not in available_models():
                raise UsageError(f"--model {model!r} is not known: use one of {', '.join(available_models())}")
            samples_per_second = (measure or measure_throughput)(model)
        compute = int(device_hours * SECONDS_PER_HOUR * samples_per_second)
        throughput = {"device_hours": device_hours, "samples_per_second": samples_per_second, "measured": measured,
                      "model": model if measured else None}
    front = frontier(dataset_size, epsilon, compute, delta, min_batch_size=min_batch_size, factor=factor,
                     accountant=accountant)
    result = front.to_dict()
    result["throughput"] = throughput
    result["notes"] = []
    if delta >= 1.0 / dataset_size:
        result["notes"].append(f"delta={delta:g} is ≥ 1/N={1.0 / dataset_size:.3g}: such a δ allows releasing "
                               f"an example outright (training commands refuse it without privacy.allow_large_delta)")
    return result


# ----------------------------------------------------------------------------------------------------
# Candidates as configs


def rescaled(cfg: Config, steps: int, rescale: bool = True) -> dict:
    """The train.* values of `cfg` moved from S_ref = cfg.train.steps to `steps` (see the module doc)."""
    t = cfg.train
    if not rescale:
        return {"train.learning_rate": t.learning_rate, "train.ema_decay": t.ema_decay,
                "train.warmup_steps": t.warmup_steps}
    ratio = steps / t.steps
    ema = 0.0 if t.ema_decay == 0 else max(0.0, 1.0 - (1.0 - t.ema_decay) / ratio)
    return {"train.learning_rate": t.learning_rate / ratio, "train.ema_decay": ema,
            "train.warmup_steps": min(steps, round(t.warmup_steps * ratio))}


def candidate_overrides(cfg: Config, candidate: Candidate) -> dict:
    """The dotted overrides that turn `cfg` into the full-scale run of `candidate` (σ from privacy.epsilon)."""
    return {"train.batch_size": candidate.batch_size, "train.steps": candidate.steps, "train.proxy_batch_size": 0,
            "privacy.sigma": 0.0, **rescaled(cfg, candidate.steps, cfg.optimize.rescale)}


def proxy_batch_size(candidate: Candidate, savings: float, floor: int) -> int:
    """B' = B/savings, rounded, but at least `floor` (and at most B)."""
    return min(candidate.batch_size, max(floor, round(candidate.batch_size / savings)))


def check_config(cfg: Config) -> None:
    """What optimize needs of a config: a private run whose σ is calibrated from privacy.epsilon."""
    from tanplan.privacy.mechanism import uses_snip

    if not cfg.privacy.private:
        raise UsageError("privacy.private = false is not allowed: optimize plans private runs at an ε budget")
    if cfg.privacy.sigma > 0:
        raise UsageError(f"privacy.sigma = {cfg.privacy.sigma:g} is not allowed: optimize calibrates σ for every "
                         f"candidate from privacy.epsilon; use --set privacy.sigma=0")
    if cfg.privacy.neighbouring != "add_remove":
        raise UsageError(f"privacy.neighbouring = {cfg.privacy.neighbouring!r} is not allowed: the frontier is "
                         "calibrated under add/remove-one (its replace-one ε is reported by the launch)")
    if uses_snip(cfg):
        raise UsageError("pruning.method = 'dp_snip' is not allowed: the frontier calibrates σ for DP-SGD alone")
    from tanplan.workflow import tuning

    tuning.check(cfg)


def simulated_window(candidates: list[Candidate], anchor: int, factor: float, count: int) -> list[Candidate]:
    """The `count` candidates nearest the anchor among those whose S is anchor·factor^k (k whole)."""
    on_grid = []
    for c in candidates:
        k = math.log(c.steps / anchor) / math.log(factor)
        if abs(k - round(k)) < 0.25:
            on_grid.append((abs(round(k)), round(k), c))
    on_grid.sort(key=lambda t: (t[0], t[1]))
    return sorted((c for _, _, c in on_grid[:count]), key=lambda c: c.steps)


# ----------------------------------------------------------------------------------------------------
# The stage


def optimize(cfg: Config, out: Path | None, *, compute: int | None = None, launch_best: bool = False,
             train_fn: Callable | None = None, log=print, progress: bool = True, source: str = "") -> dict:
    """Simulate frontier candidates by proxies, fit accuracy against ln S, recommend one (B, S, σ).

    compute: C in examples (default [optimize] compute, else train.batch_size × train.steps). source:
    the --config/--set text of the command, to write each candidate's launch command in the report.
    Every input is checked before the data is loaded, and the frontier before any proxy trains.
    """
    from tanplan.workflow.fit import train_points

    started = time.perf_counter()
    opt = cfg.optimize
    check_config(cfg)
    compute = compute or opt.compute or cfg.train.batch_size * cfg.train.steps
    min_batch = MIN_SAVINGS * opt.min_proxy_batch_size
    if compute < min_batch:
        raise UsageError(f"compute {compute} is not allowed: it is smaller than one step of the smallest batch "
                         f"{min_batch} ({MIN_SAVINGS} × optimize.min_proxy_batch_size)")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is not allowed: it is a file, not a folder")
    if launch_best and out is None:
        raise UsageError("--launch needs --out: the launch writes its checkpoint and ledger there")

    from tanplan.engine.setup import load_data
    from tanplan.privacy.mechanism import resolve_plan
    from tanplan.workflow import tuning

    from tanplan.privacy.plan import check_delta_below_one_over_n, default_delta

    private = load_data(cfg)
    n = private.num_train
    if cfg.privacy.delta:
        check_delta_below_one_over_n(cfg.privacy.delta, n, cfg.privacy.allow_large_delta)
    delta = cfg.privacy.delta or default_delta(n)
    min_batch = min(min_batch, n)
    anchor = anchor_steps(n, compute, cfg.train.steps, min_batch)
    front = frontier(n, cfg.privacy.epsilon, compute, delta, min_batch_size=min_batch, factor=opt.steps_factor ** 0.5,
                     anchor=anchor, accountant=cfg.privacy.accountant)
    window = simulated_window(list(front.candidates), anchor, opt.steps_factor, opt.candidates)
    if len(window) < 3:
        raise UsageError(f"only {len(window)} frontier candidates have a batch of at least {min_batch} "
                         f"({MIN_SAVINGS} × optimize.min_proxy_batch_size) at compute {compute} and N = {n}: raise "
                         f"the compute, or lower optimize.min_proxy_batch_size or optimize.steps_factor")
    law_needs = {"quadratic": 3, "linear": 2, "flat": 1, "auto": 1}[opt.law]
    if len(window) * opt.seeds < law_needs + 2:
        raise UsageError(f"optimize.seeds = {opt.seeds} is not allowed with {len(window)} candidates: the "
                         f"{opt.law} law needs {law_needs + 2} runs or more")

    planned = {}
    if cfg.tuning.data == "private":  # every proxy trains on the private set: bound the total before any trains
        from tanplan.workflow import total_budget

        planned = total_budget.check(total_budget.optimize_plan(
            cfg, n, list(front.candidates), window, opt.seeds,
            opt.extend, lambda c: proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size), launch_best), cfg)
    rows = {}
    for c in front.candidates:
        overrides = candidate_overrides(cfg, c)
        b_proxy = proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size)
        rows[c.steps] = {**c.to_dict(), "learning_rate": overrides["train.learning_rate"],
                         "ema_decay": overrides["train.ema_decay"], "warmup_steps": overrides["train.warmup_steps"],
                         "proxy_batch_size": b_proxy, "proxy_sigma": c.sigma * b_proxy / c.batch_size,
                         "simulated": False, "diverged": None, "overrides": overrides, "runs": []}
    log(f"frontier: N = {n}, ε = {cfg.privacy.epsilon:g}, δ = {delta:.3g}, C = {compute:,} examples: "
        f"{len(rows)} candidates; simulating {len(window)} × {opt.seeds} seeds at B' = max(B/{opt.savings:g}, "
        f"{opt.min_proxy_batch_size})")

    points: list[dict] = []

    loaded: dict = {}  # the tuning data, loaded (and checked against the private set) once
    tunings: list = []

    def simulate(c: Candidate) -> None:
        row = rows[c.steps]
        row["simulated"] = True
        run_cfg = cfg.with_overrides({**row["overrides"], "train.eval_every": c.steps})
        planned = resolve_plan(run_cfg, n)  # the engine calibrates σ itself: it must be the frontier's
        if not math.isclose(planned.sigma, c.sigma, rel_tol=1e-9):
            raise RuntimeError(f"the engine's σ {planned.sigma} differs from the frontier's {c.sigma} at S={c.steps}")
        # The candidate's proxies learn on the tuning data ([tuning]: public by default) at its η_step.
        tune = tuning.resolve(run_cfg, planned.plan, private=None if loaded else private,
                              load=lambda c_: loaded.setdefault(repr(c_.data), load_data(c_)))
        tunings.append(tune)
        try:
            runs = train_points(tune.proxy_cfg, [row["proxy_batch_size"]], opt.seeds, out, train_fn=train_fn,
                                log=log, label=f"S{c.steps}")
        except TrainingDiverged as err:  # a candidate whose (rescaled) learning rate diverges is no option
            row["diverged"] = str(err)
            log(f"  S{c.steps}: diverged, left out of the law: {err}")
            return
        for r in runs:
            r.update(candidate_steps=c.steps, candidate_batch_size=c.batch_size)
        points.extend(runs)
        row["runs"] = [r["test_accuracy"] for r in runs]
        row["mean_accuracy"] = statistics.fmean(row["runs"])
        row["std_accuracy"] = statistics.stdev(row["runs"]) if len(runs) > 1 else 0.0

    for c in window:
        simulate(c)
    for _ in range(opt.extend):  # the best at an end of the simulated range: look one step beyond it
        law, span = _fit(points, rows, opt)
        beyond = _beyond(front.candidates, rows, law, span)
        if beyond is None:
            break
        log(f"  the best candidate is at an end of the simulated range: simulating S = {beyond.steps} too")
        simulate(beyond)
    law, span = _fit(points, rows, opt)
    for row in rows.values():
        mean, low, high = law.predict(row["steps"], opt.level)
        inside = span["low"] <= row["steps"] <= span["high"]
        row.update(predicted_accuracy=mean, prediction_interval=[low, high], eligible=inside and not row["diverged"],
                   outside_law=row["simulated"] and not row["diverged"] and not inside)
    rows = [rows[s] for s in sorted(rows)]
    result = {"experiment": cfg.experiment.name, "dataset_size": n, "epsilon": cfg.privacy.epsilon, "delta": delta,
              "compute": compute, "accountant": cfg.privacy.accountant, "reference_steps": cfg.train.steps,
              "settings": {k: getattr(opt, k) for k in ("candidates", "seeds", "extend", "savings",
                                                         "min_proxy_batch_size", "steps_factor", "rescale", "law",
                                                         "level")},
              "frontier": rows, "dropped": front.to_dict()["dropped"], "points": points, "source": source}
    result.update(_choose(rows, law, opt.level, span, (front.candidates[0].steps, front.candidates[-1].steps)))
    result["law"] = {**law.to_dict(), "level": opt.level, "top_interval": list(law.top_interval(opt.level)),
                     "range": span}
    result["proxy_examples"] = sum(p["batch_size"] * p["steps"] for p in points)
    result["proxy_runs"] = len(points)
    result["proxy_compute_fraction"] = result["proxy_examples"] / result["recommendation"]["compute"]
    result["tuning"] = tunings[0].to_dict() if tunings else None
    result.update(planned)  # the bound on the total checked before training (private tuning data)
    result["launch"] = None
    result["wall_seconds"] = result["simulation_seconds"] = time.perf_counter() - started
    if out is not None:
        from tanplan.workflow.privacy_spent import report, totals

        # What the proxies cost the data they trained on, and the total ε on the private set: the launch's
        # alone with public tuning data, composed with every proxy's with private tuning data.
        result["privacy_spent"] = report(Path(out) / "runs", out, "proxy runs of the frontier simulation")
        result.update(totals(None, [Path(out) / "runs"], tunings[0]))
        _write(result, Path(out))
    if launch_best:
        result["launch"] = launch_recommendation(cfg, result, Path(out), train_fn=train_fn, progress=progress)
        result["wall_seconds"] = time.perf_counter() - started
        result.update(totals(Path(out) / "launch", [Path(out) / "runs"], tunings[0]))
        _write(result, Path(out))
    return result


def _fit(points: list[dict], rows: dict, opt) -> tuple:
    """(law, range): the law of opt.law over the widest run of consecutive simulated S on which it passes
    the lack-of-fit and the equal-variance tests (tanplan.workflow.frontier_law) at 1 − level; among
    equally wide runs, the one with the smallest residual scatter. With no such run of three or more, the
    three consecutive S with the smallest scatter, and range["passes"] is False. range = {"low", "high",
    "excluded", "passes", "lack_of_fit_p", "equal_variance_p"}, the p-values those of every simulated S."""
    from tanplan.workflow.frontier_law import equal_variance_p, fit_frontier_law

    trained = sorted(s for s, r in rows.items() if r["runs"])
    if len(trained) < 3:
        raise TrainingDiverged(f"only {len(trained)} candidates trained without diverging "
                               f"(S = {', '.join(str(s) for s, r in rows.items() if r['diverged'])} diverged): "
                               f"lower train.learning_rate or turn optimize.rescale off")

    def fit(span):
        used = [p for p in points if span[0] <= p["candidate_steps"] <= span[-1]]
        steps, acc = [p["candidate_steps"] for p in used], [p["test_accuracy"] for p in used]
        law, equal_p = fit_frontier_law(steps, acc, opt.law, opt.level), equal_variance_p(steps, acc)
        passes = all(p is None or p >= 1 - opt.level for p in (law.lack_of_fit_p, equal_p))
        return law, equal_p, passes

    law, equal_p, passes = fit(trained)
    first = {"lack_of_fit_p": law.lack_of_fit_p, "equal_variance_p": equal_p}
    span = trained
    if not passes:
        for width in range(len(trained) - 1, 2, -1):
            fits = [(fit(trained[i:i + width]), trained[i:i + width]) for i in range(len(trained) - width + 1)]
            good = [f for f in fits if f[0][2]] or (fits if width == 3 else [])
            if good:
                (law, equal_p, passes), span = min(good, key=lambda f: f[0][0].residual_std)
                break
    excluded = [s for s in trained if not span[0] <= s <= span[-1]]
    return law, {"low": span[0], "high": span[-1], "excluded": excluded, "passes": passes, **first}


def _beyond(candidates, rows: dict, law, span: dict) -> Candidate | None:
    """The next frontier candidate beyond the simulated end where the law's best candidate sits, or None
    (the best is inside, that end was cut by the lack-of-fit test, or nothing lies beyond)."""
    simulated = sorted(s for s, r in rows.items() if r["simulated"])
    inside = [s for s in rows if span["low"] <= s <= span["high"] and not rows[s]["diverged"]]
    best = max(inside, key=lambda s: (round(law.mean(s), 12), -s))
    if best == span["low"] == simulated[0]:
        options = [c for c in candidates if c.steps < best]
        return max(options, key=lambda c: c.steps) if options else None
    if best == span["high"] == simulated[-1]:
        options = [c for c in candidates if c.steps > best]
        return min(options, key=lambda c: c.steps) if options else None
    return None


def _edge_note(steps: int, span: dict, ends: tuple[int, int]) -> str:
    """What lies beyond a recommendation at an end of the law's range ("" inside it)."""
    for end, side, beyond in ((span["low"], "largest batch (B ≤ N)", [s for s in span["excluded"] if s < steps]),
                              (span["high"], "smallest batch (4 × optimize.min_proxy_batch_size)",
                               [s for s in span["excluded"] if s > steps])):
        if steps != end:
            continue
        if steps in ends:
            return f"; it is the frontier's end with the {side}, so the frontier holds nothing beyond it"
        if beyond:
            return (f"; it sits at an end of the law's range: beyond it, S = {', '.join(map(str, beyond))} was "
                    f"simulated and left out of the law (see the law's range)")
        return "; it sits at an end of the simulated range, so the optimum may lie beyond it (raise optimize.extend)"
    return ""


def _choose(rows: list[dict], law, level: float, span: dict, ends: tuple[int, int]) -> dict:
    """The recommendation (best predicted, fewest steps on a tie), runner-up and worst among the eligible
    rows, and whether the data tells the recommendation from each of the others. span: the law's range;
    ends: the frontier's first and last S."""
    eligible = [r for r in rows if r["eligible"]]
    ranked = sorted(eligible, key=lambda r: (-round(r["predicted_accuracy"], 12), r["steps"]))
    best, runner_up, worst = ranked[0], ranked[1], ranked[-1]

    def compare(other: dict) -> dict:
        diff, low, high = law.difference(best["steps"], other["steps"], level)
        return {"steps": other["steps"], "difference": diff, "interval": [low, high],
                "distinguishable": bool(low > 0.0 or high < 0.0)}

    comparisons = {r["steps"]: compare(r) for r in eligible if r is not best}
    tied = sorted(s for s, c in comparisons.items() if not c["distinguishable"])
    if law.degree == 0:
        verdict = (f"the data cannot tell the candidates apart: the {law.model} law fits best, so every candidate "
                   f"has the same predicted accuracy; the one with the fewest steps is recommended")
    elif not comparisons[runner_up["steps"]]["distinguishable"]:
        verdict = (f"the data cannot tell the recommendation (S = {best['steps']}) from {len(tied)} other "
                   f"candidate(s) (S = {', '.join(map(str, tied))}): their difference's {level:.0%} interval "
                   f"contains 0")
    else:
        verdict = f"the recommendation (S = {best['steps']}) beats every other candidate in the law's range"
    if comparisons[worst["steps"]]["distinguishable"]:
        verdict += f"; it beats the worst-predicted (S = {worst['steps']})"
    else:
        verdict += f"; even the worst-predicted (S = {worst['steps']}) cannot be told from it"
    if law.degree:
        verdict += _edge_note(best["steps"], span, ends)
    return {"recommendation": best, "runner_up": runner_up, "worst": worst,
            "comparisons": [comparisons[s] for s in sorted(comparisons)], "tied_with_recommendation": tied,
            "distinguishable_from_runner_up": comparisons[runner_up["steps"]]["distinguishable"],
            "distinguishable_from_worst": comparisons[worst["steps"]]["distinguishable"], "verdict": verdict}


def launch_recommendation(cfg: Config, result: dict, out: Path, *, train_fn: Callable | None = None,
                          progress: bool = True) -> dict:
    """Launch the recommended candidate as `tanplan run` launches its target; compare with the prediction."""
    from tanplan.workflow.launch import launch

    best = result["recommendation"]
    folder = out / "launch"
    launched = launch(cfg.with_overrides(best["overrides"]), folder, train_fn=train_fn, progress=progress,
                      resume=(folder / "checkpoint").is_dir())
    actual = float(launched["summary"]["test_accuracy"])
    low, high = best["prediction_interval"]
    accounting = launched["accounting"] or {}
    return {"steps": best["steps"], "batch_size": best["batch_size"], "actual_accuracy": actual,
            "predicted_accuracy": best["predicted_accuracy"], "prediction_interval": [low, high],
            "inside_interval": bool(low <= actual <= high), "epsilon_rdp": accounting.get("epsilon_rdp"),
            "epsilon_pld": accounting.get("epsilon_pld"), "sigma": accounting.get("sigma"),
            "wall_seconds": launched["wall_seconds"], "folder": str(folder)}


def _write(result: dict, out: Path) -> None:
    from tanplan.fileio import write_json_atomic
    from tanplan.reports.optimize import write_optimize_report

    write_json_atomic(out / "optimize.json", result)
    write_optimize_report(result, out)


__all__ = ["frontier_plan", "optimize", "launch_recommendation", "candidate_overrides", "rescaled"]
