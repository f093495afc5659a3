"""The public tuning set from any source a private set can come from: a memmap folder (read through memmaps,
never whole: a public set larger than memory) or a plugged-in loader by import path ([tuning] dataset,
options, path). Each is checked against the private set like an .npz, and refused before anything loads when
it cannot be served."""

import json
import textwrap

import numpy as np
import pytest

import tanplan
from tanplan import plugins
from tanplan.config import load_config
from tanplan.data.memmap import MemmapSource
from tanplan.errors import UsageError
from tanplan.privacy.run_plan import resolve_plan
from tanplan.engine.setup import load_data
from tanplan.workflow import pretrain, tuning

SHAPE, CLASSES = (16, 1), 3


def _rows(n, seed):
    """n examples of 3 classes, each class a shifted mean: learnable, and different for every seed."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % CLASSES).astype(np.int32)
    x = (rng.normal(size=(n, *SHAPE)) + y[:, None, None]).astype(np.float32)
    return x, y


def write_memmap(folder, n_train=300, n_test=60, seed=1, train_rows=None):
    """A memmap folder in the documented format (docs/api.md): meta.json and four .npy files."""
    folder.mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        x, y = _rows(n, seed + (split == "test"))
        if split == "train" and train_rows is not None:
            x[:len(train_rows)] = train_rows
        np.save(folder / f"{split}_x.npy", x)
        np.save(folder / f"{split}_y.npy", y)
    meta = {"format": "tanplan-memmap", "version": 1, "name": "public", "num_classes": CLASSES, "class_names": [],
            "input_shape": list(SHAPE), "dtype": "float32", "scale": 1.0, "mean": [0.0], "std": [1.0],
            "splits": {"train": n_train, "test": n_test}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def write_private(tmp_path, seed=10):
    (x, y), (x_test, y_test) = _rows(400, seed), _rows(80, seed + 1)
    path = tmp_path / "private.npz"
    np.savez(path, x_train=x, y_train=y, x_test=x_test, y_test=y_test)
    return path, x


def _cfg(private, *extra):
    return load_config(None, ["data.dataset=npz", f'data.path="{private}"', "train.batch_size=64", "train.steps=4",
                              "privacy.epsilon=4", *extra])


@pytest.mark.parametrize("explicit", [False, True])
def test_a_memmap_folder_is_a_public_set_read_through_memmaps(tmp_path, explicit):
    private, _ = write_private(tmp_path)
    public = write_memmap(tmp_path / "public")
    cfg = _cfg(private, f'tuning.path="{public}"', *(['tuning.dataset="memmap"'] if explicit else []))
    tuning.check(cfg)
    t = tuning.for_config(cfg)  # loads the private set, checks the public one against it (every row, in slices)
    assert t.data == "public" and t.proxy_cfg.data.dataset == "memmap" and t.proxy_cfg.data.path == str(public)
    assert t.tuning_size == 300 and t.private_size == 400 and str(public) in t.source
    assert isinstance(t.proxy_data.train, MemmapSource) and not t.proxy_data.in_memory  # rows read when asked for


def test_a_memmap_public_set_holding_a_private_row_is_refused(tmp_path):
    private, x = write_private(tmp_path)
    public = write_memmap(tmp_path / "public", train_rows=x[7:8])
    with pytest.raises(UsageError, match="holds examples of the private training or test set"):
        tuning.for_config(_cfg(private, f'tuning.path="{public}"'))


LOADER = '''
    import numpy as np

    import tanplan


    def load(n=240, shift=0.0, path=None):
        """A public set of n examples of the task, drawn apart from the private one; path is recorded."""
        rng = np.random.default_rng(99)
        y = (np.arange(n) % 3).astype(np.int32)
        x = (rng.normal(size=(n, 16, 1)) + y[:, None, None] + shift).astype(np.float32)
        load.calls.append({"n": n, "shift": shift, "path": path})
        return tanplan.ArraySource(x, y), tanplan.ArraySource(x[:40], y[:40])


    load.calls = []
'''


@pytest.fixture
def loader(tmp_path, monkeypatch):
    (tmp_path / "pubdata.py").write_text(textwrap.dedent(LOADER))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "pubdata:load"


def test_a_plugged_in_loader_is_a_public_set(tmp_path, loader):
    private, _ = write_private(tmp_path)
    cfg = _cfg(private, f'tuning.dataset="{loader}"', "tuning.options={n = 320, shift = 0.5}",
               f'tuning.path="{tmp_path}"')
    t = tuning.for_config(cfg)
    fn = plugins.resolve(loader, "test")
    assert fn.calls[-1] == {"n": 320, "shift": 0.5, "path": str(tmp_path)}  # options, and path= tuning.path
    assert t.proxy_cfg.data.dataset == loader and t.proxy_cfg.data.options == {"n": 320, "shift": 0.5}
    assert t.tuning_size == 320 and loader in t.source
    assert loader in plugins.of_config(cfg)  # Ray workers get the loader's folder on their PYTHONPATH


@pytest.mark.parametrize("extra, words", [
    (['tuning.dataset="nopkg.nomod:load"'], "no module named 'nopkg'"),
    (["tuning.options={{n = 3}}"], "tuning.options is not allowed"),
    (['tuning.dataset="parquet"'], "tuning.dataset = 'parquet' is not allowed"),
    (['tuning.path="{tmp}"'], "not a memmap folder"),
    (['tuning.dataset="memmap"', 'tuning.path="{private}"'], "not a memmap folder"),
    (['tuning.dataset="npz"', 'tuning.path="{tmp}"'], "no such file"),
])
def test_unservable_public_sources_are_refused_before_any_load(tmp_path, extra, words):
    private, _ = write_private(tmp_path)
    cfg = _cfg(private, *(e.format(tmp=tmp_path, private=private) for e in extra))
    with pytest.raises(UsageError, match=words):
        tuning.check(cfg)


def test_the_private_memmap_folder_is_no_public_set(tmp_path):
    folder = write_memmap(tmp_path / "data")
    cfg = load_config(None, ["data.dataset=memmap", f'data.path="{folder}"', f'tuning.path="{tmp_path}/./data"'])
    with pytest.raises(UsageError, match="is the private data file"):
        tuning.check(cfg)


def test_pretraining_reads_a_memmap_public_set(tmp_path):
    """`tanplan pretrain` on a memmap public set: the run trains on its rows (the summary's N is the public
    set's, its data the folder), and the private set is not what it trained on."""
    private, _ = write_private(tmp_path)
    public = write_memmap(tmp_path / "public")
    summary = tanplan.pretrain(None, tmp_path / "pre", overrides={
        "data.dataset": "npz", "data.path": str(private), "tuning.path": str(public), "model.name": "mlp",
        "model.width": 8, "model.depth": 1, "train.batch_size": 60, "train.steps": 60, "train.eval_every": 60,
        "train.physical_batch_size": 64, "train.learning_rate": 0.1})  # 20 steps at 0.5 scattered 0.37-0.97
    assert summary.private is False and summary.dataset_size == 300
    written = load_config(tmp_path / "pre" / "config.toml")
    assert written.data.dataset == "memmap" and written.data.path == str(public)
    assert summary.test_accuracy > 1 / CLASSES + 0.2  # it learned the task from the public rows


def test_pretraining_may_use_other_classes_but_never_private_rows(tmp_path):
    """Kurakin et al. pretrain on other labels (the head is replaced): pretrain's check lets the class count
    differ, never the input shape or a shared row; the proxies' check keeps the class count."""
    private, x = write_private(tmp_path)
    cfg = _cfg(private, f'tuning.path="{write_memmap(tmp_path / "public")}"')  # stands in: load() below serves
    private_set = load_data(cfg.data)
    five = tanplan.Dataset("five", *_rows(200, 3), *_rows(40, 4), num_classes=5)
    pretrain.check_public(cfg, lambda c: five if c.privacy.private is False else private_set)
    with pytest.raises(UsageError, match="5 classes"):
        tuning.check_public_set(cfg, five, private_set)
    leaked = tanplan.Dataset("leaked", np.concatenate([_rows(200, 3)[0], x[:1]]), np.zeros(201, np.int32),
                             *_rows(40, 4), num_classes=5)
    with pytest.raises(UsageError, match="holds examples of the private"):
        pretrain.check_public(cfg, lambda c: leaked if c.privacy.private is False else private_set)
    flat = tanplan.Dataset("flat", _rows(200, 3)[0][..., 0], _rows(200, 3)[1], _rows(40, 4)[0][..., 0],
                           _rows(40, 4)[1], num_classes=5)
    with pytest.raises(UsageError, match="shape"):
        pretrain.check_public(cfg, lambda c: flat if c.privacy.private is False else private_set)


@pytest.mark.parametrize("data", ["public", "private"])
def test_the_proxies_name_their_files_by_absolute_paths(tmp_path, monkeypatch, data):
    """Sweep trials run in Ray workers whose working directory is their trial's folder: a relative init.path
    or data path (found in the sweep of a new user's `tanplan run`) must reach them absolute; a loader's
    path= that names no file here (a URL) is left as written."""
    private, _ = write_private(tmp_path)
    write_memmap(tmp_path / "public")
    (tmp_path / "pre").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = _cfg("private.npz", 'tuning.path="public"', f'tuning.data="{data}"')
    cfg = cfg.with_overrides({"init.path": "pre"})
    t = tuning.resolve(cfg, resolve_plan(cfg, 400).plan, load=lambda c: load_data(c.data))
    assert t.proxy_cfg.init.path == str(tmp_path / "pre")
    assert t.proxy_cfg.data.path == str(tmp_path / ("public" if data == "public" else "private.npz"))
    url = cfg.with_overrides({"data.path": "hf://some/set", "init.path": ""})
    assert tuning.absolute_paths(url).data.path == "hf://some/set"
