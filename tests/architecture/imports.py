"""The import graph of a package's modules, read with ``ast``: every import counts (module level,
``TYPE_CHECKING`` blocks and imports deferred into functions alike)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package at ``root``."""
    return {module_name(root, path): path for path in sorted(root.rglob("*.py"))}


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The package's modules that the module ``name`` imports."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, path)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            found = target
            while found and found not in known:
                found = found.rpartition(".")[0]
            if found and found != name:
                yield found


def graph(root: Path) -> dict[str, set[str]]:
    found = modules(root)
    known = set(found)
    # A package's __init__ (the root's, or a folder's) runs before every module below it: an import of it
    # from below (``from . import layout``) is no edge; only the __init__'s own imports are.
    return {name: set(imported(name, path, known)) - set(_packages_above(name)) for name, path in found.items()}


def _packages_above(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in edges.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def circle_path(edges: dict[str, set[str]], members: list[str]) -> list[str]:
    """One shortest circle through ``members`` (a strongly connected component, as :func:`cycles` gives
    it), as a path that starts and ends at the same node: ``["a", "b", "a"]``."""
    start, inside = members[0], set(members)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(edges.get(node, ())):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if successor in inside and successor not in parents:
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    raise ValueError(f"no circle through {start}")


def room_of(module: str) -> str:
    """The folder (room) a module of the package lives in, ``fracnb_spawner.gpu``; a module directly in
    the package is a room of its own."""
    return ".".join(module.split(".")[:2])


def room_arrows(edges: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """Room -> room it imports -> the imports that make that arrow (``"a.b imports c.d"``)."""
    arrows: dict[str, dict[str, list[str]]] = {}
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            source, destination = room_of(module), room_of(target)
            if source != destination:
                arrows.setdefault(source, {}).setdefault(destination, []).append(f"{module} imports {target}")
    return arrows


def outside_imports(root: Path) -> dict[str, set[str]]:
    """Dotted name -> the top-level packages outside the package at ``root`` that the module imports."""
    found = {}
    for name, path in modules(root).items():
        tops = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
        found[name] = tops - {root.name}
    return found
