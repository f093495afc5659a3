"""One table of bad inputs around audit folders, resumes and --out (issue 44): each ends with exit 2 and exactly
one line on stderr starting with "tanplan:", never a traceback, nothing on stdout and nothing written.

An audit's run (trained with canaries: not a private release) is never resumed and never trained into, even
when it was killed before its summary (its marker, tanplan.engine.run_folder.AUDIT_MARKER); `tanplan audit`
writes into a new or empty folder only, never beside a release or a sweep's, fit's or launch's outputs;
`--out ""` (the current folder) is refused by every command that takes --out; a resume over a damaged secret or
checkpoint is one line. Folders are written by hand except one tiny trained run, whose checkpoint is truncated.
The cases run in the fixture folder (the current folder), so that a command that wrote into "" shows.
"""

import contextlib
import io
import json
import re

import numpy as np
import pytest

import tanplan.data
from tanplan import cli
from tanplan.data import load_dataset
from tanplan.dp.secret import RunSecret

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
[sweep]
trials = 1
top_k = 0
[sweep.space]
learning_rate = [1.0, 2.0]
[fit]
batch_sizes = [32, 64]
seeds = 2
"""
AUDIT_CARD = {"audit_canaries": 40, "private_release": False}
SECRETS = {  # checkpoint/run_secret.json as a hostile or broken disk leaves it
    "garbage": b"garbage{", "empty": b"", "a_list": b"[1, 2]", "null": b"null", "letters": b'{"words": "abcdefgh"}',
    "short": b'{"words": [1, 2, 3]}', "huge": json.dumps({"words": [2**40] * 8}).encode(),
    "bad_binding": json.dumps({"words": list(range(8)), "binding": 5}).encode(), "binary": b"\x00\xff\xfe\x80",
}


def _json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _run_folder(path, *, secret=True, **files):
    """A run folder by hand: its lock file (every run leaves one), its secret, and `files` {relative path: JSON}."""
    (path / "checkpoint").mkdir(parents=True)
    (path / ".tanplan.lock").write_text("")
    if secret:
        RunSecret.fresh().save(path / "checkpoint")
    for name, obj in files.items():
        _json(path / name.replace(":", "/"), obj)
    return path


def _quiet_cli(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return cli.main(argv)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-audit-input")
    (root / "tiny.toml").write_text(TINY_TOML)
    rng = np.random.default_rng(0)
    np.savez(root / "features.npz", x_train=rng.normal(size=(200, 8)), y_train=rng.integers(0, 3, 200),
             x_test=rng.normal(size=(50, 8)), y_test=rng.integers(0, 3, 50))
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache, before any case
    load_dataset("mnist1d", num_samples=2000, seed=1)  # the public tuning draw (pretrain)
    # outputs an audit may not write beside: a release, a sweep, a fit, a launch, a plan's report
    _run_folder(root / "release", **{"summary.json": {"epsilon": 1.0}, "ledger.json": {"releases": []},
                                     "model:model.json": {"private_release": None}})
    _json(root / "sweep_out" / "best.json", {"best": {"overrides": {}}})
    _json(root / "sweep_out" / "trials" / "t0" / "ledger.json", {"releases": []})
    _json(root / "fit_out" / "fit.json", {"law": "tan"})
    _run_folder(root / "launch_out", **{"launch.json": {"epsilon": 1.0}, "summary.json": {"epsilon": 1.0}})
    (root / "plan_out").mkdir()
    (root / "plan_out" / "report.md").write_text("# plan\n")
    # audits: one finished (its report beside its run), one killed before its summary (the marker only), and
    # runs an earlier version wrote without the marker (its summary, or its model card alone, says audit)
    _run_folder(root / "audit_done" / "run", **{"audit_run.json": {"private_release": False},
                                                "summary.json": AUDIT_CARD, "model:model.json": AUDIT_CARD})
    _json(root / "audit_done" / "audit.json", {"verdict": "consistent"})
    _run_folder(root / "audit_killed", **{"audit_run.json": {"private_release": False}})
    _run_folder(root / "audit_old", **{"summary.json": AUDIT_CARD, "model:model.json": AUDIT_CARD})
    _run_folder(root / "audit_card", **{"model:model.json": {"private_release": False}})
    for name, content in SECRETS.items():
        _run_folder(root / f"secret_{name}", secret=False)
        (root / f"secret_{name}" / "checkpoint" / "run_secret.json").write_bytes(content)
    (_run_folder(root / "secret_folder", secret=False) / "checkpoint" / "run_secret.json").mkdir()
    # one real run, its checkpoint then truncated (every file of it cut to half)
    assert _quiet_cli(["train", "--config", str(root / "tiny.toml"), "--out", str(root / "truncated"), "--quiet"]) == 0
    step_files = [p for p in (root / "truncated" / "checkpoint").glob("[0-9]*/**/*") if p.is_file()]
    assert step_files
    for path in step_files:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return {p.name: str(p) for p in root.iterdir()} | {"root": str(root)}


TINY = ["--config", "{tiny.toml}"]
FEATURES = ["--features", "{features.npz}", "--epsilon", "1", "--method", "dp-ls"]
PLAN = ["--dataset-size", "1000", "--batch-size", "100", "--steps", "100", "--sigma", "2"]
EMPTY_OUT = "name a folder (an empty path would write into the current folder)"
NEVER_RESUMED = "an audited run is never resumed"
HOLDS_AUDIT = "already holds an audited run"
NOT_EMPTY = "an audit writes a run trained with canaries (not a private release) and its report into a new or empty"

# (sub-command and arguments, a fragment of the one line, whether the case may load data)
CASES = [
    # --out "" on every command that takes --out (and --make-features)
    (["plan", *PLAN, "--out", ""], EMPTY_OUT, False),
    (["train", *TINY, "--out", ""], EMPTY_OUT, False),
    (["train", *TINY, "--out", "  "], EMPTY_OUT, False),
    (["train", *TINY, "--resume", "--out", ""], EMPTY_OUT, False),
    (["pretrain", *TINY, "--out", ""], EMPTY_OUT, False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", ""], EMPTY_OUT, False),
    (["fit", *TINY, "--out", ""], EMPTY_OUT, False),
    (["optimize", *TINY, "--out", ""], EMPTY_OUT, False),
    (["launch", *TINY, "--out", ""], EMPTY_OUT, False),
    (["run", *TINY, "--out", ""], EMPTY_OUT, False),
    (["audit", *TINY, "--canaries", "20", "--out", ""], EMPTY_OUT, False),
    (["audit", *TINY, "--final-model", "--canaries", "20", "--out", ""], EMPTY_OUT, False),
    (["baseline", *FEATURES, "--out", ""], EMPTY_OUT, False),
    (["baseline", *FEATURES, "--make-features", ""], EMPTY_OUT, False),
    (["convert", "--from", "image-folder", "{root}/no_images", "--out", ""], EMPTY_OUT, False),
    # audit --out: a new or empty folder only
    (["audit", *TINY, "--canaries", "20", "--out", "{release}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canaries", "20", "--out", "{sweep_out}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canaries", "20", "--out", "{fit_out}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canaries", "20", "--out", "{launch_out}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canaries", "20", "--out", "{plan_out}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canary-kind", "input", "--canaries", "20", "--out", "{release}"], NOT_EMPTY, False),
    (["audit", *TINY, "--final-model", "--canaries", "20", "--out", "{release}"], NOT_EMPTY, False),
    (["audit", *TINY, "--final-model", "--canaries", "20", "--out", "{launch_out}"], NOT_EMPTY, False),
    (["audit", *TINY, "--canaries", "20", "--out", "{audit_done}"], HOLDS_AUDIT, False),
    # an audit's run: never resumed, never trained into (killed before its summary too)
    (["train", *TINY, "--resume", "--out", "{audit_killed}"], NEVER_RESUMED, True),
    (["train", *TINY, "--resume", "--out", "{audit_old}"], NEVER_RESUMED, True),
    (["train", *TINY, "--resume", "--out", "{audit_card}"], NEVER_RESUMED, True),
    (["train", *TINY, "--resume", "--out", "{audit_done}/run"], NEVER_RESUMED, True),
    (["launch", *TINY, "--resume", "--out", "{audit_killed}"], NEVER_RESUMED, True),
    (["launch", *TINY, "--resume", "--out", "{audit_old}"], NEVER_RESUMED, True),
    (["train", *TINY, "--out", "{audit_killed}"], HOLDS_AUDIT, True),
    (["train", *TINY, "--out", "{audit_old}"], HOLDS_AUDIT, True),
    (["launch", *TINY, "--out", "{audit_killed}"], HOLDS_AUDIT, True),
    (["train", *TINY, "--out", "{audit_done}"], "it holds an audit's outputs (audit.json)", True),
    # a workflow's folder is never an audit's: `run` checks before its stages (its runs go into subfolders)
    (["run", *TINY, "--out", "{audit_killed}"], HOLDS_AUDIT, False),
    (["run", *TINY, "--out", "{audit_done}"], "it holds an audit's outputs (audit.json)", False),
    # a resume over a damaged secret or checkpoint
    *[(["train", *TINY, "--resume", "--out", f"{{secret_{name}}}"], "is unreadable", True)
      for name in ("garbage", "empty", "a_list", "null", "letters", "bad_binding", "binary")],
    (["train", *TINY, "--resume", "--out", "{secret_short}"], "is malformed", True),
    (["train", *TINY, "--resume", "--out", "{secret_huge}"], "is malformed", True),
    (["launch", *TINY, "--resume", "--out", "{secret_garbage}"], "is unreadable", True),
    (["train", *TINY, "--resume", "--out", "{secret_folder}"], "holds no run to continue", False),
    (["train", *TINY, "--resume", "--out", "{truncated}"], "reads back whole", True),
    (["launch", *TINY, "--resume", "--out", "{truncated}"], "reads back whole", True),
]


def _fill(text: str, files: dict) -> str:
    return re.sub(r"\{([^{}]+)\}", lambda m: files.get(m.group(1), m.group(0)), text)


def _no_data(*args, **kwargs):
    raise AssertionError("data was loaded before the command had checked its input")


def _tree(root) -> dict:
    """Every path under root with its content: a refused input writes nothing."""
    from pathlib import Path

    return {str(p): p.read_bytes() if p.is_file() else None for p in Path(root).rglob("*")}


@pytest.mark.parametrize("argv, fragment, data", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_audit_input_is_one_line_and_writes_nothing(files, monkeypatch, capsys, argv, fragment, data):
    if not data:
        monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    monkeypatch.chdir(files["root"])  # `--out ""` would write here
    argv = [_fill(a, files) for a in argv]
    before = _tree(files["root"])
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert (got, err.count("\n"), err.startswith("tanplan:")) == (2, 1, True), err
    assert fragment in err, err
    assert "Traceback" not in err and out == ""
    assert _tree(files["root"]) == before  # nothing written: no folder, marker, secret, lock or checkpoint


def test_the_table_covers_every_command_that_takes_out():
    assert len(CASES) >= 20
    empty_out = {c[0][0] for c in CASES if c[1] == EMPTY_OUT}
    assert empty_out == {"plan", "train", "pretrain", "sweep", "fit", "optimize", "launch", "run", "audit", "baseline",
                         "convert"}
