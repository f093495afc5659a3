"""The sweep's parts that need no Ray: the trial wrapper, outcomes, the study and resume bookkeeping,
the plan it pins, and the one-line errors of `tanplan sweep` (none of these tests starts Ray)."""

import dataclasses
import time

import pytest
from fakes import failing_train, fake_sweep_train

from tanplan import cli, ray_session
from tanplan.workflow.sweep import search as sweep
from tanplan.workflow.sweep import trial
from tanplan.config import load_config
from tanplan.errors import TrainingDiverged, UsageError

SPACE = "{learning_rate={low=0.5,high=16.0,log=true}, momentum=[0.0,0.9]}"
TINY = ["train.batch_size=512", "train.steps=6", "train.eval_every=2", "privacy.sigma=2.0", f"sweep.space={SPACE}"]


class _Data:
    """Stands in for the dataset in prepare(): its size and kind are all the planner reads."""

    num_train, data_kind = 4000, "1d"


def _prepare(**kw):
    cfg = load_config(None, TINY)
    return sweep.prepare(cfg, proxy_batch_size=kw.pop("proxy", 64), dataset=_Data(), **kw)


@pytest.fixture(scope="module")
def base_spec():
    return _prepare()  # planning computes ε: do it once for the module


def _spec(base, **changes):
    return dataclasses.replace(base, **changes)


fake_train = fake_sweep_train()


# ---------------------------------------------------------------- prepare: the plan every trial trains


def test_prepare_pins_the_target_sigma_and_sets_the_proxy(base_spec):
    spec = base_spec
    assert spec.base["train"]["proxy_batch_size"] == 64
    assert spec.base["privacy"]["sigma"] == spec.target.sigma == 2.0
    assert spec.proxy.sigma == pytest.approx(2.0 * 64 / 512)  # σ' = σ·B'/B
    assert spec.proxy.eta_step == pytest.approx(spec.target.eta_step)  # constant η_step
    assert spec.proxy.steps == spec.target.steps == 6
    assert "sweep" not in spec.base


def test_prepare_calibrated_sigma_is_the_plans():
    cfg = load_config(None, [t for t in TINY if not t.startswith("privacy")] + ["privacy.epsilon=50.0"])
    spec = sweep.prepare(cfg, proxy_batch_size=128, dataset=_Data())
    from tanplan.privacy.plan import plan_from_config

    target = plan_from_config(cfg, _Data.num_train)
    assert spec.base["privacy"]["sigma"] == target.sigma
    assert target.epsilon() <= 50.0 and target.accountant == "pld"  # calibrated by the accountant of record


def test_prepare_rejects_a_proxy_larger_than_the_target():
    with pytest.raises(UsageError, match="proxy-batch-size 1024 is not allowed"):
        _prepare(proxy=1024)


def test_prepare_needs_a_proxy():
    cfg = load_config(None, TINY)
    with pytest.raises(UsageError, match="proxy-batch-size is required"):
        sweep.prepare(cfg, dataset=_Data())


def test_prepare_takes_command_line_choices_over_the_section():
    spec = _prepare(trials=5, top_k=0, seeds=2, scheduler="asha")
    assert (spec.trials, spec.top_k, spec.seeds, spec.scheduler) == (5, 0, 2, "asha")


# ---------------------------------------------------------------- the trial wrapper


def _job(**kw):
    return {"params": {"learning_rate": 4.0, "momentum": 0.0}, "trial": 3, "seed": 17, "kind": "search", **kw}


def test_run_trial_reports_intermediate_then_final(tmp_path, base_spec):
    spec = base_spec
    reports = []
    train_fn = fake_sweep_train()
    result = trial.run_trial(_job(), base=spec.base, dims=spec.dims, trials_dir=str(tmp_path),
                             train_fn=train_fn, report=reports.append)
    # evaluations before the last step are intermediate; the last one comes with the summary, once
    assert [r["step"] for r in reports] == [2, 4, 6]
    assert not any(r.get("final") for r in reports[:-1]) and reports[-1] is result
    assert result["final"] and result["status"] == "finished" and result["test_accuracy"] == pytest.approx(0.9)
    assert train_fn.seeds == [17]  # every trial runs with its own seed
    assert result["sigma"] == spec.base["privacy"]["sigma"] and result["batch_size"] == 64
    assert result["run_seconds"] == 0.5 and result["wall_seconds"] > 0
    assert all(isinstance(v, (int, float, str, bool)) for r in reports for v in r.values())


def test_run_trial_records_divergence_and_errors(tmp_path, base_spec):
    spec = base_spec
    diverge = failing_train(TrainingDiverged("loss is nan at step 3"), [(2, {"test_accuracy": 0.3})])
    crash = failing_train(RuntimeError("out of memory"))
    for fn, status, text in ((diverge, "diverged", "nan"), (crash, "error", "RuntimeError: out of memory")):
        result = trial.run_trial(_job(), base=spec.base, dims=spec.dims, trials_dir=str(tmp_path), train_fn=fn)
        assert result["status"] == status and text in result["error"]
        assert "test_accuracy" not in result


def test_outcome_states():
    assert sweep.outcome({"final": True, "status": "finished", "test_accuracy": 0.5}, False)[0] == "finished"
    assert sweep.outcome({"final": True, "status": "finished"}, False)[0] == "error"  # no accuracy
    status, row = sweep.outcome({"test_accuracy": 0.4, "step": 2.0, "time_total_s": 3.0}, False)  # stopped by ASHA
    assert status == "pruned" and row["last_test_accuracy"] == 0.4 and "test_accuracy" not in row
    assert row["step"] == 2.0 and row["wall_seconds"] == 3.0
    assert sweep.outcome(None, True)[0] == "error"
    assert sweep.outcome({"final": True, "status": "diverged", "error": "nan"}, False)[1]["error"] == "nan"


# ---------------------------------------------------------------- the study and resume bookkeeping


def test_study_refuses_to_mix_sweeps(tmp_path, base_spec):
    spec = base_spec
    sweep.open_studies(tmp_path, spec, resume=False)
    with pytest.raises(UsageError, match="--resume"):
        sweep.open_studies(tmp_path, spec, resume=False)
    sweep.open_studies(tmp_path, spec, resume=True)  # same sweep: fine
    other = dataclasses.replace(spec, base={**spec.base, "train": {**spec.base["train"], "proxy_batch_size": 128}})
    with pytest.raises(UsageError, match="different config.*proxy_batch_size"):
        sweep.open_studies(tmp_path, other, resume=True)


def test_interrupted_trials_are_requeued_with_their_seed(tmp_path, base_spec):
    import optuna
    from optuna.trial import TrialState

    from tanplan.workflow.sweep.space import to_optuna

    spec = base_spec
    search, _ = sweep.open_studies(tmp_path, spec, resume=False)
    dists = to_optuna(spec.dims)
    done = search.ask(dists)
    done.set_user_attr("status", "finished")
    search.tell(done, 0.7)
    killed = search.ask(dists)  # left RUNNING, as a SIGKILL leaves it
    killed.set_user_attr("seed", 41)
    assert sweep.finished_count(search) == 1 and sweep.running_numbers(search) == [killed.number]

    assert sweep.requeue_interrupted(search, sweep.open_storage(tmp_path)) == [killed.number]
    old = search.trials[killed.number]
    assert old.state == TrialState.FAIL and old.user_attrs["status"] == "interrupted"
    assert sweep.finished_count(search) == 1 and sweep.running_numbers(search) == []
    again = search.ask(dists)  # the next trial Optuna hands out is the interrupted one
    assert again.params == old.params and again.user_attrs["seed"] == 41
    assert isinstance(search.sampler, optuna.samplers.BaseSampler)


def test_rerun_jobs_cover_top_k_distinct_configurations(tmp_path, base_spec):
    import optuna

    from tanplan.workflow.sweep.space import to_optuna

    spec = _spec(base_spec, top_k=2, seeds=3)
    search, reruns = sweep.open_studies(tmp_path, spec, resume=False)
    dists = to_optuna(spec.dims)
    for number, (lr, acc) in enumerate([(1.0, 0.5), (4.0, 0.9), (4.0, 0.8), (2.0, 0.7)]):
        search.add_trial(optuna.trial.create_trial(params={"learning_rate": lr, "momentum": 0.0}, distributions=dists,
                                                   value=acc, user_attrs={"seed": number}))
    jobs = sweep.rerun_jobs(search, reruns, spec)
    # trial 2 repeats trial 1's parameters: the top 2 distinct configurations are trials 1 and 3
    assert sorted({j.trial for j in jobs}) == [1, 3] and len(jobs) == 6
    assert {j.seed for j in jobs if j.trial == 1} == {1001, 2001, 3001}
    first = jobs[0]
    reruns.add_trial(optuna.trial.create_trial(params=first.params, distributions=dists, value=0.9,
                                               user_attrs={"source_trial": first.trial, "seed": first.seed}))
    assert len(sweep.rerun_jobs(search, reruns, spec)) == 5  # what ran is not run again


def test_one_sweep_per_directory(tmp_path, base_spec):
    from tanplan.fileio import exclusive

    with exclusive(tmp_path, "sweep"):
        with pytest.raises(UsageError, match="another tanplan sweep is running"):
            sweep.run_sweep(base_spec, tmp_path, train_fn=fake_train)
        with pytest.raises(UsageError, match="another tanplan sweep is running"):
            with exclusive(tmp_path, "sweep"):
                pass
    with exclusive(tmp_path, "sweep"):  # released on exit
        pass


# ---------------------------------------------------------------- Ray addresses, without starting Ray


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "no Ray cluster answers there"),
    ("ray://127.0.0.1:1", "no Ray cluster answers there"),
    ("nonsense", "use auto, HOST:PORT or ray://HOST:PORT"),
])
def test_unreachable_or_malformed_address(address, message):
    start = time.perf_counter()
    with pytest.raises(UsageError, match=message):
        ray_session.check_address(address, timeout=2.0)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("cluster, max_concurrent, expected", [
    ({"CPU": 16.0, "GPU": 4.0}, 0, ({"cpu": 4.0, "gpu": 1}, 4)),  # one GPU per trial, all GPUs busy
    ({"CPU": 16.0, "GPU": 4.0}, 2, ({"cpu": 8.0, "gpu": 1}, 2)),
    ({"CPU": 16.0, "GPU": 4.0}, 9, ({"cpu": 4.0, "gpu": 1}, 4)),  # never more trials than GPUs
    ({"CPU": 2.0}, 0, ({"cpu": 2.0}, 1)),  # no GPU: one trial at a time, the whole CPU
    ({"CPU": 2.0}, 4, ({"cpu": 0.5}, 4)),
])
def test_trial_resources(monkeypatch, cluster, max_concurrent, expected):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "cluster_resources", lambda: cluster)
    assert sweep.trial_resources(max_concurrent) == expected


# ---------------------------------------------------------------- the command's one-line errors


@pytest.mark.parametrize("extra, message", [
    (["--proxy-batch-size", "1024"], "proxy-batch-size 1024 is not allowed"),
    (["--proxy-batch-size", "64", "--set", "sweep.space={learning_rate={low=4.0,high=1.0}}"], "low = 4.0 > high"),
    (["--proxy-batch-size", "64", "--set", "sweep.space={aug_mult=[0,2]}"], "must be >= 1"),
    (["--proxy-batch-size", "64", "--set", "sweep.space={depth_of_field=[1]}"], "is unknown"),
    (["--proxy-batch-size", "64", "--address", "127.0.0.1:1"], "no Ray cluster answers"),
    (["--proxy-batch-size", "0"], "must be an integer >= 1"),
    (["--proxy-batch-size", "64", "--top-k", "-1"], "--top-k -1 is not allowed"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, extra, message):
    tiny = ["--set", "data.num_samples=4000", *sum((["--set", t] for t in TINY[:-1]), [])]
    code = cli.main(["sweep", *tiny, "--out", str(tmp_path / "s"), "--trials", "2", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message.replace("\\", "") in err or __import__("re").search(message, err), err
    assert err.count("\n") == 1 and err.startswith("tanplan")
