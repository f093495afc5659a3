"""docs/api.md's second example ("your own job") runs as written: flat feature rows from a plugged-in loader,
a linen model and an nnx factory taking `rngs` and `input_shape`, each trained and read back by
tanplan.load_run, whose predict matches the test accuracy of the summary."""

import os
import re
import subprocess
import sys

from helpers import ROOT, env

PAGE = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, flags=re.S)


def test_the_own_job_example_runs(tmp_path):
    files = {b.splitlines()[0][2:].strip(): b for b in BLOCKS if b.startswith("# my_tab/")}
    assert set(files) == {"my_tab/nets.py", "my_tab/data.py"}
    (tmp_path / "my_tab").mkdir()
    (tmp_path / "my_tab" / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    example = next(b for b in BLOCKS if b.startswith("# example: your own job"))
    variables = env()
    variables["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), variables.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=variables, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for factory in ("make_linen", "make_nnx"):
        found = re.search(rf"my_tab.nets:{factory}: accuracy (\S+), reloaded (\S+)", proc.stdout)
        assert found and found[1] == found[2] and float(found[1]) > 0.8, proc.stdout
    assert (tmp_path / "runs" / "make_nnx" / "model" / "model.json").is_file()
