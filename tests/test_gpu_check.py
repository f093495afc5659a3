"""experiments/gpu_check.sh --dry-run: the device check runs end to end on a CPU at its smallest sizes and
writes its table (every measurement of docs/performance.md, with a value), each stage in its own process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~90 s on an idle 2-core CPU: four processes, small compilations, a launch
def test_gpu_check_dry_run_writes_every_measurement(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS="cpu")
    proc = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path),
                           "--accuracy-runs", "2"], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {r["measure"]: r["value"] for r in result["rows"]}
    assert result["dry_run"] is True and "cpu" in result["device"]
    assert "failed" not in rows.values()
    ratios = [v for m, v in rows.items() if m.startswith("DP ÷ non-private step")]
    speeds = [m for m in rows if m.startswith("steps/s")]
    assert len(ratios) == 2 and all(isinstance(v, float) and v > 0 for v in ratios)
    assert len(speeds) == 2 and speeds[1].endswith("bfloat16") and all(rows[m] > 0 for m in speeds)
    assert rows["tiny end-to-end launch (mnist1d)"] == "ok"
    means = [v for m, v in rows.items() if m.startswith("demo target accuracy")]
    assert len(means) == 2 and all("±" in v for v in means)  # float32 and bfloat16, two runs each
    assert "| measure | value | detail |" in (tmp_path / "gpu_check.md").read_text()
