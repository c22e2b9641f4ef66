"""The workload's modules import one another without a loop.

Every `import` and `from ... import` counts, at module level, under TYPE_CHECKING
and inside functions alike: a loop that only a function-level import hides still
ties the modules together. Read from the source (ast), nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpubench.agent.workload as workload

PACKAGE = "gpubench.agent.workload"
ROOT = Path(workload.__file__).parent


def modules() -> dict[str, Path]:
    """Every module of the workload by its dotted name."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([PACKAGE, *parts])] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The workload's modules that `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # a module: `from package import module`
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of `graph`, each as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                found.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_workload_has_no_import_loop() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert f"{PACKAGE}.frameworks.types" in graph[f"{PACKAGE}.frameworks.base"]
    assert [" -> ".join(loop) for loop in loops(graph)] == []


def test_a_loop_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert loops(graph) == [["a", "b", "c", "a"]]
