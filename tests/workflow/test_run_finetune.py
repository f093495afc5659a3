"""`tanplan run` over fine-tuning (issue 31, item 4) on experiments/mnist1d_finetune.toml with a fake engine
(fast): every sweep trial, ladder rung and the launch start from the same [init] weights with the same frozen
set; the proxies learn on the public mnist1d draw, not on the shifted set the weights were pretrained on."""

import numpy as np
import pytest
from fakes import fake_pipeline_engine, fake_train, record_plan_reports, use_mnist1d_shaped
from helpers import ROOT

from tanplan.config import load_config
from tanplan.workflow.pipeline import run_pipeline

FROZEN = ["Conv_0", "NormAct_0", "Conv_1", "NormAct_1"]


@pytest.fixture
def engine(monkeypatch):
    """The engine replaced by a flat law (no Ray, no JAX training); the sweep trains two trials through it. It
    reads only N of the data: random signals of mnist1d's shapes (generating mnist1d's two draws costs about
    5 CPU-s a process), and no plan report (RDP curves, figures: tests/commands/test_plan_command.py's), only
    the calls to write one."""

    use_mnist1d_shaped(monkeypatch)
    train_fn = fake_train(law=lambda b: 0.8, noise=0.004)
    train_fn.plan_reports = []
    record_plan_reports(monkeypatch, train_fn.plan_reports)
    return fake_pipeline_engine(monkeypatch, train_fn, 1.0)


def test_every_stage_of_run_starts_from_the_init_with_its_frozen_set(tmp_path, engine, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the init is named relative to here, as the config's comment does
    (tmp_path / "pre" / "model").mkdir(parents=True)
    np.savez(tmp_path / "pre" / "model" / "params.npz", **{"Dense_0/kernel": np.zeros((2, 3), np.float32)})
    cfg = load_config(str(ROOT / "experiments" / "mnist1d_finetune.toml"),
                      ["data.num_samples=2000", "train.steps=20", "fit.batch_sizes=[16, 32]", "fit.seeds=2",
                       "fit.max_half_width=50", 'init.path="pre"', f"init.frozen={FROZEN}"])
    assert not cfg.tuning.path and cfg.fit.law == "noise"  # the proxies' public data is the mnist1d draw
    summary = run_pipeline(cfg, tmp_path / "run", log=lambda *a: None)
    assert engine.plan_reports == [tmp_path / "run" / "plan"]
    launch_cfg, proxy_cfgs = engine.calls[-1], engine.calls[:-1]
    assert summary.launched and len(proxy_cfgs) == 2 + 4  # two sweep trials, four ladder runs
    for c in proxy_cfgs:  # Ray trials run in their own folders: the proxies name the init absolutely
        assert c.init.path == str(tmp_path / "pre")
    assert (tmp_path / launch_cfg.init.path).resolve() == tmp_path / "pre"  # the launch runs here
    assert all(list(c.init.frozen) == FROZEN for c in engine.calls)
    assert {c.data.seed for c in proxy_cfgs} == {cfg.data.seed + 1} and {c.data.dataset for c in proxy_cfgs} == {"mnist1d"}
    assert launch_cfg.data.seed == cfg.data.seed and launch_cfg.train.proxy_batch_size == 0
    assert summary.model == "noise"
