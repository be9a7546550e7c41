"""Which saved variables a damaged state has lost, read from the manifest and the files' sizes, never
unpickled: the states listing (the panel, the offer) and ``%fracnb_restore --list`` name them before a
restore, as the restore itself would (fracnb_meter.hibernation.restorer).

A variable is lost when a byte of its record in the objects file, or of a buffer it refers to in the
arrays file, lies past that file's end (a file cut short: a full volume, a copy that stopped). A cut in
the objects file also loses every later variable: the restore cannot find where their objects go. The
arrays file is written in the variables' order, so each variable's buffers (numpy's and the frameworks'
device arrays alike) are the next ones by offset whose lengths add up to its array bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import layout


def lost_variables(manifest: Mapping[str, Any], objects_size: int, arrays_size: int) -> list[dict[str, str]]:
    """The manifest's variables that cannot come back from files of these sizes, each with why
    (hibernation-manifest.schema.json's skippedVariable). Pure."""
    records = sorted(
        (int(offset), int(length)) for kind in ("out_of_band", "device") for offset, length in manifest["arrays"][kind]
    )
    cut_objects, cut_arrays = _cut(layout.OBJECTS, objects_size), _cut(layout.ARRAYS, arrays_size)
    lost, objects_lost, position = [], False, 0
    for variable in manifest["variables"]:
        end = int(variable["offset"]) + int(variable["length"])
        array_bytes = int(variable.get("bytes", variable["length"])) - int(variable["length"])
        mine, position = _buffers(records, position, array_bytes)
        reason = None
        if objects_lost or end > objects_size:
            objects_lost, reason = True, cut_objects
        elif any(offset + length > arrays_size for offset, length in mine):
            reason = cut_arrays
        if reason is not None:
            lost.append({"name": str(variable["name"]), "type": str(variable.get("type", "")), "reason": reason})
    return lost


def _cut(name: str, size: int) -> str:
    return f"{name} is cut short ({size} bytes)"


def _buffers(records: list[tuple[int, int]], position: int, array_bytes: int) -> tuple[list[tuple[int, int]], int]:
    """The records from ``position`` on whose lengths add up to ``array_bytes``, and the next position."""
    mine, total = [], 0
    while position < len(records) and total < array_bytes:
        mine.append(records[position])
        total += records[position][1]
        position += 1
    return mine, position


def lost_in_entry(entry: Path, manifest: Mapping[str, Any]) -> list[dict[str, str]]:
    """The variables this entry's files have lost (a missing file has lost all it held)."""
    generation = entry / os.path.basename(str(manifest.get("generation")))
    return lost_variables(manifest, _size(generation / layout.OBJECTS), _size(generation / layout.ARRAYS))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
