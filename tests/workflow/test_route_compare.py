"""`tanplan run --routes` (issue 47, item 1) with the fake engine (no JAX training): each route's overrides from
the user's config, every route predicted and compared (routes.md, routes.json, routes.png), the recommendation
(the highest predicted mean whose law holds), --launch-best-route launching the winner and only it, and the
budget refusal (exit 3) before anything is written or trained. The heads route's encoder is replaced by a
projection of the inputs (its DP-LS releases run for real: milliseconds)."""

import json

import numpy as np
import pytest
from fakes import fake_pipeline_engine, fake_train, mnist1d_shaped, record_plan_reports
from helpers import ROOT, run_cli

from tanplan.config import config_to_toml, load_config
from tanplan.outcomes.routes import RoutePrediction, RoutesResult
from tanplan.privacy.ledger import Ledger
from tanplan.workflow import fit as fit_module
from tanplan.workflow.pipeline import routes

CONFIG = str(ROOT / "experiments" / "mnist1d_finetune.toml")
FROZEN = ["Conv_0", "NormAct_0"]
SMALL = ["data.num_samples=2000", "train.steps=20", "fit.batch_sizes=[16, 32]", "fit.seeds=2", "fit.max_half_width=50"]


def labelled_signals(num_samples: int = 60_000, seed: int = 0):
    """mnist1d's shapes, its first ten points a one-hot of the label plus noise: features a linear head can read."""
    ds = mnist1d_shaped(num_samples, seed)
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        x[np.arange(len(y)), y, 0] += 4.0
    return ds


@pytest.fixture
def world(monkeypatch, tmp_path):
    """Labelled signals for the data, the heads' encoder a projection, public pretrained weights in tmp_path/pre,
    and a fake engine whose accuracy is a route's (scratch 0.6, finetune 0.8, adapters `world.adapters`)."""
    from tanplan.data import load as data_load

    monkeypatch.setattr(data_load, "load_mnist1d", labelled_signals)
    monkeypatch.setattr(routes, "encoder", lambda cfg, k, shape: lambda x: np.asarray(x, np.float64)[:, :12, 0])
    (tmp_path / "pre" / "model").mkdir(parents=True)
    np.savez(tmp_path / "pre" / "model" / "params.npz", **{"Dense_0/kernel": np.zeros((2, 3), np.float32)})
    monkeypatch.chdir(tmp_path)
    accuracy = {"scratch": 0.6, "finetune": 0.8, "adapters": 0.7}
    engines = {r: fake_train(law=lambda b, r=r: accuracy[r], noise=0.004) for r in accuracy}
    calls = []

    def train_fn(cfg, workdir, progress=False, resume=False, on_eval=None):
        route = "scratch" if not cfg.init.path else ("adapters" if cfg.init.adapters else "finetune")
        calls.append((route, cfg.train.proxy_batch_size))
        return engines[route](cfg, workdir, progress=progress, resume=resume, on_eval=on_eval)

    train_fn.calls, train_fn.accuracy, train_fn.reports = calls, accuracy, []
    record_plan_reports(monkeypatch, train_fn.reports)
    monkeypatch.setattr(fit_module, "figure_scaling", lambda *a, **k: None)  # the fit's figure: tests/reports/'s
    return fake_pipeline_engine(monkeypatch, train_fn, 1.0)


def test_each_route_is_the_users_config_with_its_init_changed():
    cfg = load_config(CONFIG, ['init.path="runs/pre"', f"init.frozen={FROZEN}", 'init.trainable=["Dense_0"]',
                               'init.head=["Dense_0"]', "init.adapters_rank=4"])
    scratch = routes.route_config(cfg, "scratch").init
    assert (scratch.path, scratch.loader, scratch.frozen, scratch.trainable, scratch.adapters) == ("", "", (), (), ())
    assert routes.route_config(cfg, "finetune") == cfg  # [init] as written (no adapters to clear)
    adapters = routes.route_config(cfg, "adapters").init
    assert adapters.adapters == routes.EVERY_LAYER and (adapters.frozen, adapters.trainable) == ((), ())
    assert adapters.path == "runs/pre" and adapters.adapters_rank == 4 and adapters.head == ("Dense_0",)
    heads = routes.route_config(cfg, "heads").init
    assert heads.path == "runs/pre" and heads.frozen == () and heads.adapters == ()
    with_lora = cfg.with_overrides({"init.adapters": ("Conv_1",), "init.frozen": ()})
    assert routes.route_config(with_lora, "adapters").init.adapters == ("Conv_1",)  # the config's own targets
    assert routes.route_config(with_lora, "finetune").init.adapters == ()
    assert routes.route_overrides(with_lora, "finetune") == {"init.adapters": ()}  # only what changes
    assert routes.parse_routes("scratch, heads") == ("scratch", "heads")


def _row(route, mean, half=0.02, holds=True):
    return RoutePrediction(route=route, method="DP-SGD", overrides={}, predicted_accuracy=mean,
                           prediction_interval=(mean - half, mean + half), law_holds=holds, verdict="v",
                           launch_compute=100, launch_unit="example-gradients", proxy_compute=10,
                           proxy_unit="example-gradients", epsilon_of_record=1.0, epsilon_accountant="pld", folder="f")


def test_the_highest_mean_whose_law_holds_is_recommended():
    cfg = load_config(CONFIG)
    result = routes.recommend((_row("scratch", 0.5), _row("adapters", 0.95, holds=False), _row("finetune", 0.8),
                               _row("heads", 0.79)), cfg, 1e-4, 0.0)
    assert result.recommended == "finetune"
    standing = {r.route: r.standing for r in result.routes}
    assert standing == {"scratch": "below the recommended route's interval",
                        "adapters": "not recommended: its law does not hold", "finetune": "recommended",
                        "heads": "its interval overlaps the recommended route's"}
    assert "overlaps heads's" in result.recommendation
    tie = routes.recommend((_row("heads", 0.8), _row("finetune", 0.8)), cfg, 1e-4, 0.0)
    assert tie.recommended == "heads"  # an exact tie: the route named first
    assert routes.recommend((_row("scratch", 0.5, holds=False),), cfg, 1e-4, 0.0).recommended is None


def test_routes_are_predicted_compared_and_only_the_winner_launches(world, tmp_path):
    world.accuracy["adapters"] = 1.5  # its law cannot hold (a prediction above 1): listed, never recommended
    out = tmp_path / "cmp"
    cfg = load_config(CONFIG, SMALL + ['init.path="pre"', f"init.frozen={FROZEN}"])
    result = routes.routes_entry(cfg, out, "scratch,finetune,adapters,heads", launch_best=True, log=lambda *a: None)
    rows = {r.route: r for r in result.routes}
    assert list(rows) == ["scratch", "finetune", "adapters", "heads"]
    assert not rows["adapters"].law_holds and rows["adapters"].standing.startswith("not recommended")
    assert rows["finetune"].predicted_accuracy == pytest.approx(0.8, abs=0.02)
    assert rows["scratch"].predicted_accuracy == pytest.approx(0.6, abs=0.02)
    head = rows["heads"]  # DP-LS at ε = 1 on features that hold the label: above every DP-SGD route here
    assert head.method == "DP-LS head" and head.law_holds and head.predicted_accuracy > 0.85
    assert head.prediction_interval[0] < head.predicted_accuracy < head.prediction_interval[1]
    assert head.epsilon_of_record <= cfg.privacy.epsilon and head.launch_compute == 1600 + 400
    assert result.recommended == result.launched == "heads" and result.actual_accuracy > 0.8
    assert rows["finetune"].launch_compute == 512 * 20  # B·S; the proxies: 2 sweep trials at 16, the fit's 4 runs
    assert rows["finetune"].proxy_compute == (2 * 16 + 2 * (16 + 32)) * 20
    # only the winner touched the private set: no DP-SGD launch (a launch trains at proxy_batch_size 0)
    assert all(b > 0 for _, b in world.calls) and {r for r, _ in world.calls} == {"scratch", "finetune", "adapters"}
    released = json.loads((out / "launch" / "head.json").read_text())
    assert released["noise_secret"] and released["epsilon"] <= cfg.privacy.epsilon
    written = json.loads((out / "routes.json").read_text())
    assert written == json.loads(json.dumps(result.to_dict())) and RoutesResult.from_dict(written).launched == "heads"
    table = (out / "routes.md").read_text()
    for route in rows:
        assert f"| {route} | " in table
    assert "## Launched: heads" in table and (out / "routes.png").stat().st_size > 0
    for route in ("scratch", "finetune", "adapters"):  # each a `tanplan run` folder stopped after its law
        summary = json.loads((out / "routes" / route / "summary.json").read_text())
        assert not summary["launched"] and not (out / "routes" / route / "launch").exists()
    # a rerun with --resume keeps every finished route, and the head's release: never a second one
    trained = len(world.calls)
    again = routes.routes_entry(cfg, out, "scratch,finetune,adapters,heads", launch_best=True, log=lambda *a: None,
                                resume=True)
    assert again.actual_accuracy == result.actual_accuracy and len(world.calls) == trained
    assert [r.to_dict() for r in again.routes] == written["routes"]


def test_a_dp_sgd_winner_launches_into_out_as_run_does(world, tmp_path):
    out = tmp_path / "cmp"
    cfg = load_config(CONFIG, SMALL + ['init.path="pre"'])
    result = routes.routes_entry(cfg, out, ["scratch", "finetune"], launch_best=True, log=lambda *a: None)
    assert result.recommended == result.launched == "finetune"
    launches = [r for r, b in world.calls if b == 0]
    assert launches == ["finetune"]  # the winner's launch, once
    summary = json.loads((out / "summary.json").read_text())
    assert summary["launched"] and summary["actual_accuracy"] == pytest.approx(result.actual_accuracy)
    assert (out / "launch" / "ledger.json").is_file() and not (out / "routes" / "finetune" / "launch").exists()
    assert "routes/finetune/plan/report.md" in (out / "report.md").read_text()


def _private_init(folder, cfg):
    """A DP-SGD run on the same private set, at ε ≈ 1 (q 0.32, σ 2, 20 steps): its weights compose."""
    (folder / "model").mkdir(parents=True)
    np.savez(folder / "model" / "params.npz", **{"Dense_0/kernel": np.zeros((2, 3), np.float32)})
    ledger = Ledger(delta=1e-4, accountant="pld")
    ledger.advance(ledger.open_release(0, 0.32, 2.0, 1e-4), 20)
    (folder / "ledger.json").write_text(json.dumps(ledger.to_dict()))
    (folder / "config.toml").write_text(config_to_toml(cfg))


@pytest.mark.parametrize("named", ["scratch,finetune", "scratch,heads"])
def test_a_route_over_the_total_budget_is_refused_before_anything_trains(world, tmp_path, capsys, named):
    cfg = load_config(CONFIG, SMALL)
    _private_init(tmp_path / "priv", cfg)
    code, out, err = run_cli(capsys, "run", "--config", CONFIG, *sum([["--set", s] for s in SMALL], []),
                             "--set", 'init.path="priv"', "--routes", named, "--launch-best-route",
                             "--out", str(tmp_path / "cmp"))
    route = named.split(",")[1]
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"route {route!r}" in err and "privacy.total_epsilon" in err
    assert not (tmp_path / "cmp").exists() and world.calls == []


def test_a_dry_run_prints_each_routes_planned_compute(world, tmp_path, capsys):
    sets = sum([["--set", s] for s in SMALL], [])
    code, out, err = run_cli(capsys, "run", "--config", CONFIG, *sets, "--set", 'init.path="pre"', "--routes",
                             "scratch,finetune,heads", "--dry-run", "--no-probe", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    for route in ("scratch", "finetune"):
        assert f"{route}: planned compute: sweep: 29 runs" in out and f"{route}: planned compute: launch: 1 run" in out
    assert "planned compute: heads: no example-gradient; about 2,000 example-forward passes" in out
    assert not (tmp_path / "cmp").exists() and world.calls == []
