"""The README's commands that train run on a checkout, as a new user types them (issue 47): every `tanplan`
line of its unmarked ```sh blocks is one of the three below, and each does what its comment says. The marked
blocks (planning, no training) are tests/test_docs_code.py's. Each runs in this process (tanplan.cli.main) in
an empty working directory that holds a link to the checkout's experiments/, shrunk where it would train for
minutes:
- `run --dry-run`: as written, plus --no-probe (the timed probe is the costs module's own test), on signals of
  mnist1d's shapes (tests/fakes.py: generating the demo's two 20,000-row draws costs about 25 CPU-s);
- `run --baselines`, "what make demo runs": `make demo` runs `tanplan demo`, whose run is this command (argv
  compared; the demo's pipeline is the demo's, minutes long, run by `make demo`);
- `train ... data.path=my.npz ...`: on a small my.npz written in the npz format docs/data.md gives, 3 steps."""

import shlex

import numpy as np
import pytest
from helpers import ROOT, run_cli

README = (ROOT / "README.md").read_text(encoding="utf-8")
SHRINK = ["--set", "train.steps=3", "--set", "train.eval_every=3", "--set", "train.batch_size=64",
          "--set", "train.checkpoint_every=0"]


def unmarked_commands() -> list[list[str]]:
    """argv (after `tanplan`) of each `tanplan` line of the README's ```sh blocks not marked `<!-- runs -->`."""
    lines, found, inside, marked, joined = README.splitlines(), [], False, False, ""
    for n, line in enumerate(lines):
        if line.startswith("```"):
            inside = line.strip() == "```sh" and not inside
            marked = inside and n > 0 and lines[n - 1].strip() == "<!-- runs -->"
            continue
        if not inside or marked:
            continue
        joined += line.split("#")[0].rstrip().removesuffix("\\")
        if line.rstrip().endswith("\\"):
            continue
        words, joined = shlex.split(joined), ""
        if words and words[0].endswith("tanplan"):
            found.append(words[1:])
    return found


COMMANDS = unmarked_commands()


def _one(predicate) -> list[str]:
    matching = [argv for argv in COMMANDS if predicate(argv)]
    assert len(matching) == 1, COMMANDS
    return matching[0]


@pytest.fixture
def checkout_dir(tmp_path, monkeypatch):
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_readme_trains_with_three_commands_and_each_is_tested_here():
    kinds = sorted((argv[0], "--dry-run" in argv, "--baselines" in argv) for argv in COMMANDS)
    assert kinds == [("run", False, True), ("run", True, False), ("train", False, False)], COMMANDS


def test_the_dry_run_command_checks_and_prints_each_stages_cost(checkout_dir, capsys, monkeypatch):
    from fakes import use_mnist1d_shaped

    use_mnist1d_shaped(monkeypatch)
    argv = _one(lambda a: "--dry-run" in a)
    code, out, err = run_cli(capsys, *argv, "--no-probe")
    assert code == 0, err[-2000:]
    assert "dry run: nothing trained" in out and "sweep" in out and "launch" in out, out
    assert not (checkout_dir / "reports").exists()  # a dry run writes nothing


def test_the_demo_runs_the_readmes_pipeline_command(checkout_dir, monkeypatch):
    from tanplan.cli import main
    from tanplan.commands import demo, plan, run

    argv = _one(lambda a: "--baselines" in a)
    assert "demo: install\n\t$(BIN)/tanplan demo" in (ROOT / "Makefile").read_text()
    called = []
    monkeypatch.setattr(plan, "execute", lambda args: 0)  # the ImageNet plan: tests/commands/ test it
    monkeypatch.setattr(run, "execute", lambda args: called.append(args) or 0)
    assert main(["demo"]) == 0
    ran, = called
    config = argv[argv.index("--config") + 1]
    assert demo.CONFIG.read_bytes() == (checkout_dir / config).read_bytes()  # the same experiment file
    assert (ran.out, ran.baselines, ran.dry_run) == (argv[argv.index("--out") + 1], True, False)


def test_the_own_data_command_trains_on_a_users_npz(checkout_dir, capsys):
    argv = _one(lambda a: a[0] == "train")
    rng = np.random.default_rng(0)
    y_train, y_test = rng.integers(0, 10, 600), rng.integers(0, 10, 200)
    np.savez(checkout_dir / "my.npz", x_train=rng.normal(size=(600, 40)).astype(np.float32) + y_train[:, None],
             y_train=y_train, x_test=rng.normal(size=(200, 40)).astype(np.float32) + y_test[:, None], y_test=y_test)
    code, out, err = run_cli(capsys, *argv, *SHRINK)
    assert code == 0, err[-2000:]
    out_dir = checkout_dir / argv[argv.index("--out") + 1]
    assert (out_dir / "summary.json").is_file() and (out_dir / "model" / "params.npz").is_file()
