"""The hub package's floor plan (docs/architecture.md): no import circle between its files or between its
rooms (folders), ``gpu/`` never imports ``cluster/``, a small root and a small spawner class. Every import
counts: module level, ``TYPE_CHECKING`` blocks and imports deferred into functions alike. The same check
for the front end's modules is extension/src/__tests__/imports.spec.ts."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from tests.architecture.imports import circle_path, cycles, graph, room_arrows

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "spawner" / "fracnb_spawner"
BENCH = REPO / "bench"
MOST_ROOT_MODULES = 8
# The class holds KubeSpawner's hooks and the few steps of a start that set its own fields (the created pod's
# token, the leftover pod's replacement, the running URL): 380 lines keep those methods in the class rather
# than as module functions that take the spawner, which is where the 300-line cap had pushed them.
MOST_SPAWNER_CLASS_LINES = 380


def circles(edges: dict[str, set[str]]) -> list[str]:
    return [" -> ".join(circle_path(edges, members)) for members in cycles(edges)]


def test_the_checks_find_a_circle_made_by_any_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "top.py").write_text("from pkg.room import leaf\n")
    (package / "room" / "leaf.py").write_text("def later():\n    from pkg import top  # noqa\n")
    (package / "room" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .leaf import later\n"
    )
    edges = graph(package)
    assert edges["pkg.room.typed"] == {"pkg.room.leaf"}  # a TYPE_CHECKING import counts
    assert circles(edges) == ["pkg.room.leaf -> pkg.top -> pkg.room.leaf"]
    assert room_arrows(edges) == {
        "pkg.room": {"pkg.top": ["pkg.room.leaf imports pkg.top"]},
        "pkg.top": {"pkg.room": ["pkg.top imports pkg.room", "pkg.top imports pkg.room.leaf"]},
    }


def test_no_import_circle_between_the_files_of_the_hub_package() -> None:
    edges = graph(PACKAGE)
    assert "fracnb_spawner.gpu.plan" in edges["fracnb_spawner.gpu.resolve"], "the graph reads the imports"
    found = circles(edges)
    assert not found, "import circles between files:\n" + "\n".join(found)


def test_no_import_circle_between_the_files_of_the_benchmarks() -> None:
    edges = graph(BENCH)
    assert "bench.replay_training" in edges["bench.replay_model"], "the graph reads the imports"
    found = circles(edges)
    assert not found, "import circles between files of bench/:\n" + "\n".join(found)


def test_no_import_circle_between_the_rooms_of_the_hub_package() -> None:
    arrows = room_arrows(graph(PACKAGE))
    edges = {room: set(targets) for room, targets in arrows.items()}
    found = []
    for circle in (circle_path(edges, members) for members in cycles(edges)):
        steps = itertools.pairwise(circle)
        because = "; ".join(f"{a} -> {b}: {', '.join(arrows[a][b])}" for a, b in steps)
        found.append(f"{' -> '.join(circle)} ({because})")
    assert not found, (
        "import circles between rooms (folders; a module at the root is a room of its own):\n" + "\n".join(found)
    )


def test_gpu_never_imports_cluster() -> None:
    """A GPU plan is a record of what is asked; counting what the cluster has free is the cluster's job."""
    arrows = room_arrows(graph(PACKAGE))
    crossing = arrows.get("fracnb_spawner.gpu", {}).get("fracnb_spawner.cluster", [])
    assert not crossing, "gpu/ imports cluster/: " + "; ".join(crossing)


def test_the_shared_queue_modules_never_import_the_kueue_engine() -> None:
    """``queue/kueue/`` builds on the shared queue modules, never the other way round: only ``queue/engines.py``,
    which picks the engine from ``c.FracnbQueue.engine``, names it."""
    kueue, chooser = "fracnb_spawner.queue.kueue", "fracnb_spawner.queue.engines"
    edges = graph(PACKAGE)
    assert any(target.startswith(kueue) for target in edges[chooser]), "the graph reads the imports"
    shared = [m for m in edges if m.startswith("fracnb_spawner.queue.") and not m.startswith(kueue) and m != chooser]
    crossing = [f"{m} imports {t}" for m in sorted(shared) for t in sorted(edges[m]) if t.startswith(kueue)]
    assert not crossing, "shared queue modules import the Kueue engine: " + "; ".join(crossing)


def test_the_service_core_never_imports_its_api_or_page() -> None:
    """In ``service/`` the API (``api/``) and the web page (``web.py``, ``page.py``) stand on the shared state,
    the passes and the loops, never the other way round; only the shell (``app.py``, ``__main__.py``) names them."""
    service = "fracnb_spawner.service"
    above = (f"{service}.api", f"{service}.web", f"{service}.page", f"{service}.app", f"{service}.__main__")
    edges = graph(PACKAGE)
    assert any(t.startswith(f"{service}.api.") for t in edges[f"{service}.app"]), "the graph reads the imports"
    below = [m for m in edges if m.startswith(f"{service}.") and not m.startswith(above)]
    crossing = [f"{m} imports {t}" for m in sorted(below) for t in sorted(edges[m]) if t.startswith(above)]
    assert not crossing, "the service's core imports its API or page: " + "; ".join(crossing)


def test_the_package_root_holds_few_modules() -> None:
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= MOST_ROOT_MODULES, f"{len(root)} modules directly in fracnb_spawner/: {', '.join(root)}"


def test_the_spawner_class_stays_small() -> None:
    """FractionalSpawner holds KubeSpawner's hooks; the work is done by the objects beside it."""
    tree = ast.parse((PACKAGE / "spawner.py").read_text())
    (spawner,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "FractionalSpawner"]
    lines = spawner.end_lineno - min([spawner.lineno, *(d.lineno for d in spawner.decorator_list)]) + 1
    assert lines <= MOST_SPAWNER_CLASS_LINES, f"FractionalSpawner is {lines} lines (spawner.py:{spawner.lineno})"
