"""fit and launch stages with a fake engine (fast): the law, the privacy search, the budget guard."""

import math

import pytest

from tanplan.workflow import fit as fit_stage
from tanplan.cli import main
from tanplan.config import load_config
from tanplan.errors import BudgetExceeded
from tanplan.workflow.best import load_best_overrides
from tanplan.workflow.launch import launch
from fakes import SMALL, fake_train

from tanplan.reports.fit import fit_markdown

def test_fit_recovers_the_law_and_trains_each_proxy_at_sigma_scaled_with_b(tmp_path):
    cfg = load_config("experiments/mnist1d.toml", SMALL)
    train_fn = fake_train(law=lambda b: 0.85 - 1.0 / b, noise=0.002)
    result = fit_stage.fit_batch_law(cfg, [16, 32, 64], 2, tmp_path, train_fn=train_fn, log=lambda *a: None,
                                     law="noise")
    assert result.model == "noise" and result.law.coef == pytest.approx([0.85, -1.0], abs=0.05)
    low, high = result.prediction_interval
    assert low < 0.85 - 1.0 / 512 < high
    sigmas = {p.batch_size: p.sigma for p in result.points}
    assert sigmas[32] == pytest.approx(2 * sigmas[16]) and sigmas[64] == pytest.approx(4 * sigmas[16])
    assert (tmp_path / "fit.json").is_file() and (tmp_path / "scaling_law.png").stat().st_size > 0
    assert len(train_fn.calls) == 6


def test_privacy_parameter_search_keeps_eta_and_scales_lr(tmp_path):
    cfg = load_config("experiments/mnist1d.toml", SMALL)
    result = fit_stage.privacy_parameter_search(cfg, [0.5, 1, 2], 32, 1, None, train_fn=fake_train(),
                                                log=lambda *a: None)
    etas = [m.eta for m in result.members]
    assert max(etas) == pytest.approx(min(etas), rel=0.02)  # only B/k rounding moves η
    lrs = {m.k: m.learning_rate for m in result.members}
    assert lrs[2] == pytest.approx(lrs[1] / 4) and lrs[0.5] == pytest.approx(lrs[1] * 4)
    assert result.best in result.members


def test_over_budget_launch_is_refused_before_any_step(tmp_path):
    cfg = load_config("experiments/mnist1d.toml", SMALL + ["privacy.sigma=0.6", "privacy.epsilon=1.0"])
    train_fn = fake_train()
    with pytest.raises(BudgetExceeded):
        launch(cfg, tmp_path, train_fn=train_fn)
    assert train_fn.calls == []
    assert not (tmp_path / "launch.json").exists()


def test_over_budget_launch_exits_3(tmp_path, capsys):
    code = main(["launch", "--config", "experiments/mnist1d.toml", "--out", str(tmp_path / "l"),
                 *sum([["--set", s] for s in SMALL + ["privacy.sigma=0.6", "privacy.epsilon=1.0"]], [])])
    assert code == 3
    assert "above the budget" in capsys.readouterr().err
    assert not (tmp_path / "l" / "summary.json").exists()


def test_best_overrides_from_a_sweep_best_json(tmp_path):
    path = tmp_path / "best.json"
    path.write_text('{"best": {"overrides": {"train.learning_rate": 2.0}}}')
    assert load_best_overrides(path) == {"train.learning_rate": 2.0}


def test_dataset_size_study_keeps_b_sigma_s_and_n_eta_while_epsilon_falls(tmp_path):
    cfg = load_config("experiments/mnist1d.toml", SMALL)  # 1,600 training examples, B = 512
    train_fn = fake_train()
    result = fit_stage.dataset_size_study(cfg, [0.25, 0.5, 1.0, 2.0], 32, 1, None, train_fn=train_fn,
                                          log=lambda *a: None)
    members = result.members
    assert [m.dataset_size for m in members] == [800, 1600]  # 400 < B and 3,200 > the data: skipped
    assert len({m.sigma for m in members}) == 1 and len({m.steps for m in members}) == 1
    n_eta = [m.dataset_size * m.eta for m in members]
    assert n_eta[0] == pytest.approx(n_eta[1])
    assert members[0].eps_rdp > members[1].eps_rdp
    assert [m.delta for m in members] == [800 ** -1.1, 1600 ** -1.1]  # the default δ of each size
    trained_on = [c.data.train_examples for c in train_fn.calls]
    assert trained_on == [800, 1600]


def test_a_law_whose_interval_leaves_0_1_is_flagged(tmp_path):
    cfg = load_config("experiments/mnist1d.toml", SMALL)
    steep = fake_train(law=lambda b: 0.1 + 0.35 * math.log(b / 16), noise=0.03)
    result = fit_stage.fit_batch_law(cfg, [16, 32, 64], 2, None, train_fn=steep, log=lambda *a: None,
                                     law="log-linear")
    assert result.law_at_target > 1 and not result.law_holds
    assert result.predicted_accuracy is None and result.prediction_interval is None  # not an accuracy
    text = fit_markdown(result)
    assert "does not hold" in text and "No prediction" in text and "Predicted for one launch" not in text
    flat = fit_stage.fit_batch_law(cfg, [16, 32, 64], 2, None, train_fn=fake_train(law=lambda b: 0.8),
                                   log=lambda *a: None)
    assert flat.law_holds and flat.verdict is None


def test_fewer_than_two_seeds_a_size_is_refused_for_the_law():
    from tanplan.errors import UsageError

    with pytest.raises(UsageError, match="--seeds 1"):
        fit_stage.check_batch_sizes([16, 32], 512, seeds=1)


def test_two_explicit_rungs_carry_a_stated_misspecification_term_or_exit_4_naming_the_rung_to_add(
        tmp_path, monkeypatch, capsys):
    import json

    from tanplan.engine import loop
    from tanplan.laws.batch_law import UNMEASURED_MISSPECIFICATION_STD

    monkeypatch.setattr(loop, "train_and_evaluate", fake_train(law=lambda b: 0.85 - 1.0 / b, noise=0.002))
    args = ["fit", "--config", "experiments/mnist1d.toml", *sum([["--set", s] for s in SMALL], []),
            "--batch-sizes", "64,128", "--seeds", "3"]
    # no rung held out: the misspecification part is the stated conservative term, not 0
    assert main([*args, "--set", "fit.max_half_width=50", "--out", str(tmp_path / "wide")]) == 0
    fit = json.loads((tmp_path / "wide" / "fit.json").read_text())
    assert UNMEASURED_MISSPECIFICATION_STD > 0
    assert fit["std_parts"]["misspecification"] == pytest.approx(UNMEASURED_MISSPECIFICATION_STD)
    assert fit["misspecification_stated"] == UNMEASURED_MISSPECIFICATION_STD
    assert "no rung held out" in capsys.readouterr().out
    # the same interval, wider than fit.max_half_width: exit 4, naming the rung to add
    assert main([*args, "--set", "fit.max_half_width=2", "--out", str(tmp_path / "narrow")]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fit.max_half_width" in err[0] and "add the rung B' = 256" in err[0]
    assert main([*args, "--set", "fit.max_half_width=2", "--launch-anyway", "--out", str(tmp_path / "anyway")]) == 0


def test_a_held_out_rung_measures_the_misspecification_instead():
    from tanplan.laws.batch_law import predict

    rows = [(b, 0.85 - 1.0 / b + e) for b in (32, 64, 128) for e in (-0.003, 0.0, 0.003)]
    p = predict(rows, 4096)
    assert p.misspecification_measured and p.record().misspecification_stated is None
