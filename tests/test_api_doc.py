"""docs/api.md cannot drift: its package files are written to a temporary folder and its example runs there,
in a fresh Python (the package on PYTHONPATH, as a user's would be), and must print what it says."""

import os
import re
import subprocess
import sys

from helpers import ROOT, env

PAGE = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, flags=re.S)


def run_page_example(tmp_path, package: str, marker: str) -> subprocess.CompletedProcess:
    """Write the page's `# <package>/...` files into tmp_path and run the block that starts with marker."""
    files = {b.splitlines()[0][2:].strip(): b for b in BLOCKS if b.startswith(f"# {package}/")}
    assert set(files) == {f"{package}/nets.py", f"{package}/data.py"}
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    example = next(b for b in BLOCKS if b.startswith(marker))
    variables = env()
    variables["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), variables.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=variables, capture_output=True,
                          text=True, timeout=600)


def test_the_pages_example_runs(tmp_path):
    proc = run_page_example(tmp_path, "my_pkg", "# example")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    import tanplan

    plan = tanplan.plan(dataset_size=2000, batch_size=200, steps=20, epsilon=1.0)  # what the page computed
    assert (f"σ = {plan.sigma:.3f}, exact ε = {plan.epsilon():.3f} (PLD, of record; RDP {plan.epsilon('rdp'):.3f}), "
            f"δ = {2000 ** -1.1:.3g} (N^-1.1), {plan.regime_text}") in out, out
    assert f"proxy B' = 50, σ' = {plan.sigma / 4:.3f}, 4x cheaper" in out, out
    trained = re.search(r"accuracy (\S+) at ε = (\S+) \(PLD\), route ghost", out)
    assert trained and float(trained[1]) > 0.8 and float(trained[2]) <= 1.0, out
    launched = re.search(r"launch: accuracy (\S+), ε = (\S+) \(PLD; RDP (\S+), replace-one (\S+)\)", out)
    assert launched and float(launched[1]) > 0.8 and float(launched[2]) <= 1.0 < float(launched[3]), out
    assert re.search(r"fit: law holds (True|False), prediction \S+, ε of the proxies \S+ \(RDP\)", out), out
    assert "refused: model.name = 'my_pkg.nets:make_batchnorm' is not allowed: it keeps the collection 'batch_stats'" in out


def test_the_own_job_example_runs(tmp_path):
    """The page's second example ("your own job"): flat feature rows from a plugged-in loader, a linen model and
    an nnx factory taking `rngs` and `input_shape`, each trained and read back by tanplan.load_run, whose
    predict matches the test accuracy of the summary."""
    proc = run_page_example(tmp_path, "my_tab", "# example: your own job")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for factory in ("make_linen", "make_nnx"):
        found = re.search(rf"my_tab.nets:{factory}: accuracy (\S+), reloaded (\S+)", proc.stdout)
        assert found and found[1] == found[2] and float(found[1]) > 0.8, proc.stdout
    assert (tmp_path / "runs" / "make_nnx" / "model" / "model.json").is_file()


def test_the_fine_tuning_example_runs(tmp_path):
    """The page's third example: a user's own public loader and model, pretrained on four public classes,
    fine-tuned privately on two with the body frozen and the head re-initialised, read back by load_run."""
    proc = run_page_example(tmp_path, "my_ft", "# example: fine-tuning from your own public data")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    pre = re.search(r"pretrained on (\d+) public examples: accuracy (\S+), private False", out)
    assert pre and pre[1] == "3000" and float(pre[2]) > 0.5, out  # four classes: chance is 0.25
    ft = re.search(r"fine-tuned: accuracy (\S+) at ε = (\S+); head re-initialised \['head/bias', 'head/kernel'\], "
                   r"(\d+) of (\d+) parameters trained", out)
    assert ft and float(ft[2]) <= 1.0 and int(ft[3]) == 32 * 2 + 2 and int(ft[4]) == 40 * 32 + 32 + 32 * 32 + 32 + 66, out
    reloaded = re.search(r"reloaded: accuracy (\S+)", out)
    assert reloaded and reloaded[1] == ft[1] and float(ft[1]) > 0.8, out
