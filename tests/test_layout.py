"""The house: no import cycle anywhere, and every module imports on its own in a fresh interpreter.

The import graph is read from the sources with ``ast`` (nothing is imported to build it): an edge
a → b for every ``import`` / ``from ... import`` in a, at module level or inside a function (a
function-level import is still a dependency, only a later one), except those under ``if
TYPE_CHECKING:``. Importing a submodule also runs its package's ``__init__``; that implicit edge
is not counted, and the packages' ``__init__`` files import lazily or only their own children.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # import name → folder holding it
    "typed_decisions": ROOT,
    "typed_decisions_export": ROOT / "export",
    "langchain_typed_decisions": ROOT / "integrations" / "langchain",
    "dspy_typed_decisions": ROOT / "integrations" / "dspy",
    "ray_typed_decisions": ROOT / "integrations" / "ray",
}
# Import edges allowed to close a cycle: none (export.py and quantize.py share layout.py instead).
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, base in PACKAGES.items():
        for path in sorted((base / pkg).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The known modules ``module`` imports (see the module docstring)."""
    found: set[str] = set()

    def resolve(name: str) -> None:
        while name and name not in known:  # `import a.b.c` depends on the deepest known module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                resolve(sub if sub in known else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(ast.parse(p.read_text(encoding="utf-8")), m, p.name == "__init__.py", known)
            for m, p in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative DFS, white/grey/black).

    >>> find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    True
    >>> find_cycle({"a": {"b"}, "b": {"a"}})
    ['a', 'b', 'a']
    """
    state: dict[str, int] = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "typed_decisions.evaluation.cli" in graph["typed_decisions.cli"]  # imported inside a function
    assert "typed_decisions.decider" not in graph["typed_decisions.evaluation.presets"]  # TYPE_CHECKING only
    assert "typed_decisions.readout" in graph["typed_decisions.reducers"]


def test_no_import_cycle():
    graph = import_graph()
    for a, b in KNOWN_CYCLE_EDGES:
        graph[a].discard(b)
    assert find_cycle(graph) is None


def test_doors_are_not_imported_by_the_pipeline():
    """server/ and evaluation/ may import the pipeline, never the other way round."""
    graph = import_graph()
    doors = ("typed_decisions.server", "typed_decisions.evaluation")
    for module, deps in graph.items():
        if module.startswith("typed_decisions.") and not module.startswith(doors + ("typed_decisions.cli",)):
            assert not [d for d in deps if d.startswith(doors)], module


@pytest.mark.parametrize("packages", [["typed_decisions"], ["langchain_typed_decisions", "dspy_typed_decisions",
                                                           "ray_typed_decisions"]],
                         ids=["runtime", "integrations"])
def test_every_module_imports_alone_in_a_fresh_interpreter(packages: list[str]):
    """Each module first in its own interpreter would be slow; one interpreter per distribution,
    importing the modules leaf-first order-independently (sorted), still catches a cycle that
    only breaks at import time, and shows the runtime never pulls torch in."""
    names = [m for m in sorted(_modules()) if m.split(".")[0] in packages]
    code = ("import importlib, sys\n"
            f"for m in {names!r}: importlib.import_module(m)\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == ""
