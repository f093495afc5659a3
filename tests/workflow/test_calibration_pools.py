"""experiments/calibration_pools.py: the pools' runs written from the engine's typed summary (resumable), a
setting's planned cost (issue 30's large target: planned, not trained here) computed before anything trains, and
the fine-tuning setting (issue 31): its init pretrained once, its digest in every row, its proxies from it."""

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from fakes import SMALL, fake_train, use_mnist1d_shaped
from helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import calibration_pools as pools  # noqa: E402

from tanplan.config import load_config  # noqa: E402
from tanplan.engine import loop  # noqa: E402
from tanplan.models.init import digest_of, read_source  # noqa: E402
from tanplan.workflow import pretrain  # noqa: E402


@pytest.fixture(autouse=True)
def shaped_data(monkeypatch):
    """Random signals of mnist1d's shapes: the fake engine and the plans read only N (generating the fine-tuning
    setting's private and public draws costs about 10 CPU-s a process)."""

    use_mnist1d_shaped(monkeypatch)


def test_a_pool_is_written_from_the_typed_summaries_and_a_rerun_trains_nothing_again(tmp_path, monkeypatch):
    fake = fake_train(law=lambda b: 0.8, noise=0.0)
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    overrides = {k: int(v) for k, v in (s.split("=") for s in SMALL)}  # N 2000, B 512, S 20
    setting = pools.Setting("tiny", "experiments/mnist1d.toml", {**pools.PLD, **overrides}, {16: 2}, launches=1)
    out = tmp_path / "tiny.jsonl"
    pools.run_pool(setting, out, log=lambda line: None)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["b"], r["seed"]) for r in rows] == [("rung", 16, 0), ("launch", 512, 0), ("rung", 16, 1)]
    assert all(r["acc"] == pytest.approx(0.8) and r["steps"] == 20 and r["sigma"] > 0 for r in rows)
    pools.run_pool(setting, out, log=lambda line: None)  # resumed: every (kind, b, seed) is there
    assert len(fake.calls) == 3 and len(out.read_text().splitlines()) == 3


def test_a_pool_extended_elsewhere_takes_seeds_past_the_first_records_its_device_and_stops_in_time(
        tmp_path, monkeypatch):
    """A second pool of a setting (another machine): its experiment seeds start past the first pool's, so no
    init or evaluation is shared; only the rungs asked for; every row says its device; no run starts past
    `until` (a lent machine's lease); a rerun resumes where it stopped."""
    fake = fake_train(law=lambda b: 0.8, noise=0.0)
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    overrides = {k: int(v) for k, v in (s.split("=") for s in SMALL)}
    base = pools.Setting("tiny", "experiments/mnist1d.toml", {**pools.PLD, **overrides}, {16: 2, 32: 2}, launches=8)
    setting = pools.extension(base, "32:3", 2)
    assert setting.rungs == {32: 3} and setting.launches == 2
    assert pools.extension(base, "", None).rungs == {} and pools.extension(base, None, None) == base
    with pytest.raises(SystemExit, match="32-3"):
        pools.extension(base, "32-3", None)
    out, said = tmp_path / "tiny.jsonl", []
    pools.run_pool(setting, out, log=said.append, first_seed=100, until=0.0)  # the time is up before any run
    assert not out.exists() and not fake.calls and "stopped after 0 s, before rung 32 seed 100" in said[-1]
    pools.run_pool(setting, out, log=lambda line: None, first_seed=100)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["b"], r["seed"]) for r in rows] == [
        ("rung", 32, 100), ("launch", 512, 100), ("rung", 32, 101), ("launch", 512, 101), ("rung", 32, 102)]
    assert {r["device"] for r in rows} == {"cpu"} and len(fake.calls) == 5
    assert [c.experiment.seed for c in fake.calls] == [100, 100, 101, 101, 102]


def test_the_large_settings_cost_is_planned_from_a_measured_pool_without_training(tmp_path):
    reference = tmp_path / "ref.jsonl"
    rows = [{"kind": "rung", "b": 16, "seed": 0, "steps": 300, "wall": 0.01 * 16 * 300},  # 0.01 s an example
            {"kind": "rung", "b": 32, "seed": 0, "steps": 300, "wall": 0.005 * 32 * 300},  # 0.005 s at B' = 32
            {"kind": "launch", "b": 4096, "seed": 0, "steps": 300, "wall": 0.001 * 4096 * 300}]
    reference.write_text("".join(json.dumps(r) + "\n" for r in rows))
    setting = pools.SETTINGS["large_b16384"]
    cost = pools.planned_cost(setting, reference)
    rung_examples = {b: n * b * 300 for b, n in setting.rungs.items()}
    assert cost["rung_runs"] == sum(setting.rungs.values()) and cost["launches"] == 8
    assert cost["launch_example_gradients"] == 8 * 16384 * 300
    assert cost["rung_example_gradients"] == sum(rung_examples.values())
    all_rungs = (rows[0]["wall"] + rows[1]["wall"]) / (16 * 300 + 32 * 300)  # where the reference has no B'
    seconds = sum(e * (0.005 if b == 32 else 0.01 if b == 16 else all_rungs) for b, e in rung_examples.items())
    assert cost["hours"] == pytest.approx((seconds + 8 * 16384 * 300 * 0.001) / 3600)


@pytest.mark.parametrize("name, frozen", [("finetune", pools.FINETUNE_FROZEN), ("finetune_all", [])])
def test_the_finetune_settings_proxies_start_from_the_launchs_init_with_its_frozen_set_on_the_public_draw(name, frozen):
    """Issue 31: the fine-tuning pool's proxies are `tanplan run`'s: the same [init] weights and frozen set as
    the launch, the public mnist1d draw of the same task (not the shifted pretraining set), the target's η_step."""
    setting = pools.SETTINGS[name]
    cfg, proxy_cfg, plan = pools.configs(setting)
    assert plan.batch_size == 512 and plan.steps == 100 and plan.dataset_size == 4000
    assert plan.delta == pytest.approx(4000 ** -1.1) and plan.accountant == "pld"
    for c in (cfg, proxy_cfg):
        assert c.init.path == str(pools.FINETUNE_INIT) and list(c.init.frozen) == frozen
    assert not cfg.tuning.path  # the shifted set is the pretraining's alone
    assert proxy_cfg.data.seed == cfg.data.seed + 1 and proxy_cfg.data.dataset == "mnist1d"
    assert "finetune_init" in setting.prepare and setting.launches >= 8
    # rungs below the target for the ladder, and its public twin (B' = B: the target on the public draw)
    assert max(b for b in setting.rungs if b < plan.batch_size) == 256 and setting.rungs[plan.batch_size] >= 2


def _fake_pretrain(monkeypatch, calls):
    def train(cfg, out, progress=False):
        calls.append(cfg)
        (out / "model").mkdir(parents=True)
        np.savez(out / "model" / "params.npz", **{"Dense_0/kernel": np.ones((2, 3), np.float32)})
        return SimpleNamespace(test_accuracy=0.5)

    monkeypatch.setattr(loop, "train_and_evaluate", train)
    monkeypatch.setattr(pretrain, "check_public", lambda cfg, load: calls.append(("checked", cfg.tuning.path)))


def test_the_finetune_init_is_pretrained_once_without_privacy_on_the_shifted_set(tmp_path, monkeypatch):
    shifted = tmp_path / "shifted.npz"
    shifted.write_bytes(b"")  # there: not written again
    monkeypatch.setattr(pools, "FINETUNE_SHIFTED", shifted)
    monkeypatch.setattr(pools, "FINETUNE_DATA", tmp_path / "data")
    calls = []
    _fake_pretrain(monkeypatch, calls)
    out = pools.pretrained_init(pools.SETTINGS["finetune"], tmp_path / "init.npz", log=lambda line: None)
    assert out == tmp_path / "init.npz"  # the released params, as [init] path reads them
    assert digest_of(read_source(load_config(None, [f'init.path="{out}"']).init)[0]) == digest_of(
        {"Dense_0/kernel": np.ones((2, 3), np.float32)})
    assert calls[0] == ("checked", str(shifted))  # the public set checked against the private one first
    cfg = calls[1]
    assert not cfg.privacy.private and cfg.privacy.noise_seed == pools.FINETUNE_PRETRAIN_SEED >= 0
    assert cfg.data.dataset == "npz" and cfg.data.path == str(shifted) and cfg.experiment.seed == 0
    assert (cfg.train.optimizer, cfg.train.learning_rate, cfg.train.steps, cfg.train.ema_decay) == ("adam", 0.003, 400, 0)
    assert not cfg.init.path and not cfg.init.frozen  # pretraining starts from experiment.seed's draw, all trainable
    pools.pretrained_init(pools.SETTINGS["finetune"], out, log=lambda line: None)
    assert len(calls) == 2  # made once: a second call reuses it


@pytest.mark.parametrize("name", ["finetune", "finetune_all"])
def test_the_pools_init_is_in_the_repository_with_the_digest_its_rows_record(name):
    """The pool is tied to its weights (two pretrainings differ in their last bits): both are kept."""
    cfg, _, _ = pools.configs(pools.SETTINGS[name])
    rows = [json.loads(line) for line in (pools.POOLS / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    assert pools.FINETUNE_INIT.is_file() and {r["init"] for r in rows} == {pools.init_digest(cfg)}


def test_a_pool_from_pretrained_weights_records_their_digest_and_refuses_other_weights(tmp_path, monkeypatch):
    fake = fake_train(law=lambda b: 0.8, noise=0.0)
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    weights = tmp_path / "w.npz"
    np.savez(weights, **{"Dense_0/kernel": np.zeros((2, 3), np.float32)})
    overrides = {k: int(v) for k, v in (s.split("=") for s in SMALL)}
    setting = pools.Setting("tiny", "experiments/mnist1d.toml", {**pools.PLD, **overrides, "init.path": str(weights)},
                            {16: 1}, launches=1)
    out = tmp_path / "tiny.jsonl"
    pools.run_pool(setting, out, log=lambda line: None)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and {r["init"] for r in rows} == {digest_of({"Dense_0/kernel": np.zeros((2, 3), np.float32)})}
    assert all(c.init.path == str(weights) for c in fake.calls)  # rungs and launch from the same weights
    np.savez(weights, **{"Dense_0/kernel": np.ones((2, 3), np.float32)})
    bigger = pools.Setting("tiny", setting.config, setting.overrides, {16: 2}, launches=1)
    with pytest.raises(SystemExit, match="init"):
        pools.run_pool(bigger, out, log=lambda line: None)
    assert len(out.read_text().splitlines()) == 2 and len(fake.calls) == 2  # nothing trained with other weights
