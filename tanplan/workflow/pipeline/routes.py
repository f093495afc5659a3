"""`tanplan run --routes`: training from scratch, fine-tuning, adapters and a private head compared by their
predictions at the user's ε, B and S, before any of them touches the private set; `--launch-best-route` then
launches the recommended one, and only it (docs/finetune.md, "Choosing a route by prediction").

The routes, each built from the user's config (`route_config`):
- scratch: [init] cleared (no weights, nothing frozen, no adapters);
- finetune: the config's [init] as written, adapters cleared;
- adapters: LoRA on init.adapters, or on every Dense and Conv layer when it names none; trainable, frozen and
  frozen_blocks cleared (the base is frozen);
- heads: a DP-LS head (Mehta et al., Alg. 3) on the features of the config's [init] model, the inputs of its
  head, standardised with the public set's statistics.
Every route but scratch needs init.path or init.loader.

Predictions. A DP-SGD route is `tanplan run` stopped after its law (tanplan.workflow.pipeline.run: `predict`,
`stop_before_launch`), into OUT/routes/<route>/: the same sweep, ladder or fit, on the same public data.
The heads route is predicted on the public set of the same task: the encoder's features of its training
split (N of them drawn, or all when it holds fewer than N: the note says so), HEAD_RELEASES releases of the
head at the launch's (ε, δ), each with fresh OS-entropy noise, scored on its test split; the mean, with an
interval for one launch of mean ± t·√(s²(1 + 1/n) + p(1 − p)(1/n_test,pub + 1/n_test)) (the releases'
spread, and the two test sets' sampling), at fit.level. Its compute is the encoder's forward passes.

Privacy. The proxies learn on public data only: private tuning data is refused (every route's proxies
would spend the private budget on routes that never launch). Before anything is written, each route's ε of
record is checked against privacy.total_epsilon by the pipeline's own rule (its launch's releases composed
with those its [init] inherited: tanplan.workflow.total_budget.check); the head's by the same rule, its
Gaussian releases (calibrated to the launch's ε by tanplan.baselines.accounting) composed with the init's.
Only the launched route touches the private set.

The recommendation: the highest predicted mean among the routes whose law holds (an exact tie: the one
named first); a route whose interval overlaps the winner's is said to, since the data do not separate them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import time
from pathlib import Path
from typing import Callable

import jax
import numpy as np
from scipy import stats

from tanplan.baselines.accounting import calibrated, gaussian_event
from tanplan.baselines.data import feature_set, public_standardiser
from tanplan.baselines.least_squares import relative_multipliers
from tanplan.baselines.released import head_inputs
from tanplan.baselines.runner import run_baseline
from tanplan.config import Config
from tanplan.data.source import read_rows
from tanplan.engine.release import LoadedRun
from tanplan.engine.run_folder import check_audit_folder
from tanplan.engine.setup import build_model, load_data, public_example
from tanplan.errors import BudgetExceeded, NotLaunched, RunInterrupted, UsageError
from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.job import job_of
from tanplan.models.init import load_init
from tanplan.outcomes.pipeline import RunResult
from tanplan.outcomes.routes import RoutePrediction, RoutesResult
from tanplan.privacy import init_provenance
from tanplan.reports.routes import routes_figure, routes_markdown
from tanplan.workflow import tuning
from tanplan.workflow.inputs import check_inputs, check_out_dir
from tanplan.workflow.members import Members
from tanplan.workflow.pipeline import costs
from tanplan.workflow.pipeline.checks import (RUN_FILE, check_resume, run_record, sweep_batch_size,
                                              validate_inputs)
from tanplan.workflow.pipeline.run import (Predicted, checked_data, launch_predicted, predict, stop_before_launch,
                                           with_tune_data)
from tanplan.workflow.pipeline.stages import Progress, launch_plan

ROUTES = ("scratch", "finetune", "adapters", "heads")
EVERY_LAYER = ("*",)  # init.adapters when the config names none: every Dense and Conv layer of the model
HEAD_METHOD, HEAD_RELEASES = "dp-ls", 5
FOLDER, PREDICTION, HEAD = "routes", "prediction.json", "head.json"
# The head's (ε, δ) accountant: a DP-LS release is one Gaussian mechanism (tanplan.baselines.accounting), whose ε
# the analytic formula gives exactly (PLD's is a pessimistic bound on it, and takes seconds to calibrate)
HEAD_ACCOUNTANT = {"pld": "analytic", "rdp": "rdp"}
_CLEARED = {"init.trainable": (), "init.frozen": (), "init.frozen_blocks": 0, "init.adapters": ()}


def parse_routes(routes) -> tuple[str, ...]:
    """The route names of --routes ("scratch,heads" or a list): UsageError for an empty, unknown or repeated one."""
    names = [n.strip() for n in (routes.split(",") if isinstance(routes, str) else routes or ())]
    if not names or not all(names):
        raise UsageError(f"--routes {','.join(names)!r} is not allowed: name routes among {', '.join(ROUTES)}, "
                         "separated by commas")
    for name in names:
        if name not in ROUTES:
            raise UsageError(f"--routes: route {name!r} is not known: use {', '.join(ROUTES)}")
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated:
        raise UsageError(f"--routes: route {repeated!r} is named twice: name each route once")
    return tuple(names)


def route_overrides(cfg: Config, route: str) -> dict:
    """The [init] keys a route changes in the user's config (only those whose value changes)."""
    if route == "scratch":
        wanted = {"init.path": "", "init.loader": "", "init.head": (), **_CLEARED}
    elif route == "adapters":
        wanted = {**_CLEARED, "init.adapters": tuple(cfg.init.adapters) or EVERY_LAYER}
    else:  # finetune: [init] as written; heads: its model is the encoder
        wanted = {"init.adapters": ()} if route == "finetune" else dict(_CLEARED)
    return {k: v for k, v in wanted.items() if getattr(cfg.init, k.split(".")[1]) != v}


def route_config(cfg: Config, route: str) -> Config:
    changes = route_overrides(cfg, route)
    return cfg.with_overrides(changes) if changes else cfg


def check_routes(cfg: Config, routes: tuple[str, ...]) -> None:
    """What --routes refuses before anything is read (UsageError): private tuning data, a route that needs
    pretrained weights without them, a head that cannot be accounted as the config asks."""
    if cfg.tuning.data == "private":
        raise UsageError("--routes is not allowed with tuning.data = \"private\": every route's proxies would train "
                         "on the private set, spending its budget on routes that never launch; tune on public data "
                         "(--tune-data public)")
    for route in routes:
        if route != "scratch" and not (cfg.init.path or cfg.init.loader):
            raise UsageError(f"route {route!r} needs pretrained weights: set init.path or init.loader, or leave "
                             f"{route} out of --routes")
    if "heads" in routes and (not cfg.privacy.private or cfg.privacy.neighbouring != "add_remove"):
        raise UsageError("route 'heads' is not allowed with privacy.private = false or privacy.neighbouring = "
                         "\"replace_one\": its DP-LS head is released at the launch's ε under add/remove-one")


def route_configs(cfg: Config, routes, out: Path, *, proxy_batch_size=None, trials=None,
                  address=None) -> dict[str, Config]:
    """Each route's Config, every input checked as `tanplan run` checks it, before any data is read."""
    names = parse_routes(routes)
    check_routes(cfg, names)
    configs = {r: route_config(cfg, r) for r in names}
    for route, rcfg in configs.items():
        if route == "heads":
            check_inputs(rcfg)  # the encoder's weights read, and where they were trained
            tuning.check(rcfg)  # its prediction reads the public set
        else:
            validate_inputs(rcfg, out / FOLDER / route, address=address, proxy_batch_size=proxy_batch_size,
                            trials=trials)
    return configs


def routes_entry(cfg: Config, out, routes, *, launch_best: bool = False, tune_data: str | None = None,
                 trials: int | None = None, proxy_batch_size: int | None = None, address: str | None = None,
                 log=print, resume: bool = False) -> RoutesResult:
    """Every route predicted into out/routes/<route>/, compared in out/routes.md, routes.json and routes.png;
    with launch_best, the recommended route launched into out/launch (a DP-SGD route: out/summary.json and
    report.md as `tanplan run` writes them; the head: out/launch/head.json). resume: continue the comparison
    in out (the same config and options): finished proxy runs, head releases and launch are kept. tune_data:
    [tuning] data ("private" is refused)."""
    started, out, cfg = time.perf_counter(), Path(out), with_tune_data(cfg, tune_data)
    configs = route_configs(cfg, routes, out, proxy_batch_size=proxy_batch_size, trials=trials, address=address)
    record = run_record(cfg, trials=trials, proxy_batch_size=proxy_batch_size, routes=list(configs),
                        launch_best_route=launch_best)
    check_out_dir(out)
    if out.is_dir():  # an audit's outputs hold canary-trained models: never a workflow's folder
        check_audit_folder(out, resume=False, audit=False)
    check_resume(out, record, resume)
    delta, head_epsilon = check_budgets(configs, proxy_batch_size, trials)  # exit 3 before anything is written
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / RUN_FILE, record.to_dict())
    try:
        return _compare(cfg, configs, out, delta, head_epsilon, launch_best=launch_best, started=started,
                        trials=trials, proxy_batch_size=proxy_batch_size, address=address, log=log)
    except RunInterrupted as err:  # its line named a route's folder: the comparison is what continues
        signum = err.exit_code - 128
        raise RunInterrupted(f"{signal.Signals(signum).name}: `tanplan run --routes` stopped; finished routes and runs "
                             f"are kept in {str(out)!r}: continue with --resume (the same --config, --set, --routes "
                             "and --out)", signum) from None


def _compare(cfg: Config, configs: dict[str, Config], out: Path, delta: float, head_epsilon, *, launch_best: bool,
             started: float, trials, proxy_batch_size, address, log) -> RoutesResult:
    """Every route predicted, the comparison written, the recommended route launched with launch_best."""
    rows, predicted = [], {}
    options = dict(trials=trials, proxy_batch_size=proxy_batch_size, address=address, log=log)
    for route, rcfg in configs.items():
        if route == "heads":
            rows.append(predict_heads(rcfg, out, head_epsilon, log))
        else:
            row, predicted[route] = predict_route(cfg, route, rcfg, out, **options)
            rows.append(row)
    result = recommend(tuple(rows), cfg, delta, started)
    write_routes(result, out, figure=not launch_best)  # the comparison, before any launch
    log(f"routes: {result.recommendation}")
    if not launch_best:
        return result
    if result.recommended is None:
        write_routes(result, out)
        raise NotLaunched(f"not launched: {result.recommendation}; report {out / 'routes.md'}")
    winner = result.recommended
    if winner != "heads" and predicted[winner] is None:  # kept from an earlier run: its stages read back
        predicted[winner] = predict(configs[winner], out / FOLDER / winner, Progress(False, log, launch=False),
                                    trials=trials, proxy_batch_size=proxy_batch_size, address=address, resume=True)
    return write_routes(launch_best_route(result, configs, predicted, out, log, started), out)


def check_budgets(configs: dict[str, Config], proxy_batch_size, trials) -> tuple[float, tuple[float, str] | None]:
    """Each route's launch within privacy.total_epsilon, its releases composed with its init's (BudgetExceeded,
    exit 3, naming the route), on the loaded data: the DP-SGD routes by `tanplan run`'s own checks before
    anything is written (checked_data), the head by head_budget. (The launches' δ, the head's (ε of record,
    accountant) or None.)"""
    dataset, delta = None, None
    for route, rcfg in configs.items():
        try:
            if route != "heads":
                dataset, plan, tune = checked_data(rcfg, sweep_batch_size(rcfg, proxy_batch_size), trials)[:3]
                delta = plan.delta
                # its proxies start from the init too: weights pretrained without privacy on the very public set
                # they learn on are refused there (UsageError), so here, before any route trains
                init_provenance.read(tune.proxy_cfg)
        except BudgetExceeded as err:
            raise BudgetExceeded(f"route {route!r}: {err}") from None
        except UsageError as err:
            raise UsageError(f"route {route!r}: {err}") from None
    if "heads" not in configs:
        return delta, None
    hcfg = configs["heads"]
    target = launch_plan(Members.of(hcfg), dataset or load_data(hcfg.data))
    return target.delta, head_budget(hcfg, target)


def head_budget(hcfg: Config, target) -> tuple[float, str]:
    """(ε of record, accountant) of the head released at the launch's (ε, δ) (target: the launch's RunPlan),
    composed with the releases its [init] inherited; BudgetExceeded above privacy.total_epsilon."""
    epsilon = float(target.epsilon())
    sigma, guarantee = calibrated(relative_multipliers(), epsilon, target.delta, HEAD_ACCOUNTANT[target.accountant])
    provenance = init_provenance.read(hcfg)
    inherited = provenance.events() if provenance is not None else []
    limit = init_provenance.limit(hcfg)
    record, used = guarantee.epsilon, guarantee.accountant
    if inherited:
        event = gaussian_event([sigma * c for c in relative_multipliers()])
        record, used = init_provenance.composed_epsilon([event, *inherited], target.delta, target.accountant,
                                                        "add_remove", within=limit)
    if record is None or record > limit:
        raise BudgetExceeded(f"route 'heads': its head at ε = {epsilon:.4g} composed with its init "
                             f"{hcfg.init.path or hcfg.init.loader!r} would be ε = {record:.4g} ({used.upper()}, "
                             f"δ = {target.delta:.3g}), above privacy.total_epsilon = {limit:g}; nothing was trained: "
                             "leave heads out of --routes, raise privacy.total_epsilon, or start from public weights")
    return float(record), used


def predict_route(cfg: Config, route: str, rcfg: Config, out: Path, *, trials, proxy_batch_size, address,
                  log) -> tuple[RoutePrediction, Predicted | None]:
    """A DP-SGD route's prediction: `tanplan run` up to its law in out/routes/<route>/; a prediction that
    finished there (its summary.json) is read back (None in place of its stages)."""
    folder = out / FOLDER / route
    p = None
    if (folder / "summary.json").is_file():  # written last, once its law is fitted: the route is kept
        result = RunResult.from_dict(json.loads((folder / "summary.json").read_text(encoding="utf-8")))
    else:
        progress = Progress(False, lambda line: log(f"{route}: {line}"), launch=False)
        p = predict(rcfg, folder, progress, trials=trials, address=address, proxy_batch_size=proxy_batch_size,
                    resume=(folder / RUN_FILE).is_file())
        result = stop_before_launch(p, predict_only=True)
    target = result.batch_size * result.steps
    return RoutePrediction(
        route=route, method="DP-SGD", overrides=route_overrides(cfg, route),
        predicted_accuracy=result.predicted_accuracy, prediction_interval=result.prediction_interval,
        law_holds=bool(result.law_holds), verdict=result.verdict, launch_compute=target,
        launch_unit="example-gradients", proxy_compute=int(round(result.proxy_compute.total * target)),
        proxy_unit="example-gradients", epsilon_of_record=result.epsilon_total_planned,
        epsilon_accountant=result.epsilon_total_planned_accountant or "none", folder=f"{FOLDER}/{route}"), p


@dataclasses.dataclass(frozen=True)
class HeadSetting:
    """What the heads route reads: the private set, the launch's RunPlan, the encoder, the public features."""

    dataset: object
    target: object
    encode: Callable[[np.ndarray], np.ndarray]
    standardise: Callable[[np.ndarray], np.ndarray]
    public: object  # the FeatureSet of the public set: its N-row training sample and its test split
    note: str | None


def encoder(cfg: Config, num_classes: int, input_shape) -> Callable[[np.ndarray], np.ndarray]:
    """x -> the inputs of the head of the config's model with [init]'s weights ((n, d) float64): the features."""
    job = job_of(cfg)
    model = build_model(job, num_classes, input_shape)
    params = model.init(jax.random.key(cfg.experiment.seed), public_example(input_shape, 1))["params"]
    run = LoadedRun(model, load_init(job.init, cfg.model.name, params).params, None, {"model": cfg.model.name})
    head = cfg.init.head[0] if cfg.init.head else None  # a plugged-in model names its head there
    return lambda x: head_inputs(run, x, head)


def all_rows(source) -> tuple[np.ndarray, np.ndarray]:
    return read_rows(source, np.arange(len(source)))


def head_setting(hcfg: Config) -> HeadSetting:
    """The heads route's data: N rows of the public training split drawn (public, experiment.seed), encoded,
    the standardisation their statistics give, and the public test split's features."""
    dataset = load_data(hcfg.data)
    target = launch_plan(Members.of(hcfg), dataset)
    public = tuning.resolve(hcfg, target.plan, private=dataset).proxy_data
    encode = encoder(hcfg, dataset.num_classes, dataset.input_shape)
    x, y = all_rows(public.train)
    n = dataset.num_train
    note = None
    if len(y) > n:
        keep = np.sort(np.random.default_rng(hcfg.experiment.seed).choice(len(y), n, replace=False))
        x, y = x[keep], y[keep]
    elif len(y) < n:
        note = (f"predicted on the public set's {len(y)} training examples, fewer than N = {n}: at the same ε a "
                "smaller set is noisier, so the prediction errs low")
    features = encode(x)
    standardise = public_standardiser(features)
    x_test, y_test = all_rows(public.test)
    fs = feature_set(standardise(features), y, standardise(encode(x_test)), y_test, source="the public features")
    return HeadSetting(dataset, target, encode, standardise, fs, note)


def head_interval(mean: float, std: float, releases: int, level: float, n_test_public: int,
                  n_test: int) -> tuple[float, float]:
    """The interval for one release on the private set: mean ± t·√(s²(1 + 1/n) + p(1 − p)(1/n₁ + 1/n₂)) (s
    the releases' sample spread from their population std, the test sets' binomial sampling), t at `level`."""
    s2 = std ** 2 * releases / (releases - 1)
    var = s2 * (1 + 1 / releases) + mean * (1 - mean) * (1 / n_test_public + 1 / n_test)
    half = float(stats.t.ppf((1 + level) / 2, releases - 1)) * math.sqrt(var)
    return mean - half, mean + half


def predict_heads(hcfg: Config, out: Path, budget: tuple[float, str], log) -> RoutePrediction:
    """The heads route's prediction on the public set (kept in out/routes/heads/prediction.json on a rerun)."""
    path = out / FOLDER / "heads" / PREDICTION
    if path.is_file():
        return RoutePrediction.from_dict(json.loads(path.read_text(encoding="utf-8")))
    log(f"heads: {HEAD_METHOD} head on the pretrained features of the public set, {HEAD_RELEASES} releases")
    s = head_setting(hcfg)
    target, public = s.target, s.public
    result = run_baseline(HEAD_METHOD, public, float(target.epsilon()), target.delta, repeats=HEAD_RELEASES,
                          accountant=HEAD_ACCOUNTANT[target.accountant])  # seed None: fresh OS-entropy noise
    low, high = head_interval(result.accuracy, result.accuracy_std, HEAD_RELEASES, hcfg.fit.level,
                              len(public.y_test), s.dataset.num_test)
    half_max = hcfg.fit.max_half_width / 100
    holds = (high - low) / 2 <= half_max  # as the law's verdict: an interval wider than fit.max_half_width
    low, high = max(0.0, low), min(1.0, high)  # an accuracy: the interval clipped to [0, 1]
    verdict = (f"{HEAD_RELEASES} releases on the public features: {result.accuracy:.4f} ± {result.accuracy_std:.4f}"
               if holds else f"its interval is wider than ±{half_max:.3g} (fit.max_half_width)")
    row = RoutePrediction(
        route="heads", method="DP-LS head", overrides=route_overrides(hcfg, "heads"),
        predicted_accuracy=result.accuracy, prediction_interval=(low, high), law_holds=holds, verdict=verdict,
        launch_compute=s.dataset.num_train + s.dataset.num_test, launch_unit="example-forward passes",
        proxy_compute=len(public.y_train) + len(public.y_test), proxy_unit="example-forward passes",
        epsilon_of_record=budget[0], epsilon_accountant=budget[1], folder=f"{FOLDER}/heads", note=s.note)
    write_json_atomic(path, row.to_dict())
    return row


def recommend(rows: tuple[RoutePrediction, ...], cfg: Config, delta: float, started: float) -> RoutesResult:
    """The route with the highest predicted mean among those whose law holds (an exact tie: the first named),
    each row's standing, and why."""
    holding = [r for r in rows if r.law_holds and r.predicted_accuracy is not None]
    best = max(holding, key=lambda r: r.predicted_accuracy) if holding else None  # max keeps the first of a tie
    standings, overlap = [], []
    for r in rows:
        if not (r.law_holds and r.predicted_accuracy is not None):
            standings.append(dataclasses.replace(r, standing="not recommended: its law does not hold"))
        elif r is best:
            standings.append(dataclasses.replace(r, standing="recommended"))
        elif r.prediction_interval[1] >= best.prediction_interval[0]:
            overlap.append(r.route)
            standings.append(dataclasses.replace(r, standing="its interval overlaps the recommended route's"))
        else:
            standings.append(dataclasses.replace(r, standing="below the recommended route's interval"))
    if best is None:
        why = "no route's prediction holds (each row's verdict says why)"
    else:
        why = f"{best.route}, the highest predicted mean ({best.predicted_accuracy:.4f})"
        if overlap:
            why += (f"; its interval overlaps {', '.join(overlap)}'s: the proxies do not separate them at the "
                    f"{cfg.fit.level:.0%} level, and the highest mean is the best guess")
    return RoutesResult(routes=tuple(standings), recommended=best.route if best else None, recommendation=why,
                        launched=None, actual_accuracy=None, actual_inside_interval=None, epsilon=None,
                        delta=delta, accountant=cfg.privacy.accountant,
                        epsilon_total_budget=init_provenance.limit(cfg), level=cfg.fit.level,
                        wall_seconds=time.perf_counter() - started)


def launch_best_route(result: RoutesResult, configs: dict[str, Config], predicted: dict[str, Predicted], out: Path,
                      log, started: float) -> RoutesResult:
    """The recommended route launched into out/launch, and only it; the result with its accuracy."""
    route = result.recommended
    row = next(r for r in result.routes if r.route == route)
    log(f"routes: launching {route}")
    if route == "heads":
        actual, epsilon = launch_heads(configs[route], out, row)
    else:
        progress = Progress(False, lambda line: log(f"{route}: {line}"))
        progress.done = 3  # plan, sweep and law: its prediction's
        launched = launch_predicted(predicted[route], progress, into=out)
        actual, epsilon = launched.actual_accuracy, launched.epsilon
    low, high = row.prediction_interval
    return dataclasses.replace(result, launched=route, actual_accuracy=actual,
                               actual_inside_interval=bool(low <= actual <= high), epsilon=epsilon,
                               wall_seconds=time.perf_counter() - started)


def private_features(s: HeadSetting):
    """The private set's features (train and test splits), encoded and standardised as the prediction's were."""
    x, y = all_rows(s.dataset.train)
    x_test, y_test = all_rows(s.dataset.test)
    return feature_set(s.standardise(s.encode(x)), y, s.standardise(s.encode(x_test)), y_test,
                       source="the private features")


def release_head(s: HeadSetting, private=None):
    """One release of the head on the private features at the launch's (ε, δ), fresh OS-entropy noise (seed
    None), scored on the private test split: the BaselineResult. private: the features, when already made."""
    private = private_features(s) if private is None else private
    return run_baseline(HEAD_METHOD, private, float(s.target.epsilon()), s.target.delta,
                        accountant=HEAD_ACCOUNTANT[s.target.accountant])


def launch_heads(hcfg: Config, out: Path, row: RoutePrediction) -> tuple[float, float]:
    """The head released once on the private set's features (fresh OS-entropy noise), scored on its test split,
    recorded in out/launch/head.json; a head already released there is read back, never released again.
    (accuracy, its ε of record)."""
    path = out / "launch" / HEAD
    if path.is_file():
        done = json.loads(path.read_text(encoding="utf-8"))
        return float(done["accuracy"]), float(done["epsilon_of_record"])
    result = release_head(head_setting(hcfg))
    write_json_atomic(path, {**result.to_dict(), "epsilon_of_record": row.epsilon_of_record,
                             "epsilon_of_record_accountant": row.epsilon_accountant,
                             "init": hcfg.init.path or hcfg.init.loader})
    return float(result.accuracy), float(row.epsilon_of_record)


def write_routes(result: RoutesResult, out: Path, figure: bool = True) -> RoutesResult:
    """out/routes.json, routes.md and (figure) routes.png; the result."""
    write_json_atomic(out / "routes.json", result.to_dict())
    write_text_atomic(out / "routes.md", routes_markdown(result))
    if figure:
        routes_figure(result, out / "routes.png")
    return result


def dry_run_routes(cfg: Config, routes, out, *, proxy_batch_size=None, trials=None, address=None,
                   measure: bool = True) -> tuple[dict, list[str]]:
    """`run --dry-run --routes`: each route's planned compute ({route: PlannedCompute, or the head's forward
    passes}, and the lines to print), after every check the comparison makes before it trains."""
    out = Path(out)
    configs = route_configs(cfg, routes, out, proxy_batch_size=proxy_batch_size, trials=trials, address=address)
    check_budgets(configs, proxy_batch_size, trials)
    planned, lines = {}, []
    for route, rcfg in configs.items():
        if route == "heads":
            data = load_data(rcfg.data)
            forwards = data.num_train + data.num_test
            planned[route] = {"example_forward_passes": forwards}
            lines.append(f"planned compute: heads: no example-gradient; about {forwards:,} example-forward passes "
                         "of the encoder on the public set (the prediction) and as many on the private set (the "
                         "launch), plus a least-squares solve: negligible next to DP-SGD")
            continue
        folder = out / FOLDER / route
        found = costs.dry_run(rcfg, proxy_batch_size, trials)  # its data checked above, as `run --dry-run` does
        planned[route] = costs.timed(found, rcfg, folder, measure=measure)
        lines += [f"{route}: {line}" for line in costs.compute_lines(planned[route])]
    return planned, lines
