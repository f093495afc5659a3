"""The proxy ladder: its stopping rule on synthetic accuracy curves (pure, no training), its driver and the
pipeline's never-launch-blind path with the fake engine (tests/fakes.py)."""

import json
import math

import numpy as np
import pytest
from fakes import SMALL, fake_train
from helpers import CONFIG  # absolute: the tests do not depend on the working directory
from scipy import stats

from tanplan.cli import main
from tanplan.config import load_config
from tanplan.errors import NotLaunched, UsageError
from tanplan.workflow import fit as fit_stage
from tanplan.workflow import launch as launch_module
from tanplan.workflow.ladder import (RISE_ALPHA, Rung, find_knee, ladder_fit, plan_rungs, rise_test,
                                     run_ladder)
from tanplan.workflow.pipeline import run_pipeline
from tanplan.workflow.sweep import search as sweep

SIZES = [16, 32, 64, 128, 256]
quiet = lambda *a: None  # noqa: E731


def _rungs(curve, rng, seeds=2, noise=0.01, sizes=SIZES):
    return [Rung(b, tuple(curve(b) + rng.normal(0, noise, seeds))) for b in sizes]


def _false_knee_rate(rise, noise, seeds, alpha=RISE_ALPHA):
    """P(a rise of `rise` per doubling is not found significant): the noncentral t the test follows."""
    dof = 2 * seeds - 2
    return float(stats.nct.cdf(stats.t.ppf(1 - alpha, dof), dof, rise / (noise * math.sqrt(2 / seeds))))


def _within(rate, p, n):
    """A simulated rate agrees with its probability p (4 binomial standard deviations)."""
    return abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-9


# ---------------------------------------------------------------- the stopping rule on synthetic curves

def test_rise_test_is_the_one_sided_pooled_t_test():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lower, upper = rng.normal(0.8, 0.02, 3), rng.normal(0.81, 0.02, 2)
        test = rise_test(Rung(16, tuple(lower)), Rung(32, tuple(upper)))
        ref = stats.ttest_ind(upper, lower, equal_var=True, alternative="greater")
        assert test.p_value == pytest.approx(ref.pvalue) and test.dof == 3
        assert test.rising == (ref.pvalue < RISE_ALPHA) == (test.lower_bound > 0)


def test_flat_curve_has_its_knee_at_the_first_rung_unless_the_test_errs_at_rate_alpha():
    rng = np.random.default_rng(1)
    n = 4000
    knees = [find_knee(_rungs(lambda b: 0.82, rng, sizes=[16, 32])).batch_size for _ in range(n)]
    # Under "no rise" the one-sided test calls a rise with probability α exactly: no more, no less.
    assert _within(np.mean([k is None for k in knees]), RISE_ALPHA, n)
    assert set(knees) <= {16, None}


def test_rising_curve_has_no_knee_and_its_false_knees_follow_the_test_power():
    curve = lambda b: 0.5 + 0.05 * math.log2(b / 16)  # noqa: E731  5 points per doubling, never flat
    rng = np.random.default_rng(2)
    assert not find_knee(_rungs(curve, rng, noise=0.005)).found  # clear rise: every pair significant
    n, noise = 3000, 0.03  # noisy: a single pair errs with the probability its noncentral t gives
    wrong = np.mean([find_knee(_rungs(curve, rng, noise=noise, sizes=[16, 32])).found for _ in range(n)])
    assert _within(wrong, _false_knee_rate(0.05, noise, 2), n)


def test_rising_then_flat_curve_finds_the_knee_where_it_flattens():
    curve = lambda b: 0.85 - 0.06 * max(0.0, math.log2(64 / b))  # noqa: E731  knee at 64
    rng = np.random.default_rng(3)
    knee = find_knee(_rungs(curve, rng, seeds=3, noise=0.004))
    assert knee.batch_size in (64, 128)  # 64 unless its flat pair errs (probability α), then one rung later
    assert [t.rising for t in knee.tests[:2]] == [True, True]  # 16→32 and 32→64 rise 6 points each
    assert all(t.upper <= 2 * knee.batch_size for t in knee.tests)  # the ladder stops at the knee


def test_noisy_curves_move_the_knee_in_both_directions_at_the_computed_rates():
    curve = lambda b: 0.85 - 0.04 * max(0.0, math.log2(64 / b))  # noqa: E731  knee at 64, 4 points a doubling
    rng = np.random.default_rng(4)
    n, noise = 2000, 0.04  # seed noise as large as the rise
    knees = [find_knee(_rungs(curve, rng, noise=noise)).batch_size for _ in range(n)]
    # Before the knee every pair must be found rising: the chance of a knee at 16 is one false knee.
    assert _within(np.mean([k == 16 for k in knees]), _false_knee_rate(0.04, noise, 2), n)
    quiet_knees = [find_knee(_rungs(curve, rng, noise=0.002)).batch_size for _ in range(200)]
    assert np.mean([k is not None and k < 64 for k in knees]) > np.mean([k is not None and k < 64 for k in quiet_knees])


def test_identical_accuracies_decide_by_the_sign_of_the_rise():
    assert rise_test(Rung(16, (0.7, 0.7)), Rung(32, (0.8, 0.8))).rising
    assert not rise_test(Rung(16, (0.8, 0.8)), Rung(32, (0.8, 0.8))).rising
    with pytest.raises(ValueError):
        rise_test(Rung(16, (0.8,)), Rung(32, (0.8, 0.9)))


def test_plan_rungs_spends_at_most_the_budget_and_could_not_add_one_more():
    for target in (512, 2048, 4096, 16384):
        for seeds in (2, 3):
            for fraction in (1 / 32, 1 / 16, 1 / 4):
                rungs = plan_rungs(16, target, seeds, fraction)
                spent = seeds * sum(rungs)
                assert spent <= fraction * target
                assert rungs == [16 * 2**i for i in range(len(rungs))] and all(b < target for b in rungs)
                nxt = 16 * 2 ** len(rungs)
                assert nxt >= target or spent + seeds * nxt > fraction * target


# ---------------------------------------------------------------- config

def test_fit_batch_sizes_default_to_auto_and_take_lists_with_one_line_errors():
    assert load_config(None).fit.batch_sizes == "auto"
    assert load_config(None, ["fit.batch_sizes=[16, 32]"]).fit.batch_sizes == (16, 32)
    assert load_config(None, ["fit.batch_sizes=auto"]).fit.batch_sizes == "auto"
    for bad in ("fit.batch_sizes=automatic", "fit.batch_sizes=[]", "fit.max_proxy_fraction=0",
                "fit.max_proxy_fraction=1.5", "fit.ladder_seeds=1", "fit.ladder_start=0"):
        with pytest.raises(UsageError, match=bad.split("=")[0]) as err:
            load_config(None, [bad])
        assert "\n" not in str(err.value)


def test_a_budget_too_small_for_two_rungs_is_bad_input_before_any_training(tmp_path):
    train_fn = fake_train()
    cfg = load_config(CONFIG, SMALL + ["fit.max_proxy_fraction=0.05"])  # 0.05 × 512 < 2 × (16 + 32)
    with pytest.raises(UsageError, match="fit.max_proxy_fraction"):
        run_ladder(cfg, tmp_path, train_fn=train_fn, log=quiet)
    assert train_fn.calls == []


# ---------------------------------------------------------------- the driver, with the fake engine

HINGE = lambda b: 0.8 - 0.05 * max(0.0, math.log2(32 / b))  # noqa: E731  knee at 32
STEEP = lambda b: 0.3 + 0.1 * math.log2(b / 16)  # noqa: E731  still rising at every rung
LADDER = ["fit.max_proxy_fraction=1"]  # SMALL's B = 512: rungs 16, 32, 64, 128 (2 × 240 ≤ 512)


def test_ladder_stops_at_the_knee_within_budget_and_a_rerun_reuses_its_rungs(tmp_path):
    cfg = load_config(CONFIG, SMALL + LADDER)
    train_fn = fake_train(law=HINGE, noise=0.0)
    result = run_ladder(cfg, tmp_path, train_fn=train_fn, log=quiet)
    assert result["knee"] == 32 and result["past_knee"] == [32, 64]
    assert [r["batch_size"] for r in result["rungs"]] == [16, 32, 64]  # 128 never trained
    assert len(train_fn.calls) == 3 * cfg.fit.ladder_seeds
    assert result["spent_fraction"] == pytest.approx(2 * (16 + 32 + 64) / 512)
    assert result["spent_fraction"] <= cfg.fit.max_proxy_fraction
    sigmas = {r["batch_size"]: r["sigma"] for r in result["rungs"]}
    assert sigmas[64] == pytest.approx(4 * sigmas[16])  # constant η_step: σ' ∝ B'
    for name in ("ladder.json", "ladder.png", "ladder.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert "knee at B'=32" in (tmp_path / "ladder.md").read_text()
    again = fake_train(law=HINGE, noise=0.0)
    assert run_ladder(cfg, tmp_path, train_fn=again, log=quiet)["knee"] == 32 and again.calls == []


def test_ladder_without_a_knee_in_budget_says_what_to_change(tmp_path):
    cfg = load_config(CONFIG, SMALL + ["fit.max_proxy_fraction=0.5"])  # rungs 16, 32, 64
    result = run_ladder(cfg, tmp_path, train_fn=fake_train(law=STEEP, noise=0.0), log=quiet)
    assert not result["found"] and result["knee"] is None and result["past_knee"] == [32, 64]
    assert "no knee within the proxy budget" in result["reason"]
    assert f"{result['next_fraction']:.3g}" in result["what_to_change"] and result["next_fraction"] > 0.5


def test_tanplan_fit_auto_fits_only_the_rungs_past_the_knee(tmp_path):
    cfg = load_config(CONFIG, SMALL + LADDER)
    result = ladder_fit(cfg, tmp_path, train_fn=fake_train(law=HINGE, noise=0.0), log=quiet)
    assert result["ladder"]["knee"] == 32 and result["batch_sizes"] == [32, 64]
    assert result["predicted_accuracy"] == pytest.approx(HINGE(512))
    assert (tmp_path / "fit.md").is_file() and (tmp_path / "ladder" / "ladder.png").is_file()


# ---------------------------------------------------------------- the pipeline: never launch blind

@pytest.fixture
def engine(monkeypatch):
    """Install a fake engine with a given law for proxies, sweep trials (none run) and the launch."""
    state = {}

    def install(law, noise=0.0):
        train_fn = fake_train(law=law, noise=noise)
        real_launch = launch_module.launch

        def fake_sweep(spec, out, **kwargs):
            out.mkdir(parents=True, exist_ok=True)
            state["sweep_proxy"] = spec.proxy["batch_size"]
            return {"best": {"overrides": {"train.learning_rate": 2.5}}}

        def fake_launch(cfg, out, progress=True, resume=False):
            state["launched"] = True
            return real_launch(cfg, out, train_fn=train_fn)

        monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
        monkeypatch.setattr(fit_stage, "_default_train_fn", lambda: train_fn)
        monkeypatch.setattr(launch_module, "launch", fake_launch)
        state["train_fn"] = train_fn
        return state

    return install


def _run_cli(tmp_path, *extra, sets=()):
    return main(["run", "--config", CONFIG, "--out", str(tmp_path / "run"), *extra,
                 *sum([["--set", s] for s in SMALL + list(sets)], [])])


def test_auto_run_sweeps_at_the_knee_fits_past_it_and_launches(tmp_path, engine):
    state = engine(HINGE)
    cfg = load_config(CONFIG, SMALL + LADDER)
    summary = run_pipeline(cfg, tmp_path, log=quiet)
    assert summary["launched"] and state["sweep_proxy"] == 32  # the smallest rung past the knee
    assert summary["ladder"]["knee"] == 32 and summary["fit"]["batch_sizes"] == [32, 64]
    # The sweep's best (learning rate 2.5) differs from the config: the fit re-trains the rungs past the knee.
    fit_runs = [c for c in state["train_fn"].calls if c.train.learning_rate == 2.5 and c.train.proxy_batch_size]
    assert sorted(c.train.proxy_batch_size for c in fit_runs) == [32, 32, 64, 64]
    c = summary["proxy_compute"]
    assert c["ladder"] == pytest.approx(2 * (16 + 32 + 64) / 512) and c["fit"] == pytest.approx(2 * (32 + 64) / 512)
    assert summary["proxy_compute_fraction"] == pytest.approx(c["ladder"] + c["sweep"] + c["fit"])
    report = (tmp_path / "report.md").read_text()
    assert "ladder/ladder.png" in report and "knee at B'=32" in report and "Not launched" not in report


def test_no_knee_in_budget_stops_before_the_sweep_and_the_launch(tmp_path, engine):
    state = engine(STEEP)
    cfg = load_config(CONFIG, SMALL + ["fit.max_proxy_fraction=0.5"])
    summary = run_pipeline(cfg, tmp_path, log=quiet)
    assert not summary["launched"] and summary["stopped_at"] == "ladder" and "launched" not in state
    assert "sweep_proxy" not in state and summary["predicted_accuracy"] is None
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["launched"] is False and "no knee" in written["reason"] and written["what_to_change"]
    assert "## Not launched" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "launch").exists()


def test_run_exits_4_with_a_one_line_reason_and_launch_anyway_overrides(tmp_path, engine, capsys):
    state = engine(STEEP)
    assert _run_cli(tmp_path, sets=["fit.max_proxy_fraction=0.5"]) == NotLaunched.exit_code == 4
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tanplan: error: not launched: no knee within the proxy budget")
    assert "launched" not in state and "Traceback" not in captured.out + captured.err
    code = _run_cli(tmp_path, "--launch-anyway", sets=["fit.max_proxy_fraction=0.5"])
    assert code == 0 and state["launched"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["launched"] and summary["launched_anyway"] and summary["fit"]["batch_sizes"] == [32, 64]


def test_explicit_proxies_below_the_knee_are_not_launched_and_show_no_prediction(tmp_path, engine, capsys):
    # The case: two proxies on the steep part, a line that predicts an accuracy above 1.
    state = engine(lambda b: 0.3 + 0.2 * math.log2(b / 16), noise=0.003)
    assert _run_cli(tmp_path, "--json", sets=["fit.batch_sizes=[16, 32]"]) == 4
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["stopped_at"] == "fit" and summary["predicted_accuracy"] is None and "launched" not in state
    assert summary["loglinear_prediction"]["predicted_accuracy"] > 1
    assert captured.err.strip().splitlines()[-1].startswith("tanplan: error: not launched: the batch law does not hold")
    for path in (tmp_path / "run" / "report.md", tmp_path / "run" / "fit" / "fit.json"):
        assert path.is_file()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "No prediction" in report and "predicted at" not in report
    assert _run_cli(tmp_path, "--launch-anyway", sets=["fit.batch_sizes=[16, 32]"]) == 0 and state["launched"]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("no prediction") and "actual" in last  # never the line's value above 1


def test_bad_proxy_batch_size_is_refused_before_any_training(tmp_path, engine, capsys):
    state = engine(HINGE)
    assert _run_cli(tmp_path, "--proxy-batch-size", "1024", sets=LADDER) == 2
    assert "--proxy-batch-size 1024" in capsys.readouterr().err and state["train_fn"].calls == []
