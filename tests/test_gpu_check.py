"""experiments/gpu_check.sh --dry-run: the device check runs end to end on a CPU at its smallest sizes and
writes its table (every measurement of docs/performance.md, with a value)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~40 s on an idle 2-core CPU: three small compilations and a launch
def test_gpu_check_dry_run_writes_every_measurement(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS="cpu")
    proc = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    measures = [r["measure"] for r in result["rows"]]
    assert result["dry_run"] and "cpu" in result["device"]
    assert sum(m.startswith("DP ÷ non-private step") for m in measures) == 2
    assert [m for m in measures if m.startswith("steps/s")][1].endswith("bfloat16")
    assert all(isinstance(r["value"], float) and r["value"] > 0 for r in result["rows"][:4])
    assert result["rows"][-1]["value"] == "ok"  # the tiny launch completed
    assert "| measure | value | detail |" in (tmp_path / "gpu_check.md").read_text()
