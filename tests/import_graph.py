"""The project's import graph, read from the source as every tool reads it.

Each module of the three source roots (the shared `gpubench/`, `agent/` and
`collector/`: pyproject.toml's `[tool.ruff] src`) and of `tests/`, `bench/` and
`scripts/` is a node; each `import` and `from ... import` in it is an edge to the
project's module it names, wherever it stands (at the top, inside a function or a
`try`), except under `if TYPE_CHECKING:`, which never runs. `from PACKAGE import NAME`
names the module PACKAGE.NAME where one exists, else PACKAGE itself; a package's
`importlib.import_module(f"{__name__}.{...}")` names each module directly in it.

docs/architecture.md's picture is `LAYERS`, and tests/unit/test_import_graph.py holds
the graph to it: no module imports a layer above its own or beside it (the agent and
the collector never import each other; the agent never imports its workload), and no
import loop, among modules or among layers. `python tests/import_graph.py` prints the
layers with their modules' counts and what each imports.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where each top-level name's modules live: the three source roots of `gpubench`, and
# the folders of scripts and tests (their modules are named by their path from ROOT).
SOURCE_ROOTS = (ROOT, ROOT / "agent", ROOT / "collector")
SCRIPT_FOLDERS = ("tests", "bench", "scripts")
SKIPPED = {"__pycache__", ".venv", ".git", "build", "dist", ".demo"}


@dataclass(frozen=True)
class Layer:
    """A part of the picture: its modules (by name prefix) and the layers it may import."""

    name: str
    prefixes: tuple[str, ...]
    may_import: tuple[str, ...]


# Top to bottom. A module belongs to the first layer with a matching prefix, the longest
# prefix winning (`gpubench.agent.workload` before `gpubench.agent`).
LAYERS = (
    Layer("tests, bench, scripts", ("tests", "bench", "scripts"),
          ("agent", "workload", "collector's commands", "collector", "site", "shared", "wire")),
    Layer("agent", ("gpubench.agent",), ("shared", "wire")),
    Layer("workload", ("gpubench.agent.workload",), ("shared", "wire")),
    # `gpubench-collector`: its commands serve the collector and the site both.
    Layer("collector's commands", ("gpubench.collector.cli",),
          ("site", "collector", "shared", "wire")),
    Layer("site", ("gpubench.collector.web",), ("collector", "shared", "wire")),
    Layer("collector", ("gpubench.collector",), ("shared", "wire")),
    Layer("shared", ("gpubench",), ("wire",)),
    Layer("wire", ("gpubench.v1",), ()),
)


def layer_of(module: str) -> Layer:
    """The layer a module belongs to: the one whose prefix matches it the longest."""
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), layer)
    if best is None:
        raise ValueError(f"{module}: in no layer of tests/import_graph.py's LAYERS")
    return best[1]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project below `root`, by its dotted name."""
    found: dict[str, Path] = {}
    for source_root in (root, root / "agent", root / "collector"):
        package = source_root / "gpubench"
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(source_root).with_suffix("").parts
            if SKIPPED.intersection(parts) or _generated(path):
                continue
            if source_root == root and len(parts) > 1 and parts[1] in ("agent", "collector"):
                continue  # a stray copy: the agent and the collector live in their own roots
            found[_dotted(parts)] = path
    for folder in SCRIPT_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if not SKIPPED.intersection(parts):
                found[_dotted(parts)] = path
    return found


def _generated(path: Path) -> bool:
    return path.name.endswith(("_pb2.py", "_pb2_grpc.py"))


def _dotted(parts: tuple[str, ...]) -> str:
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


@dataclass(frozen=True)
class Import:
    """One import of a project module: who imports, what, and where in its file."""

    importer: str
    imported: str
    line: int


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import of a project module by a project module (TYPE_CHECKING ones left out)."""
    for name, path in known.items():
        tree = _parsed(path)
        package = name if _is_package(path) else name.rpartition(".")[0]
        for node in _runtime_nodes(tree):
            if _imports_own_submodule(node):
                for target in known:
                    if target.rpartition(".")[0] == name:
                        yield Import(name, target, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = _known_prefix(alias.name, known)
                    if target:
                        yield Import(name, target, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                for alias in node.names:
                    target = (_known(f"{base}.{alias.name}", known)
                              or _known_prefix(base, known))
                    if target and target != name:
                        yield Import(name, target, node.lineno)


def _imports_own_submodule(node: ast.AST) -> bool:
    """`importlib.import_module(f"{__name__}.{...}")`: one of the package's own modules."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and node.args):
        return False
    name = node.args[0]
    return (isinstance(name, ast.JoinedStr) and len(name.values) >= 2
            and isinstance(name.values[0], ast.FormattedValue)
            and isinstance(name.values[0].value, ast.Name)
            and name.values[0].value.id == "__name__"
            and isinstance(name.values[1], ast.Constant) and name.values[1].value == ".")


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A module's syntax tree, read once for the imports and the unresolved names both."""
    return ast.parse(path.read_text(), filename=str(path))


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the tree but those under `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, known: dict[str, Path]) -> str | None:
    return name if name in known else None


def _known_prefix(name: str, known: dict[str, Path]) -> str | None:
    """The longest project module that `name` is or lies in (`gpubench` alone is none)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def unresolved(known: dict[str, Path], root: Path = ROOT) -> list[str]:
    """`gpubench.*` imports that name no module or package of the three source roots."""
    missing = []
    for name, path in known.items():
        tree = _parsed(path)
        package = name if _is_package(path) else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [_absolute(node, package)]
            for target in targets:
                if target.startswith("gpubench.") and not target.startswith("gpubench.v1") \
                        and target not in known:
                    missing.append(f"{path.relative_to(root)}:{node.lineno}: {target}")
    return missing


def upward(edges: list[Import]) -> list[str]:
    """Imports of a layer that its own layer may not import, in words."""
    found = []
    for edge in edges:
        mine, theirs = layer_of(edge.importer), layer_of(edge.imported)
        if theirs.name != mine.name and theirs.name not in mine.may_import:
            found.append(f"{edge.importer}:{edge.line} imports {edge.imported}"
                         f" ({mine.name} may not import {theirs.name})")
    return found


def loops(edges: list[Import]) -> list[list[str]]:
    """The import loops among modules: each strongly connected part of two or more."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    return [sorted(part) for part in _strongly_connected(graph) if len(part) > 1]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion (the graph is a few hundred modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    parts: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                parts.append(part)
    return parts


def picture() -> list[str]:
    """The layers, top to bottom, each with the layers it may import: docs/architecture.md's."""
    width = max(len(layer.name) for layer in LAYERS)
    return [f"{layer.name:{width}}  may import: {', '.join(layer.may_import) or 'nothing'}"
            for layer in LAYERS]


def faults(root: Path = ROOT) -> list[str]:
    """Every import against the picture, every loop and every unresolved project import."""
    known = modules(root)
    edges = list(imports(known))
    return (upward(edges) + ["loop among: " + ", ".join(loop) for loop in loops(edges)]
            + [f"unresolved: {line}" for line in unresolved(known, root)])


def main() -> int:
    """Print the picture, then each fault; exit 1 where there is one."""
    print("\n".join(picture()))
    found = faults()
    for fault in found:
        print("fault:", fault)
    print(f"{len(modules())} modules, {len(found)} faults")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
