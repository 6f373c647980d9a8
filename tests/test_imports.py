"""The import graph of the project's packages has no circles, and the layers point one way.

The graph is read from the source (ast), not by importing: every ``import`` and
``from ... import`` of a module of compressors/, workloads/ or orchestrator/,
absolute or relative, at module level or inside a function (a lazy import is
still an import), except those under ``if TYPE_CHECKING:`` (never run).
``from package import name`` is an edge to ``package.name`` when that is a
module, else to the package's ``__init__``.  A package ``__init__`` that
imports its modules through ``pkgutil.iter_modules`` imports every one of them.
An import of a module of another package also runs that package's
``__init__``: an edge to it as well.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compressors", "workloads", "orchestrator")


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the packages (a package is its ``__init__``)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST):
    """Every node, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _ours(name: str) -> str | None:
    """The longest module of ours that ``name`` names or lies in (None: not ours)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str) -> set[str]:
    """The modules of ours that ``module`` imports (see the module docstring)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    own_package = module if _is_package(module) else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            targets.update(t for t in (_ours(alias.name) for alias in node.names) if t)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = own_package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if _ours(base) is None:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in MODULES else _ours(base))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "iter_modules" and _is_package(module):
            targets.update(m for m in MODULES if m.rpartition(".")[0] == module)
    # Importing a module of another package first runs that package's __init__.
    for target in list(targets):
        top = target.split(".")[0]
        if top != module.split(".")[0] and top in MODULES:
            targets.add(top)
    targets.discard(module)
    return targets


@functools.cache  # read once: the tests below only look at it
def import_graph() -> dict[str, set[str]]:
    return {module: imports_of(module) for module in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a path back to its start) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for component in components:
        members = set(component)
        start = min(component)
        path, seen = [start], {start}
        while True:  # walk inside the component until a module repeats
            nxt = min(w for w in graph[path[-1]] if w in members)
            if nxt in seen:
                out.append(path[path.index(nxt):] + [nxt])
                break
            path.append(nxt)
            seen.add(nxt)
    return out


def test_the_graph_sees_relative_absolute_and_lazy_imports():
    graph = import_graph()
    assert "compressors.core.wire" in graph["compressors.core.base"]  # from . import registry, wire
    assert "compressors.core.params" in graph["workloads.options"]  # from compressors.core.params import ...
    assert "compressors" in graph["workloads.options"]  # ... runs compressors/__init__ first
    assert "compressors.comm.reducer" in graph["compressors"]  # from .reducer import Reducer
    assert "compressors.codecs.qsgd" in graph["compressors.codecs"]  # pkgutil.iter_modules: every module
    assert "compressors.core.base" not in graph["compressors.core.registry"]
    assert "orchestrator.study.labels" in graph["orchestrator.study.sweep_file"]


def test_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    found = [c for c in circles(import_graph()) if any(m.split(".")[0] == package for m in c)]
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


# A package may import only the packages listed for it (README: compressors knows nothing
# of workloads or the orchestrator; workloads nothing of the orchestrator).
ALLOWED = {"compressors": {"compressors"}, "workloads": {"workloads", "compressors"},
           "orchestrator": set(PACKAGES)}


# Inside a package, a folder imports only the folders listed for it: the layers point one way
# (a folder not listed, such as workloads/, is one layer).
SUB_ALLOWED = {
    "compressors.core": {"compressors.cuda"},
    "compressors.kernels": set(),
    "compressors.cuda": set(),
    "compressors.codecs": {"compressors.core", "compressors.kernels", "compressors.cuda"},
    "compressors.comm": {"compressors.core"},
    "compressors.ddp": {"compressors.comm", "compressors.core"},
    "compressors.sync": {"compressors.comm"},
    "compressors.optim": {"compressors.comm", "compressors.core"},
    "orchestrator.study": {"orchestrator.cluster"},
    "orchestrator.cluster": set(),
    "orchestrator.predict": {"orchestrator.study"},
    "orchestrator.results": {"orchestrator.study", "orchestrator.predict"},
}
# The results modules in order: none imports one after it.
RESULTS_ORDER = ["tables", "summary", "plots", "export"]


def _folder(module: str) -> str:
    """The subpackage a module lies in (its top package for one at the top)."""
    parts = module.split(".")
    candidate = ".".join(parts[:2])
    return candidate if candidate in SUB_ALLOWED else parts[0]


def test_every_subpackage_has_its_layer():
    subpackages = {m for m in MODULES if _is_package(m) and m.count(".") == 1}
    assert subpackages == set(SUB_ALLOWED)


@pytest.mark.parametrize("folder", sorted(SUB_ALLOWED))
def test_subpackage_layers(folder):
    graph = import_graph()
    allowed = SUB_ALLOWED[folder] | {folder}
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items() if _folder(m) == folder
                 for t in targets if t.split(".")[0] == folder.split(".")[0] and _folder(t) not in allowed
                 and t != folder.split(".")[0])
    assert not bad, bad


def test_results_modules_import_in_one_direction():
    graph = import_graph()
    for i, name in enumerate(RESULTS_ORDER):
        later = {f"orchestrator.results.{m}" for m in RESULTS_ORDER[i:]} - {f"orchestrator.results.{name}"}
        assert not graph[f"orchestrator.results.{name}"] & later, name


@pytest.mark.parametrize("package", PACKAGES)
def test_layers(package):
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items() if m.split(".")[0] == package
                 for t in targets if t.split(".")[0] not in ALLOWED[package])
    assert not bad, bad
