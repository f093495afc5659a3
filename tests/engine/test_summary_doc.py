"""docs/summary.md documents every field of the run summary, and only those."""

import re

from helpers import ROOT

from tanplan.outcomes.run_summary import FIELDS


def test_the_summary_page_lists_every_field():
    page = (ROOT / "docs" / "summary.md").read_text(encoding="utf-8")
    table = page.split("## The other files")[0]
    documented = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M):
        documented |= set(re.findall(r"`([a-z_0-9]+)`", cell))
    assert documented == set(FIELDS)
