"""Bad and hostile [init] input (issue 44, item 2): each ends with exit 2 and exactly one line on stderr
starting with "tanplan:", never a traceback, nothing on stdout and nothing written (no run folder, no
secret), so nothing is trained and nothing spent. The pattern of tests/commands/test_bad_input.py. Every
case here crashed, trained, dropped data or published a digest before (the refusals [init] already made,
a missing or extra array, a wrong shape, a loader returning None, are tests/models/test_init_weights.py's).

Cases marked `data=False` fail before any data is loaded or generated (loading fails the test for them): the
weights are read and checked, and where they were trained, by the config check. The others need the model's
shapes (a missing or extra array, a wrong shape, a value beyond float32, a head pattern), which the data's
input shape gives: they fail after the data is read, still before anything is written.
"""

import json
import os
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from commands.test_bad_input import TINY_TOML

import tanplan.data
from tanplan import cli
from tanplan.config import load_config
from tanplan.data import load_dataset
from tanplan.models import create_model
from tanplan.models.init import digest_of
from tanplan.models.paths import flat_params

LOADERS = '''
import numpy as np

def needs_argument(path):
    return {}

def raises():
    raise RuntimeError("the weights server is down")



def strings():
    return {"Dense_0": {"kernel": "abc"}}

def nan():
    return {"Dense_0": {"kernel": np.full((40, 8), np.nan, np.float32)}}


def complex_numbers():
    return {"Dense_0": {"kernel": np.ones((40, 8), np.complex64)}}

'''


def _weights(root: Path) -> dict:
    """The tiny config's model parameters ({path: array}), as a release of it holds them."""
    cfg = load_config(str(root / "tiny.toml"))
    model = create_model(cfg.model.name, 10, width=cfg.model.width, depth=cfg.model.depth)
    return flat_params(model.init(jax.random.key(0), np.zeros((1, 40, 1), np.float32))["params"])


def _run_folder(folder: Path, weights: dict, *, ledger=None, summary=None, card=None, config: str | None = None):
    """A run folder written by hand: model/params.npz, and the JSON files given (a dict, or raw text)."""
    (folder / "model").mkdir(parents=True)
    np.savez(folder / "model" / "params.npz", **weights)
    for name, value in (("ledger.json", ledger), ("summary.json", summary), ("model/model.json", card)):
        if value is not None:
            (folder / name).write_text(value if isinstance(value, str) else json.dumps(value))
    if config is not None:
        (folder / "config.toml").write_text(config)


def _ledger(sigma: float = 1.0, q: float = 0.1) -> dict:
    return {"delta": 1e-4, "releases": [{"first_step": 0, "last_step": 4, "q": q, "sigma": sigma, "delta": 1e-4,
                                         "session": 1, "started_at": 1.0, "kind": "dp_sgd", "steps": 4}]}


def _write_runs(root: Path, w: dict) -> None:
    """Run folders that are never an init, or whose releases cannot be read."""
    card = {"model": "mlp", "epsilon": 4.0}
    _run_folder(root / "audit_run", w, ledger=_ledger(), summary={"audit_canaries": 8, "private_release": False})
    _run_folder(root / "audit_card", w, ledger=_ledger(), card={**card, "private_release": False})
    _run_folder(root / "audit_marked", w, ledger=_ledger())  # killed before its summary: its mark says it
    (root / "audit_marked" / "audit_run.json").write_text(json.dumps({"private_release": False}))
    _run_folder(root / "garbage_ledger", w, ledger="{not json", summary={"epsilon": 4.0})
    _run_folder(root / "list_ledger", w, ledger="[1, 2]", summary={"epsilon": 4.0})
    _run_folder(root / "no_ledger", w, summary={"epsilon": 4.0})
    _run_folder(root / "bad_releases", w, ledger={"releases": "x"}, summary={"epsilon": 4.0})
    _run_folder(root / "negative_q", w, ledger=_ledger(q=-1.0), summary={"epsilon": 4.0})
    _run_folder(root / "garbage_inherited", w, ledger={**_ledger(), "inherited": [{"source": 3}]}, summary={})
    _run_folder(root / "garbage_summary", w, ledger=_ledger(), summary="\x00\xff garbage")
    _run_folder(root / "nonprivate_same", w, ledger=_ledger(sigma=0.0), summary={"private": False},
                config='[data]\nnum_samples = 2000\n[privacy]\nprivate = false\n')
    _run_folder(root / "nonprivate_unknown", w, ledger=_ledger(sigma=0.0), summary={"private": False})
    (root / "orphan").mkdir()
    _run_folder(root / "orphan" / "released", w, card=card)  # a model/ moved away from its run folder
    _run_folder(root / "orphan_garbage", w, card="garbage")
    (root / "truncated_run" / "model").mkdir(parents=True)
    np.savez(root / "truncated_run" / "model" / "params.npz", **w)
    data = (root / "truncated_run" / "model" / "params.npz").read_bytes()
    (root / "truncated_run" / "model" / "params.npz").write_bytes(data[: len(data) // 2])
    (root / "truncated_run" / "ledger.json").write_text(json.dumps(_ledger()))


def _write_files(root: Path, w: dict) -> None:
    """Weight files: truncated, not numbers, not finite, the wrong arrays."""
    np.savez(root / "good.npz", **w)
    data = (root / "good.npz").read_bytes()
    (root / "truncated.npz").write_bytes(data[: len(data) // 2])
    (root / "header_only.npz").write_bytes(data[:30])
    np.savez(root / "strings.npz", **{k: np.full(v.shape, "a") for k, v in w.items()})
    np.savez(root / "complex.npz", **{k: v.astype(np.complex64) + 1j for k, v in w.items()})
    np.savez(root / "nan.npz", **{k: np.where(np.arange(v.size).reshape(v.shape) == 3, np.nan, v) for k, v in w.items()})
    np.savez(root / "inf.npz", **{**w, "Dense_1/bias": np.full(8, -np.inf, np.float32)})
    np.savez(root / "huge.npz", **{**w, "Dense_0/bias": np.full(8, 1e300)})  # finite in float64, inf in float32
    np.savez(root / "empty.npz")
    np.save(root / "plain.npy", np.zeros(3))
    (root / "plain.npy").rename(root / "array.npz")  # a .npy named .npz: np.load returns an array
    (root / "loops").mkdir()
    os.symlink(root / "loops" / "b", root / "loops" / "a")
    os.symlink(root / "loops" / "a", root / "loops" / "b")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 12)), rng.integers(0, 4, 300)
    np.savez(root / "private.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    (root / "copy_of_private.npz").write_bytes((root / "private.npz").read_bytes())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every file a case names, written once: {name: path}."""
    root = tmp_path_factory.mktemp("bad-init")
    (root / "tiny.toml").write_text(TINY_TOML)
    w = _weights(root)
    _write_files(root, w)
    _write_runs(root, w)
    pkgs = root / "pkgs"
    pkgs.mkdir()
    (pkgs / "initloaders.py").write_text(LOADERS)
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache, before any case
    found = {p.name: str(p) for p in root.iterdir()} | {"root": str(root), "loop": str(root / "loops" / "a"),
                                                        "orphan_model": str(root / "orphan" / "released" / "model")}
    sys.path.insert(0, str(pkgs))
    yield found
    sys.path.remove(str(pkgs))
    sys.modules.pop("initloaders", None)


TINY = ["--config", "{tiny.toml}"]


def _init(path: str, *more: str) -> list[str]:
    return [*TINY, "--set", f'init.path="{path}"', *more]


def _loader(name: str) -> list[str]:
    return [*TINY, "--set", f'init.loader="initloaders:{name}"']


NPZ = ["--set", "data.dataset=npz", "--set", "data.path={private.npz}", "--set", "train.batch_size=32"]

# (sub-command and arguments, a fragment of the one line, whether the case may load data)
CASES = [
    # the cases: each crashed, dropped imaginary parts, trained from scratch or published a digest
    (["train", *_init("{truncated.npz}"), "--out", "{root}/o1"], "is not a readable .npz", False),
    (["train", *_init("{truncated_run}"), "--out", "{root}/o2"], "is not a readable .npz", False),
    (["train", *_init("{strings.npz}"), "--out", "{root}/o3"], "of dtype <U1", False),
    (["train", *_init("{complex.npz}"), "--out", "{root}/o4"], "of dtype complex64", False),
    (["train", *_loader("needs_argument"), "--out", "{root}/o5"], "it takes arguments (path)", False),
    (["train", *_loader("raises"), "--out", "{root}/o6"], "RuntimeError: the weights server is down", False),
    (["train", *_init("{private.npz}", "--set", 'init.head=["*"]'), *NPZ, "--out", "{root}/o7"],
     "it is the private data", False),
    # not finite, not numbers, not arrays
    (["train", *_init("{nan.npz}"), "--out", "{root}/o8"], "NaN or infinite values in", False),
    (["train", *_init("{inf.npz}"), "--out", "{root}/o9"], "NaN or infinite values in Dense_1/bias", False),
    (["train", *_init("{huge.npz}"), "--out", "{root}/o10"], "overflows the model's dtype float32", True),
    (["train", *_init("{empty.npz}"), "--out", "{root}/o12"], "holds no array", False),
    (["train", *_init("{header_only.npz}"), "--out", "{root}/o13"], "is not a readable .npz", False),
    (["train", *_init("{array.npz}"), "--out", "{root}/o14"], "is not a readable .npz", False),
    (["train", *_init("{loop}"), "--out", "{root}/o20"], "cannot be", False),
    # arrays that do not fit the model
    (["train", *_init("{good.npz}", "--set", 'init.head=["Dense_7"]'), "--out", "{root}/o24"],
     "init.head pattern 'Dense_7' names no parameter", True),
    (["train", *_init("{good.npz}", "--set", 'init.head=["re:Conv_.*"]'), "--out", "{root}/o25"],
     "names no parameter", True),
    # loaders
    (["train", *_loader("strings"), "--out", "{root}/o29"], "of dtype <U3", False),
    (["train", *_loader("nan"), "--out", "{root}/o30"], "NaN or infinite values in Dense_0/kernel", False),
    (["train", *_loader("complex_numbers"), "--out", "{root}/o31"], "of dtype complex64", False),
    # run folders that are never an init, or whose releases cannot be read (and so cannot be composed)
    (["train", *_init("{audit_run}"), "--out", "{root}/o36"], "an audit's run is never an init", False),
    (["train", *_init("{audit_card}/model/params.npz"), "--out", "{root}/o37"], "an audit's run is never an init",
     False),
    (["train", *_init("{audit_marked}"), "--out", "{root}/o58"], "an audit's run is never an init", False),
    (["train", *_init("{garbage_ledger}"), "--out", "{root}/o38"], "is not the JSON tanplan writes", False),
    (["train", *_init("{list_ledger}"), "--out", "{root}/o39"], "is not the JSON tanplan writes", False),
    (["train", *_init("{no_ledger}/model"), "--out", "{root}/o40"], "holds no ledger.json", False),
    (["train", *_init("{bad_releases}"), "--out", "{root}/o41"], "is not a ledger tanplan writes", False),
    (["train", *_init("{negative_q}"), "--out", "{root}/o42"], "is not a ledger tanplan writes", False),
    (["train", *_init("{garbage_inherited}"), "--out", "{root}/o43"], "is not a ledger tanplan writes", False),
    (["train", *_init("{garbage_summary}"), "--out", "{root}/o44"], "summary.json' is not the JSON", False),
    (["train", *_init("{nonprivate_same}"), "--out", "{root}/o45"], "trained without privacy on data that may be",
     False),
    (["train", *_init("{nonprivate_unknown}"), "--out", "{root}/o46"], "(ε = ∞)", False),
    (["train", *_init("{orphan_model}"), "--out", "{root}/o47"], "without its run folder", False),
    (["train", *_init("{orphan_garbage}/model"), "--out", "{root}/o48"], "is not the JSON tanplan writes", False),
    # the private data as weights: a byte copy too, and in every command that trains
    (["train", *_init("{copy_of_private.npz}"), *NPZ, "--out", "{root}/o50"], "it is the private data", False),
    (["launch", *_init("{private.npz}"), *NPZ, "--out", "{root}/o51"], "it is the private data", False),
    (["run", *_init("{copy_of_private.npz}"), *NPZ, "--set", "tuning.path={good.npz}", "--out", "{root}/o52"],
     "it is the private data", False),
    # every command that trains checks [init] before any data
    (["launch", *_init("{nan.npz}"), "--out", "{root}/o53"], "NaN or infinite values", False),
    (["run", *_init("{audit_run}"), "--out", "{root}/o54"], "an audit's run is never an init", False),
    (["sweep", *_init("{truncated.npz}"), "--proxy-batch-size", "64", "--out", "{root}/o55"],
     "is not a readable .npz", False),
    (["fit", *_loader("raises"), "--out", "{root}/o56"], "calling it failed", False),
    (["audit", *_init("{complex.npz}"), "--out", "{root}/o57"], "of dtype complex64", False),
]


def _fill(text: str, files: dict) -> str:
    """{name} -> the path of the fixture file `name` (other braces, as in TOML tables, stay)."""
    return re.sub(r"\{([^{}]+)\}", lambda m: files.get(m.group(1), m.group(0)), text)


def _no_data(*args, **kwargs):
    raise AssertionError("data was loaded before the command had checked its [init]")


def _tree(root) -> dict:
    """Every path under root with its size: a refused input writes nothing (no folder, secret or lock)."""
    return {str(p): p.stat().st_size if p.is_file() else None for p in Path(root).rglob("*")}


@pytest.mark.parametrize("argv, fragment, data", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_init_is_one_line_exit_2_and_nothing_written(files, monkeypatch, capsys, argv, fragment, data):
    if not data:
        monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    argv = [_fill(a, files) for a in argv]
    before = _tree(files["root"])
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert (got, err.count("\n"), err.startswith("tanplan:")) == (2, 1, True), err
    assert fragment in err, err
    assert "Traceback" not in err and out == ""
    assert _tree(files["root"]) == before  # nothing written: no run folder, secret, lock or checkpoint


def test_the_private_data_as_init_publishes_no_digest_of_it(files, capsys):
    """init.path = the private .npz with every parameter a head: refused, and its digest (which summary.json and
    ledger.json would have stated) is nowhere in the line."""
    with np.load(files["private.npz"]) as f:
        digest = digest_of({k: f[k] for k in f.files})
    argv = [_fill(a, files) for a in ["train", *_init("{private.npz}", "--set", 'init.head=["*"]'), *NPZ]]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "it is the private data" in err and digest not in err

