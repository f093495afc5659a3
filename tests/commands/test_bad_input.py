"""One table of bad and hostile inputs across every sub-command: each ends with exit 2 (bad input) or 3
(budget exceeded) and exactly one line on stderr starting with "tanplan:", never a traceback.

No case trains. Cases marked `data=False` must fail before any data is loaded or generated: loading is
made to fail the test for them. The others read a tiny mnist1d generated once for the module (so that the
first-run "generating mnist1d" note is not part of any case's stderr), or files the fixtures write.
"""

import re

import numpy as np
import pytest

import tanplan.data
from tanplan import cli
from tanplan.data import load_dataset

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


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every file a case names, written once: {name: path}."""
    from data.test_datasets import write_hostile_cifar

    root = tmp_path_factory.mktemp("bad-input")
    (root / "tiny.toml").write_text(TINY_TOML)
    (root / "binary.toml").write_bytes(b"\x00\xff\xfe\x80[data]\n")
    (root / "list.json").write_text("[1, 2]")
    (root / "string.json").write_text('"abc"')
    (root / "binary.json").write_bytes(b"\x00\xff\xfe\x80garbage")
    (root / "a_file").write_text("not a folder")
    (root / "sweep").mkdir()
    (root / "audited" / "run").mkdir(parents=True)
    (root / "sweep" / "study.sqlite3").write_bytes(np.random.default_rng(0).bytes(5000))
    rng = np.random.default_rng(0)
    np.savez(root / "huge_label.npz", x_train=rng.normal(size=(200, 8)), y_train=np.r_[np.zeros(199), 1e12],
             x_test=rng.normal(size=(50, 8)), y_test=np.zeros(50))
    np.savez(root / "features.npz", x_train=rng.normal(size=(200, 8)), y_train=rng.integers(0, 3, 200),
             x_test=rng.normal(size=(50, 8)), y_test=rng.integers(0, 3, 50))
    write_hostile_cifar(root / "cifar", root / "pwned")
    np.savez(root / "zero_width.npz", x_train=np.zeros((200, 0)), y_train=rng.integers(0, 3, 200),
             x_test=np.zeros((50, 0)), y_test=rng.integers(0, 3, 50))
    # A private npz set, a "public" set holding some of its rows, and a set of another task.
    x, y = rng.normal(size=(300, 12)), rng.integers(0, 4, 300)
    np.savez(root / "private.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    np.savez(root / "shares.npz", x_train=np.concatenate([x[:5], rng.normal(size=(295, 12))]),
             y_train=rng.integers(0, 4, 300), x_test=rng.normal(size=(60, 12)), y_test=rng.integers(0, 4, 60))
    (root / "best_private.json").write_text('{"best": {"overrides": {"train.learning_rate": 2.0}}, "tuning": '
                                            '{"tuning_data": "private", "source": "the private set"}, '
                                            '"trials_dir": "no_such_trials"}')
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache, before any case
    load_dataset("mnist1d", num_samples=2000, seed=1)  # the public tuning draw (data.seed + 1)
    return {p.name: str(p) for p in root.iterdir()} | {"root": str(root), "marker": str(root / "pwned")}


TINY = ["--config", "{tiny.toml}"]
NPZ = [*TINY, "--set", "data.dataset=npz", "--set", "data.path={private.npz}", "--set", "train.batch_size=32"]
TARGET = ["--dataset-size", "1000", "--batch-size", "100", "--steps", "100"]

# (sub-command and arguments, exit code, a fragment of the one line, whether the case may load data)
CASES = [
    # plan and proxy
    (["plan", *TARGET, "--sigma", "1e-300"], 2, "sigma 1e-300 is not allowed", False),
    (["plan", *TARGET, "--sigma", "1e300"], 2, "sigma 1e+300 is not allowed", False),
    (["plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "1000000000000000000000", "--epsilon",
      "1"], 2, "where the accountants are trusted", False),
    (["plan", *TARGET, "--sigma", "0.05", "--accountant", "pld"], 2, "PLD accountant", False),
    (["plan", "--dataset-size", "100", "--batch-size", "200", "--steps", "10", "--sigma", "1"], 2, "--batch-size 200",
     False),
    (["plan", *TARGET, "--sigma", "nan"], 2, "not a finite number", False),
    (["plan", *TARGET, "--sigma", "1", "--delta", "1"], 2, "(0, 1)", False),
    (["plan", "--dataset-size", "100000", "--batch-size", "10", "--steps", "10", "--epsilon", "0.001", "--accountant",
      "rdp"], 2, "cannot be reached", False),
    (["plan", *TARGET, "--sigma", "2", "--dataset-sizes", "50"], 2, "dataset size 50 is not allowed", False),
    (["plan", *TARGET, "--sigma", "2", "--out", "{a_file}/report"], 2, "Not a directory", False),
    (["proxy", *TARGET, "--sigma", "2", "--proxy-batch-size", "512"], 2, "--proxy-batch-size 512", False),
    (["proxy", *TARGET, "--sigma", "2", "--savings", "0.5"], 2, "--savings 0.5", False),
    (["proxy", *TARGET, "--sigma", "1e300", "--proxy-batch-size", "10"], 2, "sigma 1e+300", False),
    # bench
    (["bench", "--batch-size", "200000000"], 2, "more than the", False),
    (["bench", "--model", "nosuchnet"], 2, "unknown model 'nosuchnet'", False),
    (["bench", "--repeats", "0"], 2, "must be an integer >= 1", False),
    # train: config files, keys and values
    (["train", "--config", "{binary.toml}"], 2, "is not UTF-8 text", False),
    (["train", "--config", "{root}/nope.toml"], 2, "does not exist", False),
    (["train", *TINY, "--set", "experiment.seed=99999999999999999999"], 2, "experiment.seed", False),
    (["train", *TINY, "--set", "nosection.key=1"], 2, "unknown config section", False),
    (["train", *TINY, "--set", "privacy.sigma=1e-300"], 2, "privacy.sigma", False),
    (["train", *TINY, "--set", "train.steps=100000000"], 2, "train.steps", False),
    (["train", *TINY, "--set", "model.name=nope"], 2, "unknown model 'nope'", False),
    (["train", *TINY, "--set", "model.name=cnn2d"], 2, "reads image inputs", False),
    (["train", *TINY, "--set", "data.augmentation=rrc"], 2, "data.augmentation = 'rrc'", False),
    (["train", *TINY, "--set", "data.dataset=npz", "--set", "data.path={root}/nope.npz"], 2, "no such file", False),
    (["train", *TINY, "--out", "{a_file}"], 2, "is a file, not a folder", False),
    (["train", *TINY, "--set", "privacy.sigma=0.05"], 2, "full-scale run", True),
    (["train", *TINY, "--set", "data.dataset=cifar10", "--set", "data.path={cifar}", "--set", "model.name=cnn2d"], 2,
     "is not allowed in a CIFAR-10 batch", True),
    # sweep
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{sweep}", "--resume"], 2, "not a sweep study", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s1", "--address", "notaport"], 2,
     "use auto, HOST:PORT", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s2", "--address", "127.0.0.1:1"], 2,
     "no Ray cluster answers", False),
    (["sweep", *TINY, "--proxy-batch-size", "1024", "--out", "{root}/s3"], 2, "--proxy-batch-size 1024", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s4", "--set",
      "sweep.space={learning_rate={low=4.0,high=1.0}}"], 2, "low = 4.0 > high", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s5", "--top-k", "-1"], 2, "--top-k -1", False),
    # fit
    (["fit", *TINY, "--best", "{list.json}", "--out", "{root}/f"], 2, "holds a JSON list", False),
    (["fit", *TINY, "--best", "{string.json}", "--out", "{root}/f"], 2, "holds a JSON str", False),
    (["fit", *TINY, "--best", "{binary.json}", "--out", "{root}/f"], 2, "not a text file", False),
    (["fit", *TINY, "--set", 'fit.batch_sizes="abc"', "--out", "{root}/f"], 2, "fit.batch_sizes", False),
    (["fit", *TINY, "--set", "fit.seeds=-2", "--out", "{root}/f"], 2, "fit.seeds = -2", False),
    (["fit", *TINY, "--set", "fit.level=5", "--out", "{root}/f"], 2, "fit.level = 5.0", False),
    (["fit", *TINY, "--batch-sizes", "64", "--out", "{root}/f"], 2, "two or more distinct", False),
    (["fit", *TINY, "--batch-sizes", "32,64", "--seeds", "1", "--out", "{root}/f"], 2, "--seeds 1 is not allowed", False),
    (["fit", *TINY, "--batch-sizes", "64,100000", "--out", "{root}/f"], 2, "proxy batch size 100000", False),
    # launch
    (["launch", *TINY, "--out", "{root}/l", "--backend", "ray", "--address", "notaport"], 2, "use auto, HOST:PORT",
     False),
    (["launch", *TINY, "--out", "{root}/l", "--backend", "ray", "--address", "127.0.0.1:1"], 2,
     "no Ray cluster answers", False),
    (["launch", *TINY, "--out", "{root}/l", "--address", "127.0.0.1:1"], 2, "not allowed with --backend local", False),
    (["launch", *TINY, "--out", "{root}/l", "--best", "{list.json}"], 2, "holds a JSON list", False),
    (["launch", *TINY, "--out", "{root}/l", "--set", "privacy.sigma=0.5", "--set", "privacy.epsilon=1",
      "--set", "train.steps=50"], 3, "above the budget", True),
    # run
    (["run", *TINY, "--out", "{root}/r", "--baselines", "--baseline-features", "/nope.npz"], 2, "does not exist", False),
    (["run", *TINY, "--out", "{root}/r", "--baseline-features", "{features.npz}"], 2, "without --baselines", False),
    (["run", *TINY, "--out", "{root}/r", "--set", "model.name=nope"], 2, "unknown model 'nope'", False),
    (["run", *TINY, "--out", "{a_file}"], 2, "is a file, not a folder", False),
    # audit
    (["audit", *TINY, "--canaries", "5"], 2, "--canaries 5 is not allowed", False),
    (["audit", *TINY, "--canaries", "0"], 2, "must be an integer >= 1", False),
    (["audit", *TINY, "--confidence", "1.5"], 2, "(0.5, 1)", False),
    (["audit", *TINY, "--set", "privacy.private=false"], 2, "claims no ε", False),
    (["audit", *TINY, "--set", "pruning.method=random", "--set", "pruning.rate=0.5"], 2,
     "pruning and gradient dropping are not allowed", False),
    (["audit", *TINY, "--out", "{a_file}"], 2, "is a file, not a folder", False),
    (["audit", *TINY, "--out", "{audited}"], 2, "already holds an audited run", False),
    (["audit", *TINY, "--canaries", "100000"], 2, "parameters (each canary has coordinates of its own)", True),
    # baseline
    (["baseline", "--features", "{huge_label.npz}", "--epsilon", "1", "--method", "dp-ls"], 2, "label 1e+12", False),
    (["baseline", "--features", "{features.npz}", "--epsilon", "1", "--method", "dp-ls", "--out", "{a_file}/sub"], 2,
     "is a file, not a folder", False),
    (["baseline", "--features", "{features.npz}", "--epsilon", "1", "--method", "nope"], 2, "nope", False),
    (["baseline", "--epsilon", "1"], 2, "--features F.npz is required", False),
    (["baseline", "--features", "/nope.npz", "--epsilon", "1"], 2, "does not exist", False),
    # Issue 21's list: each was accepted, crashed, or wrote a secret, a lock or a folder before refusing.
    (["train", *TINY, "--resume", "--out", "{root}/never"], 2, "does not exist", False),
    (["train", *TINY, "--set", "train.eval_batch_size=2e9", "--out", "{root}/t1"], 2, "train.eval_batch_size", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s6", "--set", "tuning.path=/tmp"], 2,
     "tuning.path = '/tmp'", False),
    (["baseline", "--features", "{features.npz}", "--epsilon", "1e300", "--method", "dp-ls"], 2, "--epsilon 1e+300",
     False),
    (["baseline", "--features", "{zero_width.npz}", "--epsilon", "1", "--method", "dp-ls"], 2, "0 features", False),
    (["fit", *TINY, "--vary", "data", "--factors", "1e308", "--proxy-batch-size", "64", "--out", "{root}/f2"], 2,
     "--factors 1e+308", True),
    (["fit", *TINY, "--vary", "steps", "--factors", "1e200", "--proxy-batch-size", "64", "--out", "{root}/f3"], 2,
     "--factors 1e+200", True),
    (["train", "--config", "{root}"], 2, "is a folder, not a TOML config file", False),
    (["train", *TINY, "--set", "privacy.sigma=0", "--set", "privacy.epsilon=0.0001", "--set", "privacy.accountant=rdp",
      "--out", "{root}/t2"], 2, "use the PLD accountant, or a larger epsilon", True),
    (["train", *TINY, "--set", "data.num_samples=1e400", "--out", "{root}/t6"], 2, "overflows", False),
    (["train", *TINY, "--set", "privacy.delta=0.9", "--out", "{root}/t3"], 2, "≥ 1/N", True),
    (["launch", *TINY, "--set", "privacy.delta=0.9", "--out", "{root}/l2"], 2, "≥ 1/N", True),
    (["run", *TINY, "--set", "privacy.delta=0.9", "--out", "{root}/r2"], 2, "≥ 1/N", True),
    (["train", *TINY, "--set", "privacy.delta=1e-400", "--out", "{root}/t4"], 2, "underflows to 0", False),
    (["launch", *TINY, "--set", "privacy.delta=1e-400", "--out", "{root}/l3"], 2, "underflows to 0", False),
    (["run", *TINY, "--set", "privacy.delta=1e-400", "--out", "{root}/r3"], 2, "underflows to 0", False),
    (["train", *TINY, "--set", "privacy.delta=0.000625", "--out", "{root}/t5"], 2, "allow_large_delta", True),
    (["launch", *TINY, "--set", "privacy.delta=0.001", "--out", "{root}/l4"], 2, "allow_large_delta", True),
    (["run", *TINY, "--set", "privacy.delta=0.001", "--out", "{root}/r4"], 2, "allow_large_delta", True),
    (["sweep", *NPZ, "--proxy-batch-size", "8", "--out", "{root}/s7", "--set", "tuning.path={private.npz}"], 2,
     "is the private data file", False),
    (["sweep", *NPZ, "--proxy-batch-size", "8", "--out", "{root}/s8", "--set", "tuning.path={shares.npz}"], 2,
     "5 of its examples are in the private", True),
    (["fit", *TINY, "--out", "{root}/f4", "--set", "tuning.path={features.npz}"], 2, "its examples have shape (8, 1)",
     True),
    # More of the same kind, tried as a hostile user would.
    (["plan", *TARGET, "--sigma", "1", "--delta", "1e-400"], 2, "underflows to 0", False),
    (["plan", *TARGET, "--sigma", "1", "--delta", "1e-310"], 2, "smallest normal double", False),
    (["plan", *TARGET, "--sigma", "1", "--accountant", "rdp", "--neighbouring", "replace_one"], 2,
     "--neighbouring replace_one", False),
    (["plan", "--dataset-size", "1000000", "--batch-size", "100000", "--steps", "1000", "--epsilon", "1e-9"], 2,
     "epsilon=1e-09 cannot be reached", False),
    (["proxy", *TARGET, "--sigma", "2", "--delta", "1.5", "--proxy-batch-size", "10"], 2, "(0, 1)", False),
    (["train", *TINY, "--set", "privacy.neighbouring=replace_one", "--set", "privacy.accountant=rdp"], 2,
     "only the PLD accountant", False),
    (["train", *TINY, "--set", "privacy.neighbouring=sideways"], 2, "privacy.neighbouring", False),
    (["train", *TINY, "--set", "privacy.delta=1e400"], 2, "overflows", False),
    (["train", *TINY, "--set", "privacy.delta=-1e-5"], 2, "privacy.delta", False),
    (["train", *TINY, "--set", "privacy.allow_large_delta=maybe"], 2, "true or false", False),
    (["train", *TINY, "--set", "train.eval_batch_size=0"], 2, "train.eval_batch_size", False),
    (["train", *TINY, "--resume", "--out", "{sweep}"], 2, "holds no run to continue", False),
    (["launch", *TINY, "--resume", "--out", "{root}/never"], 2, "does not exist", False),
    (["launch", *TINY, "--out", "{root}/l5", "--best", "{best_private.json}"], 2, "cannot be composed", True),
    (["launch", *TINY, "--set", "privacy.delta=1e-310", "--out", "{root}/l6"], 2, "smallest normal double", False),
    (["sweep", *TINY, "--proxy-batch-size", "64", "--out", "{root}/s9", "--set", "privacy.delta=0.9"], 2, "≥ 1/N",
     True),
    (["fit", *TINY, "--out", "{root}/f5", "--set", "privacy.delta=1e-400"], 2, "underflows to 0", False),
    (["fit", *TINY, "--out", "{root}/f6", "--set", "tuning.path={root}"], 2, "no such file", False),
    (["run", *NPZ, "--out", "{root}/r5", "--set", "tuning.path={private.npz}"], 2, "is the private data file", False),
    (["run", *TINY, "--out", "{root}/r6", "--set", "data.dataset=npz", "--set", "data.path={private.npz}"], 2,
     "needs tuning.path", False),
    (["optimize", *TINY, "--out", "{root}/o1", "--set", "privacy.sigma=0", "--set", "privacy.neighbouring=replace_one"],
     2, "privacy.neighbouring = 'replace_one' is not allowed", False),
    (["optimize", *TINY, "--out", "{root}/o2", "--set", "privacy.sigma=0", "--set", "privacy.delta=0.9"], 2, "≥ 1/N",
     True),
    (["baseline", "--features", "{features.npz}", "--epsilon", "1", "--delta", "1e-400"], 2, "underflows to 0", False),
    (["baseline", "--features", "{features.npz}", "--epsilon", "1", "--method", "dp-ls", "--delta", "1"], 2, "(0, 1)",
     False),
]


def _fill(text: str, files: dict) -> str:
    """{name} -> the path of the fixture file `name` (other braces, as in TOML tables, stay)."""
    return re.sub(r"\{([^{}]+)\}", lambda m: files.get(m.group(1), m.group(0)), text)


def _no_data(*args, **kwargs):
    raise AssertionError("data was loaded before the command had checked its input")


def _tree(root) -> dict:
    """Every path under root with its size: a refused input writes nothing (no secret, lock or folder)."""
    from pathlib import Path

    return {str(p): p.stat().st_size if p.is_file() else None for p in Path(root).rglob("*")}


@pytest.mark.parametrize("argv, code, fragment, data", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_and_no_traceback(files, monkeypatch, capsys, argv, code, fragment, data):
    if not data:
        monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    argv = [_fill(a, files) for a in argv]
    before = _tree(files["root"])
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert (got, err.count("\n"), err.startswith("tanplan:")) == (code, 1, True), err
    assert fragment in err, err
    assert "Traceback" not in err and out == ""
    assert _tree(files["root"]) == before  # nothing written: no folder, secret, lock or checkpoint


def test_the_table_covers_every_command_with_eighty_inputs_or_more():
    assert len(CASES) >= 80
    assert {c[0][0] for c in CASES} == {"plan", "proxy", "bench", "train", "sweep", "fit", "launch", "run", "baseline",
                                        "optimize", "audit"}


def test_a_crafted_cifar_pickle_is_refused_and_does_not_run(files, capsys):
    from pathlib import Path

    assert cli.main(["train", "--config", files["tiny.toml"], "--set", "data.dataset=cifar10", "--set",
                     f"data.path={files['cifar']}", "--set", "model.name=cnn2d"]) == 2
    assert "refused without running it" in capsys.readouterr().err
    assert not Path(files["marker"]).exists()
