"""`pip install .` without extras, in a fresh venv: the planner works, imports no JAX (`python -X importtime`
lists every module it loads), the commands that train name the extra to install, and the wheel ships the
demo config with the content of experiments/mnist1d.toml.

Slow (about a minute: a venv, a wheel build and numpy, scipy, dp-accounting, matplotlib installed):
`make test-install` runs it, and so does .ci/run after `make test`."""

import json
import shutil
import subprocess
import sys

import pytest
from helpers import CONFIG, ROOT

from tanplan.extras import TRAIN_MODULES

pytestmark = pytest.mark.slow

PLAN = ["plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "1000", "--epsilon", "8"]
# The source tree as a fresh clone has it: no venv, no build folder whose stale files could reach the wheel.
TOP_LEVEL_ONLY = {".git", ".venv", "build", "reports", ".pytest_cache", ".hypothesis", ".cache"}


def _not_source(folder, names):
    top = {n for n in names if n in TOP_LEVEL_ONLY} if folder == str(ROOT) else set()
    return top | {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def planner_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_not_source)
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr[-2000:]
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)])
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv / "bin", root


def test_the_base_install_holds_no_package_of_the_train_extra(planner_venv):
    bin_dir, _ = planner_venv
    listed = _run([str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"])
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"tanplan", "numpy", "scipy", "dp-accounting", "matplotlib"} <= names
    assert not names & {"jax", "jaxlib", "flax", "optax", "jax-privacy", "orbax-checkpoint", "ray", "optuna",
                        "pandas", "chex", "tensorboardx"}


def test_tanplan_plan_works_and_imports_no_jax(planner_venv, tmp_path):
    bin_dir, _ = planner_venv
    shown = _run([str(bin_dir / "tanplan"), *PLAN], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "ε exact (PLD, add/remove-one)" in shown.stdout and "ε exact (RDP, add/remove-one)" in shown.stdout
    # The same σ as the development install calibrates.
    fresh = _run([str(bin_dir / "tanplan"), *PLAN, "--json"], cwd=tmp_path)
    here = _run([sys.executable, "-m", "tanplan", *PLAN, "--json"], cwd=ROOT)
    assert json.loads(fresh.stdout)["sigma"] == json.loads(here.stdout)["sigma"]
    code = f"from tanplan.cli import main; raise SystemExit(main({[*PLAN, '--json']!r}))"
    timed = _run([str(bin_dir / "python"), "-X", "importtime", "-c", code], cwd=tmp_path)
    assert timed.returncode == 0, timed.stderr[-2000:]
    loaded = {line.split("|")[-1].strip().split(".")[0] for line in timed.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert {"tanplan", "numpy", "scipy", "dp_accounting"} <= loaded
    assert not loaded & set(TRAIN_MODULES), sorted(loaded & set(TRAIN_MODULES))


def test_the_frontier_proxy_and_figures_need_no_extra(planner_venv, tmp_path):
    bin_dir, _ = planner_venv
    tanplan = str(bin_dir / "tanplan")
    frontier = _run([tanplan, "plan", "--dataset-size", "16000", "--epsilon", "0.7", "--compute", "1228800", "--json"])
    proxy = _run([tanplan, "proxy", "--dataset-size", "1281167", "--batch-size", "16384", "--steps", "72000",
                  "--sigma", "2.5", "--proxy-batch-size", "128", "--json"])
    report = _run([tanplan, "plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "2000", "--sigma", "1",
                   "--out", str(tmp_path / "plan")])
    assert [frontier.returncode, proxy.returncode, report.returncode] == [0, 0, 0], frontier.stderr + proxy.stderr
    assert json.loads(frontier.stdout)["candidates"] and json.loads(proxy.stdout)["proxy_batch_size"] == 128
    assert (tmp_path / "plan" / "privacy_wall.png").stat().st_size > 0


def test_training_commands_name_the_extra_and_the_demo_config_ships(planner_venv, tmp_path):
    bin_dir, _ = planner_venv
    for argv in (["train", "--config", CONFIG, "--out", str(tmp_path / "run")], ["demo", "--out", str(tmp_path)]):
        refused = _run([str(bin_dir / "tanplan"), *argv], cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert refused.stderr.count("\n") == 1 and "pip install 'tanplan[train]'" in refused.stderr
    assert not (tmp_path / "run").exists()
    code = "from tanplan.commands.demo import CONFIG; print(CONFIG.read_text(encoding='utf-8'), end='')"
    shipped = _run([str(bin_dir / "python"), "-c", code], cwd=tmp_path)
    assert shipped.returncode == 0 and "site-packages" in _run(
        [str(bin_dir / "python"), "-c", "from tanplan.commands.demo import CONFIG; print(CONFIG)"], cwd=tmp_path).stdout
    assert shipped.stdout == (ROOT / "experiments" / "mnist1d.toml").read_text(encoding="utf-8")
