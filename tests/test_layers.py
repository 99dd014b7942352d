"""Layers depend one way: the package import graph, read from the source with ``ast`` (nothing is imported).

Only top-level imports count for the graph (those in ``if TYPE_CHECKING:``
blocks do not: they never run); function-local imports are left to TensorFlow
and ``tensorflow_serving``, so the top of a module shows what it depends on.

``DIAGRAM`` is the layer diagram of ``docs/architecture.md``, box by box:
every project module sits in exactly one box, and a box imports only boxes on
rows below it (inside the server, only the server's lower rows and the rows
below the server; never the exporter beside it).
"""
from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path
from typing import Iterator

from serving.checkout import REPO_ROOT

SOURCE_PACKAGES = ("serving", "exporter", "loadtest", "monitoring", "benchmarks", "deploy", "gateway")

# The granularity of the graph: a module belongs to the longest of these that prefixes it;
# any other module is a node of its own (e.g. serving.stack.cli). The modules at the root of
# serving.server are nodes of their own too: the composition root (server, main) imports
# every folder of the server, and the folders import the neutral root modules (metrics,
# deadline, flags), which is one way, though one node for the root would make it a cycle.
UNITS = (
    "serving.codec", "serving.client", "serving.capture", "serving.config", "serving.rollout",
    "serving.server.core", "serving.server.tensorflow", "serving.server.batching", "serving.server.frontends",
    "serving.server",
    "serving.status", "serving.wire", "serving.model_repo",
    "exporter", "loadtest", "monitoring", "benchmarks", "deploy", "gateway", "tests",
)
SERVER_ROOT = "serving.server"

Box = tuple[str, ...]   # modules and packages (with everything under them) drawn as one box
SERVER_ROWS: tuple[tuple[Box, ...], ...] = (
    (("serving.server.main", "serving.server.server", "serving.server.__main__", "serving.server"),),
    (("serving.server.frontends",),),
    (("serving.server.batching",),),
    (("serving.server.tensorflow",),),
    (("serving.server.core",),),
    (("serving.server.flags", "serving.server.metrics", "serving.server.deadline",
      "serving.server.admission", "serving.server.heap_freezer", "serving.server.open_file_limit",
      "serving.server.logs", "serving.server.memory", "serving.server.request_capture"),),
)
"""The server's column of the diagram, top to bottom: composition root, frontends/, batching/, tensorflow/,
core/, the root modules."""
DIAGRAM: tuple[tuple[Box, ...], ...] = (
    (("benchmarks",),),
    (("loadtest",), ("monitoring",), ("deploy",), ("serving.rollout",)),
    (("serving.stack",),),
    (("gateway",),),
    (("exporter",), ("serving.server.*",), ("serving.launcher",)),   # beside the server's column (SERVER_ROWS)
    (("serving.config",),),
    (("serving.client",), ("serving.capture",)),
    (("serving.codec",),),
    (("serving.model_repo",),),
    (("serving.status",), ("serving.wire",), ("serving",)),
)
"""``docs/architecture.md``'s layer diagram, top to bottom: each row holds boxes side by side."""


def box_positions() -> dict[Box, tuple[int, int]]:
    """Each box's (row, server row) in ``DIAGRAM``; server row -1 outside the server's column."""
    positions: dict[Box, tuple[int, int]] = {}
    for row, boxes in enumerate(DIAGRAM):
        for box in boxes:
            if box == ("serving.server.*",):
                positions.update({b: (row, sub) for sub, sub_boxes in enumerate(SERVER_ROWS) for b in sub_boxes})
            else:
                positions[box] = (row, -1)
    return positions


def box_of(module: str, positions: dict[Box, tuple[int, int]]) -> Box | None:
    """The box ``module`` is drawn in: the one naming the longest prefix of it; None if no box does."""
    best: tuple[int, Box | None] = (-1, None)
    for box in positions:
        for name in box:
            if (module == name or module.startswith(name + ".")) and len(name) > best[0]:
                best = (len(name), box)
    return best[1]


def may_import(importer: Box, imported: Box, positions: dict[Box, tuple[int, int]]) -> bool:
    """The diagram's rule: a lower row; inside the server's column, a lower server row."""
    (row, sub), (other_row, other_sub) = positions[importer], positions[imported]
    if importer == imported or other_row > row:
        return True
    return row == other_row and sub >= 0 and other_sub > sub


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


@functools.lru_cache(maxsize=1)
def package_graph() -> dict[str, dict[str, list[str]]]:
    """``{unit: {imported unit: [module that imports it, ...]}}`` from top-level imports (read once)."""
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


def layer_violations(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """Every import of ``graph`` that goes up or sideways in ``DIAGRAM``, or from or to a module it lacks."""
    positions = box_positions()
    found = []
    for source in sorted(graph):
        for _target, why in sorted(graph[source].items()):
            for line in why:
                importer, imported = line.split(" imports ")
                a, b = box_of(importer, positions), box_of(imported, positions)
                if a is None or b is None:
                    found.append(f"{line}: {importer if a is None else imported} is in no box of DIAGRAM")
                elif not may_import(a, b, positions):
                    found.append(f"{line}: {a[0]} may not import {b[0]} (not below it in the diagram)")
    return found


def test_every_import_goes_down_the_documented_layer_diagram():
    assert layer_violations(package_graph()) == []


def test_every_project_module_is_drawn_in_the_diagram():
    positions = box_positions()
    assert [m for top in SOURCE_PACKAGES for m, _ in _sources(top) if box_of(m, positions) is None] == []


def frontend_violations(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """The diagram's "grpc, rest -> dataplane": inside frontends/, only the data plane reaches the server's
    lower folders (tensorflow/, batching/, core/); the wire front-ends go through it."""
    lower = ("serving.server.tensorflow", "serving.server.batching", "serving.server.core")
    return [line for target in lower for line in graph.get("serving.server.frontends", {}).get(target, [])
            if not line.startswith("serving.server.frontends.dataplane imports ")]


def test_the_wire_front_ends_reach_the_model_only_through_the_data_plane():
    assert frontend_violations(package_graph()) == []
    assert frontend_violations({"serving.server.frontends": {"serving.server.tensorflow": [
        "serving.server.frontends.grpc imports serving.server.tensorflow.inference"]}}) != []


def test_the_diagram_refuses_what_the_docs_forbid():
    """The rule itself, on imports the tree must never have."""
    graph = {
        "serving.server.core": {"serving.server.tensorflow": ["serving.server.core.manager imports "
                                                              "serving.server.tensorflow.loader"]},
        "serving.server.batching": {"serving.server.frontends": ["serving.server.batching.queue imports "
                                                                 "serving.server.frontends.dataplane"]},
        "serving.server.tensorflow": {"serving.server.batching": ["serving.server.tensorflow.loader imports "
                                                                  "serving.server.batching.queue"]},
        "exporter": {"serving.server.core": ["exporter.export imports serving.server.core.manager"]},
        "serving.codec": {"serving.client": ["serving.codec._rest imports serving.client._types"]},
        "loadtest": {"benchmarks": ["loadtest.run imports benchmarks.server"]},
    }
    assert len(layer_violations(graph)) == 6
    assert layer_violations({"serving.server.frontends": {"serving.server.core": [
        "serving.server.frontends.dataplane imports serving.server.core.state"]}}) == []
