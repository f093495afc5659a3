"""What both audits print and how they end: the JSON or the table and the note, then exit 5 on a violation."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import print_json, print_table
from tanplan.errors import PrivacyViolation


def finish(result, args, title: str, rows: list[tuple[str, str]]) -> int:
    """Print an audit's result (JSON with --json, else its table and note); PrivacyViolation (exit 5) when its
    bound is above the claim, else 0."""
    if args.json:
        print_json(result.to_dict())
    else:
        print_table(rows, title=f"{title}: {api.as_config(args.config, args.overrides).experiment.name}")
        print(result.note)
    if result.verdict == "violation":
        raise PrivacyViolation(f"privacy violation: {result.reason}")
    return 0
