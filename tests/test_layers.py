"""Layers depend one way: the package import graph, read from the source with ``ast`` (nothing is imported).

Only top-level imports count for the graph (those in ``if TYPE_CHECKING:``
blocks do not: they never run); function-local imports are left to TensorFlow
and ``tensorflow_serving``, so the top of a module shows what it depends on.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGES = ("serving", "exporter", "loadtest", "monitoring", "benchmarks", "deploy")

# The granularity of the graph: a module belongs to the longest of these that prefixes it;
# any other module is a node of its own (e.g. serving.stack.cli). The modules at the root of
# serving.server are nodes of their own too: the composition root (server, main) imports
# every folder of the server, and the folders import the neutral root modules (metrics,
# deadline, flags), which is one way, though one node for the root would make it a cycle.
UNITS = (
    "serving.codec", "serving.client", "serving.config", "serving.rollout",
    "serving.server.core", "serving.server.tensorflow", "serving.server.batching", "serving.server.frontends",
    "serving.server",
    "serving.status", "serving.wire", "serving.model_repo",
    "exporter", "loadtest", "monitoring", "benchmarks", "deploy", "tests",
)
SERVER_ROOT = "serving.server"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _unit(module: str) -> str:
    matches = [u for u in UNITS if module == u or module.startswith(u + ".")]
    unit = max(matches, key=len) if matches else module
    return module if unit == SERVER_ROOT else unit


def _is_type_checking(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import: the body, and the branches of top-level if/try (not TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body + node.orelse + node.finalbody
                                  + [s for h in node.handlers for s in h.body])
        elif not isinstance(node, ast.If):
            yield node


def _imported(node: ast.stmt, module: str, is_package: bool) -> Iterator[str]:
    """The project modules an import statement loads (``from serving import codec`` -> serving.codec)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        for alias in node.names:
            yield f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base


def _sources(top: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((REPO_ROOT / top).rglob("*.py")):
        yield _module_name(path), path


def _imports(path: Path, module: str, nodes: Iterator[ast.AST]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in nodes:
        for name in _imported(node, module, is_package):
            if name.split(".")[0] in SOURCE_PACKAGES + ("tests",):
                yield name


def package_graph() -> dict[str, dict[str, list[str]]]:
    """``{unit: {imported unit: [module that imports it, ...]}}`` from top-level imports."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for top in SOURCE_PACKAGES:
        for module, path in _sources(top):
            tree = ast.parse(path.read_text(), str(path))
            for name in _imports(path, module, _top_level(tree.body)):
                source, target = _unit(module), _unit(name)
                if source != target:
                    graph[source][target].append(f"{module} imports {name}")
    return graph


def test_the_graph_sees_the_known_layers():
    graph = package_graph()
    assert "serving.model_repo" in graph["serving.config"]
    assert "serving.model_repo" in graph["exporter"]
    assert "serving.client" in graph["serving.rollout"]


def test_no_package_imports_a_package_that_imports_it_back():
    graph = package_graph()
    cycles = [f"{a} <-> {b}: {graph[a][b][0]}; {graph[b][a][0]}"
              for a in sorted(graph) for b in sorted(graph[a]) if a < b and a in graph.get(b, {})]
    assert cycles == []


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or [] when it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return []
        for nxt in sorted(graph.get(node, {})):
            cycle = visit(nxt, path + [node])
            if cycle:
                return cycle
        done.add(node)
        return []

    for node in sorted(graph):
        cycle = visit(node, [])
        if cycle:
            return cycle
    return []


def test_the_cycle_finder_finds_a_three_package_cycle():
    assert find_cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": []}, "b": {"c": []}}) == []


def test_the_package_graph_has_no_longer_cycle_either():
    assert " -> ".join(find_cycle(package_graph())) == ""


def test_the_bottom_modules_import_nothing_of_the_project_but_each_other():
    graph = package_graph()
    assert set(graph.get("serving.model_repo", {})) == set()
    assert set(graph.get("serving.status", {})) == set()


def test_benchmarks_import_nothing_from_tests():
    found = [f"{module} imports {name}" for module, path in _sources("benchmarks")
             for name in _imports(path, module, ast.walk(ast.parse(path.read_text())))
             if name == "tests" or name.startswith("tests.")]
    assert found == []
