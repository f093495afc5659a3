"""The product stands on its own: nothing in the package, the README or docs/ points outside the repository."""

import re

from helpers import ROOT

OUTSIDE = re.compile(r"shared/|seeds/")
LINK = re.compile(r"\]\(([^)#\s]+)")  # the target of a markdown link, anchor dropped


def _texts():
    yield from sorted((ROOT / "tanplan").rglob("*.py"))
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))


def test_nothing_points_to_the_design_notes_or_the_papers_folder():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in _texts()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, found


def test_relative_links_stay_inside_the_repository():
    escaping = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target).resolve()
            if ROOT.resolve() not in (resolved, *resolved.parents):
                escaping.append(f"{path.relative_to(ROOT)}: {target}")
    assert not escaping, escaping
