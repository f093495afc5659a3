"""One table of bad and hostile inputs across every sub-command: each ends with exit 2 (bad input) or 3
(budget exceeded) and exactly one line on stderr starting with "tanplan:", never a traceback.

No case trains. Cases marked `data=False` must fail before any data is loaded or generated: loading is
made to fail the test for them. The others read a tiny mnist1d generated once for the module (so that the
first-run "generating mnist1d" note is not part of any case's stderr), or files the fixtures write.
"""

import re
import sys

import numpy as np
import pytest
from commands import hostile_inputs

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
    np.savez(root / "near.npz", x_train=x[:240] * 1.0000001 + 1e-6, y_train=y[:240], x_test=x[240:] * 1.0000001 + 1e-6,
             y_test=y[240:])  # the private set scaled and shifted: no row bit-identical, every example the same
    (root / "best_private.json").write_text('{"best": {"overrides": {"train.learning_rate": 2.0}}, "tuning": '
                                            '{"tuning_data": "private", "source": "the private set"}, '
                                            '"trials_dir": "no_such_trials"}')
    load_dataset("mnist1d", num_samples=2000)  # into this session's cache, before any case
    load_dataset("mnist1d", num_samples=2000, seed=1)  # the public tuning draw (data.seed + 1)
    found = {p.name: str(p) for p in root.iterdir()} | {"root": str(root), "marker": str(root / "pwned")}
    # issue 28's hostile data: memmap folders that lie, a loader that breaks the protocol, plug-in models
    hostile = root / "hostile"
    hostile.mkdir()
    found["hostile"] = str(hostile)
    for write in (hostile_inputs.write_memmaps, hostile_inputs.write_npz, hostile_inputs.write_image_folder,
                  hostile_inputs.write_package):
        found |= write(hostile)
    sys.path.insert(0, found["pkgs"])
    yield found
    sys.path.remove(found["pkgs"])
    for name in [m for m in sys.modules if m == "hostilepkg" or m.startswith("hostilepkg.")]:
        del sys.modules[name]


TINY = ["--config", "{tiny.toml}"]
NPZ = [*TINY, "--set", "data.dataset=npz", "--set", "data.path={private.npz}", "--set", "train.batch_size=32"]
TARGET = ["--dataset-size", "1000", "--batch-size", "100", "--steps", "100"]
SMALL = [*TINY, "--set", "train.batch_size=32"]


def _memmap(name: str) -> list[str]:
    return [*SMALL, "--set", "data.dataset=memmap", "--set", f"data.path={{{name}}}"]


def _loader(kind: str) -> list[str]:
    return [*SMALL, "--set", "data.dataset=hostilepkg.data:load", "--set", f'data.options={{kind="{kind}"}}']


def _model(name: str, *more: str) -> list[str]:
    return [*TINY, "--set", f"model.name=hostilepkg.nets:{name}", *more]


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
    (["audit", *TINY, "--canary-kind", "pixels"], 2, "invalid choice: 'pixels'", False),
    (["audit", *TINY, "--set", "privacy.private=false"], 2, "claims no ε", False),
    (["audit", *TINY, "--set", "pruning.method=random", "--set", "pruning.rate=0.5"], 2,
     "pruning and gradient dropping are not allowed", False),
    (["audit", *TINY, "--out", "{a_file}"], 2, "is a file, not a folder", False),
    (["audit", *TINY, "--out", "{audited}"], 2, "already holds an audited run", False),
    (["audit", *TINY, "--canaries", "100000"], 2, "parameters (each canary has coordinates of its own)", True),
    # baseline
    (["baseline", "--features", "{huge_label.npz}", "--epsilon", "1", "--method", "dp-ls"], 2, "y_train holds a label outside this range", False),
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
     "it holds examples of the private training or test set", True),
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
    # a folder is a memmap public set since issue 31: one without meta.json is refused as such
    (["fit", *TINY, "--out", "{root}/f6", "--set", "tuning.path={root}"], 2, "not a memmap folder", False),
    (["fit", *TINY, "--out", "{root}/f7", "--set", "tuning.path={root}/nope.npz"], 2, "no such file", False),
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
    # Issue 28: each was accepted and trained on, crashed (exit 1), or was refused only after config.toml,
    # the secret and the metrics were written. Memmap folders whose meta.json or files lie:
    (["train", *_memmap("mm_zero_std"), "--out", "{root}/h1"], 2, "std = [0.0] is not allowed", True),
    (["train", *_memmap("mm_nan_scale"), "--out", "{root}/h2"], 2, "scale = nan is not allowed", True),
    (["train", *_memmap("mm_negative_scale"), "--out", "{root}/h3"], 2, "scale = -1.0 is not allowed", True),
    (["train", *_memmap("mm_dtype"), "--out", "{root}/h4"], 2, "dtype float32 where meta.json says 'uint8'", True),
    (["train", *_memmap("mm_truncated"), "--out", "{root}/h5"], 2, "is truncated", True),
    (["train", *_memmap("mm_train_label"), "--out", "{root}/h6"], 2, "it holds a label outside this range", True),
    (["train", *_memmap("mm_channels"), "--out", "{root}/h7"], 2, "give 1 finite number(s), one per channel", True),
    (["train", *_memmap("mm_inf_mean"), "--out", "{root}/h8"], 2, "mean = [inf] is not allowed", True),
    (["train", *_memmap("mm_float_labels"), "--out", "{root}/h9"], 2, "labels must be integers", True),
    (["train", *_memmap("mm_zero_length"), "--out", "{root}/h10"], 2, "input_shape [0, 1] is not allowed", True),
    # a user's loader whose sources break the protocol (met on the public probe of the test source)
    (["train", *_loader("float_labels"), "--out", "{root}/h11"], 2, "labels have dtype float32", True),
    (["train", *_loader("short"), "--out", "{root}/h12"], 2, "a different number of inputs or labels", True),
    (["train", *_loader("shape"), "--out", "{root}/h13"], 2, "declared (8, 2)", True),
    (["train", *_loader("nan"), "--out", "{root}/h14"], 2, "NaN or infinite inputs", True),
    (["train", *_loader("strings"), "--out", "{root}/h15"], 2, "inputs must be numbers", True),
    (["train", *_loader("wide_labels"), "--out", "{root}/h16"], 2, "expected one label", True),
    (["train", *_loader("negative_label"), "--out", "{root}/h17"], 2, "outside [0, 3)", True),
    (["train", *_loader("nan_mean"), "--out", "{root}/h18"], 2, "mean = [nan] is not allowed", True),
    # npz files: training labels out of range (never named: private), labels that are not whole, NaN/inf rows
    (["train", *SMALL, "--set", "data.dataset=npz", "--set", "data.path={train_label.npz}", "--out", "{root}/h19"], 2,
     "a training label lies outside it", True),
    (["train", *SMALL, "--set", "data.dataset=npz", "--set", "data.path={half_labels.npz}", "--out", "{root}/h20"], 2,
     "not whole numbers", True),
    (["train", *SMALL, "--set", "data.dataset=npz", "--set", "data.path={inf_test.npz}", "--out", "{root}/h21"], 2,
     "x_test holds NaN or infinite values", True),
    (["train", *SMALL, "--set", "data.dataset=npz", "--set", "data.path={nan_train.npz}", "--out", "{root}/h22"], 2,
     "x_train holds NaN or infinite values", True),
    # plug-in models and losses (item 6): rows mixed (on the ghost route too), too few or too many logits, NaN loss
    (["train", *_model("row_mixing"), "--out", "{root}/h23"], 2, "changes when the other examples", True),
    (["train", *_model("row_mixing", "--set", "train.grad_method=ghost"), "--out", "{root}/h24"], 2,
     "changes when the other examples", True),
    (["train", *_model("narrow"), "--out", "{root}/h25"], 2, "the data has 10 classes", True),
    (["train", *_model("wide"), "--out", "{root}/h26"], 2, "the data has 10 classes", True),
    (["train", *TINY, "--set", "task.loss=hostilepkg.nets:nan_loss", "--out", "{root}/h27"], 2,
     "task.loss returns NaN", True),
    (["launch", *_model("narrow"), "--out", "{root}/h28"], 2, "the data has 10 classes", True),
    # convert (item 8): sizes that cannot fit, non-finite constants, a folder in use
    # a near-duplicate public set (item 10): the private npz × 1.0000001 + 1e-6
    (["sweep", *NPZ, "--proxy-batch-size", "8", "--out", "{root}/s10", "--set", "tuning.path={near.npz}"], 2,
     "it holds examples of the private training or test set", True),
    (["run", *NPZ, "--set", "train.batch_size=128", "--out", "{root}/r7", "--set", "tuning.path={near.npz}"], 2,
     "it holds examples of the private training or test set", True),
    (["convert", "--from", "image-folder", "{images}", "--out", "{root}/c1", "--image-size", "100000"], 2,
     "--image-size 100000 is not allowed", True),
    (["convert", "--from", "image-folder", "{images}", "--out", "{root}/c2", "--mean", "nan,0,0"], 2,
     "finite value(s)", True),
    (["convert", "--from", "image-folder", "{broken_images}", "--out", "{root}/c3", "--image-size", "4"], 2,
     "cannot read image", True),  # the temporary folder with the training images is removed
    (["convert", "--from", "image-folder", "{images}", "--out", "{hostile}", "--image-size", "4"], 2,
     "is not an empty folder", True),
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
                                        "optimize", "audit", "convert"}


def test_a_crafted_cifar_pickle_is_refused_and_does_not_run(files, capsys):
    from pathlib import Path

    assert cli.main(["train", "--config", files["tiny.toml"], "--set", "data.dataset=cifar10", "--set",
                     f"data.path={files['cifar']}", "--set", "model.name=cnn2d"]) == 2
    assert "refused without running it" in capsys.readouterr().err
    assert not Path(files["marker"]).exists()


@pytest.mark.parametrize("argv, private", [
    (["train", *SMALL, "--set", "data.dataset=npz", "--set", "data.path={train_label.npz}", "--out", "{root}/p1"],
     ["0..7", "label 7", "7)"]),
    (["train", *_memmap("mm_train_label"), "--out", "{root}/p2"], ["label 7", "0..7"]),
    (["train", *_loader("short"), "--out", "{root}/p3"], [str(d) for d in range(10)]),  # no number at all
])
def test_refusals_state_no_private_label_or_count(files, capsys, argv, private):
    """Item 9: the largest training label (7, where the test set's classes are 0..3) and the number of rows a
    read asked for are private; the one line names the rule broken, never the value."""
    assert cli.main([_fill(a, files) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not any(p in err for p in private), err


@pytest.mark.parametrize("kind, says", [("train_labels", "a label outside [0, 3) was read"),
                                        ("train_nan", "rows hold NaN or infinite inputs")])
def test_a_bad_training_row_met_mid_run_stops_with_one_line(files, capsys, tmp_path, kind, says):
    """Rows that only the training split holds are met when a step's batch is read (the public probe reads the
    test source only): the run stops with exit 2 and one line naming the rule, not the row, the label or the
    batch; no step after it runs (tanplan.engine.batches checks every batch it reads)."""
    out = tmp_path / "run"
    assert cli.main([_fill(a, files) for a in ["train", *_loader(kind), "--out", str(out), "--quiet"]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert not list(out.rglob("summary.json")) and not list(out.rglob("model.json"))  # nothing released
    assert not out.exists()  # refused at its first batch: no step ran, so nothing (config, secret, events) is left


@pytest.mark.parametrize("call, says", [
    (lambda t: t.train(123), "tanplan.train(config=123) is not allowed"),
    (lambda t: t.train(None, out=123), "tanplan.train(out=123) is not allowed"),
    (lambda t: t.train(None, overrides=[b"train.steps=1"]), "overrides takes a mapping or a list"),
    (lambda t: t.train(None, overrides={1: 2}), "overrides takes a mapping or a list"),
    (lambda t: t.plan(1000, 100, 100, sigma=True), "tanplan.plan(sigma=True) is not allowed"),
    (lambda t: t.plan("1000", 100, 100, sigma=1.0), "dataset_size takes a whole number"),
    (lambda t: t.proxy(1000, 100, 100, sigma=2.0, proxy_batch_sizes=["a"]), "each item a whole number"),
    (lambda t: t.launch(None, "x", best=5), "best takes a string or a path or None"),
    (lambda t: t.sweep(None, 5), "tanplan.sweep(out=5)"),
    (lambda t: t.train(None, resume="yes"), "resume takes True or False"),
    (lambda t: t.train(None, nosuch=1), "unexpected keyword argument 'nosuch'"),
])
def test_the_python_api_raises_usage_error_for_wrong_types(call, says, monkeypatch):
    import tanplan
    from tanplan.errors import UsageError

    monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    with pytest.raises(UsageError) as caught:
        call(tanplan)
    assert says in str(caught.value) and not isinstance(caught.value, TypeError)


def test_batches_that_do_not_fit_in_memory_are_refused_before_anything_is_written(files, capsys, monkeypatch):
    """Item 7's sizes against memory: with 64 KiB available, TINY's padded batches (mnist1d rows of 40 floats,
    B = 256) do not fit; the run is refused in one line naming the planned layout's B, nothing written."""
    import tanplan.data.dataset

    monkeypatch.setattr(tanplan.data.dataset, "available_memory", lambda: 2**16)
    before = _tree(files["root"])
    assert cli.main([_fill(a, files) for a in [*("train", *TINY), "--out", "{root}/m1"]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "examples of shape 40×1 do not fit" in err and "B = 256" in err, err
    assert _tree(files["root"]) == before


def test_a_step_that_does_not_fit_the_devices_memory_is_one_line_and_exit_2(monkeypatch, capsys):
    """data.aug_mult = 100000 on mnist1d asks XLA for 655 GB: its RESOURCE_EXHAUSTED is the config's fault
    (exit 2, one line naming what to lower), not an internal error (the run itself is faked here: it is the
    mapping of the error that is tested)."""
    from tanplan.commands import train

    def exhausted(args):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 655770341728 bytes.")

    monkeypatch.setattr(train, "execute", exhausted)
    assert cli.main(["train"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.aug_mult" in err and "internal error" not in err, err
