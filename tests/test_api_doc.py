"""docs/api.md cannot drift: its package files are written to temporary folders and its three examples run
there one after another, each in its own folder (its working directory, first on sys.path) and its own
namespace, in this process as a notebook would run them, and each must print what it says. In this process, not
in fresh ones: a fresh Python costs its imports and JAX's warm-up again (about 8 CPU-s each)."""

import contextlib
import io
import re
import traceback
from types import SimpleNamespace

import pytest
from helpers import ROOT

PAGE = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, flags=re.S)
EXAMPLES = {"my_pkg": "# example\n", "my_tab": "# example: your own job",
            "my_ft": "# example: fine-tuning from your own public data"}  # package: the first line of its example


def write_package(folder, package: str) -> str:
    """Write the page's `# <package>/...` files into folder; the example that uses them."""
    files = {b.splitlines()[0][2:].strip(): b for b in BLOCKS if b.startswith(f"# {package}/")}
    assert set(files) == {f"{package}/nets.py", f"{package}/data.py"}
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text("")
    for name, text in files.items():
        (folder / name).write_text(text)
    return next(b for b in BLOCKS if b.startswith(EXAMPLES[package]))


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory) -> dict:
    """Each package's folder and what its example printed (stdout; stderr: its traceback, or '')."""
    root = tmp_path_factory.mktemp("api_page")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        for package in EXAMPLES:
            folder = root / package
            code = write_package(folder, package)
            patch.chdir(folder)
            patch.syspath_prepend(str(folder))
            printed, failed = io.StringIO(), ""
            with contextlib.redirect_stdout(printed):
                try:
                    exec(compile(code, str(folder / "example.py"), "exec"), {"__name__": "__main__"})
                except (Exception, SystemExit):
                    failed = traceback.format_exc()
            runs[package] = SimpleNamespace(folder=folder, stdout=printed.getvalue(), stderr=failed)
    return runs


def test_the_pages_example_runs(page_runs):
    run = page_runs["my_pkg"]
    assert run.stderr == "", run.stderr[-3000:]
    out = run.stdout
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


def test_the_own_job_example_runs(page_runs):
    """The page's second example ("your own job"): flat feature rows from a plugged-in loader, a linen model and
    an nnx factory taking `rngs` and `input_shape`, each trained and read back by tanplan.load_run, whose
    predict matches the test accuracy of the summary."""
    run = page_runs["my_tab"]
    assert run.stderr == "", run.stderr[-3000:]
    for factory in ("make_linen", "make_nnx"):
        found = re.search(rf"my_tab.nets:{factory}: accuracy (\S+), reloaded (\S+)", run.stdout)
        assert found and found[1] == found[2] and float(found[1]) > 0.8, run.stdout
    assert (run.folder / "runs" / "make_nnx" / "model" / "model.json").is_file()


def test_the_fine_tuning_example_runs(page_runs):
    """The page's third example: a user's own public loader and model, pretrained on four public classes,
    fine-tuned privately on two with the body frozen and the head re-initialised, read back by load_run."""
    run = page_runs["my_ft"]
    assert run.stderr == "", run.stderr[-3000:]
    out = run.stdout
    pre = re.search(r"pretrained on (\d+) public examples: accuracy (\S+), private False", out)
    assert pre and pre[1] == "3000" and float(pre[2]) > 0.5, out  # four classes: chance is 0.25
    ft = re.search(r"fine-tuned: accuracy (\S+) at ε = (\S+); head re-initialised \['head/bias', 'head/kernel'\], "
                   r"(\d+) of (\d+) parameters trained", out)
    assert ft and float(ft[2]) <= 1.0 and int(ft[3]) == 32 * 2 + 2 and int(ft[4]) == 40 * 32 + 32 + 32 * 32 + 32 + 66, out
    reloaded = re.search(r"reloaded: accuracy (\S+)", out)
    assert reloaded and reloaded[1] == ft[1] and float(ft[1]) > 0.8, out
