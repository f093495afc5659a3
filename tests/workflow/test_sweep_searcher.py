"""The sweep's Ray Tune searcher on its own (no Ray started): Optuna's ask and tell on the stored study,
one seed per trial, outcomes recorded row first; and the sweep package's use of public APIs only."""

import ast
import pickle

import pytest

from helpers import ROOT, skip_module_without

skip_module_without("ray", "optuna")

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from tanplan.config import load_config  # noqa: E402
from tanplan.workflow.sweep import search as sweep  # noqa: E402
from tanplan.workflow.sweep.space import to_optuna  # noqa: E402


def _study_searcher(*args, **kwargs):
    from tanplan.workflow.sweep.searcher import StudySearcher  # here: it imports Ray Tune (collection stays light)

    return StudySearcher(*args, **kwargs)

SPACE = "{learning_rate={low=0.5,high=16.0,log=true}, momentum=[0.0,0.9]}"


class _Data:
    num_train, data_kind = 4000, "1d"


@pytest.fixture(scope="module")
def spec():
    cfg = load_config(None, ["train.batch_size=512", "train.steps=6", "train.eval_every=2", "privacy.sigma=2.0",
                             f"sweep.space={SPACE}"])
    return sweep.prepare(cfg, proxy_batch_size=64, dataset=_Data())


def _searcher(tmp_path, spec, seed=100):
    storage = sweep.open_storage(tmp_path)
    search, _ = sweep.open_studies(tmp_path, spec, resume=False, storage=storage)
    sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)
    return _study_searcher(to_optuna(spec.dims), storage=storage, study_name=search.study_name, sampler=sampler,
                         seed=seed), search


def test_suggest_hands_out_study_trials_with_their_seeds(tmp_path, spec):
    searcher, search = _searcher(tmp_path, spec)
    jobs = [searcher.suggest(tid)["job"] for tid in ("a", "b")]
    assert [j["trial"] for j in jobs] == [0, 1] and [j["seed"] for j in jobs] == [100, 101]
    assert all(j["kind"] == "search" for j in jobs)
    stored = {t.number: t for t in search.trials}
    for job in jobs:  # the study holds each trial, RUNNING, with its parameters and seed
        t = stored[job["trial"]]
        assert t.state == TrialState.RUNNING and t.params == job["params"] and t.user_attrs["seed"] == job["seed"]
        assert 0.5 <= job["params"]["learning_rate"] <= 16.0 and job["params"]["momentum"] in (0.0, 0.9)


def test_outcomes_are_stored_row_first_then_state(tmp_path, spec):
    searcher, search = _searcher(tmp_path, spec)
    for tid in "abcd":
        searcher.suggest(tid)
    searcher.on_trial_result("a", {"test_accuracy": 0.4, "step": 2})
    searcher.on_trial_complete("a", {"test_accuracy": 0.8, "final": True, "status": "finished", "step": 6,
                                     "wall_seconds": 3.0})
    searcher.on_trial_complete("b", {"test_accuracy": 0.3, "step": 2}, error=False)  # stopped by the scheduler
    searcher.on_trial_complete("c", None, error=True)
    searcher.on_trial_complete("d", {"final": True, "status": "diverged", "error": "loss is nan"})
    searcher.on_trial_complete("a", {"test_accuracy": 0.1, "final": True})  # told once: a repeat is ignored
    a, b, c, d = search.trials
    assert a.state == TrialState.COMPLETE and a.value == 0.8 and a.intermediate_values == {2: 0.4}
    assert a.user_attrs["status"] == "finished" and a.user_attrs["wall_seconds"] == 3.0
    assert b.state == TrialState.PRUNED and b.user_attrs["last_test_accuracy"] == 0.3
    assert c.state == TrialState.FAIL and c.user_attrs["status"] == "error"
    assert d.state == TrialState.PRUNED and d.user_attrs["error"] == "loss is nan"
    assert sweep.finished_count(search) == 4 and sweep.running_numbers(search) == []


def test_a_requeued_trial_comes_back_with_its_seed(tmp_path, spec):
    searcher, search = _searcher(tmp_path, spec)
    first = searcher.suggest("a")["job"]  # then the process is killed: the trial stays RUNNING
    assert sweep.requeue_interrupted(search, sweep.open_storage(tmp_path)) == [first["trial"]]
    fresh, _ = _searcher_again(tmp_path, spec, search.study_name)
    again = fresh.suggest("z")["job"]
    assert again["params"] == first["params"] and again["seed"] == first["seed"] and again["trial"] == 1


def _searcher_again(tmp_path, spec, name):
    storage = sweep.open_storage(tmp_path)
    sampler = optuna.samplers.TPESampler(seed=1)
    return _study_searcher(to_optuna(spec.dims), storage=storage, study_name=name, sampler=sampler, seed=100), storage


def test_searcher_pickles_without_its_open_study(tmp_path, spec):
    """Ray Client ships the searcher to the head node: it must travel as data and reopen the study there."""
    searcher, search = _searcher(tmp_path, spec)
    searcher.suggest("a")
    copy = pickle.loads(pickle.dumps(searcher))
    job = copy.suggest("b")["job"]
    assert job["trial"] == 1 and len(search.trials) == 2


def test_the_sweep_package_uses_no_private_attribute_of_optuna_or_ray():
    """Optuna and Ray are used through public APIs only: no `obj._name` on anything but `self`, and a class
    reads only the private attributes it sets or defines itself (not those of a library base class)."""
    found = []
    for path in sorted((ROOT / "tanplan" / "workflow" / "sweep").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            own |= {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
            for n in ast.walk(cls):
                if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                        and _private(n.attr) and n.attr not in own):
                    found.append(f"{path.name}:{n.lineno}: self.{n.attr} (not set in {cls.name})")
    assert not found, found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
