"""Audit outputs stay audit outputs (issue 44): an audit's run, trained with canaries, is never resumed or trained
into (even killed before its summary), `tanplan audit` never writes beside a release, its canaries' coins cannot
be recomputed from the run's stored secret, `--out ""` writes nothing, and a refused resume ends with its one
line: no traceback from a thread at exit. One tiny audit (mnist1d, an MLP of width 8, 4 steps, 40 canaries)
is shared by the module."""

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import threading
import types

import jax
import numpy as np
import pytest
from helpers import ROOT, no_figure

from tanplan import api, cli
from tanplan.data import load_dataset
from tanplan.dp import canaries, input_canaries
from tanplan.dp.secret import CANARY, RunSecret
from tanplan.engine import loop
from tanplan.reports import audit as reports

TINY_TOML = """
[data]
num_samples = 2000
[model]
name = "mlp"
width = 8
[privacy]
sigma = 2.0
epsilon = 100.0
[train]
batch_size = 256
steps = 4
eval_every = 2
grad_method = "vmap"  # the route is not what is tested: no choice between routes to trace and cost
"""
AUDIT_MARKER = "audit_run.json"  # tanplan.engine.run_folder.AUDIT_MARKER
COUNT = 40  # canaries (tanplan.workflow.audit.MIN_CANARIES is 20; the MLP has 418 parameters)


def _cli(*argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `tanplan ARGV` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _tree(root) -> dict:
    return {str(p): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def _one_line(code: int, out: str, err: str, fragment: str) -> None:
    assert (code, err.count("\n"), err.startswith("tanplan: error:")) == (2, 1, True), err[-3000:]
    assert fragment in err and "Traceback" not in err and out == "", err



@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The tiny audit, run by the command, with the canaries' wrapper it built (to compare the stored secret with)."""
    root = tmp_path_factory.mktemp("audit-outputs")
    toml = root / "tiny.toml"
    toml.write_text(TINY_TOML)
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache: no "generating" line in any stderr
    wrapped = []
    original = canaries.wrap

    def spy(mechanism, count, params, *args, **kwargs):
        audit = original(mechanism, count, params, *args, **kwargs)
        wrapped.append((mechanism, params, audit))
        return audit

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(canaries, "wrap", spy)
        patch.setattr(reports, "figure_scores", no_figure)
        code, _, err = _cli("audit", "--config", toml, "--canaries", COUNT, "--out", root / "aud", "--quiet")
    assert code == 0, err[-3000:]
    assert len(wrapped) == 1
    return {"root": root, "toml": toml, "aud": root / "aud", "run": root / "aud" / "run", "wrapped": wrapped[0]}


# ---------------------------------------------------------------- the canaries' coins: a secret of their own

def test_the_held_in_canaries_cannot_be_recomputed_from_the_stored_secret(audited):
    """Whoever reads checkpoint/run_secret.json replays the run's streams: the canaries' are not among them."""
    mechanism, params, audit = audited["wrapped"]
    stored = RunSecret.load(audited["run"] / "checkpoint")
    assert stored == mechanism.secret  # the file holds the run's secret, as it must for the run's own noise
    report = json.loads((audited["aud"] / "audit.json").read_text())
    assert report["held_in"] == int(audit.arrays.held_in.sum())  # the wrapper is the audit's
    num_params = sum(int(np.size(leaf)) for leaf in jax.tree.leaves(params))
    replay = canaries.draw(audit.design, num_params, stored.batch_rng(CANARY, 0))
    assert not np.array_equal(replay.held_in, audit.arrays.held_in)  # equal by chance: 2^-40
    assert not np.array_equal(replay.index, audit.arrays.index)
    q, n = mechanism.q, mechanism.plan.dataset_size
    steps = [(audit.draws(t), canaries.step_draws(stored, t, COUNT, n, q)) for t in range(4)]
    assert not all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in steps)


def _mechanism(secret):
    """What the canaries' wrappers read of a run's mechanism."""
    return types.SimpleNamespace(sensitivity=1.5, clipped_sum=lambda *a: None, secret=secret, q=0.1, noise_std=1.0,
                                 plan=types.SimpleNamespace(dataset_size=1000))


@pytest.mark.parametrize("kind", ["gradient", "input"])
def test_each_audit_draws_a_fresh_secret_for_its_canaries_even_with_a_public_noise_seed(kind):
    mechanism = _mechanism(RunSecret.from_noise_seed(3))  # privacy.noise_seed: the run's streams are public

    def wrap():
        if kind == "gradient":
            return canaries.wrap(mechanism, 100, {"w": np.zeros(500)})
        return input_canaries.wrap(mechanism, 100, (5,), 4)

    first, second = wrap(), wrap()
    rng = mechanism.secret.batch_rng(CANARY, 0)
    replay = (canaries.draw(first.design, 500, rng) if kind == "gradient" else
              input_canaries.draw(first.design, (5,), 4, 1000, rng))
    assert not np.array_equal(first.arrays.held_in, replay.held_in)
    assert not np.array_equal(first.arrays.held_in, second.arrays.held_in)
    public = [canaries.step_draws(mechanism.secret, t, 100, 1000, 0.1)[0] for t in range(3)]
    assert not all(np.array_equal(first.draws(t)[0], public[t]) for t in range(3))
    assert first.secret != mechanism.secret and not first.secret.reproducible
    assert "hidden" in repr(first)  # the wrapper's repr never shows the canaries' secret


# ---------------------------------------------------------------- an audit's run: never resumed, never trained into

@pytest.mark.parametrize("command", ["train", "launch"])
def test_an_audit_run_is_never_resumed_and_keeps_its_marks(audited, command):
    run = audited["run"]
    before = _tree(audited["root"])
    quiet = ["--quiet"] if command == "train" else []
    _one_line(*_cli(command, "--config", audited["toml"], "--resume", "--out", run, *quiet),
              "an audited run is never resumed")
    assert _tree(audited["root"]) == before
    summary = json.loads((run / "summary.json").read_text())
    card = json.loads((run / "model" / "model.json").read_text())
    assert summary["audit_canaries"] == card["audit_canaries"] == COUNT
    assert summary["private_release"] is False and card["private_release"] is False
    assert json.loads((run / AUDIT_MARKER).read_text())["private_release"] is False


def test_no_run_is_trained_into_an_audit_or_its_run(audited):
    before = _tree(audited["root"])
    _one_line(*_cli("train", "--config", audited["toml"], "--out", audited["run"], "--quiet"),
              "already holds an audited run")
    _one_line(*_cli("train", "--config", audited["toml"], "--out", audited["aud"], "--quiet"),
              "it holds an audit's outputs (audit.json)")
    assert _tree(audited["root"]) == before


@pytest.mark.parametrize("final", [False, True], ids=["audit", "final-model"])
def test_an_audit_killed_before_its_summary_is_marked_and_never_resumed(audited, tmp_path, monkeypatch, final):
    """The marker is written when the run's folder is opened, before its secret and any step."""

    def killed(session):
        raise RuntimeError("killed")

    out = tmp_path / "aud"
    with monkeypatch.context() as patch:
        patch.setattr(loop, "_train_steps", killed)
        with pytest.raises(RuntimeError, match="killed"):
            audit = api.final_audit if final else api.audit
            audit(str(audited["toml"]), out, canaries=20)
    run = out / "run"
    assert (run / AUDIT_MARKER).is_file() and (run / "checkpoint" / "run_secret.json").is_file()
    assert not (run / "summary.json").exists() and not (run / "model").exists()
    before = _tree(tmp_path)
    _one_line(*_cli("train", "--config", audited["toml"], "--resume", "--out", run, "--quiet"),
              "an audited run is never resumed")
    _one_line(*_cli("train", "--config", audited["toml"], "--out", run, "--quiet"), "already holds an audited run")
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- audit --out: a new or empty folder only

def test_audit_out_refuses_a_release_and_writes_nothing(audited, tmp_path):
    release = tmp_path / "release"
    (release / "model").mkdir(parents=True)
    (release / "summary.json").write_text('{"epsilon": 1.0}')
    (release / "ledger.json").write_text('{"releases": []}')
    (release / "model" / "model.json").write_text('{"private_release": null}')
    before = _tree(tmp_path)
    for extra in ([], ["--final-model"], ["--canary-kind", "input"]):
        _one_line(*_cli("audit", "--config", audited["toml"], "--canaries", 20, "--out", release, *extra),
                  "ledger.json, model, summary.json; an audit writes a run trained with canaries")
    assert _tree(tmp_path) == before


def test_out_empty_writes_nothing_into_the_current_folder(audited, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["train", "--config", audited["toml"], "--quiet"],
                 ["audit", "--config", audited["toml"], "--canaries", 20, "--quiet"]):
        _one_line(*_cli(*argv, "--out", ""), "--out '' is not allowed")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- no traceback after the one line

def _slow_orbax_cleanup(monkeypatch):
    """orbax's tmp-folder cleanup made slow, so that a thread running it is sure to outlive a quick exit."""
    import asyncio

    from orbax.checkpoint._src.path import temporary_paths

    original = temporary_paths.cleanup_temporary_paths

    async def slow(*args, **kwargs):
        await asyncio.sleep(1.0)
        return await original(*args, **kwargs)

    monkeypatch.setattr(temporary_paths, "cleanup_temporary_paths", slow)


def test_opening_and_closing_the_checkpoints_leaves_no_thread(tmp_path, monkeypatch):
    from tanplan.engine.checkpoint import Checkpoints

    _slow_orbax_cleanup(monkeypatch)
    before = set(threading.enumerate())
    Checkpoints(tmp_path / "checkpoint").close()
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert left == []


def test_a_refused_resume_over_a_garbage_secret_ends_with_its_one_line(audited, tmp_path):
    """The asyncio "cannot schedule new futures after interpreter shutdown" traceback, printed by orbax's
    cleanup thread after the one-line exit 2 (1 run in 7 without the slowed cleanup that makes it certain)."""
    folder = tmp_path / "run"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / ".tanplan.lock").write_text("")
    (folder / "checkpoint" / "run_secret.json").write_text("garbage{")
    code = textwrap.dedent(f"""
        import asyncio, sys
        from orbax.checkpoint._src.path import temporary_paths
        original = temporary_paths.cleanup_temporary_paths
        async def slow(*args, **kwargs):
            await asyncio.sleep(1.0)
            return await original(*args, **kwargs)
        temporary_paths.cleanup_temporary_paths = slow
        from tanplan.cli import main
        sys.exit(main(["train", "--config", {str(audited["toml"])!r}, "--resume", "--out", {str(folder)!r},
                       "--quiet"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert "is unreadable" in proc.stderr and "Traceback" not in proc.stderr
