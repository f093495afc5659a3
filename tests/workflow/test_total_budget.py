"""The total ε a workflow will release on the private set is bounded before any training and checked against
privacy.total_epsilon (tanplan.workflow.total_budget): `tanplan run --tune-data private` of the demo config
exits 3 before anything is written, naming the figure; raised, the run's JSON ε is the total; the ladder's
bound covers every way it can spend its budget; a best.json's tuning record is checked against its runs."""

import json
import random
from pathlib import Path

import pytest
from fakes import SMALL, fake_pipeline_engine, fake_train, record_plan_reports, use_mnist1d_shaped
from helpers import CONFIG, run_cli

from tanplan.config import load_config
from tanplan.engine import loop
from tanplan.privacy import accounting
from tanplan.workflow import total_budget
from tanplan.workflow.ladder import Budget, climb
from tanplan.workflow.pipeline import run_pipeline
from tanplan.workflow.sweep import search


@pytest.fixture(autouse=True)
def no_signals_no_figures(monkeypatch):
    """What is checked here depends on the data's N, not on its signals: random rows of mnist1d's shapes stand in
    for the private and public draws (generating them and importing mnist1d cost about 4 CPU-s in a cold cache).
    The batch law's and the ladder's figures (7 in this module, a few tenths of a CPU-s each) are not checked
    here: tests/workflow/test_fit_launch.py and test_ladder.py check that they are drawn."""
    from tanplan.reports import ladder as ladder_report
    from tanplan.workflow import fit as fit_module
    from tanplan.workflow.pipeline import run as pipeline_run

    use_mnist1d_shaped(monkeypatch)
    for module in (fit_module, pipeline_run):
        monkeypatch.setattr(module, "figure_scaling", lambda result, path, *a, **k: path)
    monkeypatch.setattr(ladder_report, "figure_ladder", lambda result, path: path)


def _no_training(*args, **kwargs):
    raise AssertionError("nothing may train")


def _rdp_epsilon(runs, delta):
    """ε (RDP) of (q, σ, S) runs composed, by dp-accounting's own accountant: an independent computation."""
    acc = accounting.make_accountant("rdp")
    for q, sigma, steps in runs:
        acc.compose(accounting.dp_sgd_event(q, sigma, steps))
    return acc.get_epsilon(delta)


def test_private_tuning_of_the_demo_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    from tanplan.engine.setup import load_data
    from tanplan.privacy.run_plan import resolve_plan
    from tanplan.workflow.ladder import budget_of

    # the figure depends on the demo's N, not on its signals: random rows of mnist1d's shapes stand in for the
    # 20,000-row draw (about 14 CPU-s to generate in a cold cache; no_signals_no_figures)
    monkeypatch.setattr(loop, "train_and_evaluate", _no_training)
    monkeypatch.setattr(search, "run_sweep", _no_training)
    out = tmp_path / "run"
    code, stdout, err = run_cli(capsys, "run", "--config", CONFIG, "--tune-data", "private", "--out", str(out))
    assert code == 3 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    # The figure: every planned release composed, recomputed here from the config (RDP: the proxies' σ' is
    # below PLD's domain): the sweep's trials and top_k × seeds re-runs at the ladder's second rung (32), the
    # ladder's costliest runs within what the pipeline's budget (the config's fit.compute_budget: 1/4 of B·S)
    # leaves after the sweep, and the launch.
    cfg = load_config(CONFIG)
    n = load_data(cfg.data).num_train
    target = resolve_plan(cfg, n)
    sweep_runs = cfg.sweep.trials + cfg.sweep.top_k * cfg.sweep.seeds
    b = budget_of(cfg, sweep_runs * 32)
    runs = [(q * 32 / target.batch_size, target.sigma * 32 / target.batch_size, target.steps)
            for q in [target.q]] * sweep_runs
    assert b.per_step == target.batch_size / 4 - sweep_runs * 32  # the quarter of B·S, less the sweep's runs
    seeds = cfg.fit.ladder_seeds
    counts, left = {}, b.per_step  # the climb, `seeds` a rung while they fit; what is left, at B' = 16
    for size in (16, 32, 64, 128, 256):
        if seeds * size > left:
            break
        counts[size], left = seeds, left - seeds * size
    counts[16] += int(left // 16)
    for size, k in counts.items():
        runs += [(size / n, target.sigma * size / target.batch_size, target.steps)] * k
    runs.append((target.q, target.sigma, target.steps))
    expected = _rdp_epsilon(runs, target.delta)
    assert f"up to ε = {expected:.4g} (RDP" in err and "above privacy.total_epsilon = 0.7" in err
    for alternative in ("tuning.data = \"public\"", "fewer proxy runs", "random-count tuning"):
        assert alternative in err


@pytest.fixture
def fake_engine(monkeypatch):

    train_fn = fake_train(law=lambda b: 0.8, noise=0.004)
    # the plan stage's report (its privacy-wall figure: RDP curves of many settings, 5-7 CPU-s) is not what is
    # checked here; tests/commands/test_plan_command.py checks the report that `plan --out` writes with it
    train_fn.plan_reports = []
    record_plan_reports(monkeypatch, train_fn.plan_reports)
    return fake_pipeline_engine(monkeypatch, train_fn, 2.5)  # two sweep trials, each with its ledger


@pytest.mark.parametrize("tuning_data", ["private", "public"])
def test_with_a_raised_total_the_run_trains_and_its_epsilon_is_the_total(tmp_path, fake_engine, tuning_data):
    # B' = 64, 128 (σ' = 0.74, 1.5; 16 and 32 had 0.18, 0.37): their ledgers compose by PLD, dearer near σ' = 0.1
    sets = SMALL + ["fit.batch_sizes=[64, 128]", "fit.seeds=2", f"tuning.data={tuning_data}",
                    "privacy.total_epsilon=1e6", "fit.max_half_width=50"]  # two rungs' width is not the point here
    summary = run_pipeline(load_config(CONFIG, sets), tmp_path / "run", log=lambda *a: None)
    assert fake_engine.plan_reports == [tmp_path / "run" / "plan"]  # the plan stage ran, once
    assert summary.launch_epsilon == summary.epsilon_pld <= 0.7  # the launch's own ε of record
    if tuning_data == "public":
        assert summary.epsilon == summary.launch_epsilon
        return
    assert summary.epsilon == summary.epsilon_total > summary.launch_epsilon
    # what the ledgers hold is within the bound checked before training (here every planned run ran)
    assert summary.epsilon_total <= summary.epsilon_total_planned * (1 + 1e-9)
    sweep = load_config(CONFIG).sweep  # planned: [sweep]'s trials and re-runs (the fake sweep trains only 2)
    assert summary.epsilon_total_planned_runs == sweep.trials + sweep.top_k * sweep.seeds + 2 * 2 + 1
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["epsilon"] == summary.epsilon_total


def _ladder_runs(budget: Budget, n: int, sigma: float, steps: int, counts: dict[int, int]):
    return [(b / n, sigma * b / budget.target_batch_size, steps) for b, k in counts.items() for _ in range(k)]


def test_the_ladder_bound_covers_every_way_to_spend_its_budget():
    n, sigma, steps, delta = 2000, 4.0, 20, 1e-4
    budget = Budget(16, 512, 2, 256, 0.3)
    bound = total_budget.ladder_counts(budget)
    assert bound == {16: 4, 32: 2, 64: 2}  # the climb: 2 × (16 + 32 + 64) = 224; 32 left: two more at 16
    eps_bound = _rdp_epsilon(_ladder_runs(budget, n, sigma, steps, bound), delta)
    climbed = {16: 2, 32: 2, 64: 2}
    for extra in ({}, {16: 1}, {32: 1}, {16: 2}):  # every other way to spend the 32 left
        counts = {b: k + extra.get(b, 0) for b, k in climbed.items()}
        assert _rdp_epsilon(_ladder_runs(budget, n, sigma, steps, counts), delta) <= eps_bound * (1 + 1e-12)

    def driven_by_the_rule_within_it(budget, eps_bound, draws):  # random accuracies, the rule to its end
        for seed in range(draws):
            rng = random.Random(seed)
            outcome = climb(lambda b, k: [0.5 + 0.3 * rng.random() for _ in range(k)], budget)
            trained = {r.batch_size: r.n for r in outcome.rungs}
            assert sum(b * k for b, k in trained.items()) <= budget.per_step
            assert _rdp_epsilon(_ladder_runs(budget, n, sigma, steps, trained), delta) <= eps_bound * (1 + 1e-12)

    driven_by_the_rule_within_it(budget, eps_bound, 5)  # ladders driven to their end stay within it too
    # a rung climbed with fewer seeds than fit.ladder_seeds (the budget left pays two of four) stays within it
    budget = Budget(16, 4096, 4, 704, 1e-6)  # the demo's ladder after its sweep: 448, then 128 × 2
    bound = total_budget.ladder_counts(budget)
    eps_bound = _rdp_epsilon(_ladder_runs(budget, n, sigma, steps, bound), delta)
    driven_by_the_rule_within_it(budget, eps_bound, 3)
    assert _rdp_epsilon(_ladder_runs(budget, n, sigma, steps, {16: 4, 32: 4, 64: 4, 128: 2}), delta) <= eps_bound


# ---------------------------------------------------------------------------------------------------
# launch --best: the total checked, the tuning record recomputed from the runs


def _sweep(tmp_path, monkeypatch, capsys, fake, sets, name="sweep"):
    from test_tuning_routes import _sweep_without_ray

    monkeypatch.setattr(search, "run_sweep", _sweep_without_ray(fake))
    # B' = 64 (σ' = 0.45): the launches compose its runs by PLD, which costs more the nearer σ' is to its floor 0.1
    code, _, err = run_cli(capsys, "sweep", "--config", CONFIG, *sum([["--set", s] for s in sets], []),
                           "--proxy-batch-size", "64", "--out", str(tmp_path / name))
    assert code == 0, err
    return tmp_path / name / "best.json"


TINY = ["data.num_samples=2000", "train.batch_size=256", "train.steps=4", "train.eval_every=4", "sweep.trials=2"]


def test_launch_best_of_a_private_sweep_is_refused_over_the_total(tmp_path, monkeypatch, capsys):
    fake = fake_train()
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    best = _sweep(tmp_path, monkeypatch, capsys, fake, TINY + ["tuning.data=private", "privacy.total_epsilon=1e6"])
    calls = len(fake.calls)
    sets = sum([["--set", s] for s in TINY + ["tuning.data=private", "privacy.epsilon=1"]], [])
    code, stdout, err = run_cli(capsys, "launch", "--config", CONFIG, *sets, "--best", str(best), "--out",
                                str(tmp_path / "launch"))
    assert code == 3 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert "2 runs already trained and the launch" in err and "privacy.total_epsilon = 1 (its default" in err
    assert len(fake.calls) == calls and not (tmp_path / "launch").exists()


def test_an_edited_tuning_record_is_refused_and_a_missing_one_recomputed(tmp_path, monkeypatch, capsys):
    fake = fake_train()
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    private = TINY + ["tuning.data=private", "privacy.total_epsilon=1e6"]
    best = _sweep(tmp_path, monkeypatch, capsys, fake, private)
    record = json.loads(best.read_text())
    record["tuning"]["tuning_data"] = "public"  # the edit
    best.write_text(json.dumps(record))
    sets = sum([["--set", s] for s in private], [])
    code, stdout, err = run_cli(capsys, "launch", "--config", CONFIG, *sets, "--best", str(best), "--out",
                                str(tmp_path / "launch"))
    assert code == 2 and stdout == "" and "2 of the 2 runs" in err and "trained on the private set" in err
    assert not (tmp_path / "launch").exists()

    del record["tuning"]  # no record at all (an older sweep): recomputed from the runs, and composed
    best.write_text(json.dumps(record))
    code, stdout, err = run_cli(capsys, "launch", "--config", CONFIG, *sets, "--best", str(best), "--out",
                                str(tmp_path / "launch"), "--json")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["tuning_data"] == "private" and result["epsilon_total_runs"] == 3
    assert result["epsilon"] == result["epsilon_total"] > result["accounting"]["epsilon"]

    # A public sweep's record checks out against its runs (the public mnist1d draw, data.seed + 1).
    public = _sweep(tmp_path, monkeypatch, capsys, fake, TINY, name="public")
    code, stdout, err = run_cli(capsys, "launch", "--config", CONFIG, *sum([["--set", s] for s in TINY], []),
                                "--best", str(public), "--out", str(tmp_path / "launch2"))
    assert code == 0, err
    assert "checked on its 2 runs" in stdout and Path(tmp_path / "launch2" / "launch.json").is_file()


# "auto" at B = 256 needs fit.compute_budget = 0: the pipeline's budget (never more than the launch) cannot pay it.
# Proxies of B' ≥ 64 (σ' ≥ 0.45): each refusal is a PLD composition, and B' = 16 or 32 (σ' = 0.11, 0.23, near PLD's
# floor of 0.1) made the four modes' cost 1.5 CPU-s more
@pytest.mark.parametrize("mode", [["--batch-sizes", "64,128", "--seeds", "2", "--launch-anyway"],
                                  ["--batch-sizes", "auto", "--set", "fit.compute_budget=0", "--set", "fit.ladder_start=64"],
                                  ["--vary", "steps", "--factors", "1,2", "--proxy-batch-size", "64", "--seeds", "1"],
                                  ["--vary", "data", "--factors", "0.5,1", "--proxy-batch-size", "64", "--seeds", "1"]],
                         ids=["batch", "ladder", "steps", "data"])
def test_every_fit_mode_on_the_private_set_is_bounded_before_it_trains(tmp_path, monkeypatch, capsys, mode):
    fake = fake_train()
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    sets = sum([["--set", s] for s in TINY + ["tuning.data=private", "privacy.total_epsilon=2"]], [])
    code, stdout, err = run_cli(capsys, "fit", "--config", CONFIG, *sets, "--out", str(tmp_path / "fit"), *mode)
    assert code == 3 and stdout == "" and "above privacy.total_epsilon = 2;" in err and fake.calls == []
    assert not (tmp_path / "fit").exists()
    sets[-1] = "privacy.total_epsilon=1e6"
    code, stdout, err = run_cli(capsys, "fit", "--config", CONFIG, *sets, "--out", str(tmp_path / "fit"), *mode,
                                "--json")
    assert code == 0, err
    result = json.loads(stdout)
    spent = json.loads((tmp_path / "fit" / "privacy_spent.json").read_text())
    assert spent["runs"] == len(fake.calls) <= result["epsilon_total_planned_runs"]
    # what ran, composed, stays within the bound it was checked on (under the accountant that gave it)
    assert spent[f"epsilon_{result['epsilon_total_planned_accountant']}"] <= result["epsilon_total_planned"] * (1 + 1e-9)
