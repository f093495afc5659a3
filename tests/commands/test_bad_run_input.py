"""Issue 44 items 4-6 as one table of refused inputs, in the style of test_bad_input.py: `pretrain` given
near-copies of the private set or bad public files, `run`/`fit`/`sweep`/`launch` given train.epochs, and
`launch --best` / `fit --best` given a registry of private releases (private_releases.json) that is edited,
missing a folder or a ledger, garbage, or still being written. Each ends with exit 2 and exactly one line on
stderr starting with "tanplan:", no traceback, nothing on stdout and nothing written under the fixtures.

No case trains. Cases marked `data=False` fail before any data is loaded (loading fails the test for them);
the others read a tiny mnist1d generated once for the module, or the .npz files the fixture writes.
"""

import fcntl
import json
import re

import numpy as np
import pytest

import tanplan.data
from tanplan import cli
from tanplan.config import config_to_toml, load_config
from tanplan.data import load_dataset
from tanplan.privacy.ledger import Ledger

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
[sweep]
trials = 1
top_k = 0
[sweep.space]
learning_rate = [1.0, 2.0]
[fit]
batch_sizes = [32, 64]
seeds = 2
"""
BEST = {"best": {"overrides": {"train.learning_rate": 2.0}}}


def _npz(path, x, y):
    np.savez(path, x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])


def _public_files(root, rng) -> None:
    """A private .npz set and public sets made from it (near-copies) or broken."""
    x, y = rng.normal(size=(300, 12)), rng.integers(0, 4, 300)
    _npz(root / "private.npz", x, y)
    _npz(root / "times255.npz", x * 255, y)
    _npz(root / "reversed.npz", x[:, ::-1], y)  # every row's features reversed
    _npz(root / "noisy.npz", x[::-1] * 255 + rng.normal(size=x.shape) * 255e-5, y)  # rows reversed, × 255, noise
    _npz(root / "subset.npz", np.concatenate([rng.normal(size=(280, 12)), 0.5 * x[rng.permutation(300)[:20]] + 3])[
        rng.permutation(300)], y)  # a shuffled subset, brighter and at half the contrast
    _npz(root / "narrow.npz", rng.normal(size=(300, 8)), y)
    nan = x.copy()
    nan[3, 3] = np.nan
    _npz(root / "nan.npz", nan, y)
    (root / "garbage.npz").write_bytes(b"\x00\xffnot a zip archive")
    np.savez(root / "nokeys.npz", a=np.zeros(3))


def _registry(folder, releases) -> str:
    """folder/best.json and beside it the registry `releases` (a list, or raw bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "best.json").write_text(json.dumps(BEST))
    path = folder / "private_releases.json"
    if isinstance(releases, bytes):
        path.write_bytes(releases)
    else:
        path.write_text(json.dumps(releases if not isinstance(releases, list) else {"releases": releases}))
    return str(folder / "best.json")


def _run_folder(folder, delta: float | None = None, text: str | None = None):
    """A recorded run folder with its ledger.json: empty, a release at δ, or `text` (garbage)."""
    folder.mkdir(parents=True)
    ledger = Ledger(delta=delta, proxy=True)
    if delta is not None:
        ledger.advance(ledger.open_release(0, 0.02, 1.0, delta), 4)
    (folder / "ledger.json").write_text(text if text is not None else json.dumps(ledger.to_dict()))
    return str(folder)


def _best_files(root, tiny) -> dict:
    """best.json files with registries that cannot be accounted, and one with an edited tuning record."""
    entry = {"command": "fit --best", "ledgers": None}
    found = {
        "reg_garbage": _registry(root / "reg_garbage", b"\x00\xff\xfe garbage"),
        "reg_list": _registry(root / "reg_list", [1, 2]),
        "reg_object": _registry(root / "reg_object", {"releases": {"out": "/x"}}),
        "reg_relative": _registry(root / "reg_relative", [{**entry, "out": "runs/fit"}]),
        "reg_count": _registry(root / "reg_count", [{**entry, "out": str(root), "ledgers": -1}]),
        "reg_gone": _registry(root / "reg_gone", [{**entry, "out": str(root / "gone")}]),
        "reg_fewer": _registry(root / "reg_fewer", [{**entry, "out": _run_folder(root / "fewer" / "r0"),
                                                     "ledgers": 3}]),
        "reg_bad_ledger": _registry(root / "reg_bad_ledger", [{**entry, "out": _run_folder(root / "bad_ledger",
                                                                                            text="{not json")}]),
        "reg_training": _registry(root / "reg_training", [{**entry, "out": _run_folder(root / "training")}]),
        "reg_delta": _registry(root / "reg_delta", [{**entry, "out": _run_folder(root / "delta", 0.5)}]),
        "reg_lock": _registry(root / "reg_lock", [{**entry, "out": _run_folder(root / "lock")}]),
    }
    (root / "reg_lock" / ".private_releases.training").mkdir()  # the training lock is not a file
    # an edited tuning record: best.json says public, its trial trained on the launch's own (private) data
    edited = root / "edited"
    _run_folder(edited / "trials" / "t0")
    (edited / "trials" / "t0" / "config.toml").write_text(config_to_toml(load_config(tiny)))
    (edited / "best.json").write_text(json.dumps({**BEST, "tuning": {"tuning_data": "public", "source": "public"}}))
    found["edited"] = str(edited / "best.json")
    return found


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-run-input")
    (root / "tiny.toml").write_text(TINY_TOML)
    _public_files(root, np.random.default_rng(0))
    found = {p.name: str(p) for p in root.iterdir()} | {"root": str(root)}
    found |= _best_files(root, root / "tiny.toml")
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache, before any case
    with open(root / "reg_training" / ".private_releases.training", "a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # a `fit --best` of this best.json is training
        yield found


TINY = ["--config", "{tiny.toml}"]
PRE = ["pretrain", *TINY, "--set", "data.dataset=npz", "--set", "data.path={private.npz}", "--set",
       "train.batch_size=32", "--out", "{root}/p"]
LAUNCH = ["launch", *TINY, "--out", "{root}/l"]
REFUSED = "it holds examples of the private training or test set"
EPOCHS = "train.epochs = 1 is read by train and launch only"
UNREAD = "cannot be read (not the JSON tanplan writes): the releases it records on the private set cannot be accounted"

# (sub-command and arguments, exit code, a fragment of the one line, whether the case may load data)
CASES = [
    # pretrain: near-copies of the private rows (item 5), the private file, bad public files
    ([*PRE, "--set", "tuning.path={times255.npz}"], 2, REFUSED, True),
    ([*PRE, "--set", "tuning.path={reversed.npz}"], 2, REFUSED, True),
    ([*PRE, "--set", "tuning.path={noisy.npz}"], 2, REFUSED, True),
    ([*PRE, "--set", "tuning.path={subset.npz}"], 2, REFUSED, True),
    ([*PRE, "--set", "tuning.path={private.npz}"], 2, "it is the private data file", False),
    ([*PRE, "--set", "tuning.path={root}/nope.npz"], 2, "no such file", False),
    ([*PRE, "--set", "tuning.path={root}"], 2, "not a memmap folder", False),
    ([*PRE, "--set", "tuning.path={narrow.npz}"], 2, "its examples have shape (8, 1)", True),
    ([*PRE, "--set", "tuning.path={garbage.npz}"], 2, "as .npz", True),
    ([*PRE, "--set", "tuning.path={nokeys.npz}"], 2, "lacks x_train", True),
    ([*PRE, "--set", "tuning.path={nan.npz}"], 2, "x_train holds NaN or infinite values", True),
    ([*PRE, "--set", "tuning.data=private"], 2, "trains on public data", False),
    (["pretrain", *TINY, "--set", "tuning.dataset=nope", "--out", "{root}/p"], 2, "tuning.dataset = 'nope'", False),
    # train.epochs (item 6): read by train and launch alone; every proxy stage refuses it
    (["run", *TINY, "--set", "train.epochs=1", "--out", "{root}/r"], 2, EPOCHS, False),
    (["run", *TINY, "--set", "train.epochs=1", "--out", "{root}/r", "--dry-run", "--no-probe"], 2, EPOCHS, False),
    (["run", *TINY, "--set", "train.epochs=1", "--set", "tuning.data=private", "--out", "{root}/r"], 2, EPOCHS,
     False),
    (["fit", *TINY, "--set", "train.epochs=1", "--out", "{root}/f"], 2, EPOCHS, True),
    (["sweep", *TINY, "--set", "train.epochs=1", "--proxy-batch-size", "64", "--out", "{root}/s"], 2, EPOCHS, True),
    ([*LAUNCH, "--set", "train.epochs=1", "--set", "train.steps=5"], 2, "give exactly one", False),
    # launch --best: what the registry beside best.json records must be accounted (item 4)
    ([*LAUNCH, "--best", "{reg_garbage}"], 2, UNREAD, False),
    ([*LAUNCH, "--best", "{reg_list}"], 2, UNREAD, False),
    ([*LAUNCH, "--best", "{reg_object}"], 2, UNREAD, False),
    ([*LAUNCH, "--best", "{reg_relative}"], 2, UNREAD, False),
    ([*LAUNCH, "--best", "{reg_count}"], 2, UNREAD, False),
    ([*LAUNCH, "--best", "{reg_gone}"], 2, "which is gone: the releases it made on the private set cannot be", False),
    ([*LAUNCH, "--best", "{reg_fewer}"], 2, "which finished with 3 run ledgers; 1 are left", False),
    ([*LAUNCH, "--best", "{reg_bad_ledger}"], 2, "a ledger.json below it cannot be read", False),
    ([*LAUNCH, "--best", "{reg_training}"], 2, "is still training on the private set", False),
    ([*LAUNCH, "--best", "{reg_delta}"], 2, "were accounted at δ = [0.5]", True),
    ([*LAUNCH, "--best", "{reg_lock}"], 2, "still trains on the private set cannot be told", False),
    ([*LAUNCH, "--best", "{edited}"], 2, "the record was edited or belongs to another sweep", False),
    (["fit", *TINY, "--best", "{reg_garbage}", "--out", "{root}/f"], 2, UNREAD, False),
    (["fit", *TINY, "--best", "{reg_list}", "--set", "tuning.data=private", "--out", "{root}/f"], 2, UNREAD, False),
]


def _fill(text: str, files: dict) -> str:
    """{name} -> the path of the fixture `name` (other braces stay)."""
    return re.sub(r"\{([^{}]+)\}", lambda m: files.get(m.group(1), m.group(0)), text)


def _no_data(*args, **kwargs):
    raise AssertionError("data was loaded before the command had checked its input")


def _tree(root) -> dict:
    from pathlib import Path

    return {str(p): p.stat().st_size if p.is_file() else None for p in Path(root).rglob("*")}


@pytest.mark.parametrize("argv, code, fragment, data", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_run_input_is_one_line_and_no_traceback(files, monkeypatch, capsys, argv, code, fragment, data):
    if not data:
        monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    argv = [_fill(a, files) for a in argv]
    before = _tree(files["root"])
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert (got, err.count("\n"), err.startswith("tanplan:")) == (code, 1, True), err
    assert fragment in err, err
    assert "Traceback" not in err and out == ""
    assert "without --best" not in err  # no way out that prints a smaller ε than the one of record
    assert _tree(files["root"]) == before  # nothing written: no folder, registry, secret or lock


def test_the_table_covers_pretrain_epochs_and_the_registry():
    assert len(CASES) >= 15
    assert {c[0][0] for c in CASES} == {"pretrain", "run", "fit", "sweep", "launch"}
