"""docs/opacus.md cannot drift: its tanplan commands are run and every number the page shows after them,
and every number of its table, is checked against what tanplan computes now (no torch needed: the Opacus
code is only compiled; Opacus's RDP ε is computed with dp-accounting on Opacus's default orders)."""

import json
import math
import re
import shlex

import pytest
from helpers import ROOT, run_cli

from tanplan.privacy import accounting

PAGE = (ROOT / "docs" / "opacus.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", PAGE, flags=re.S)
# opacus.accountants.RDPAccountant.DEFAULT_ALPHAS
OPACUS_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def _shown_matches(shown: str, actual: float) -> bool:
    """True when `shown` is `actual` written to the digits shown (a full repr must match exactly)."""
    shown = shown.replace(",", "")
    decimals = len(shown.split(".")[1]) if "." in shown and "e" not in shown.lower() else 0
    if decimals >= 12 or "e" in shown.lower():
        return math.isclose(float(shown), actual, rel_tol=4e-16)  # a repr: the same float, to an ulp or two
    return abs(float(shown) - actual) <= 0.5 * 10**-decimals * (1 + 1e-9)


def _commands_and_outputs(capsys) -> dict[str, dict]:
    """{"plan"|"proxy": the JSON the page's command prints now}, checked against the block the page shows."""
    outputs = {}
    for (lang, text), (next_lang, shown) in zip(BLOCKS, BLOCKS[1:]):
        if lang != "sh" or not text.startswith("tanplan "):
            continue
        argv = shlex.split(text.split(">")[0])[1:]
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and next_lang == "json", text
        result = json.loads(out)
        for key, value in re.findall(r'^\s*"(\w+)": ([-0-9.e+]+),?$', shown, flags=re.M):
            assert _shown_matches(value, result[key]), f"{argv[0]} {key}: the page shows {value}, tanplan gives {result[key]}"
        outputs[argv[0]] = result
    return outputs


def test_the_pages_commands_print_what_the_page_shows(capsys):
    outputs = _commands_and_outputs(capsys)
    assert set(outputs) == {"plan", "proxy"}


def test_the_pages_table_is_what_tanplan_computes(capsys):
    outputs = _commands_and_outputs(capsys)
    plan, proxy = outputs["plan"], outputs["proxy"]
    n, delta = plan["dataset_size"], plan["delta"]
    runs = [(plan["batch_size"], plan["sigma"], plan["steps"]),
            (proxy["proxy_batch_size"], proxy["proxy_sigma"], proxy["steps"])]

    def opacus_epsilon(q, sigma, steps):
        acc = accounting.make_accountant("rdp", orders=OPACUS_ORDERS)
        acc.compose(accounting.dp_sgd_event(q, sigma, steps))
        return acc.get_epsilon(delta)

    expected = {
        "batch size B": [b for b, _, _ in runs],
        "sampling rate q": [b / n for b, _, _ in runs],
        "noise multiplier σ": [s for _, s, _ in runs],
        "steps S": [t for _, _, t in runs],
        "η_step": [b / n / (math.sqrt(2) * s) for b, s, _ in runs],
        "ε at δ = 1e-5, tanplan": [accounting.epsilon(b / n, s, t, delta, "rdp") for b, s, t in runs],
        "ε at δ = 1e-5, Opacus": [opacus_epsilon(b / n, s, t) for b, s, t in runs],
    }
    assert delta == 1e-5 and runs[1][1] == pytest.approx(runs[0][1] * runs[1][0] / runs[0][0], rel=1e-12)
    rows = {cells[0]: cells[1:] for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in PAGE.splitlines()
        if line.startswith("| ") and not line.startswith("| quantity"))}
    for label, values in expected.items():
        found = [cells for row, cells in rows.items() if row.startswith(label)]
        assert len(found) == 1, f"the table has no single row starting {label!r}"
        for shown, actual in zip(found[0], values):
            assert _shown_matches(shown, actual), f"{label}: the page shows {shown}, tanplan gives {actual}"
    assert len(rows) == len(expected)  # every row is checked


def test_the_pages_python_compiles():
    code = [text for lang, text in BLOCKS if lang == "python"]
    assert code
    for text in code:
        compile(text, "docs/opacus.md", "exec")
