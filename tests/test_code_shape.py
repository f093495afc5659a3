"""The code keeps its shape: stage results travel typed (string-key lookups in workflow/,
reports/ and commands/ stay under 100: what is left reads user files and third-party maps), and no function
in tanplan/ is longer than 80 lines. An AST walk; run this file to print the figures."""

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "tanplan"
MAX_LOOKUPS = 100
MAX_FUNCTION_LINES = 80


def string_key_lookups(source: str) -> int:
    """`x["key"]` and `x.get("key")` with a string constant: how a dict passed between stages is read."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            found += 1
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found += 1
    return found


def function_lengths(source: str, name: str) -> list[tuple[int, str]]:
    """(lines, "file:line function") of every function and method."""
    return [(node.end_lineno - node.lineno + 1, f"{name}:{node.lineno} {node.name}")
            for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def lookups_by_layer() -> dict[str, int]:
    return {layer: sum(string_key_lookups(p.read_text(encoding="utf-8")) for p in (PACKAGE / layer).rglob("*.py"))
            for layer in ("workflow", "reports", "commands")}


def longest_functions(count: int = 5) -> list[tuple[int, str]]:
    found = [f for p in PACKAGE.rglob("*.py")
             for f in function_lengths(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    return sorted(found, reverse=True)[:count]


def test_stage_results_are_read_by_attribute_not_by_string_key():
    counts = lookups_by_layer()
    assert sum(counts.values()) < MAX_LOOKUPS, counts


def test_no_function_is_longer_than_a_screen():
    too_long = [f for f in longest_functions(20) if f[0] > MAX_FUNCTION_LINES]
    assert too_long == [], too_long


def test_the_walks_count_what_they_should():
    """Not vacuous: each lookup form is counted once, an attribute or an integer index is not; a function's
    length counts its decorator-free lines from `def` to its last line."""
    source = 'a = d["k"]\nb = d.get("k")\nc = d.k\ne = d[0]\nf = d.get(k)\n\ndef g():\n    return 1\n'
    assert string_key_lookups(source) == 2
    assert function_lengths(source, "x.py") == [(2, "x.py:7 g")]


if __name__ == "__main__":
    counts = lookups_by_layer()
    print("string-key lookups:", counts, "total", sum(counts.values()))
    print("longest functions:", longest_functions())
