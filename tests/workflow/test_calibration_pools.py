"""experiments/calibration_pools.py: the pools' runs written from the engine's typed summary (resumable), and a
setting's planned cost (issue 30's large target: planned, not trained here) computed before anything trains."""

import json
import sys

import pytest
from fakes import SMALL, fake_train
from helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import calibration_pools as pools  # noqa: E402

from tanplan.engine import loop  # noqa: E402


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
