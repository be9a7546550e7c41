"""The restore's own check of a manifest's shape: what the loader reads, with no schema library.

jsonschema's import alone costs seconds in a fresh kernel (its format checkers compile grammars),
more than a small restore takes; the schema (hibernation-manifest.schema.json) is checked by the
tests. This check covers what the restore reads: a manifest that fails it is damaged, and the
reason names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .layout import MANIFEST, DamagedStateError

FORMAT = 1


def _damaged(what: str) -> DamagedStateError:
    return DamagedStateError(f"the saved state is damaged: {MANIFEST} has {what}; discard it")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_records(pairs: Any, field: str) -> int:
    """The number of [offset, length] pairs in ``pairs``; DamagedStateError when it is not such a list."""
    if not isinstance(pairs, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(_is_count(n) for n in pair) for pair in pairs
    ):
        raise _damaged(f"a {field} that is not a list of [offset, length]")
    return len(pairs)


def _check_variable(variable: Any, buffers: int) -> None:
    if not isinstance(variable, dict) or not isinstance(variable.get("name"), str):
        raise _damaged("a variable without a name")
    name = variable["name"]
    if not (_is_count(variable.get("offset")) and _is_count(variable.get("length"))):
        raise _damaged(f"no offset or length for {name!r}")
    span = variable.get("buffers")
    if not (isinstance(span, list) and len(span) == 2 and all(_is_count(n) for n in span)):
        raise _damaged(f"no [first, count] of buffers for {name!r}")
    if span[0] + span[1] > buffers:
        raise _damaged(f"buffers for {name!r} beyond the {buffers} it lists")


def check_manifest(manifest: Mapping[str, Any]) -> None:
    """Refuse a manifest of another format, or one the loader cannot follow, with the reason."""
    if manifest.get("format") != FORMAT:
        raise DamagedStateError(
            f"this saved state has format {manifest.get('format')!r}; this fracnb reads format {FORMAT}"
        )
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict):
        raise _damaged("no arrays")
    buffers = _check_records(arrays.get("out_of_band"), "arrays.out_of_band")
    _check_records(arrays.get("device"), "arrays.device")
    variables = manifest.get("variables")
    if not isinstance(variables, list):
        raise _damaged("no list of variables")
    for variable in variables:
        _check_variable(variable, buffers)
    if not isinstance(manifest.get("generation"), str) or not manifest["generation"]:
        raise _damaged("no generation")
    devices = manifest.get("devices", [])
    if not isinstance(devices, list) or not all(
        isinstance(d, dict) and isinstance(d.get("framework"), str) and isinstance(d.get("device"), str)
        and _is_count(d.get("bytes")) for d in devices
    ):  # fmt: skip
        raise _damaged("a list of devices that is not one")
