"""The code blocks the documentation marks as runnable run, and do what they show.

The convention (docs/README.md states it for writers): an HTML comment `<!-- runs -->` on the line right
before a fenced block of README.md or docs/*.md marks that block as runnable (GitHub does not show the
comment). Only cheap blocks are marked: planning, accounting and small API calls, nothing that trains.

- ```python blocks are doctests: every `>>>` example runs and its output must match (a block without
  `>>>` is executed as a script instead), in a fresh namespace, in an empty temporary working directory.
- ```sh blocks are commands, one a line (`\\` continues a line, `#` starts a comment): each must be
  `tanplan plan` or `tanplan proxy` (`.venv/bin/tanplan` too), without `--compute` or `--device-hours`
  (the frontier takes minutes), and is run in this process through tanplan.cli.main, in an empty
  temporary working directory, and must exit 0.
"""

import doctest
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT

MARK = "<!-- runs -->"
FENCE = re.compile(r"^```(\w*)\s*$")
CHEAP_COMMANDS = ("plan", "proxy")
SLOW_FLAGS = ("--compute", "--device-hours")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the block's first code line
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def marked_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page that follow a `<!-- runs -->` line; a mark not followed by a fence fails."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    found = []
    for n, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        opening = FENCE.match(lines[n + 1]) if n + 1 < len(lines) else None
        assert opening, f"{path.name}:{n + 1}: {MARK} must be followed by a fenced code block on the next line"
        end = next(k for k in range(n + 2, len(lines)) if lines[k].strip() == "```")
        found.append(Block(path, n + 3, opening[1], "\n".join(lines[n + 2:end]) + "\n"))
    return found


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in marked_blocks(path)]


def commands(code: str) -> list[list[str]]:
    """The argv of each command of a shell block: continuations joined, comments dropped."""
    logical = re.sub(r"\\\n", " ", code)
    return [argv for argv in (shlex.split(line, comments=True) for line in logical.splitlines()) if argv]


def run_shell(block: Block, capsys) -> None:
    from tanplan.cli import main

    argvs = commands(block.code)
    assert argvs, f"{block.where}: a marked shell block with no command"
    for argv in argvs:
        shown = " ".join(argv)
        assert Path(argv[0]).name == "tanplan" and len(argv) > 1, f"{block.where}: not a tanplan command: {shown}"
        assert argv[1] in CHEAP_COMMANDS, f"{block.where}: only {CHEAP_COMMANDS} may be marked to run: {shown}"
        assert not set(argv) & set(SLOW_FLAGS), f"{block.where}: {SLOW_FLAGS} are too slow to mark: {shown}"
        code = main(argv[1:])
        _, err = capsys.readouterr()
        assert code == 0, f"{block.where}: `{shown}` exited {code}: {err[-2000:]}"


def run_python(block: Block) -> None:
    if ">>>" not in block.code:
        exec(compile(block.code, block.where, "exec"), {"__name__": "__docs__"})  # noqa: S102
        return
    test = doctest.DocTestParser().get_doctest(block.code, {"__name__": "__docs__"}, block.where,
                                               str(block.path), block.line - 1)
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test, out=report.append, clear_globs=True)
    assert result.failed == 0, f"{block.where}:\n" + "".join(report)


def run_block(block: Block, capsys) -> None:
    if block.lang == "python":
        run_python(block)
    elif block.lang in ("sh", "bash", "console"):
        run_shell(block, capsys)
    else:
        pytest.fail(f"{block.where}: a block of {block.lang or 'no language'!r} cannot be marked to run")


BLOCKS = all_blocks()


def test_the_documentation_marks_blocks_to_run():
    where = {block.path.name for block in BLOCKS}
    assert {"README.md", "commands.md", "design.md"} <= where, where
    assert {block.lang for block in BLOCKS} == {"python", "sh"}


@pytest.mark.filterwarnings("ignore:delta=.* allows releasing an example outright")  # the pages' δ = 8e-7
@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_a_marked_block_runs(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # what a block writes (plan --out) lands in a temporary folder
    run_block(block, capsys)


@pytest.mark.parametrize("page, broken", [
    ("<!-- runs -->\n```python\n>>> 1 + 1\n3\n```\n", "Got:"),
    ("<!-- runs -->\n```python\nraise ValueError('broken')\n```\n", "broken"),
    ("<!-- runs -->\n```sh\ntanplan plan --dataset-size 100 --batch-size 1000 --steps 10 --sigma 1\n```\n", "exited 2"),
    ("<!-- runs -->\n```sh\ntanplan train --config x.toml\n```\n", "only ('plan', 'proxy') may be marked"),
    ("<!-- runs -->\n\n```sh\ntanplan plan\n```\n", "must be followed by a fenced code block"),
], ids=["doctest output", "python error", "command fails", "command not cheap", "mark without block"])
def test_a_broken_block_fails(page, broken, tmp_path, monkeypatch, capsys):
    """What the checker does with a block that no longer works: it fails, saying where and why."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises((AssertionError, ValueError, pytest.fail.Exception)) as caught:
        for block in marked_blocks(ROOT / "docs" / "broken.md", page):
            run_block(block, capsys)
    assert broken in str(caught.value), caught.value
