"""The cuts a new user's own fine-tuning job hit (issue 47, the Why list), one test each: every one failed on
main. Tiny data and dry runs where they test the same thing."""

import importlib.util
import json
import re
import shlex
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fakes import use_mnist1d_shaped
from helpers import ROOT, TINY, run_cli

import tanplan
from tanplan.config import load_config
from tanplan.engine.setup import load_data
from tanplan.errors import UsageError
from tanplan.models.init import read_source
from tanplan.privacy.run_plan import resolve_plan
from tanplan.privacy import init_provenance
from tanplan.workflow import tuning


# ---------------------------------------------------------------------------------------------------
# a. a `tanplan run` folder is a released model: load_run and init.path read <run>/launch/model


# The runs below read their folders, not what they learnt: the per-example route's choice (its self-check and
# costing) is tested in tests/engine/test_routes.py
ROUTE = "train.grad_method=vmap"


@pytest.fixture(scope="module", autouse=True)
def mnist1d_shaped_data():
    """The launch and the fine-tuning run from it read mnist1d's shapes, not its signals: random rows stand in
    for generating the draw (and importing its generator). One stand-in for the module: both runs see the same
    draw, as their ledgers' composition needs."""

    mp = pytest.MonkeyPatch()
    use_mnist1d_shaped(mp)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory):
    """A `tanplan run` folder as the pipeline leaves it: run.json, summary.json and the launch's run in
    launch/ (trained here, tiny), nothing else."""
    out = tmp_path_factory.mktemp("cuts") / "m5k"
    tanplan.train(None, out / "launch", overrides=TINY + ["model.name=mlp", ROUTE])
    (out / "run.json").write_text(json.dumps({"config": {}, "options": {}}))
    (out / "summary.json").write_text(json.dumps({"launched": True}))
    return out


def test_load_run_reads_a_tanplan_run_folder(pipeline_folder):
    loaded = tanplan.load_run(pipeline_folder)
    assert loaded.card == json.loads((pipeline_folder / "launch" / "model" / "model.json").read_text())
    assert loaded.predict(np.zeros((2, 40, 1), np.float32)).shape == (2, 10)


def test_init_path_reads_a_tanplan_run_folder(pipeline_folder):
    cfg = load_config(None, TINY + ["model.name=mlp", ROUTE, f'init.path="{pipeline_folder}"',
                                    "privacy.total_epsilon=1000"])
    flat, text = read_source(cfg.init)
    assert text == str(pipeline_folder) and "Dense_0/kernel" in flat
    prov = init_provenance.read(cfg)  # its launch's ledger: the same mnist1d draw, so its release composes
    assert prov.kind == "composed" and prov.run == str(pipeline_folder / "launch")
    summary = tanplan.train(cfg, pipeline_folder.parent / "ft")  # a run from it: its init composed
    assert summary.init.provenance["run"] == str(pipeline_folder / "launch")


def test_a_tanplan_run_that_did_not_launch_is_no_init(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "summary.json").write_text(json.dumps({"launched": False}))
    cfg = load_config(None, [f'init.path="{tmp_path}"'])
    with pytest.raises(UsageError, match="released no model"):
        init_provenance.read(cfg)
    with pytest.raises(UsageError, match="released no model"):
        tanplan.load_run(tmp_path)


def test_the_docs_say_where_a_run_folders_model_is():
    from tanplan.workflow.pipeline.summary import released_model

    assert "launch/model" in (ROOT / "docs" / "api.md").read_text()
    assert "m5k/launch/model" in released_model(Path("runs/m5k"), True)


# ---------------------------------------------------------------------------------------------------
# b. README's mnist5k commands: the script's two files share no digit, so `tanplan run` takes them


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row_set(*arrays):
    return {row.tobytes() for x in arrays for row in np.asarray(x, np.float32).reshape(len(x), -1)}


def test_the_mnist5k_halves_share_no_digit_and_the_run_takes_them(tmp_path, capsys, monkeypatch):
    halves = _script("mnist5k_halves")
    monkeypatch.setattr(halves, "FILES", {k: tmp_path / v.name for k, v in halves.FILES.items()})
    files = halves.write_halves(force=True)
    with np.load(files["private"]) as p, np.load(files["public"]) as q:
        assert len(p["y_train"]) == len(q["y_train"]) == 2000 and len(p["y_test"]) == len(q["y_test"]) == 500
        assert not _row_set(p["x_train"], p["x_test"]) & _row_set(q["x_train"], q["x_test"])
    # README's `tanplan run` on them: every check the run makes before it trains (the near-copy rule included)
    code, out, err = run_cli(capsys, "run", "--dry-run", "--no-probe", "--config", str(ROOT / "experiments" /
                             "mnist5k.toml"), "--set", f'data.path="{files["private"]}"', "--set",
                             f'tuning.path="{files["public"]}"', "--out", str(tmp_path / "m5k"))
    assert code == 0, err
    assert "dry run: nothing trained" in out and not (tmp_path / "m5k").exists()


# ---------------------------------------------------------------------------------------------------
# d, e. flat rows agree between an .npz and a source; a loader reads a file's other rows by its options

CUT_DATA = '''
import numpy as np

import tanplan


def split(path, part="private"):
    """One file, two disjoint halves by option ("again": the private half under another option)."""
    with np.load(path) as f:
        x, y = f["x"], f["y"]
    rows = slice(len(y) // 2, None) if part == "public" else slice(0, len(y) // 2)
    x, y = x[rows], y[rows]
    return tanplan.ArraySource(x[:-40], y[:-40]), tanplan.ArraySource(x[-40:], y[-40:])


def flat(n=300, seed=0, path=None):
    """Flat rows (24,): a tabular source."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 3).astype(np.int32)
    x = (rng.normal(size=(n, 24)) + y[:, None]).astype(np.float32)
    return tanplan.ArraySource(x[:-40], y[:-40]), tanplan.ArraySource(x[-40:], y[-40:])
'''


@pytest.fixture
def cut_data(tmp_path, monkeypatch):
    (tmp_path / "cutdata.py").write_text(textwrap.dedent(CUT_DATA))
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(5)
    y = (np.arange(600) % 3).astype(np.int32)
    np.savez(tmp_path / "both.npz", x=(rng.normal(size=(600, 16, 1)) + y[:, None, None]).astype(np.float32), y=y)
    return tmp_path


def _flat_npz(path, shape=(24,), seed=9):
    rng = np.random.default_rng(seed)
    y = (np.arange(300) % 3).astype(np.int32)
    x = rng.normal(size=(300, *shape)).astype(np.float32)
    np.savez(path, x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    return path


SMALL = ["train.batch_size=64", "train.steps=4", "privacy.epsilon=4", "model.name=mlp", "model.width=8"]


def test_a_loader_with_other_options_at_the_private_path_is_a_public_set(cut_data):
    both = cut_data / "both.npz"
    base = SMALL + ['data.dataset="cutdata:split"', f'data.path="{both}"', 'data.options={part = "private"}',
                    'tuning.dataset="cutdata:split"', f'tuning.path="{both}"']
    t = tuning.for_config(load_config(None, base + ['tuning.options={part = "public"}']))
    assert t.data == "public" and t.proxy_cfg.data.options == {"part": "public"} and t.tuning_size == 260
    # the same rows under another option: the near-copy check still refuses them
    with pytest.raises(UsageError, match="holds examples of the private training or test set"):
        tuning.for_config(load_config(None, base + ['tuning.options={part = "again"}']))
    with pytest.raises(UsageError, match="is the private data file"):  # the same loader, the same options
        tuning.check(load_config(None, base + ['tuning.options={part = "private"}']))


def test_a_flat_row_npz_beside_a_flat_row_source_agrees(cut_data):
    public = _flat_npz(cut_data / "public.npz")
    cfg = load_config(None, SMALL + ['data.dataset="cutdata:flat"', f'tuning.path="{public}"'])
    t = tuning.for_config(cfg)
    assert load_data(t.proxy_cfg.data).input_shape == (24,) == t.proxy_data.input_shape
    assert load_data(t.proxy_cfg.data).num_train == t.tuning_size == 240
    # and the other way round: a flat-row private .npz (read as (24, 1)) beside a flat-row public source
    private = _flat_npz(cut_data / "private.npz", seed=11)
    cfg = load_config(None, SMALL + ["data.dataset=npz", f'data.path="{private}"', 'tuning.dataset="cutdata:flat"'])
    assert load_data(tuning.for_config(cfg).proxy_cfg.data).input_shape == (24, 1)


def test_the_dry_run_refuses_the_public_set_the_run_refuses(cut_data, capsys):
    public = _flat_npz(cut_data / "public.npz", shape=(12, 2))  # (12, 2): another task's rows
    sets = SMALL + ['data.dataset="cutdata:flat"', f'tuning.path="{public}"', "fit.batch_sizes=[16, 32]",
                    "sweep.trials=2", "sweep.top_k=0"]
    code, out, err = run_cli(capsys, "run", "--dry-run", "--no-probe", "--config", str(ROOT / "experiments" /
                             "mnist1d.toml"), *sum([["--set", s] for s in sets], []), "--out", str(cut_data / "r"))
    assert code == 2 and "its examples have shape (12, 2), the private set's (24,)" in err, err
    assert len(err.strip().splitlines()) == 1 and not (cut_data / "r").exists()


# ---------------------------------------------------------------------------------------------------
# f, g. the documented fine-tuning commands: pretraining with its own optimizer, cnn1d's layers frozen by name,
# the experiments' scripts run with the venv's python, runs/ ignored

DOCS = [ROOT / "README.md", ROOT / "docs" / "commands.md", ROOT / "docs" / "finetune.md"]


def _commands(verb):
    """(page, argv after the verb) of every `tanplan VERB` command shown in the pages (continued lines joined)."""
    found = []
    for page in DOCS:
        text = page.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            m = re.match(rf"\s*(?:\.venv/bin/)?tanplan {verb} (.*)", line)
            if m:
                found.append((page.name, shlex.split(m.group(1).split(" # ")[0])))
    return found


def _config(argv):
    """The config a documented command's --config and --set give."""
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    return load_config(str(ROOT / argv[argv.index("--config") + 1]), sets)


def test_the_documented_pretrain_commands_name_an_optimizer_for_training_without_noise():
    commands = _commands("pretrain")
    assert len(commands) >= 3
    for page, argv in commands:
        train = _config(argv).train  # what pretraining trains with (pretrain_config keeps [train])
        assert (train.optimizer, train.learning_rate, train.ema_decay) == ("adam", 0.003, 0.0), page


def test_the_documented_fine_tuning_commands_freeze_what_the_model_has():
    import jax

    from tanplan.models import create_model
    from tanplan.models.freeze import trainable_paths

    commands = [(page, argv) for verb in ("train", "run") for page, argv in _commands(verb)
                if any(a.startswith("init.") for a in argv)]
    assert len(commands) >= 3
    for page, argv in commands:
        cfg = _config(argv)  # init.frozen_blocks=... on mnist1d was refused here: not an integer
        model = create_model(cfg.model.name, 10, width=cfg.model.width, depth=cfg.model.depth)
        # the parameters' paths are what freezing reads: their shapes, traced, not their values computed
        params = jax.eval_shape(model.init, jax.random.key(0), np.zeros((1, 40, 1), np.float32))["params"]
        kept = trainable_paths(cfg.init, cfg.model, params)  # cnn1d refuses init.frozen_blocks
        assert kept is None or 0 < len(kept), page


def test_the_experiments_scripts_are_shown_with_the_venvs_python_and_runs_is_ignored():
    pages = [ROOT / "docs" / "finetune.md", ROOT / "experiments" / "mnist1d_shifted.py"]
    for page in pages:
        assert not re.search(r"(?<![/\w])python experiments/", page.read_text()), page.name
    assert "runs/" in (ROOT / ".gitignore").read_text().split()


# ---------------------------------------------------------------------------------------------------
# c. a public set smaller than the target's batch B serves proxies no larger than it


def _signal_npz(path, n_train, seed):
    rng = np.random.default_rng(seed)
    y = (np.arange(n_train + 60) % 3).astype(np.int32)
    x = (rng.normal(size=(n_train + 60, 16, 1)) + y[:, None, None]).astype(np.float32)
    np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])
    return path


# σ given (above the 0.87 that ε = 4 calibrates to): the public set's size is tested, not the calibration
SMALL_PUBLIC = ["train.batch_size=512", "train.steps=4", "privacy.epsilon=4", "privacy.sigma=1.0", "model.name=mlp",
                "model.width=8", "fit.batch_sizes=[16, 32]", "fit.seeds=2", "sweep.proxy_batch_size=16",
                "sweep.trials=2", "sweep.top_k=0", "data.dataset=npz", ROUTE]


def test_a_public_set_smaller_than_the_batch_serves_the_proxies(tmp_path, capsys):
    private, public = _signal_npz(tmp_path / "private.npz", 2000, 1), _signal_npz(tmp_path / "public.npz", 200, 2)
    sets = SMALL_PUBLIC + [f'data.path="{private}"', f'tuning.path="{public}"']
    # `tanplan run` checks the public set against the largest proxy it plans (B' = 32), not B = 512
    argv = ["run", "--dry-run", "--no-probe", "--config", str(ROOT / "experiments" / "mnist1d.toml"), "--out",
            str(tmp_path / "r")]
    code, out, err = run_cli(capsys, *argv, *sum([["--set", s] for s in sets], []))
    assert code == 0, err
    code, out, err = run_cli(capsys, *argv, *sum([["--set", s] for s in sets + ["fit.batch_sizes=[16, 256]"]], []))
    assert code == 2 and "fewer than B' = 256, the largest proxy batch planned" in err, err
    assert len(err.strip().splitlines()) == 1
    # a proxy on it trains at the target's σ/B (the launch's noise on its mean gradient: tanplan.workflow.tuning),
    # and its summary (the twin it states) reads back
    t = tuning.for_config(load_config(None, sets), proxy_batch=32)
    assert t.tuning_size == 200 < 512
    run = resolve_plan(load_config(None, sets), 2000).plan
    summary = tanplan.train(t.proxy_cfg.with_overrides({"train.proxy_batch_size": 32, "train.eval_every": 4}),
                            tmp_path / "proxy")
    assert summary.dataset_size == 200 and summary.batch_size == 32 and summary.target.batch_size == 512
    assert summary.sigma / 32 == pytest.approx(run.sigma / 512, rel=1e-9)
    assert summary.target.eta_step == pytest.approx(
        resolve_plan(t.proxy_cfg.with_overrides({"train.proxy_batch_size": 32}), 200).plan.eta_step)
    assert tanplan.RunSummary.from_dict(json.loads((tmp_path / "proxy" / "summary.json").read_text())).target
