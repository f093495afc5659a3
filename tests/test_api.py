"""The Python API (tanplan.api, tanplan.outcomes, the lazy names of `tanplan`): every public name resolves
(that planning through it imports no JAX: tests/test_layers.py), configs come from a Config, a TOML path or None with
overrides, typed results read back the JSON they write, and the commands print exactly the API's results."""

import json

import pytest
from helpers import CONFIG, run_cli

import tanplan
from tanplan.config import load_config
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy

def test_every_public_name_resolves():
    assert set(tanplan.__all__) <= set(dir(tanplan))
    for name in tanplan.__all__:
        assert getattr(tanplan, name) is not None, name
    with pytest.raises(AttributeError):
        tanplan.no_such_name  # noqa: B018


def test_a_config_from_an_object_a_path_or_the_defaults_with_overrides():
    from tanplan.api import as_config

    from_path = as_config(CONFIG, {"train.steps": 7})
    assert from_path == load_config(CONFIG, ["train.steps=7"]) == as_config(CONFIG, ["train.steps=7"])
    assert as_config(from_path, ["model.width=4"]).model.width == 4 and as_config(None).train.steps == 200
    with pytest.raises(tanplan.UsageError, match="mapping or a list"):
        as_config(None, "train.steps=7")
    with pytest.raises(tanplan.UsageError, match="unknown config key"):
        as_config(None, {"train.stpes": 7})


@pytest.mark.parametrize("argv, call", [
    (["plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "2000", "--epsilon", "2",
      "--dataset-sizes", "25000,100000"],
     lambda: tanplan.plan(50000, 256, 2000, epsilon=2.0, dataset_sizes=[25000, 100000])),
    (["proxy", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "500", "--sigma", "3",
      "--proxy-batch-size", "128", "--proxy-batch-size", "256"],
     lambda: tanplan.proxy(50000, 4096, 500, sigma=3.0, proxy_batch_sizes=[128, 256])),
    (["plan", "--dataset-size", "16000", "--epsilon", "0.7", "--compute", "150000", "--min-batch-size", "1000"],
     lambda: tanplan.frontier(16000, 0.7, compute=150000, min_batch_size=1000)),
])
def test_the_commands_print_the_apis_results(capsys, argv, call):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    result = call()
    expected = [p.to_dict() for p in result] if isinstance(result, tuple) else result.to_dict()
    assert json.loads(out) == json.loads(json.dumps(expected))


def test_typed_results_read_back_their_json():
    plan = tanplan.plan(50000, 256, 2000, sigma=1.0, accountant="both", dataset_sizes=[100000])
    assert PlanResult.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert plan.sigma == 1.0 and plan.epsilon("pld") < plan.epsilon("rdp")
    proxy = tanplan.proxy(50000, 4096, 500, sigma=3.0, savings=16)[0]
    assert Proxy.from_dict(proxy.to_dict()) == proxy and proxy.proxy_batch_size == 256
    front = tanplan.frontier(16000, 0.7, compute=150000, min_batch_size=1000)
    assert FrontierResult.from_dict(json.loads(json.dumps(front.to_dict()))) == front
    assert front.candidates and all(c.batch_size * c.steps <= 150000 for c in front.candidates)
    with pytest.raises(ValueError, match="no field 'surprise'"):
        Proxy.from_dict({**proxy.to_dict(), "surprise": 1})


def test_numpy_integers_are_whole_numbers_to_the_api():
    """A numpy integer (len of an array, a value read from a .npy) passes for an int: the same plan as the int's,
    where the planner's `isinstance(x, int)` refused np.int64(1000) as "not an integer"."""
    import numpy as np

    given = tanplan.plan(np.int64(1000), np.int32(100), np.int64(100), sigma=1.0)
    assert given.to_dict() == tanplan.plan(1000, 100, 100, sigma=1.0).to_dict()
    assert type(given.plan.dataset_size) is int
    with pytest.raises(tanplan.UsageError, match="dataset size 1000.5"):
        tanplan.plan(1000.5, 100, 100, sigma=1.0)


JAX_STAGES = ("train", "pretrain", "launch", "sweep", "fit", "run", "compare_routes", "optimize", "audit",
              "final_audit")


def test_every_stage_that_runs_jax_makes_the_command_lines_process_settings(monkeypatch):
    """A notebook's stage call sets XLA's CPU flag and the compilation cache as `tanplan` does at its entry
    (before the arguments are checked, so a refused call shows it); the user's own flags are kept, and the
    planner leaves the process alone."""
    import os

    from tanplan import runtime

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    for name in JAX_STAGES:
        monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
        monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
        with pytest.raises(tanplan.UsageError):
            getattr(tanplan, name)(123, 456)  # refused by the type check: nothing runs
        assert os.environ["XLA_FLAGS"].split() == ["--xla_cpu_enable_fast_math=false", runtime.CPU_FLAG], name
        assert os.environ["JAX_COMPILATION_CACHE_DIR"] == os.path.join(runtime.cache_root(), "jax"), name
    monkeypatch.setenv("XLA_FLAGS", "")
    tanplan.plan(dataset_size=2000, batch_size=200, steps=20, epsilon=1.0)
    assert os.environ["XLA_FLAGS"] == ""
