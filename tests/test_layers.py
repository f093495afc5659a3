"""The package's layers: every import (module level and inside functions) points down or sideways
within its layer, the module graph has no cycle, and the JAX-free layer (privacy/, config, outcomes/)
imports no JAX, flax or optax, directly or through another tanplan module. outcomes/ (the stages' typed
results) imports only outcomes/, privacy/, config, errors, fileio and the standard library. Every import of
a tanplan module inside a function says why it is not at module level (`# lazy: <reason>`). Plus:
`tanplan plan` loads no JAX."""

import ast
import functools
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "tanplan"

# Lower ranks sit below higher ones: a module may import from its own rank or below, never above.
RANKS = {
    "errors": 0, "fileio": 0, "runtime": 0, "ray_session": 0, "extras": 0, "provenance": 0, "plugins": 0,
    "config": 1, "arguments": 1,  # arguments: the API's type checks (names Config)
    "privacy": 2, "outcomes": 2.5,  # the stages' typed results: above privacy/, below data/ and engine/
    "job": 2.7,  # one run's Config resolved once (tanplan.job): what the engine takes in its place
    "laws": 2.7,  # the JAX-free laws the stages fit (numpy, scipy): they build outcomes/' records
    "data": 3, "models": 3, "task": 3,
    "dp": 4,
    "engine": 5, "baselines": 5,
    "reports": 6,
    "workflow": 7, "api": 7,
    "commands": 8,
    "cli": 9, "__main__": 9, "__init__": 9,
}
JAX_FREE = ("tanplan.config", "tanplan.privacy", "tanplan.plugins", "tanplan.outcomes", "tanplan.laws", "tanplan.job")
JAX_LIKE = ("jax", "jaxlib", "flax", "optax", "chex", "jax_privacy", "orbax")
# What tanplan/outcomes/ may import from tanplan (besides the standard library): it sits under engine/ and
# reports/, so that both can name its types.
OUTCOMES_MAY_IMPORT = ("tanplan.outcomes", "tanplan.privacy", "tanplan.config", "tanplan.errors", "tanplan.fileio")
# An import inside a function names its reason on its first line: `...  # lazy: JAX; the planner imports this`.
LAZY_REASON = re.compile(r"# lazy: +\S")  # searched in the line's comment (after a `# noqa`, say)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)  # every check reads the same graph: each file is parsed once a process
def imports(path: Path) -> list[str]:
    """Every module named by an import anywhere in the file (functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return tuple(found)


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, path in modules.items():
        edges[name] = {m for m in imports(path) if m in modules and m != name}
    edges["__external__"] = {}
    return edges, {name: {m for m in imports(path) if not m.startswith("tanplan")} for name, path in modules.items()}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(edges) -> list[str]:
    bad = []
    for src, dsts in edges.items():
        if src == "__external__":
            continue
        for dst in dsts:
            if dst == "tanplan" or layer(dst) == "__init__":
                continue  # the package itself (its __version__): importing it runs nothing
            if RANKS[layer(dst)] > RANKS[layer(src)]:
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def jax_reached(edges, external, start: str) -> list[str]:
    """Paths from `start` to a JAX-like import through tanplan modules."""
    seen, todo, bad = {start}, [(start, [start])], []
    while todo:
        module, path = todo.pop()
        for ext in external.get(module, ()):
            if ext.split(".")[0] in JAX_LIKE:
                bad.append(" -> ".join(path + [ext]))
        for nxt in edges.get(module, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, path + [nxt]))
    return bad


def outcomes_imports(edges, external) -> list[str]:
    """Imports of outcomes/ modules outside what they may import: tanplan modules not in
    OUTCOMES_MAY_IMPORT, and anything outside the standard library."""
    bad = []
    for src in (m for m in edges if m.startswith("tanplan.outcomes")):
        bad += [f"{src} -> {dst}" for dst in edges[src]
                if dst != "tanplan" and not any(dst == ok or dst.startswith(ok + ".") for ok in OUTCOMES_MAY_IMPORT)]
        bad += [f"{src} -> {ext}" for ext in external.get(src, ()) if ext.split(".")[0] not in sys.stdlib_module_names]
    return sorted(set(bad))


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, its comment) of every import of a tanplan module (relative imports included) inside a function
    of `source`, nested functions and methods included, each import once."""
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                own = any(alias.name.split(".")[0] == "tanplan" for alias in sub.names)
            elif isinstance(sub, ast.ImportFrom):
                own = sub.level > 0 or (sub.module or "").split(".")[0] == "tanplan"
            else:
                continue
            if own:
                found.add((sub.lineno, comments.get(sub.lineno, "")))
    return sorted(found)


def lazy_without_reason(paths) -> list[str]:
    """`path:line` of each function-level import of a tanplan module whose first line carries no
    `# lazy: <reason>` comment (the reason not empty)."""
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
            for path in sorted(paths)
            for line, comment in function_level_imports(path.read_text(encoding="utf-8"))
            if not LAZY_REASON.search(comment)]


def test_every_module_sits_in_a_known_layer():
    edges, _ = graph()
    unknown = sorted(m for m in edges if m != "__external__" and layer(m) not in RANKS)
    assert not unknown, f"modules outside every layer (add them to RANKS): {unknown}"


def test_no_module_imports_a_higher_layer():
    edges, _ = graph()
    assert upward_imports(edges) == []


def test_the_module_graph_has_no_cycle():
    edges, _ = graph()
    assert cycles(edges) == []


def test_the_jax_free_layer_reaches_no_jax():
    edges, external = graph()
    starts = [m for m in edges if m.startswith(JAX_FREE)]
    assert starts
    assert [path for m in starts for path in jax_reached(edges, external, m)] == []


def test_outcomes_import_only_privacy_config_errors_fileio_and_the_standard_library():
    edges, external = graph()
    assert any(m.startswith("tanplan.outcomes") for m in edges)
    assert outcomes_imports(edges, external) == []


def test_every_function_level_import_of_tanplan_says_why_it_is_lazy():
    """Imports at module level show the import graph; one inside a function is there only where a layer must
    stay lazy (the JAX-free planner, the command a cli call runs) and says so: `# lazy: <reason>`."""
    offenders = lazy_without_reason(PACKAGE.rglob("*.py"))
    assert offenders == [], f"{len(offenders)} function-level tanplan imports without `# lazy: <reason>`: {offenders}"


def test_the_checks_catch_what_they_forbid():
    """The checks are not vacuous: an upward import, a cycle and a JAX import are each reported."""
    edges = {"tanplan.privacy.plan": {"tanplan.engine.loop"}, "tanplan.engine.loop": {"tanplan.privacy.plan"}}
    assert upward_imports(edges) == ["tanplan.privacy.plan -> tanplan.engine.loop"]
    assert cycles(edges) == [["tanplan.engine.loop", "tanplan.privacy.plan"]]
    assert jax_reached(edges, {"tanplan.engine.loop": {"jax.numpy"}}, "tanplan.privacy.plan")


def test_the_outcomes_check_catches_an_import_it_forbids():
    """An outcomes module that imports the engine, data/ or numpy is reported; privacy/, config, errors,
    fileio, another outcomes module, the package itself and the standard library are not."""
    edges = {"tanplan.outcomes.run_summary": {"tanplan.engine.loop", "tanplan.data", "tanplan.outcomes.base",
                                              "tanplan.privacy.plan", "tanplan.config", "tanplan.errors",
                                              "tanplan.fileio", "tanplan"},
             "tanplan.outcomes.base": {"tanplan.privacy"}, "tanplan.engine.loop": {"tanplan.outcomes.base"}}
    external = {"tanplan.outcomes.base": {"dataclasses", "typing.Any", "numpy"},
                "tanplan.engine.loop": {"jax"}}
    assert outcomes_imports(edges, external) == [
        "tanplan.outcomes.base -> numpy",
        "tanplan.outcomes.run_summary -> tanplan.data",
        "tanplan.outcomes.run_summary -> tanplan.engine.loop",
    ]


def test_the_lazy_import_check_catches_an_import_without_its_reason(tmp_path):
    """Unexplained function-level imports of tanplan are listed (in functions, methods and nested functions,
    relative or absolute, with an empty reason, or with the reason only inside a string); explained ones,
    module-level ones and function-level imports of other packages are not."""
    source = tmp_path / "module.py"
    source.write_text("\n".join([
        "from tanplan.errors import UsageError",                                # 1: module level
        "def f():",
        "    from tanplan.engine import loop",                                  # 3: no reason
        "    from tanplan.data import load  # lazy: numpy; the planner imports this module",  # 4: explained
        "    import json",                                                      # 5: not tanplan
        "    import tanplan.engine.loop as loop  # lazy:",                      # 6: empty reason
        "    from tanplan import api  # noqa: F401  # lazy: after another comment",  # 7: explained
        "    def inner():",
        "        from . import sibling  # why: no",                             # 9: not `# lazy: `
        "class C:",
        "    def method(self):",
        "        x = '# lazy: in a string'; from tanplan import api",           # 12: reason only in a string
        "        import numpy as np  # third party: not this check's",          # 13: not tanplan
        "",
    ]), encoding="utf-8")
    assert [line for line, _ in function_level_imports(source.read_text())] == [3, 4, 6, 7, 9, 12]
    assert lazy_without_reason([source]) == [f"{source}:3", f"{source}:6", f"{source}:9", f"{source}:12"]


def test_plan_command_and_planning_api_load_no_jax():
    code = ("import sys; from tanplan.cli import main; "
            "rc = main(['plan', '--dataset-size', '50000', '--batch-size', '256', '--steps', '100', '--sigma', '2']); "
            "import tanplan; tanplan.plan(50000, 256, 100, sigma=2.0); tanplan.proxy(50000, 256, 100, sigma=2.0, "
            "savings=4); tanplan.frontier(16000, 0.7, compute=10**5, min_batch_size=256); "  # B < 256: PLD's long S, slow
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in %r); "
            "print(bad); sys.exit(rc or (1 if bad else 0))" % (JAX_LIKE + ("ray", "pandas", "optuna"),))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("module", ["tanplan", "tanplan.config", "tanplan.cli"])
def test_importing_tanplan_changes_no_environment(module):
    code = f"import os; before = dict(os.environ); import {module}; assert dict(os.environ) == before"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
