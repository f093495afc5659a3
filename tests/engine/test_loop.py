"""THE loop end to end on a tiny .npz dataset: its files and which are private, secret noise against a
reproducible noise_seed, exact resume (signal, damaged checkpoints moved aside, never deleted; partial
metrics line), the lock, bad input, divergence and errors mid-run (their steps accounted)."""

import json
import shutil
import signal
import stat

import numpy as np
import pytest
from helpers import tiny_overrides
from helpers import checkpoint_steps, saved_params

from tanplan import cli
from tanplan.config import load_config
from tanplan.engine.loop import train_and_evaluate
from tanplan.engine.release import load_params
from tanplan.outcomes.run_summary import FIELDS
from tanplan.errors import RunInterrupted, TrainingDiverged, UsageError
from tanplan.fileio import exclusive
from tanplan.job import job_of
from tanplan.privacy import accounting


def _cfg(tiny_npz, *extra):
    return load_config(None, tiny_overrides(tiny_npz, *extra))


def test_train_writes_its_files_and_keeps_the_secret_private(tiny_npz, tmp_path):
    cfg = _cfg(tiny_npz, "train.grad_method=ghost", "train.checkpoint_every=3")
    seen = []
    out = tmp_path / "a"
    first = train_and_evaluate(job_of(cfg), out, progress=False, on_eval=lambda s, m: seen.append((s, m)))
    assert set(first.to_dict()) == set(FIELDS)  # one schema
    assert first.steps == 6 and first.batch_size == 32 and first.delta == pytest.approx(240 ** -1.1)
    assert first.accountant == "pld" and first.neighbouring == "add_remove"
    assert first.epsilon_pld <= 4.0 * (1 + 1e-9) and first.epsilon_pld <= first.epsilon_rdp
    assert first.epsilon_replace_one > first.epsilon_pld  # replacing one moves the sum by up to 2C
    assert first.noise_secret is True and first.test_accuracy > 0.8  # separable: 6 noisy steps learn it
    assert [s for s, _ in seen] == [3, 6] and seen[0][1]["epsilon_spent"] < seen[1][1]["epsilon_spent"]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [3, 6]
    assert json.loads((out / "summary.json").read_text())["params_checksum"] == first.params_checksum
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["steps"] == 6 and ledger["epsilon_rdp"] == pytest.approx(first.epsilon_rdp, rel=1e-12)
    assert ledger["epsilon_replace_one"] == first.epsilon_replace_one and ledger["neighbouring"] == "add_remove"
    assert load_config(out / "config.toml") == cfg  # the run's config, reloadable
    assert checkpoint_steps(out) == [3, 6]
    # The checkpoint folder is private, and holds the secret; nothing outside it does.
    private = out / "checkpoint"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    secret_file = private / "run_secret.json"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    words = json.loads(secret_file.read_text())["words"]
    for path in out.rglob("*"):
        if path.is_file() and private not in path.parents:
            text = path.read_bytes().decode("latin-1")
            assert not any(str(w) in text for w in words if w > 10**6), path
    # The released model: the final params here (no EMA), readable without pickles, no key in it
    released = load_params(out / "model")
    card = json.loads((out / "model" / "model.json").read_text())
    assert card["weights"] == "final" and card["model"] == "mlp" and card["noise_secret"] is True
    checkpointed = saved_params(out)
    assert released and all(any(a.shape == b.shape and np.array_equal(a, b) for b in checkpointed)
                            for a in released.values())


def test_two_runs_differ_unless_noise_seed_makes_them_reproducible(tiny_npz, tmp_path, capsys):
    cfg = _cfg(tiny_npz)
    a, b = (train_and_evaluate(job_of(cfg), tmp_path / n, progress=False) for n in ("a", "b"))
    assert a.params_checksum != b.params_checksum  # a fresh secret per run
    seeded = cfg.with_overrides({"privacy.noise_seed": 7})
    c, d = (train_and_evaluate(job_of(seeded), tmp_path / n, progress=False) for n in ("c", "d"))
    assert c.params_checksum == d.params_checksum and c.noise_secret is False
    assert "NOT private" in capsys.readouterr().err


def test_cli_json_and_nonprivate_mode(tiny_npz, tmp_path, capsys):
    overrides = tiny_overrides(tiny_npz, "privacy.private=false", "train.grad_method=vmap")
    code = cli.main(["train", "--quiet", "--json", "--out", str(tmp_path / "np")]
                    + sum([["--set", o] for o in overrides], []))
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["private"] is False and summary["epsilon_rdp"] is None and summary["sigma"] == 0
    assert summary["grad_method"] == "plain"


def _interrupt_at(step):
    def on_eval(done, record):
        if done == step:
            signal.raise_signal(signal.SIGTERM)  # handled by the loop: finish the step, checkpoint, stop
    return on_eval


def test_a_stopped_run_resumes_to_the_uninterrupted_result(tiny_npz, tmp_path):
    cfg = _cfg(tiny_npz, "train.eval_every=1", "train.checkpoint_every=4", "train.ema_decay=0.9")
    out, ref = tmp_path / "run", tmp_path / "ref"
    with pytest.raises(RunInterrupted) as err:
        train_and_evaluate(job_of(cfg), out, progress=False, on_eval=_interrupt_at(2))
    assert err.value.exit_code == 128 + signal.SIGTERM and checkpoint_steps(out) == [2]
    with pytest.raises(UsageError, match="pass --resume"):
        train_and_evaluate(job_of(cfg), out, progress=False)
    # The reference runs uninterrupted with the same secret (copied; the same run, so its resume takes it):
    # its result is the one to reach.
    (ref / "checkpoint").mkdir(parents=True)
    shutil.copy(out / "checkpoint" / "run_secret.json", ref / "checkpoint" / "run_secret.json")
    reference = train_and_evaluate(job_of(cfg), ref, progress=False, resume=True)
    resumed = train_and_evaluate(job_of(cfg), out, progress=False, resume=True)
    assert resumed.params_checksum == reference.params_checksum
    assert resumed.resumed_from_step == 2 and resumed.steps == 6 and resumed.steps_this_run == 4
    assert resumed.epsilon_rdp == pytest.approx(reference.epsilon_rdp, rel=1e-12)
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    again = train_and_evaluate(job_of(cfg), out, progress=False, resume=True)  # finished: no step, same result
    assert again.steps_this_run == 0 and again.params_checksum == reference.params_checksum


def test_a_stopped_run_without_a_folder_says_nothing_was_saved(tiny_npz):
    # api.train(out=None) stopped by SIGTERM: the stop is a RunInterrupted naming no checkpoint, not a TypeError.
    cfg = _cfg(tiny_npz, "train.eval_every=1")
    with pytest.raises(RunInterrupted, match="nothing was saved") as err:
        train_and_evaluate(job_of(cfg), None, progress=False, on_eval=_interrupt_at(2))
    assert err.value.exit_code == 128 + signal.SIGTERM


def test_resume_skips_a_damaged_checkpoint_and_a_partial_metrics_line(tiny_npz, tmp_path, capsys):
    cfg = _cfg(tiny_npz, "train.eval_every=2", "train.checkpoint_every=2", "privacy.noise_seed=3")
    reference = train_and_evaluate(job_of(cfg), tmp_path / "ref", progress=False)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        train_and_evaluate(job_of(cfg), out, progress=False, on_eval=_interrupt_at(4))
    assert checkpoint_steps(out) == [2, 4]
    for path in (out / "checkpoint" / "4").rglob("*"):  # garble every file of the newest checkpoint
        if path.is_file():
            path.write_bytes(b"\x00garbled" * 7)
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "test_acc')  # a process killed mid-line
    (out / "checkpoint" / "6.orbax-checkpoint-tmp-123").mkdir()  # a save killed mid-way
    garbled = {p.relative_to(out / "checkpoint" / "4"): p.read_bytes()
               for p in (out / "checkpoint" / "4").rglob("*") if p.is_file()}
    resumed = train_and_evaluate(job_of(cfg), out, progress=False, resume=True)
    assert "checkpoint of step 4" in capsys.readouterr().err
    assert resumed.params_checksum == reference.params_checksum and resumed.resumed_from_step == 2
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [2, 4, 6]
    assert not list((out / "checkpoint").glob("*orbax-checkpoint-tmp*"))
    # The damaged checkpoint was moved aside inside the private folder, byte for byte, never deleted; the
    # checkpoint the resume started from (step 2, an earlier session's) is kept beside the new ones.
    [aside] = (out / "checkpoint").glob("4.damaged-*")
    assert {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()} == garbled
    assert checkpoint_steps(out) == [2, 4, 6]


def test_resume_with_every_checkpoint_damaged_is_one_line_exit_2_and_keeps_every_file(tiny_npz, tmp_path, capsys):
    overrides = tiny_overrides(tiny_npz, "train.eval_every=2", "train.checkpoint_every=2")
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        train_and_evaluate(job_of(load_config(None, overrides)), out, progress=False, on_eval=_interrupt_at(4))
    assert checkpoint_steps(out) == [2, 4]
    ckpt = out / "checkpoint"
    for path in (ckpt / "4").rglob("*"):  # step 4: its saved state garbled
        if path.is_file() and "state" in path.relative_to(ckpt / "4").parts:
            path.write_bytes(b"\x00garbled" * 7)
    for path in (ckpt / "2").rglob("*"):  # step 2: its record (meta) garbled
        if path.is_file() and "meta" in path.relative_to(ckpt / "2").parts:
            path.write_bytes(b"{not json")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code = cli.main(["train", "--quiet", "--resume", "--out", str(out)] + sum([["--set", o] for o in overrides], []))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    assert "checkpoint of step 4" in err and "checkpoint of step 2" in err and "nothing was moved or deleted" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # every file, unchanged


def test_a_refused_resume_changes_no_file(tiny_npz, tmp_path):
    cfg = _cfg(tiny_npz, "train.eval_every=2", "train.checkpoint_every=2")
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        train_and_evaluate(job_of(cfg), out, progress=False, on_eval=_interrupt_at(4))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(UsageError, match="started with another train.learning_rate"):
        train_and_evaluate(job_of(cfg.with_overrides({"train.learning_rate": 0.5})), out, progress=False, resume=True)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_one_run_per_folder_at_a_time(tiny_npz, tmp_path):
    with exclusive(tmp_path / "busy", "run"):
        with pytest.raises(UsageError, match="another tanplan run is running"):
            train_and_evaluate(job_of(_cfg(tiny_npz)), tmp_path / "busy", progress=False)


@pytest.mark.parametrize("override, words", [
    ("train.stepz=3", "valid keys"),
    ("model.name=resnet1000", "unknown model"),
    ("data.dataset=imagenet", "unknown dataset"),
    ("train.batch_size=100000", "batch size"),
    ("privacy.noise_seed=-2", "privacy.noise_seed"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_npz, override, words, capsys):
    args = ["train", "--quiet"] + sum([["--set", o] for o in tiny_overrides(tiny_npz, override)], [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err and "Traceback" not in err


def test_missing_cifar_directory_is_usage_error(tmp_path):
    cfg = load_config(None, ["data.dataset=cifar10", f'data.path="{tmp_path / "nope"}"'])
    with pytest.raises(UsageError):
        train_and_evaluate(job_of(cfg), None, progress=False)


def test_nan_loss_stops_keeps_last_good_checkpoint_and_exits_1(tiny_npz, tmp_path, capsys):
    # Non-private SGD with an absurd learning rate overflows within a few steps.
    overrides = tiny_overrides(tiny_npz, "privacy.private=false", "train.learning_rate=1e30", "train.eval_every=1",
                               "train.checkpoint_every=1", "train.steps=20", "train.grad_method=vmap")
    cfg = load_config(None, overrides)
    with pytest.raises(TrainingDiverged, match="diverged"):
        train_and_evaluate(job_of(cfg), tmp_path / "nan", progress=False)
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["diverged_at_step"] is not None and summary["model"] is None
    assert max(checkpoint_steps(tmp_path / "nan")) < summary["diverged_at_step"]
    assert all(np.isfinite(leaf).all() for leaf in saved_params(tmp_path / "nan"))
    code = cli.main(["train", "--quiet", "--out", str(tmp_path / "nan2")] + sum([["--set", o] for o in overrides], []))
    assert code == 1 and "diverged" in capsys.readouterr().err


def test_public_files_hold_no_noiseless_statistic_of_the_private_batches(tiny_npz, tmp_path):
    out = tmp_path / "run"
    train_and_evaluate(job_of(_cfg(tiny_npz)), out, progress=False)
    public = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert public and all(set(r) <= {"step", "test_loss", "test_accuracy", "test_accuracy_no_ema", "epsilon_spent",
                                     "steps_per_second", "wall_time"} for r in public)
    private = [json.loads(x) for x in (out / "checkpoint" / "train_diagnostics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in private] == [r["step"] for r in public] and "loss" in private[0]


def test_a_diverged_run_accounts_the_steps_it_took(tiny_npz, tmp_path, capsys):
    """Issue 28 item 3: diverged_at_step is a function of the noisy steps before it: they are in the ledger
    and the summary, with ε > 0; the message names what diverged (the released parameters)."""
    # σ given (above the 0.87 that ε = 4 calibrates to at S = 30): the steps' accounting is tested, not calibration
    overrides = tiny_overrides(tiny_npz, "privacy.clip_norm=1e30", "train.learning_rate=1e9", "train.steps=30",
                               "train.eval_every=10", "privacy.sigma=0.9")
    out = tmp_path / "diverged"
    code = cli.main(["train", "--quiet", "--out", str(out)] + sum([["--set", o] for o in overrides], []))
    err = capsys.readouterr().err.strip()
    summary = json.loads((out / "summary.json").read_text())
    ledger = json.loads((out / "ledger.json").read_text())
    diverged = summary["diverged_at_step"]
    assert code == 1 and err.count("\n") == 0 and f"the parameters are not finite after step {diverged}" in err, err
    assert diverged >= 1 and summary["steps"] >= diverged and ledger["steps"] == summary["steps"]
    q, sigma, delta = summary["batch_size"] / summary["dataset_size"], summary["sigma"], summary["delta"]
    event = [accounting.dp_sgd_event(q, sigma, summary["steps"])]
    assert summary["epsilon_rdp"] == pytest.approx(accounting.epsilon_of_events(event, delta, "rdp"), rel=1e-12)
    expected = accounting.epsilon_of_events(event, delta, "pld", "add_remove", ledger["pld_interval"])
    assert summary["epsilon"] == summary["epsilon_pld"] == ledger["epsilon"] == ledger["epsilon_pld"] == expected
    assert expected > 0 and ledger["epsilon_rdp"] > 0 and summary["epsilon_replace_one"] > expected


def test_an_error_after_steps_ran_leaves_a_ledger_of_every_step_that_ran(tiny_npz, tmp_path, capsys, monkeypatch):
    """A UsageError met mid-run (a bad row read at step 5): exit 2, one line, and ledger.json counts the
    4 steps that ran (3 of them were in it after the evaluation at step 3), written before it propagates."""
    from tanplan.engine import batches

    take = batches.StepBatches.take

    def failing_take(self, t, layout):
        if t == 4:
            raise UsageError("a training row read at step 5 is not finite (test)")
        return take(self, t, layout)

    monkeypatch.setattr(batches.StepBatches, "take", failing_take)
    overrides = tiny_overrides(tiny_npz)
    out = tmp_path / "failed"
    code = cli.main(["train", "--quiet", "--out", str(out)] + sum([["--set", o] for o in overrides], []))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "not finite (test)" in err and "Traceback" not in err, err
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["steps"] == 4
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [3]
    cfg = load_config(None, overrides)
    q = cfg.train.batch_size / 240
    release = ledger["releases"][-1]
    assert (release["first_step"], release["last_step"]) == (0, 4) and release["q"] == pytest.approx(q)
    assert ledger["epsilon_rdp"] == pytest.approx(
        accounting.epsilon_of_events([accounting.dp_sgd_event(q, release["sigma"], 4)], ledger["delta"], "rdp"),
        rel=1e-12)


def test_rotation_deletes_only_checkpoints_this_process_wrote(tmp_path):
    """Each process keeps the newest MAX_TO_KEEP of the folder and deletes only older ones it saved itself:
    an earlier session's checkpoints (the one a resume started from) are never deleted."""
    from tanplan.engine.checkpoint import Checkpoints

    tree = {"w": np.arange(3, dtype=np.float32)}
    first = Checkpoints(tmp_path / "checkpoint", max_to_keep=2)
    for step in (1, 2, 3, 4):
        first.save(step, tree, {"step": step})
    first.close()
    assert checkpoint_steps(tmp_path) == [3, 4]  # its own rotation
    second = Checkpoints(tmp_path / "checkpoint", max_to_keep=2)  # a later session (a resume)
    for step in (5, 6, 7):
        second.save(step, tree, {"step": step})
    second.close()
    assert checkpoint_steps(tmp_path) == [3, 4, 6, 7]  # 5 was its own; 3 and 4 are the first session's
