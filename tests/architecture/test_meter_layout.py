"""The notebook side's floor plan (docs/architecture.md): no import circle between the files of
``fracnb_meter`` or between its rooms (folders; a module at the package's root is a room of its own).
Every import counts, deferred ones included, as for the hub package (test_layout.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.architecture.imports import circle_path, cycles, graph, room_arrows

REPO = Path(__file__).resolve().parents[2]
METER = REPO / "extension" / "fracnb_meter"


def test_a_folder_s_init_is_no_edge_from_below_but_real_circles_are_found(tmp_path: Path) -> None:
    room = tmp_path / "pkg" / "room"
    room.mkdir(parents=True)
    (room.parent / "__init__.py").write_text("")
    (room / "__init__.py").write_text("def load():\n    from .face import show  # noqa\n")
    (room / "face.py").write_text("from . import core\n")
    (room / "core.py").write_text("")
    assert graph(room.parent)["pkg.room.face"] == {"pkg.room.core"}
    assert cycles(graph(room.parent)) == []
    (room / "core.py").write_text("def later():\n    from .face import show  # noqa\n")
    assert cycles(graph(room.parent)) == [["pkg.room.core", "pkg.room.face"]]


def test_no_import_circle_between_the_files_of_the_meter() -> None:
    edges = graph(METER)
    assert "fracnb_meter.hibernation.layout" in edges["fracnb_meter.hibernation.restorer"], "the graph reads imports"
    found = [" -> ".join(circle_path(edges, members)) for members in cycles(edges)]
    assert not found, "import circles between the meter's files:\n" + "\n".join(found)


def test_no_import_circle_between_the_rooms_of_the_meter() -> None:
    arrows = room_arrows(graph(METER))
    edges = {room: set(targets) for room, targets in arrows.items()}
    found = []
    for circle in (circle_path(edges, members) for members in cycles(edges)):
        because = "; ".join(f"{a} -> {b}: {', '.join(arrows[a][b])}" for a, b in itertools.pairwise(circle))
        found.append(f"{' -> '.join(circle)} ({because})")
    assert not found, "import circles between the meter's rooms:\n" + "\n".join(found)
