"""The restore, inside the owner's kernel: checks the files, warns of version changes, loads each
variable on its own, and puts GPU arrays where they fit.

Each variable is one record of the stream (fracnb_meter.hibernation.saver), loaded by its own
unpickler that shares one memo with the others: objects two variables shared are one object
again. A variable that fails to load (a module no longer installed, say) is listed with the
reason; the others still load, except those that share an object with it. A damaged file (cut
short, say) costs only the variables whose bytes it lost: the reason names the file.

Names that hold another value in the kernel are not overwritten unasked: everything is loaded
first, and when a saved value differs from the kernel's, the first answer lists those names
(``conflict``) and assigns nothing; the user then keeps theirs (``on_conflict="keep"``) or takes the
saved ones (``"take"``).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import reprlib
import time
from collections.abc import Callable, Mapping, MutableMapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import frameworks, layout
from .arrays import Record, file_size, read_records
from .manifestcheck import check_manifest
from .namespace import is_import, type_name, version_differences
from .pickler import DEVICE_ARRAY, MAIN_NAMESPACE, describe_error
from .placement import Placement

ON_CONFLICT = ("keep", "take")


class SharedObjectMissingError(Exception):
    """A variable refers to an object of an earlier variable that could not be restored."""


class _AlignedMemo(dict):  # type: ignore[type-arg]
    """The unpickler's memo, shared by every variable's unpickler.

    Protocol 4+ stores each memoised object at index ``len(memo)`` (MEMOIZE). When a variable
    fails halfway, its later entries are missing; ``end`` moves the next index to where the saver's
    memo was after that variable, so the variables after it still find their own objects.
    """

    def __init__(self) -> None:
        super().__init__()
        self.next_index = 0

    def __len__(self) -> int:
        return self.next_index

    def __setitem__(self, key: int, value: Any) -> None:
        super().__setitem__(key, value)
        self.next_index = max(self.next_index, key + 1)

    def __missing__(self, key: int) -> Any:
        raise SharedObjectMissingError("it shares an object with a variable that could not be restored")


class _StateUnpickler(pickle._Unpickler):
    """Python's own unpickler (its memo can be shared, see :class:`_AlignedMemo`); the notebook's
    namespace, the globals of functions defined in it, is this kernel's namespace again."""

    def __init__(
        self, stream: io.BytesIO, buffers: list[Any], device: Callable[[int, str], Any], namespace: Any
    ) -> None:
        super().__init__(stream, buffers=buffers)
        self._device = device
        self._namespace = namespace

    def persistent_load(self, pid: Any) -> Any:
        if pid == MAIN_NAMESPACE:
            return self._namespace
        if not (isinstance(pid, tuple) and len(pid) == 3 and pid[0] == DEVICE_ARRAY):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r} in a saved state")
        return self._device(int(pid[1]), str(pid[2]))


def memo_entries(record: bytes) -> int:
    """How many objects one record memoises (protocol 4+: one per MEMOIZE), read without loading it."""
    return sum(1 for opcode, _arg, _pos in pickletools.genops(record) if opcode.name == "MEMOIZE")


_MISSING = object()


class _StopError(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def restore_namespace(
    user_ns: MutableMapping[str, Any],
    entry: Path,
    env: Mapping[str, str],
    *,
    force: bool,
    current_versions: Callable[[list[str]], dict[str, str | None]],
    placement_of: Callable[[list[dict[str, Any]]], Placement],
    on_conflict: str | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Restore a saved state into ``user_ns``; the result is schemas/restore-report.schema.json."""
    started = clock()
    root = layout.state_root(env)
    report: dict[str, Any] = {"status": "failed", "reason": None, "restored": [], "failed": [], "skipped_at_save": []}
    report |= {
        "warnings": [],
        "notices": [],
        "conflicts": [],
        "conflict_values": [],
        "bytes": 0,
        "saved_at": None,
        "seconds": 0.0,
    }
    try:
        manifest = _manifest_of(entry, root, report)
        saved_versions = manifest.get("versions") or {}
        report["warnings"] = version_differences(saved_versions, current_versions(sorted(saved_versions)))
        if report["warnings"] and not force:
            raise _StopError("confirm", "the saved state was made with other versions")
        placement = placement_of(manifest.get("devices") or [])
        before = dict(user_ns)
        load = _Load(user_ns, manifest, report)
        try:
            load.run(entry / os.path.basename(str(manifest.get("generation"))), root, placement)
        finally:
            _put_back(user_ns, before)
        _assign(user_ns, load.values, report, on_conflict)
        report["bytes"] = restored_bytes(manifest, report["restored"])
    except _StopError as stop:
        return {**report, "status": stop.status, "reason": stop.reason}
    except layout.UnsafeStateError as error:
        return {**report, "status": "refused", "reason": str(error)}
    except layout.DamagedStateError as error:
        return {**report, "reason": str(error)}
    except FileNotFoundError as error:
        name = os.path.basename(error.filename or "")
        return {**report, "reason": f"the saved state is damaged: {name or 'a file'} is missing; discard it"}
    except OSError as error:
        return {**report, "reason": f"the saved state cannot be read: {error}"}
    if report["restored"]:
        layout.write_private_file(entry / layout.RESTORED, _restored_mark(clock, manifest))
    report["status"] = "restored" if not report["failed"] else "partly_restored" if report["restored"] else "failed"
    report["seconds"] = round(clock() - started, 3)
    return report


def _manifest_of(entry: Path, root: Path, report: dict[str, Any]) -> dict[str, Any]:
    try:
        manifest = layout.read_manifest(entry, root)
    except FileNotFoundError:
        raise _StopError("none", "there is no saved state for this notebook") from None
    check_manifest(manifest)
    report |= {"saved_at": manifest.get("saved_at"), "skipped_at_save": manifest.get("skipped", [])}
    byte_counts = manifest.get("bytes")
    report["bytes"] = byte_counts.get("total", 0) if isinstance(byte_counts, dict) else 0
    return manifest


def restored_bytes(manifest: Mapping[str, Any], restored: list[str]) -> int:
    """The saved bytes of the variables restored: a damaged state's lost ones, or the kernel's own values
    kept, are not counted."""
    names = set(restored)
    return sum(int(v.get("bytes", 0)) for v in manifest["variables"] if str(v["name"]) in names)


def _put_back(user_ns: MutableMapping[str, Any], before: Mapping[str, Any]) -> None:
    """The namespace as it was before the load. cloudpickle's function loader writes each function's
    saved globals (and ``__builtins__``) into its globals, which are this namespace: a value the user
    changed since the save would be replaced before the conflicts are even looked at."""
    for name in [name for name in user_ns if name not in before]:
        del user_ns[name]
    for name, value in before.items():
        if user_ns.get(name, _MISSING) is not value:
            user_ns[name] = value


def _assign(
    user_ns: MutableMapping[str, Any], values: Mapping[str, Any], report: dict[str, Any], on_conflict: str | None
) -> None:
    """Put the loaded values into the namespace, unless some differ from the kernel's and the user has not chosen."""
    report["conflicts"] = conflicts(user_ns, values)
    report["conflict_values"] = [
        {"name": name, "kernel": brief(user_ns[name]), "saved": brief(values[name])} for name in report["conflicts"]
    ]
    if report["conflicts"] and on_conflict not in ON_CONFLICT:
        raise _StopError("conflict", f"other values in this kernel: {', '.join(report['conflicts'])}")
    keep = set(report["conflicts"]) if on_conflict == "keep" else set()
    for name, value in values.items():
        if name not in keep:
            user_ns[name] = value
            if not is_import(value):  # imported again, as saved, but not one of the user's variables
                report["restored"].append(name)


def conflicts(user_ns: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """The names whose saved value differs from the one the kernel holds now (a module imported again,
    or an equal number or string, is the same)."""
    return [name for name, value in values.items() if name in user_ns and not same(user_ns[name], value)]


_BRIEF = reprlib.Repr()
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlevel = 30, 30, 2


def brief(value: Any, most: int = 40) -> str:
    """A value as the conflict question shows it: a repr of at most ``most`` characters (an array's
    repr is numpy's summary, cut)."""
    try:
        text = " ".join(_BRIEF.repr(value).split())
    except Exception:
        text = f"a {type_name(value)}"
    return text if len(text) <= most else f"{text[: most - 3]}..."


def same(current: Any, saved: Any) -> bool:
    if current is saved:
        return True
    if type(current) is not type(saved):
        return False
    try:
        return (current == saved) is True  # an array's == is an array: not the same, to be safe
    except Exception:
        return False


def _restored_mark(clock: Callable[[], float], manifest: Mapping[str, Any]) -> bytes:
    moment = datetime.fromtimestamp(clock(), timezone.utc).isoformat()
    return json.dumps({"restored_at": moment, "generation": manifest.get("generation")}).encode()


def _records(pairs: list[list[int]]) -> list[Record]:
    return [Record(int(offset), int(length)) for offset, length in pairs]


class _Load:
    """One restore's loading: every variable's record, with the arrays it refers to, into ``values``
    (the namespace is only the globals of functions defined in the notebook)."""

    def __init__(self, user_ns: MutableMapping[str, Any], manifest: Mapping[str, Any], report: dict[str, Any]) -> None:
        self.user_ns, self.manifest, self.report = user_ns, manifest, report
        self.values: dict[str, Any] = {}
        self.memo = _AlignedMemo()
        self.loaded: dict[int, frameworks.HostArray] = {}
        self.damage: list[str] = []  # what is wrong with the files, once each
        self.lost_alignment: str | None = None  # why no later record can be loaded

    def run(self, generation: Path, root: Path, placement: Placement) -> None:
        layout.check_private_dirs(generation, root)
        arrays_layout = self.manifest["arrays"]
        out_of_band = _records(arrays_layout["out_of_band"])
        device_records = _records(arrays_layout["device"])
        moved: list[str] = []
        target = frameworks.TARGET.set(_target(self.manifest.get("devices") or [], placement))
        moved_token = frameworks.MOVED_TO_HOST.set(moved)
        try:
            with (
                layout.open_private(generation / layout.OBJECTS) as objects,
                layout.open_private(generation / layout.ARRAYS) as arrays,
            ):

                def device_array(index: int, device: str) -> frameworks.HostArray:
                    if index not in self.loaded:
                        (values,) = self._read(arrays, [device_records[index]])
                        self.loaded[index] = frameworks.HostArray(frameworks.as_bytes(values), device)
                    return self.loaded[index]

                for variable in self.manifest["variables"]:
                    self._variable(variable, objects, lambda span: self._read(arrays, out_of_band[span]), device_array)
        finally:
            frameworks.TARGET.reset(target)
            frameworks.MOVED_TO_HOST.reset(moved_token)
        if self.damage:
            self.report["reason"] = "; ".join(self.damage) + "; the variables it lost are listed as not restored"
        if moved:
            self.report["notices"].append(
                placement.notice or f"Restored to host memory: {', '.join(moved)} (no GPU for them here)."
            )

    def _read(self, arrays: Any, records: list[Record]) -> list[Any]:
        try:
            return read_records(arrays, records)
        except EOFError:
            raise layout.DamagedStateError(
                self._damaged(layout.ARRAYS, f"cut short ({file_size(arrays)} bytes)")
            ) from None

    def _damaged(self, name: str, what: str) -> str:
        reason = f"the saved state is damaged: {name} is {what}"
        if reason not in self.damage:
            self.damage.append(reason)
        return reason

    def _variable(self, variable: Mapping[str, Any], objects: Any, buffers_of: Any, device_array: Any) -> None:
        name, length = str(variable["name"]), int(variable["length"])
        if self.lost_alignment is not None:
            self._fail(variable, self.lost_alignment)
            return
        objects.seek(int(variable["offset"]))
        record = objects.read(length)
        start = self.memo.next_index
        if len(record) < length:
            self._fail(variable, self._damaged(layout.OBJECTS, f"cut short ({file_size(objects)} bytes)"))
            self.lost_alignment = f"{layout.OBJECTS} is damaged before this variable"
            return
        first, count = variable["buffers"]
        try:
            unpickler = _StateUnpickler(
                io.BytesIO(record), buffers_of(slice(first, first + count)), device_array, self.user_ns
            )
            unpickler.memo = self.memo
            value = unpickler.load()
        except Exception as error:
            self._fail(variable, str(error) if isinstance(error, layout.DamagedStateError) else describe_error(error))
            try:
                self.memo.next_index = start + memo_entries(record)
            except Exception:  # a garbled record: where the later ones' objects go is unknown
                self.lost_alignment = f"{layout.OBJECTS} is damaged before this variable"
                self._damaged(layout.OBJECTS, "garbled")
            return
        self.values[name] = value

    def _fail(self, variable: Mapping[str, Any], reason: str) -> None:
        self.report["failed"].append(
            {"name": str(variable["name"]), "type": variable.get("type", ""), "reason": reason}
        )


def _target(devices: list[Mapping[str, Any]], placement: Placement) -> frameworks.Target:
    if not placement.on_gpu:
        return frameworks.Target()
    saved = {(str(d["framework"]), str(d["device"])) for d in devices}
    torch_gpu = any(framework == "torch" and device != "cpu" for framework, device in saved)
    jax_gpu = any(framework == "jax" and not device.startswith("cpu") for framework, device in saved)
    return frameworks.Target(
        torch="cuda:0" if torch_gpu else None,
        jax="gpu:0" if jax_gpu else None,
        cupy=any(framework == "cupy" for framework, _ in saved),
    )
