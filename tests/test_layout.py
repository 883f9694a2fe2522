"""The house: no import cycle anywhere, and every module imports on its own in a fresh interpreter.

The import graph is read from the sources with ``ast`` (nothing is imported to build it): an edge
a → b for every ``import`` / ``from ... import`` in a, at module level or inside a function (a
function-level import is still a dependency, only a later one), except those under ``if
TYPE_CHECKING:`` — unless the module uses what it imports that way at run time: it calls a
method on a parameter annotated with such a type, or names the type outside an annotation. That is
a run-time dependency hidden from a plain import graph (the INT8 load check once called
``engine.next_token_logits`` through a type-only import of the engine, closing a cycle). Importing
a submodule also runs its package's ``__init__``; that implicit edge is not counted, and the
packages' ``__init__`` files import lazily or only their own children.
"""

from __future__ import annotations

import ast
import json
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
# Import edges allowed to close a cycle: none (export.py and int8/pipeline.py share layout.py instead).
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
    return found | _type_only_used_at_run_time(tree, module, is_package, known)


def _type_only_used_at_run_time(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Modules imported under ``if TYPE_CHECKING:`` whose names the module uses at run time.

    >>> code = ("from typing import TYPE_CHECKING\\nif TYPE_CHECKING:\\n    from .engine import Engine\\n"
    ...         "def f(engine: Engine) -> Engine:\\n    return engine.next_token_logits([])\\n")
    >>> sorted(_type_only_used_at_run_time(ast.parse(code), "p.q", False, {"p.engine", "p.q"}))
    ['p.engine']
    >>> quiet = code.replace("return engine.next_token_logits([])", "return engine.artifacts")
    >>> sorted(_type_only_used_at_run_time(ast.parse(quiet), "p.q", False, {"p.engine", "p.q"}))
    []
    """
    type_only: dict[str, str] = {}  # local name -> module
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for stmt in node.body:
                for name, target in _imported_names(stmt, module, is_package, known):
                    type_only[name] = target
    if not type_only:
        return set()
    annotations: set[int] = set()  # ids of AST nodes inside annotations or TYPE_CHECKING blocks
    typed_params: dict[int, dict[str, str]] = {}  # function node id -> {param: module}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            annotations.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            params = {}
            for a in args:
                if a.annotation is not None:
                    annotations.update(id(n) for n in ast.walk(a.annotation))
                    names = {n.id for n in ast.walk(a.annotation) if isinstance(n, ast.Name)} & set(type_only)
                    if names:
                        params[a.arg] = type_only[next(iter(names))]
            typed_params[id(node)] = params
            if node.returns is not None:
                annotations.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            annotations.update(id(n) for n in ast.walk(node.annotation))
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in type_only and id(node) not in annotations:
            used.add(type_only[node.id])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = typed_params.get(id(node), {})
            for call in ast.walk(node):
                f = call.func if isinstance(call, ast.Call) else None
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in params:
                    used.add(params[f.value.id])
    used.discard(module)
    return used


def _imported_names(stmt: ast.stmt, module: str, is_package: bool, known: set[str]) -> list[tuple[str, str]]:
    """(local name, known module) for each name an import statement binds."""
    out = []
    if isinstance(stmt, ast.ImportFrom):
        base = module.split(".")
        base = base if is_package else base[:-1]
        base = base[: len(base) - (stmt.level - 1)] if stmt.level else []
        target = ".".join(base + ([stmt.module] if stmt.module else [])) if stmt.level else (stmt.module or "")
        for alias in stmt.names:
            sub = f"{target}.{alias.name}"
            name = sub if sub in known else target
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.append((alias.asname or alias.name, name))
    elif isinstance(stmt, ast.Import):
        for alias in stmt.names:
            name = alias.name
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.append((alias.asname or alias.name.split(".")[0], name))
    return out


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
    assert "typed_decisions.presets.cli" in graph["typed_decisions.cli"]  # so the presets rules below see the command
    assert "typed_decisions.artifacts" not in graph["typed_decisions.quantized"]  # TYPE_CHECKING, annotations only
    # TYPE_CHECKING, but answer_preset(decider: Decider) calls decider.run: a run-time edge
    assert "typed_decisions.decider" in graph["typed_decisions.presets.answer"]
    assert "typed_decisions.readout" in graph["typed_decisions.reducers"]


def test_no_import_cycle():
    graph = import_graph()
    for a, b in KNOWN_CYCLE_EDGES:
        graph[a].discard(b)
    assert find_cycle(graph) is None


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_doors_are_not_imported_by_the_pipeline():
    """server/, evaluation/ and presets/ may import the pipeline, never the other way round."""
    graph = import_graph()
    doors = ("typed_decisions.server", "typed_decisions.evaluation", "typed_decisions.presets")
    for module, deps in graph.items():
        if module.startswith("typed_decisions.") and not _in(module, doors + ("typed_decisions.cli",)):
            assert not [d for d in deps if _in(d, doors)], module


def test_the_server_never_imports_evaluation():
    """Issue #30: what the server serves (presets, the question spec) lives outside evaluation/, so
    the server never pulls in the evaluation tooling; and presets/ (served) never reaches into
    evaluation/ or the server either. Transitively: no path from a server or presets module to
    evaluation/."""
    graph = import_graph()
    evaluation = ("typed_decisions.evaluation",)
    for start in [m for m in graph if _in(m, ("typed_decisions.server", "typed_decisions.presets"))]:
        seen, todo = {start}, [start]
        while todo:
            for dep in graph[todo.pop()]:
                assert not _in(dep, evaluation), f"{start} reaches {dep}"
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
    assert not [d for m in graph if _in(m, ("typed_decisions.presets",)) for d in graph[m]
                if _in(d, ("typed_decisions.server",))]


INTEGRATIONS = ("langchain_typed_decisions", "dspy_typed_decisions", "ray_typed_decisions")
PUBLIC_ONLY = ("typed_decisions.server", "typed_decisions.engine")  # packages whose __init__ is the API


def _all_of(package: str) -> set[str]:
    """The ``__all__`` of a package's ``__init__.py``, read from the source."""
    path = _modules()[package]
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{package} has no __all__")


def test_integrations_reach_the_server_and_engine_only_through_their_public_api():
    """Issue #30 (docs/ARCHITECTURE.md): an integration imports ``typed_decisions.server`` and
    ``typed_decisions.engine`` as packages, only names in their ``__all__``, never one of their
    modules; and it never reaches into a server app's state (``app.state.service``)."""
    graph = import_graph()
    public = {pkg: _all_of(pkg) for pkg in PUBLIC_ONLY}
    for module, path in _modules().items():
        if module.split(".")[0] not in INTEGRATIONS:
            continue
        inner = [d for d in graph[module] if _in(d, PUBLIC_ONLY) and d not in PUBLIC_ONLY]
        assert not inner, f"{module} imports {inner}: use the package's public names (its __all__)"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in public:
                hidden = {a.name for a in node.names} - public[node.module]
                assert not hidden, f"{module} imports {sorted(hidden)} from {node.module}, not in its __all__"
            if isinstance(node, ast.Attribute) and node.attr == "service" and \
                    isinstance(node.value, ast.Attribute) and node.value.attr == "state":
                raise AssertionError(f"{module} reaches into app.state.service (line {node.lineno})")
    assert "typed_decisions.server" in graph["ray_typed_decisions.serve"]  # the rule sees Ray's imports


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


INT8_ROOMS = ROOT / "export" / "typed_decisions_export" / "int8"
STUDIES = ROOT / "export" / "studies"


def test_a_module_over_400_lines_says_why_at_its_top():
    """Issue #30: no module of the runtime or the exporter grows past ~400 lines without a reason
    written in its docstring ("Why over 400 lines: ...")."""
    long = []
    for root in (ROOT / "typed_decisions", ROOT / "export" / "typed_decisions_export"):
        for path in root.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if len(text.splitlines()) > 400 and "Why over 400 lines:" not in (ast.get_docstring(ast.parse(text)) or ""):
                long.append(str(path.relative_to(ROOT)))
    assert long == [], long


def test_int8_rooms_are_small_and_say_what_they_own():
    """Issue #30: each module of the exporter's int8/ package is one idea, read top to bottom, its
    docstring saying what it owns; none grows past ~400 lines."""
    rooms = sorted(INT8_ROOMS.glob("*.py"))
    assert {p.stem for p in rooms} >= {"options", "smoothquant", "integer", "external_data", "quantized_graph",
                                       "matmul_rewrite", "u8u8", "drift", "pipeline"}
    for path in rooms:
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path.name
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 400, path.name


def test_the_exporter_never_imports_the_studies():
    """export/studies/ (INT8 variants the exporter does not write) builds on the exporter, never the
    other way round: no exporter module imports a study module, nor the words of its options."""
    studies = {p.stem for p in STUDIES.glob("*.py")}
    assert "int8_variants" in studies
    for module, path in _modules().items():
        if not module.startswith("typed_decisions_export"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in studies | {"studies", "td_studies"}], module
            if isinstance(node, ast.arg):  # a study option threaded through an exporter function
                assert node.arg not in ("float_channels", "blocked_quantize", "activations"), (module, node.arg)


BENCHMARKS = ROOT / "benchmarks"
TEST_MODULES = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {"tests", "conftest"}
# Preset files in the product format (typed-decisions calibrate --to-preset), read as the presets'
# calibration inputs (presets_data/*.json name them), not the output of a benchmark tool.
NOT_RESULTS = BENCHMARKS / "results" / "preset-calibrations"


def _benchmark_sources() -> list[Path]:
    return sorted(BENCHMARKS.rglob("*.py"))


def test_benchmarks_never_edit_sys_path():
    """Issue #30: the suite is a package run as ``python -m benchmarks.…``; no script puts a folder
    on ``sys.path`` (a sibling script, tests/, a throwaway venv: peers/llama_cpp.py loads from a
    site directory without it)."""
    found = []
    for path in _benchmark_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                    and node.value.id == "sys":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} sys.path")
            if isinstance(node, ast.Attribute) and node.attr == "addsitedir":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} addsitedir")
    assert _benchmark_sources() and not found, found


def test_benchmarks_never_import_tests():
    """Benchmarks import the library and each other; a helper both need lives in benchmarks/ (e.g.
    invariance.py) or the library, never in tests/. Nor do test files live in benchmarks/."""
    found = []
    for path in _benchmark_sources():
        assert not path.name.startswith("test_"), f"{path.relative_to(ROOT)}: tests belong in tests/benchmarks/"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in TEST_MODULES]
    assert not found, found


def test_every_result_file_has_the_schema():
    """Every file under benchmarks/results/ (preset-calibrations/ aside, see NOT_RESULTS) is
    ``{"schema": 1, "tool", "command", "git", "machine", "results", ...}`` with a machine record
    naming the CPU class (None where it was not recorded, which the file's note says), under
    ``results/<tool>/``."""
    files = [p for p in (BENCHMARKS / "results").rglob("*") if p.is_file() and NOT_RESULTS not in p.parents]
    assert len(files) >= 40
    bad = []
    for path in files:
        rel = path.relative_to(BENCHMARKS / "results")
        if path.suffix != ".json":
            bad.append(f"{rel}: not a .json file")
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        missing = [k for k in ("schema", "tool", "command", "git", "machine", "results") if k not in doc]
        if missing or doc["schema"] != 1:
            bad.append(f"{rel}: schema {doc.get('schema')!r}, missing {missing}")
        elif rel.parts[0] != doc["tool"] or len(rel.parts) != 2:
            bad.append(f"{rel}: not under results/{doc['tool']}/")
        elif not isinstance(doc["machine"], dict) or "class" not in doc["machine"]:
            bad.append(f"{rel}: machine without a class")
        elif doc["machine"]["class"] is None and "note" not in doc:
            bad.append(f"{rel}: CPU class unknown and no note saying so")
    assert not bad, bad
