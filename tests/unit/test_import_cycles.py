"""No import cycle within `projections`, `streams` or `bench`, counting the imports inside
functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("projections", "streams", "bench")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_imports(path: Path, modules: set[str], package: str) -> set[str]:
    """The modules of `package` that `path` imports anywhere in its body."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module)
            # `from bench import fold` imports the module bench.fold
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in imported if name in modules and name != package}


def import_graph(package: str) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in (REPO / package).rglob("*.py")}
    modules = set(paths)
    return {name: _package_imports(path, modules, package) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import path per cycle found by a depth-first walk."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 5 and any(graph.values())  # the graph was read
    assert cycles(graph) == []


def test_the_graph_sees_the_imports_inside_functions() -> None:
    assert "bench.meta" in import_graph("bench")["bench.run"]
