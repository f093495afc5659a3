"""The typed outcomes of `tanplan run`, `launch` and privacy_spent keep their files' schema: the keys and
their order as the dict-building code wrote them before the types (summary.json, launch.json,
privacy_spent.json), keys written only sometimes absent exactly then, and a file read back is the same value."""

import json
import time

from tanplan.outcomes.fit import FitResult, IntervalParts, LadderResult, LadderRung
from tanplan.outcomes.launch import LaunchAccounting, LaunchResult
from tanplan.outcomes.pipeline import ProxyCompute, RunResult, SweepChoice
from tanplan.outcomes.privacy_spent import PlannedTotal, Spent, Totals, TuningRecord
from tanplan.outcomes.run_summary import Layout, RunSummary
from tanplan.privacy.plan import Plan
from tanplan.workflow.pipeline.summary import run_result

SUMMARY_KEYS = [  # summary.json of a launched run with --baselines, a private config (pipeline.py before #29)
    "launched", "launched_anyway", "stopped_at", "reason", "what_to_change", "predicted_accuracy",
    "prediction_interval", "actual_accuracy", "abs_error", "actual_inside_interval", "epsilon_rdp", "epsilon_pld",
    "epsilon_replace_one", "epsilon", "accountant", "neighbouring", "delta", "sigma", "batch_size", "steps",
    "proxy_compute", "proxy_compute_fraction", "proxy_runs", "best_overrides", "ladder", "law_holds", "verdict",
    "model", "interval_parts", "launch_wall_seconds", "sweep_choice", "launch_epsilon", "tuning_data", "tuning",
    "epsilon_total_rdp", "epsilon_total_pld", "epsilon_total_replace_one", "epsilon_total",
    "epsilon_total_accountant", "epsilon_total_note", "epsilon_total_runs", "guarantee", "epsilon_total_planned",
    "epsilon_total_planned_accountant", "epsilon_total_planned_runs", "epsilon_total_budget",
    "epsilon_total_planned_note", "baselines", "wall_seconds"]

PLAN = Plan(1000, 100, 50, 1.5, 1e-5)
RECORD = TuningRecord(tuning_data="private", source="the private training set (1000 examples)", private_size=1000,
                      tuning_size=1000, sizes_differ=False)
TOTALS = Totals(tuning_data="private", tuning=RECORD, epsilon_total_rdp=3.0, epsilon_total_pld=2.5,
                epsilon_total_replace_one=2.9, epsilon_total=2.5, epsilon_total_accountant="pld",
                epsilon_total_note=None, epsilon_total_runs=7, guarantee="the total ε is the guarantee")
PLANNED = PlannedTotal(epsilon_total_planned=2.7, epsilon_total_planned_accountant="pld",
                       epsilon_total_planned_runs=7, epsilon_total_budget=8.0, epsilon_total_planned_note=None)
ACCOUNTING = LaunchAccounting(epsilon_rdp=1.2, epsilon_pld=1.0, epsilon_replace_one=1.1, accountant="pld",
                              neighbouring="add_remove", epsilon=1.0, delta=1e-5, sigma=1.5, snip_sigma=None, q=0.1,
                              steps=50, batch_size=100, dataset_size=1000)
RUN = RunSummary(  # the launch's own summary (the engine's), as the fakes build it
    test_accuracy=0.82, test_loss=None, epsilon_rdp=1.2, epsilon_pld=1.0, epsilon_replace_one=1.1,
    neighbouring="add_remove", delta=1e-5, accountant="pld", private=True, noise_secret=True, dataset_size=1000,
    batch_size=100, steps=50, planned_steps=50, sigma=1.5, snip_sigma=None, clip_norm=1.0, target=None,
    grad_method="fake", layout=Layout(chunks=1, chunk_size=100), backend="local", devices=1, processes=1,
    resumed_from_step=0, steps_this_run=50, wall_seconds=0.0, train_seconds=0.0, samples_per_second=None,
    params_checksum="", evaluated_at_step=50)
FIT = FitResult(law_holds=True, verdict="the law holds", predicted_accuracy=0.8, prediction_interval=(0.75, 0.85),
                model="knee", std_parts=IntervalParts(mean=0.01, launch=0.02, misspecification=0.0))
LADDER = LadderResult(
    found=True, reason="narrow", what_to_change=None, steps=(), prediction=None, window=(16, 64),
    rungs=tuple(LadderRung(batch_size=b, accuracies=(0.7,) * n, mean=0.7, std=0.0, seeds=n, sigma=None)
                for b, n in ((16, 2), (32, 3))),
    target_batch_size=100, steps_per_run=50, start=16, seeds=2, law_share=0.5, law_setting="knee",
    budget_per_step=100.0, budget_fraction=0.3, max_proxy_fraction=0.3, min_proxy_budget=0.0, spent_fraction=0.2,
    test_sizes=(None, None), points=(), basis={}, wall_seconds=1.0)


def _launched(**kw) -> RunResult:
    launch = LaunchResult(summary=RUN, accounting=ACCOUNTING, wall_seconds=3.0)
    compute = ProxyCompute.of(PLAN.batch_size * PLAN.steps, [(16, 50)] * 2, [(16, 50), (32, 50)], ladder=True)
    choice = SweepChoice(overrides={"train.learning_rate": 2.5}, mean_accuracy=0.7, std_accuracy=0.01, reruns=3,
                         search_accuracy=0.71, flags=[])
    return run_result(PLAN, LADDER, FIT, {"train.learning_rate": 2.5}, compute, totals=TOTALS, planned=PLANNED,
                      started=time.perf_counter(), launched=launch, actual=0.82, choice=choice, **kw)


def test_a_launched_runs_summary_keeps_its_keys_in_order_and_reads_back():
    result = _launched(baselines=[{"method": "dp-ls", "target_epsilon": 1.0}])
    data = json.loads(json.dumps(result.to_dict()))
    assert list(data) == SUMMARY_KEYS
    assert data["epsilon"] == TOTALS.epsilon_total and data["launch_epsilon"] == ACCOUNTING.epsilon  # private tuning
    assert data["abs_error"] == abs(0.82 - 0.8) and data["actual_inside_interval"] is True
    assert data["proxy_compute"] == {"sweep": 2 * 16 * 50 / 5000, "ladder": (16 + 32) * 50 / 5000, "fit": 0.0,
                                     "total": (2 * 16 + 16 + 32) * 50 / 5000, "runs": 4}
    assert data["ladder"]["rungs"] == {"16": 2, "32": 3} and data["tuning"] == RECORD.to_dict()
    again = RunResult.from_dict(data)
    assert again.tuning == RECORD and again.proxy_compute == result.proxy_compute
    assert json.loads(json.dumps(again.to_dict())) == data


def test_keys_written_only_sometimes_are_absent_exactly_then():
    without = json.loads(json.dumps(_launched().to_dict()))  # no --baselines
    assert list(without) == [k for k in SUMMARY_KEYS if k != "baselines"]
    compute = ProxyCompute.of(5000, [], [], ladder=False)
    public = Totals(**{**TOTALS.__dict__, "tuning_data": "public"})
    stopped = run_result(PLAN, None, FIT, {}, compute, totals=public, planned=None, started=time.perf_counter(),
                         stage="fit", reason="too few sizes", what_to_change="more sizes").to_dict()
    planned_keys = {k for k in SUMMARY_KEYS if k.startswith("epsilon_total_planned")} | {"epsilon_total_budget"}
    assert list(stopped) == [k for k in SUMMARY_KEYS if k not in planned_keys | {"sweep_choice", "baselines"}]
    assert stopped["launched"] is False and stopped["epsilon"] is None and stopped["ladder"] is None


def test_launch_json_is_the_result_without_the_note_and_the_totals_come_together():
    plain = LaunchResult(summary=RUN, accounting=ACCOUNTING, wall_seconds=1.0, tuning_note="n")
    assert list(plain.record()) == ["summary", "accounting", "wall_seconds"]
    assert list(plain.to_dict()) == ["summary", "accounting", "wall_seconds", "tuning_note"]
    totals = {k: getattr(TOTALS, k) for k in TOTALS.__dataclass_fields__}
    tuned = LaunchResult(summary=RUN, accounting=ACCOUNTING, wall_seconds=1.0, **totals, epsilon=TOTALS.epsilon_total)
    assert list(tuned.record()) == ["summary", "accounting", "wall_seconds", *TOTALS.to_dict(), "epsilon"]
    assert LaunchResult.from_dict(json.loads(json.dumps(tuned.to_dict()))) == tuned


def test_privacy_spent_json_keeps_its_keys():
    info = Spent(runs=2, delta=1e-5, epsilon_rdp=1.0, epsilon_pld=0.8, epsilon_replace_one=None, epsilon=0.8,
                 accountant="pld", note=None)
    assert list(info.to_dict()) == ["runs", "delta", "epsilon_rdp", "epsilon_pld", "epsilon_replace_one", "epsilon",
                                    "accountant", "note"]
    written = Spent(**{**info.__dict__, "what": "the exact ε of the 2 runs", "tuning": RECORD})
    assert list(written.to_dict())[-2:] == ["what", "tuning"] and Spent.from_dict(written.to_dict()) == written
