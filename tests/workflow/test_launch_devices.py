"""`tanplan launch`: on 8 (forced host) CPU devices it equals the 1-device run (same noise_seed); over budget
it exits 3 before any step; a public noise seed needs --allow-public-noise; pruning and DP-SNIP launch as
they train; checkpoints round-trip and survive a full disk."""

import json

import numpy as np
import pytest
from fakes import use_mnist1d_shaped
from helpers import CONFIG, SEEDED, TINY, run_launch, saved_params

from tanplan.cli import main

# Where neither is what a test checks: two steps (each step of B = 256 runs about 0.3 CPU-s, and every checkpoint
# and evaluation waits for it) of a one-layer MLP (the cnn1d compiles for seconds, and pruning makes its masks leaf
# by leaf, op by op: 3 CPU-s a mask for its 36 leaves; tests/dp/test_pruning.py masks a CNN of every layer kind).
SHORT = TINY + ["train.steps=2", "train.eval_every=2", "model.name=mlp", "model.depth=1"]


@pytest.fixture(autouse=True)
def shaped_data(monkeypatch):
    """Random signals of mnist1d's shapes: no test here reads what the signals are (generating mnist1d costs
    about 4 CPU-s a process, its import half of it); the subprocesses of the slow test generate the real set."""

    use_mnist1d_shaped(monkeypatch)


@pytest.mark.slow
def test_eight_devices_equal_one_device(tmp_path):
    one = run_launch(tmp_path / "one", devices=1, sets=SEEDED)["summary"]
    eight = run_launch(tmp_path / "eight", devices=8, sets=SEEDED)["summary"]
    assert one["devices"] == 1 and eight["devices"] == 8
    assert eight["steps"] == one["steps"] == 8
    assert eight["epsilon_rdp"] == pytest.approx(one["epsilon_rdp"], rel=1e-12)
    a, b = saved_params(tmp_path / "one"), saved_params(tmp_path / "eight")
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)  # only the summation order differs
    assert eight["test_accuracy"] == pytest.approx(one["test_accuracy"], abs=2 / 400)


def test_over_budget_launch_exits_3_and_takes_no_step(tmp_path, capsys):
    out = tmp_path / "over"
    sets = [s for s in TINY if not s.startswith("privacy.")] + ["privacy.sigma=0.5", "privacy.epsilon=1.0"]
    code = main(["launch", "--config", CONFIG, "--out", str(out),
                 *sum([["--set", s] for s in sets], [])])
    assert code == 3
    assert "no step was taken" in capsys.readouterr().err
    assert not (out / "checkpoint").exists() and not (out / "ledger.json").exists()


def test_launch_refuses_to_overwrite_a_checkpoint_without_resume(tmp_path, capsys):
    from tanplan.engine.checkpoint import Checkpoints

    out = tmp_path / "busy"
    ckpt = Checkpoints(out / "checkpoint")
    ckpt.save(2, {"w": np.zeros(3)}, {"step": 2})
    ckpt.close()
    sets = SHORT + ["train.grad_method=vmap"]  # refused after the model is built: no route self-check
    code = main(["launch", "--config", CONFIG, "--out", str(out), *sum([["--set", s] for s in sets], [])])
    assert code == 2
    assert "--resume" in capsys.readouterr().err
    assert not (out / "ledger.json").exists()


def test_checkpoint_roundtrip_keeps_the_tree_and_meta(tmp_path):
    from tanplan.engine.checkpoint import Checkpoints

    tree = {"a": np.arange(4.0, dtype=np.float32), "b": (np.ones((2, 2), np.int32), np.float32(3.0))}
    ckpt = Checkpoints(tmp_path / "c")
    ckpt.save(1, tree, {"step": 1, "ledger": {"steps": 1}})
    ckpt.save(3, {"a": tree["a"] + 1, "b": tree["b"]}, {"step": 3})
    got, meta, skipped = ckpt.restore_intact(tree)
    ckpt.close()
    assert meta["step"] == 3 and skipped == []
    np.testing.assert_array_equal(got["a"], tree["a"] + 1)
    np.testing.assert_array_equal(got["b"][0], tree["b"][0])
    assert json.dumps(meta)


def test_a_failed_checkpoint_write_keeps_the_previous_one(tmp_path):
    import errno

    from tanplan.engine.checkpoint import Checkpoints
    from tanplan.errors import CheckpointError

    tree = {"w": np.arange(3.0, dtype=np.float32)}
    ckpt = Checkpoints(tmp_path / "c")
    ckpt.save(1, tree, {"step": 1})

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    ckpt.manager.save = disk_full
    with pytest.raises(CheckpointError, match="No space left on device.*previous checkpoint is kept"):
        ckpt.save(2, {"w": tree["w"] + 1}, {"step": 2})
    got, meta, _ = ckpt.restore_intact(tree)
    ckpt.close()
    assert meta["step"] == 1
    np.testing.assert_array_equal(got["w"], tree["w"])


def test_a_finished_launch_resumed_takes_no_step_and_reports_the_same_result(tmp_path):
    from tanplan.config import load_config
    from tanplan.workflow.launch import launch

    cfg = load_config(CONFIG, SHORT + ["train.grad_method=vmap"])  # the route is not what is tested
    first = launch(cfg, tmp_path / "full", progress=False).summary
    again = launch(cfg, tmp_path / "full", progress=False, resume=True).summary
    assert again.resumed_from_step == again.steps == first.steps and again.steps_this_run == 0
    assert again.params_checksum == first.params_checksum
    assert again.test_accuracy == pytest.approx(first.test_accuracy)
    assert again.epsilon_rdp == first.epsilon_rdp  # the ledger counts no step twice


def test_a_public_noise_seed_needs_allow_public_noise(tmp_path, capsys):
    out = tmp_path / "seeded"
    code = main(["launch", "--config", CONFIG, "--out", str(out), *sum([["--set", s] for s in SEEDED], [])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--allow-public-noise" in err and "privacy.noise_seed = 7" in err
    assert not out.exists()  # refused before anything is written


def test_launch_prunes_and_reports_the_sigma_it_trained_with_everywhere(tmp_path):
    from tanplan.config import load_config
    from tanplan.workflow.launch import launch

    pruned = launch(load_config(CONFIG, SHORT + ["pruning.method=random", "pruning.rate=0.5"]), tmp_path / "random",
                    progress=False).summary
    kernels = [leaf for leaf in saved_params(tmp_path / "random") if leaf.ndim >= 2]
    zeros = sum(int((k == 0).sum()) for k in kernels) / sum(k.size for k in kernels)
    assert zeros >= 0.49 and pruned.pruning.kept_fraction < 0.6

    sets = [s for s in SHORT if not s.startswith("privacy.sigma")] + ["privacy.epsilon=8", "pruning.method=dp_snip",
                                                                     "pruning.rate=0.5"]
    out = tmp_path / "snip"
    result = launch(load_config(CONFIG, sets), out, progress=False)
    files = {"launch.json": json.loads((out / "launch.json").read_text()),
             "summary.json": json.loads((out / "summary.json").read_text()),
             "ledger.json": json.loads((out / "ledger.json").read_text())}
    sigma, snip = result.summary.sigma, result.summary.snip_sigma
    assert snip > 0 and files["launch.json"]["accounting"]["sigma"] == sigma == files["summary.json"]["sigma"]
    trained = [r for r in files["ledger.json"]["releases"] if r["kind"] == "dp_sgd"]
    assert {r["sigma"] for r in trained} == {sigma}
    assert [r["sigma"] for r in files["ledger.json"]["releases"] if r["kind"] == "dp_snip"] == [snip]
    eps = {files["launch.json"]["accounting"]["epsilon_rdp"], files["summary.json"]["epsilon_rdp"],
           files["ledger.json"]["epsilon_rdp"]}
    assert max(eps) - min(eps) < 1e-12 * max(eps)
    pld = {files["launch.json"]["accounting"]["epsilon_pld"], files["summary.json"]["epsilon_pld"],
           files["ledger.json"]["epsilon_pld"]}
    assert len(pld) == 1 and pld.pop() <= 8  # the accountant of record meets the budget
