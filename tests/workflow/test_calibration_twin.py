"""experiments/calibration_twin.py: the replay scored against the pool's public twin (a rung at B' = B) and
against the launches, so that a gap between the public data and the private one is told from the law's error."""

import json
import sys

import numpy as np
import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))

import calibration_pools as pools  # noqa: E402
import calibration_twin  # noqa: E402


def _pool(path, launch_offset: float):
    """A flat curve at 0.80 (seed std 0.01) on rungs 16-256 and the twin at B' = 512; launches offset from it."""
    rng = np.random.default_rng(0)
    rows = [{"kind": "rung", "b": b, "seed": s, "acc": 0.80 + rng.normal(0, 0.01), "steps": 20}
            for b in (16, 32, 64, 128, 256, 512) for s in range(8)]
    rows += [{"kind": "launch", "b": 512, "seed": s, "acc": 0.80 + launch_offset + rng.normal(0, 0.01), "steps": 20}
             for s in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("offset", [0.0, 0.08])
def test_the_twin_measures_the_laws_error_and_the_launches_add_the_public_datas(tmp_path, monkeypatch, offset):
    setting = pools.Setting("twin", "experiments/mnist1d.toml", {**pools.PLD, "train.batch_size": 512},
                            {16: 8}, launches=8)
    monkeypatch.setitem(pools.SETTINGS, "twin", setting)
    _pool(tmp_path / "twin.jsonl", offset)
    rows = calibration_twin.twin_rows("twin", 20, tmp_path)
    cells = {r.split("|")[1].strip(): [float(c) for c in r.strip("|").split("|")[1:]] for r in rows}
    assert set(cells) == set(calibration_twin.LAWS)
    for twin_cover, twin_error, launch_cover, launch_error in cells.values():
        assert twin_cover >= 0.7 and twin_error < 2.0  # the law predicts the twin: a flat curve
        if offset:  # the launches 8 points above the twin: missed, by about the offset
            assert launch_cover < 0.1 and launch_error == pytest.approx(100 * offset, abs=2.0)
        else:
            assert launch_cover >= 0.7 and launch_error < 2.0


def test_a_pool_without_a_twin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(pools.SETTINGS, "twin", pools.Setting("twin", "experiments/mnist1d.toml", {}, {16: 8}, 8))
    (tmp_path / "twin.jsonl").write_text(json.dumps({"kind": "launch", "b": 512, "seed": 0, "acc": 0.8, "steps": 20}) + "\n")
    with pytest.raises(SystemExit, match="no public twin"):
        calibration_twin.twin_rows("twin", 5, tmp_path)
