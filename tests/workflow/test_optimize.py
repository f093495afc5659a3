"""The optimize stage with the fake engine: the proxies it trains, the law it fits, the plan it recommends
and launches, and the inputs it refuses before any training."""

import json
import math

import pytest

from fakes import SMALL, fake_train, use_mnist1d_shaped
from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.privacy import accounting
from tanplan.privacy.run_plan import resolve_plan
from tanplan.workflow.optimize import frontier_window, optimize, planned_compute

CONFIG = "experiments/mnist1d.toml"
# N = 1,600, C = 512·20; proxies at B/8, at least 8 examples: the frontier (B ≥ 32) runs from S = 7 to 320: the
# simulated S = 10..160 with S = 7 below and 226, 320 above them (a floor of 4, B ≥ 16, added S = 453 and 640:
# 1.2 CPU-s more of PLD calibrations, and changed no proxy batch of these)
OPT = SMALL + ["optimize.savings=8", "optimize.min_proxy_batch_size=8"]
quiet = lambda *a, **k: None  # noqa: E731


@pytest.fixture(scope="module", autouse=True)
def mnist1d_shaped_data():
    """The fake engine's accuracies follow a law of the run, not mnist1d's signals: random rows of its shapes
    stand in for generating the private and public draws (the fake reads their N; the tuning checks, both)."""

    mp = pytest.MonkeyPatch()
    use_mnist1d_shaped(mp)
    yield
    mp.undo()


def peaked(peak_steps, top=0.8, curve=0.01):
    return lambda run: top - curve * (math.log(run.steps) - math.log(peak_steps)) ** 2


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from tanplan.reports import optimize as optimize_report

    out = tmp_path_factory.mktemp("optimize")
    cfg = load_config(CONFIG, OPT)
    train_fn = fake_train(peaked(40), noise=0.002, of_run=True)
    train_fn.lines = []  # what optimize logged
    # the report is written before the launch and again after it: its figure drawn once, the second time
    drawn, figure = [], optimize_report.figure_frontier
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(optimize_report, "figure_frontier",
                   lambda result, path: drawn.append(result.launch) or (figure(result, path) if result.launch else None))
        result = optimize(cfg, out, train_fn=train_fn, launch_best=True, log=train_fn.lines.append)
    assert len(drawn) == 2 and drawn[-1] is not None
    return cfg, train_fn, result, out


def test_optimize_says_its_planned_compute_before_any_proxy_trains(study):
    cfg, train_fn, result, _ = study
    front, window = frontier_window(cfg, result.dataset_size, result.compute, result.delta)
    planned = planned_compute(cfg, front, window, result.compute)
    in_window = {c.steps for c in window}
    trained = [(p["batch_size"] * p["steps"], p["candidate_steps"] in in_window) for p in result.points]
    candidates, extension, launch = planned.stages
    assert (candidates.stage, candidates.runs) == ("candidates", len(window) * cfg.optimize.seeds)
    assert candidates.example_gradients == sum(e for e, inside in trained if inside)  # exactly what trained
    assert sum(e for e, inside in trained if not inside) <= extension.example_gradients  # a bound on the rest
    assert launch.example_gradients == result.compute
    assert planned.proxy_fraction * result.compute >= result.proxy_compute_fraction * result.recommendation.batch_size \
        * result.recommendation.steps - 1e-6
    first = train_fn.lines[0]
    assert first.startswith("planned compute: candidates:") and f"{candidates.example_gradients:,}" in first


def test_each_candidate_is_simulated_by_its_constant_eta_step_proxy(study):
    cfg, train_fn, result, _ = study
    simulated = [r for r in result.frontier if r.simulated]
    assert [r.steps for r in simulated] == [10, 20, 40, 80, 160]  # S_ref = 20, ×2 apart, nearest first
    proxies = train_fn.calls[:-1]  # the last call is the launch
    assert len(proxies) == 5 * cfg.optimize.seeds
    n = 1600
    for run_cfg in proxies:
        run = resolve_plan(run_cfg, n)
        target = run.target
        row = next(r for r in simulated if r.steps == run.steps)
        assert (target.batch_size, target.steps) == (row.batch_size, row.steps)
        assert run.batch_size == round(target.batch_size / 8)
        assert run.sigma == pytest.approx(target.sigma * run.batch_size / target.batch_size)  # σ·B'/B: η_step kept
        assert run.steps == target.steps
        assert target.sigma == pytest.approx(row.sigma)
        # learning rate ∝ 1/S and EMA horizon ∝ S (TAN §4.3), from the config's S_ref = 20
        assert run_cfg.train.learning_rate == pytest.approx(cfg.train.learning_rate * 20 / run.steps)
        assert 1 / (1 - run_cfg.train.ema_decay) == pytest.approx(run.steps / 20 / (1 - cfg.train.ema_decay))
    assert {c.experiment.seed for c in proxies} == set(range(cfg.optimize.seeds))


def test_every_candidate_is_within_the_budgets(study):
    cfg, _, result, _ = study
    for r in result.frontier:
        assert r.batch_size * r.steps <= result.compute == 512 * 20
        assert r.epsilon <= cfg.privacy.epsilon and r.accountant == "pld"
        assert r.epsilon == pytest.approx(accounting.epsilon(r.batch_size / 1600, r.sigma, r.steps,
                                                                1600 ** -1.1, "pld"))
        assert r.eps_rdp == pytest.approx(accounting.epsilon(r.batch_size / 1600, r.sigma, r.steps,
                                                                 1600 ** -1.1, "rdp"))


def test_the_peak_of_the_law_is_recommended_with_an_interval_that_covers_it(study):
    _, _, result, _ = study
    best = result.recommendation
    assert best.steps == 40 and best.eligible
    low, high = best.prediction_interval
    assert low < 0.8 < high
    assert result.runner_up.steps in (28, 57)
    # an end of the simulated range: S = 10 and 160 lie equally far from the peak in ln S, noise decides
    assert result.worst.steps in (10, 160)
    assert result.distinguishable_from_worst and "beats the worst-predicted" in result.verdict
    assert result.law.model == "quadratic"
    # extrapolated candidates are predicted but never recommended
    assert not any(r.eligible for r in result.frontier if r.steps < 10 or r.steps > 160)


def test_the_recommendation_is_launched_and_compared_with_its_interval(study):
    cfg, train_fn, result, out = study
    launched_cfg = train_fn.calls[-1]
    best = result.recommendation
    assert (launched_cfg.train.batch_size, launched_cfg.train.steps) == (best.batch_size, best.steps)
    assert launched_cfg.train.proxy_batch_size == 0
    launch = result.launch
    assert launch.inside_interval == (launch.prediction_interval[0] <= launch.actual_accuracy
                                      <= launch.prediction_interval[1])
    assert launch.epsilon_pld <= cfg.privacy.epsilon < launch.epsilon_rdp
    assert (out / "launch" / "launch.json").is_file()


def test_the_report_and_its_files(study):
    _, _, result, out = study
    saved = json.loads((out / "optimize.json").read_text())
    assert saved["recommendation"]["steps"] == result.recommendation.steps
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "candidates.csv").read_text().splitlines()) == len(result.frontier) + 1
    report = (out / "report.md").read_text()
    best, worst = result.recommendation, result.worst
    for row in (best, worst):
        assert f"--set train.batch_size={row.batch_size} --set train.steps={row.steps}" in report
    assert f"reached **{100 * result.launch.actual_accuracy:.1f}%**" in report
    proxy = sum(p["batch_size"] * p["steps"] for p in result.points)
    assert result.proxy_compute_fraction == pytest.approx(proxy / (best.batch_size * best.steps))
    assert f"{result.proxy_compute_fraction:.3f}" in report


def test_a_flat_frontier_is_reported_as_indistinguishable():
    cfg = load_config(CONFIG, OPT + ["optimize.law=auto"])
    result = optimize(cfg, None, train_fn=fake_train(lambda run: 0.8, noise=0.01, of_run=True), log=quiet)
    assert not result.distinguishable_from_runner_up
    assert "cannot tell" in result.verdict or "cannot be told" in result.verdict


@pytest.mark.parametrize("sets, kwargs, words", [
    (["optimize.min_proxy_batch_size=4"], {"compute": 10}, "smaller than one step of the smallest batch 16"),
    (["privacy.sigma=2"], {}, "privacy.sigma = 2 is not allowed"),
    (["privacy.private=false"], {}, "privacy.private = false is not allowed"),
    (["pruning.method=dp_snip", "pruning.rate=0.5"], {}, "dp_snip"),
    (["optimize.min_proxy_batch_size=100"], {}, "only [0-2] frontier candidates have a batch of at least 400"),
    (["optimize.seeds=1", "optimize.candidates=3"], {}, "optimize.seeds = 1"),
])
def test_bad_inputs_are_refused_before_any_training(tmp_path, sets, kwargs, words):
    cfg = load_config(CONFIG, OPT + sets)
    train_fn = fake_train(of_run=True)
    with pytest.raises(UsageError, match=words):
        optimize(cfg, tmp_path / "out", train_fn=train_fn, log=quiet, **kwargs)
    assert train_fn.calls == []
    assert not (tmp_path / "out").exists()


def test_a_best_candidate_at_an_end_of_the_range_is_looked_beyond():
    """The law peaks below the simulated S = 10..160: the stage simulates the frontier's end (S = 7, B ≤ N)
    and recommends it as that end."""
    cfg = load_config(CONFIG, OPT)
    train_fn = fake_train(lambda run: 0.9 - 0.01 * math.log(run.steps), noise=0.002, of_run=True)
    result = optimize(cfg, None, train_fn=train_fn, log=quiet)
    simulated = [r.steps for r in result.frontier if r.simulated]
    assert simulated == [7, 10, 20, 40, 80, 160]
    assert result.recommendation.steps == 7 and "frontier's end with the largest batch" in result.verdict


def test_a_diverging_candidate_is_left_out_of_the_law_and_never_recommended():
    from tanplan.errors import TrainingDiverged

    cfg = load_config(CONFIG, OPT)
    inner = fake_train(peaked(40), noise=0.002, of_run=True)

    def train_fn(run_cfg, workdir, progress=False, **kwargs):
        if run_cfg.train.steps == 10:
            raise TrainingDiverged("training diverged: loss is nan at step 3")
        return inner(run_cfg, workdir, progress=progress, **kwargs)

    result = optimize(cfg, None, train_fn=train_fn, log=quiet)
    row = next(r for r in result.frontier if r.steps == 10)
    assert row.diverged and not row.eligible and row.runs == ()
    assert all(p["candidate_steps"] != 10 for p in result.points)
    assert result.recommendation.steps == 40


def test_an_unstable_end_candidate_is_left_out_of_the_law():
    """S = 10 scatters ten times more than the others (a learning rate near its limit): the equal-variance
    test fails over every candidate, so the law covers S = 20..160 only, and S = 10 is never recommended."""
    import numpy as np

    cfg = load_config(CONFIG, OPT)
    rng = np.random.default_rng(5)
    law = peaked(40)
    unstable = fake_train(lambda run: law(run) + (rng.normal(0, 0.1) if run.steps == 10 else 0.0), noise=0.003,
                          of_run=True)
    result = optimize(cfg, None, train_fn=unstable, log=quiet)
    span = result.law.range
    assert span.excluded == (10,) and span.equal_variance_p < 0.05
    assert (span.low, span.high) == (20, 160)
    row = next(r for r in result.frontier if r.steps == 10)
    assert row.outside_law and not row.eligible
    assert result.recommendation.steps == 40


def test_a_best_candidate_next_to_a_left_out_one_says_so():
    """Accuracy falls with S, but S = 10 is unstable: the best is S = 20, the end of the law's range, and
    the verdict names S = 10 as simulated and left out rather than asking to look beyond."""
    import numpy as np

    cfg = load_config(CONFIG, OPT)
    rng = np.random.default_rng(7)
    falling = fake_train(lambda run: 0.9 - 0.02 * math.log(run.steps) + (rng.normal(0, 0.1) if run.steps == 10
                                                                         else 0.0), noise=0.003, of_run=True)
    result = optimize(cfg, None, train_fn=falling, log=quiet)
    assert result.law.range.excluded == (10,)
    assert result.recommendation.steps == 20
    assert "beyond it, S = 10 was simulated and left out of the law" in result.verdict


def test_no_proxy_batch_falls_below_the_floor():
    """B' = B/savings as in TAN Table 3, but at least optimize.min_proxy_batch_size (past the batch law's knee)."""
    cfg = load_config(CONFIG, SMALL + ["optimize.savings=8", "optimize.min_proxy_batch_size=16"])
    train_fn = fake_train(peaked(40), noise=0.002, of_run=True)
    result = optimize(cfg, None, train_fn=train_fn, log=quiet)
    trained = {(resolve_plan(c, 1600).target.batch_size, resolve_plan(c, 1600).batch_size) for c in train_fn.calls}
    assert {b_proxy for _, b_proxy in trained} >= {16, 32}  # both rules are met in this frontier
    assert all(b_proxy == max(16, round(b / 8)) for b, b_proxy in trained)
    assert min(r.batch_size for r in result.frontier) >= 4 * 16  # a proxy saves at least 4×


def test_the_proxies_learn_on_the_tuning_data_and_report_what_they_spent(study, tmp_path, monkeypatch):
    """Public tuning (the default): every proxy trains an independent mnist1d draw at its candidate's
    η_step; with private tuning they train the private set and privacy_spent.json composes their runs.
    The total ε on the private set is the launch's alone with public tuning, and with private tuning the
    composition of every ledger the proxies and the launch wrote."""
    from tanplan.privacy.ledger import epsilon_of_ledgers
    from tanplan.reports import optimize as optimize_report
    from tanplan.workflow.privacy_spent import ledgers_under

    # public: the module's study (the config's own tuning.data, launched), not a second run of it
    cfg, train_fn, result, out = study
    assert cfg.tuning.data == "public"
    # the frontier figure (drawn twice a run) is not read here: test_the_report_and_its_files checks it
    monkeypatch.setattr(optimize_report, "figure_frontier", lambda result, path: None)
    for data in ("public", "private"):
        if data == "private":
            cfg = load_config(CONFIG, OPT + [f"tuning.data={data}", "privacy.total_epsilon=1e6"])  # over ε: allowed
            train_fn = fake_train(peaked(40), noise=0.002, of_run=True)
            out = tmp_path / data
            result = optimize(cfg, out, train_fn=train_fn, launch_best=True, log=quiet)
        proxies = train_fn.calls[:-1]  # the last call is the launch, on the private set
        assert {c.data.seed for c in proxies} == ({cfg.data.seed + 1} if data == "public" else {cfg.data.seed})
        assert train_fn.calls[-1].data.seed == cfg.data.seed
        assert result.tuning.tuning_data == data
        spent = result.privacy_spent
        assert spent.runs == len(proxies) and spent.epsilon_rdp > cfg.privacy.epsilon
        report = (out / "report.md").read_text()
        launch_eps = result.launch.epsilon_rdp
        if data == "public":
            assert result.epsilon_total_runs == 1 and result.epsilon_total_rdp == pytest.approx(launch_eps)
            assert "the launch's ε is the guarantee" in report
        else:
            ledgers = ledgers_under(out)
            assert result.epsilon_total_runs == len(ledgers) == len(train_fn.calls)
            assert result.epsilon_total_rdp == pytest.approx(epsilon_of_ledgers(ledgers, spent.delta, "rdp"))
            assert result.epsilon_total_rdp > max(spent.epsilon_rdp, launch_eps)
            assert "the total ε is the guarantee" in report and f"**{result.epsilon_total_rdp:.4g}**" in report
            # within the bound checked before any proxy trained (RDP: the proxies' σ' is below PLD's domain)
            assert result.epsilon_total_planned_accountant == "rdp"
            assert result.epsilon_total_rdp <= result.epsilon_total_planned * (1 + 1e-9)


def test_private_tuning_over_the_total_budget_trains_nothing(tmp_path):
    from tanplan.errors import BudgetExceeded

    train_fn = fake_train(peaked(40), noise=0.002, of_run=True)
    with pytest.raises(BudgetExceeded, match=r"up to ε = .* above privacy.total_epsilon = 50;"):
        optimize(load_config(CONFIG, OPT + ["tuning.data=private", "privacy.total_epsilon=50"]), tmp_path / "o",
                 train_fn=train_fn, launch_best=True, log=quiet)
    assert train_fn.calls == [] and not (tmp_path / "o").exists()


def test_the_typed_result_is_the_json_it_came_from(study):
    from tanplan.outcomes.optimize import FrontierRow, OptimizeResult

    _, _, result, out = study
    typed = OptimizeResult.from_dict(json.loads((out / "optimize.json").read_text()))
    assert isinstance(typed.recommendation, FrontierRow) and typed.recommendation.steps == result.recommendation.steps
    assert typed.launch.actual_accuracy == result.launch.actual_accuracy
    assert typed.to_dict() == json.loads(json.dumps(result.to_dict()))  # the JSON the command prints, key for key
    assert typed == result  # the file read back is the stage's result
