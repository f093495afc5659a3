"""Packaging: the planner without the `train` extra (plan and proxy work; every other command, and a planner
path that would need JAX, says which extra to install in one line, exit 2, before writing anything), the
demo config shipped in the package as the one file in experiments/, and the helpers' doctests.
tests/test_planner_install.py checks the same in a fresh venv from `pip install .` (slow; run by .ci/run)."""

import doctest
import json
import subprocess
import sys
import tomllib

import pytest
from helpers import CONFIG, ROOT

from tanplan import extras, provenance
from tanplan.commands import demo

# Runs each argv through tanplan's entry point in a process where no module of the train extra can be
# imported (as after `pip install tanplan`): a finder first on sys.meta_path refuses them.
NO_EXTRA = """
import contextlib, io, json, sys
from tanplan.extras import TRAIN_MODULES

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in TRAIN_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from tanplan.cli import main

results = []
for argv in json.loads(sys.argv[1]):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    results.append({"code": code, "err": err.getvalue(), "out": out.getvalue()})
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(TRAIN_MODULES))
print(json.dumps({"results": results, "loaded": loaded}))
"""


def test_without_the_train_extra_the_planner_works_and_the_rest_names_the_extra(tmp_path):
    out = tmp_path / "run"
    argvs = [
        ["plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "1000", "--epsilon", "8", "--json"],
        ["proxy", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "1000", "--sigma", "3",
         "--proxy-batch-size", "256", "--json"],
        ["plan", "--dataset-size", "16000", "--epsilon", "0.7", "--compute", "1228800", "--min-batch-size", "2000"],
        ["train", "--config", CONFIG, "--out", str(out)],
        ["demo", "--out", str(out)],
        ["bench"],
        ["plan", "--dataset-size", "16000", "--epsilon", "0.7", "--device-hours", "0.1"],  # measures with JAX
    ]
    proc = subprocess.run([sys.executable, "-c", NO_EXTRA, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    planner, refused = found["results"][:3], found["results"][3:]
    assert [r["code"] for r in planner] == [0, 0, 0], planner
    assert json.loads(planner[0]["out"])["sigma"] > 0 and json.loads(planner[1]["out"])["proxy_sigma"] > 0
    for argv, r in zip(argvs[3:], refused):
        lines = r["err"].strip().splitlines()
        assert r["code"] == 2 and len(lines) == 1, (argv, r)
        assert f"tanplan {argv[0]} needs the 'train' extra" in lines[0]
        assert "pip install 'tanplan[train]'" in lines[0]
    assert not out.exists()  # refused before the config was read or a folder written
    assert found["loaded"] == []  # nothing of the extra was imported, or even half-imported


def test_the_train_extra_lists_every_module_it_names():
    """extras.TRAIN_MODULES and pyproject's train extra describe the same packages."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {r.split("[")[0].split(">")[0].split("<")[0].strip().lower()
                for r in project["optional-dependencies"]["train"]}
    distribution = {"jax_privacy": "jax-privacy", "orbax": "orbax-checkpoint", "tensorboardX": "tensorboardx"}
    assert {distribution.get(m, m).lower() for m in extras.TRAIN_MODULES} == declared
    base = {r.split(">")[0].strip() for r in project["dependencies"]}
    assert base == {"numpy", "scipy", "dp-accounting", "matplotlib"}
    assert not any("chex" in r for group in [project["dependencies"], *project["optional-dependencies"].values()]
                   for r in group)


def test_the_demo_config_ships_in_the_package_and_is_the_file_in_experiments():
    assert demo.CONFIG.is_file() and demo.CONFIG.parent == ROOT / "tanplan" / "configs"
    assert demo.CONFIG.samefile(CONFIG)  # one file: the package's is a link, not a copy that could drift
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "configs/*.toml" in data["tanplan"]


@pytest.mark.parametrize("module", [extras, provenance])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
