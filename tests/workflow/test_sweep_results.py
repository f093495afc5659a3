"""Sweep results from a study alone (no Ray): sweep.csv, reruns.csv, best.json ranked by mean, figures."""

import json
import math
import statistics

import pytest

from tanplan.workflow.sweep import search as sweep, results as sweep_report
from tanplan.config import load_config
from tanplan.workflow.sweep.space import to_optuna


class _Data:
    num_train, data_kind = 4000, "1d"


@pytest.fixture(scope="module")
def spec():
    cfg = load_config(None, ["train.batch_size=512", "train.steps=6", "privacy.sigma=2.0", "sweep.top_k=2",
                             "sweep.seeds=3", "sweep.space={learning_rate={low=0.5,high=16.0,log=true}, "
                             "momentum=[0.0,0.9]}"])
    return sweep.prepare(cfg, proxy_batch_size=64, trials=5, dataset=_Data())


def _fill(tmp_path, spec, search_trials, rerun_accs):
    """Search trials [(lr, momentum, acc or None, status)], re-run accuracies {trial number: [acc, ...]}."""
    import optuna
    from optuna.trial import TrialState

    search, reruns = sweep.open_studies(tmp_path, spec, resume=False)
    dists = to_optuna(spec.dims)
    for number, (lr, mom, acc, status) in enumerate(search_trials):
        state = {"finished": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(status, TrialState.FAIL)
        attrs = {"seed": number, "status": status, "wall_seconds": 10.0 + number, "error": ""}
        if acc is not None:
            attrs["test_accuracy"] = acc
        search.add_trial(optuna.trial.create_trial(
            state=state, value=acc if state == TrialState.COMPLETE else None,
            params={"learning_rate": lr, "momentum": mom}, distributions=dists, user_attrs=attrs,
            intermediate_values={2: 0.1} if state == TrialState.PRUNED else None))
    for number, accs in rerun_accs.items():
        params = search.trials[number].params
        for j, acc in enumerate(accs, 1):
            reruns.add_trial(optuna.trial.create_trial(
                value=acc, params=params, distributions=dists,
                user_attrs={"source_trial": number, "seed": number + 1000 * j, "status": "finished",
                            "test_accuracy": acc, "wall_seconds": 5.0}))
    return search, reruns


TRIALS = [(4.0, 0.0, 0.80, "finished"), (1.0, 0.9, 0.60, "finished"), (8.0, 0.0, 0.82, "finished"),
          (16.0, 0.9, None, "diverged"), (2.0, 0.0, None, "pruned")]


def test_results_rank_the_top_k_by_mean_over_seeds(tmp_path, spec):
    # trial 2 won the search, but trial 0 is better on average over fresh seeds
    search, reruns = _fill(tmp_path, spec, TRIALS, {2: [0.70, 0.74, 0.72], 0: [0.79, 0.81, 0.80]})
    summary = sweep_report.write_results(tmp_path, spec, search, reruns)

    assert [r.trial for r in summary.ranking] == [0, 2]
    best = summary.best
    assert best.trial == 0 and summary.ranked_by.startswith("mean over re-runs") and best.flags == ()
    assert best.mean_accuracy == pytest.approx(0.80)
    assert best.std_accuracy == pytest.approx(statistics.stdev([0.79, 0.81, 0.80]))
    assert (best.min_accuracy, best.max_accuracy, best.reruns) == (0.79, 0.81, 3)
    assert best.search_accuracy == 0.80
    assert best.overrides == {"train.learning_rate": 4.0, "train.momentum": 0.0}
    assert summary.trials.to_dict() == {"requested": 5, "finished": 3, "pruned": 1, "diverged": 1, "error": 0,
                                 "interrupted": 0}
    assert summary.wall_seconds.search == pytest.approx(sum(10.0 + n for n in range(5)))
    assert summary.wall_seconds.reruns == pytest.approx(30.0)
    assert summary.compute_ratio == 8.0
    assert json.loads((tmp_path / "best.json").read_text())["best"]["trial"] == 0


def test_a_configuration_whose_seeds_spike_or_diverge_is_ranked_after_the_stable_one(tmp_path, spec):
    import optuna

    # trial 2 has the higher mean, but one of its seeds fell 18 points: its spread is 10× trial 0's
    (tmp_path / "spike").mkdir()
    (tmp_path / "div").mkdir()
    search, reruns = _fill(tmp_path / "spike", spec, TRIALS, {2: [0.90, 0.72, 0.91], 0: [0.79, 0.81, 0.80]})
    summary = sweep_report.write_results(tmp_path / "spike", spec, search, reruns)
    assert [r.trial for r in summary.ranking] == [0, 2]
    assert summary.ranking[1].flags and "scatter" in summary.ranking[1].flags[0]
    assert "scatter" in (tmp_path / "spike" / "sweep.md").read_text()
    # trial 2 again better on average, but one of its re-runs diverged
    search, reruns = _fill(tmp_path / "div", spec, TRIALS, {2: [0.83, 0.84], 0: [0.79, 0.81, 0.80]})
    reruns.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, params=search.trials[2].params, distributions=to_optuna(spec.dims),
        user_attrs={"source_trial": 2, "seed": 3002, "status": "diverged", "wall_seconds": 1.0}))
    summary = sweep_report.write_results(tmp_path / "div", spec, search, reruns)
    assert summary.best.trial == 0 and summary.ranking[1].flags == ("diverged or failed",)


def test_sweep_csv_has_one_row_per_trial_with_the_plan(tmp_path, spec):
    import pandas as pd

    search, reruns = _fill(tmp_path, spec, TRIALS, {})
    sweep_report.write_results(tmp_path, spec, search, reruns)
    rows = pd.read_csv(tmp_path / "sweep.csv")
    assert rows.trial.tolist() == [0, 1, 2, 3, 4]
    assert rows.status.tolist() == ["finished", "finished", "finished", "diverged", "pruned"]
    assert rows.learning_rate.tolist() == [4.0, 1.0, 8.0, 16.0, 2.0]
    assert (rows.proxy_batch_size == 64).all() and (rows.target_batch_size == 512).all()
    assert rows.proxy_sigma.iloc[0] == pytest.approx(2.0 * 64 / 512) and (rows.steps == 6).all()
    assert math.isnan(rows.test_accuracy.iloc[3]) and rows.wall_seconds.iloc[3] == 13.0


def test_without_reruns_the_search_accuracy_ranks(tmp_path, spec):
    search, reruns = _fill(tmp_path, spec, TRIALS, {})
    summary = sweep_report.write_results(tmp_path, spec, search, reruns)
    assert summary.best.trial == 2 and summary.ranked_by == "search accuracy"
    assert summary.best.mean_accuracy is None


def test_figures_and_markdown(tmp_path, spec):
    search, reruns = _fill(tmp_path, spec, TRIALS, {2: [0.7, 0.74], 0: [0.79, 0.81]})
    summary = sweep_report.write_results(tmp_path, spec, search, reruns)
    assert (tmp_path / "sweep_accuracy.png").stat().st_size > 1000
    importances = sweep_report.param_importances(search)
    assert set(importances) == {"learning_rate", "momentum"}
    assert math.isclose(sum(importances.values()), 1.0)
    assert summary.files.importance_figure == "sweep_importance.png"
    text = (tmp_path / "sweep.md").read_text()
    assert "## Proxy sweep" in text and "| 1 | 0 | 4 | 0 |" in text and "σ' = σ·B'/B" in text
    assert "--set train.learning_rate=4" in text and "![accuracy against each searched key]" in text


def test_no_finished_trial_still_writes_results(tmp_path, spec):
    search, reruns = _fill(tmp_path, spec, [(16.0, 0.9, None, "error")], {})
    summary = sweep_report.write_results(tmp_path, spec, search, reruns)
    assert summary.best is None and summary.trials.error == 1
    assert "No trial finished" in (tmp_path / "sweep.md").read_text()
