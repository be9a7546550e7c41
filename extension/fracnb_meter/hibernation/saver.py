"""The save, inside the user's kernel: a dry pass that counts, then the write, then the commit.

:func:`save_namespace` is what the server's silent execution calls (through
:func:`fracnb_meter.hibernation.kernelside.hibernate`). It never raises for one variable: what
cannot be saved is skipped and listed with its reason. It never harms an older state: the new
generation is complete and fsynced before the manifest names it (fracnb_meter.hibernation.layout),
and over the limit, on a full disk, past the deadline or on any error, the older state stays.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..wording import format_bytes
from . import layout
from .arrays import ArrayWriter, DeadlineExceededError, Record
from .namespace import is_import, made_by_user, top_packages, type_name, user_variables, versions
from .pickler import CountingSink, StatePickler, describe_error, refusal_of

FORMAT = 1
FREE_SPACE_MARGIN = 64 << 20  # left free on the home volume after a save, for the notebook's own writes
MAX_RESTARTS = 3
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclass(frozen=True)
class SaveRequest:
    """What the server asks of one kernel."""

    notebook_path: str | None  # the path the server shows (relative to its root)
    notebook_file: str  # the absolute file path: the entry's key
    kernel_id: str
    limit_bytes: int  # the most this kernel may write
    deadline: float | None  # time.time() after which the save gives up


@dataclass(frozen=True)
class _Context:
    request: SaveRequest
    env: Mapping[str, str]
    version_of: Callable[[str], str | None]
    clock: Callable[[], float]
    started: float


@dataclass
class _Pass:
    """The outcome of one pass over the variables."""

    arrays: ArrayWriter
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    objects_bytes: int = 0
    device_bytes: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.objects_bytes + self.arrays.position


def save_namespace(
    user_ns: Mapping[str, Any],
    hidden: Mapping[str, Any],
    request: SaveRequest,
    env: Mapping[str, str],
    *,
    version_of: Callable[[str], str | None],
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Save the user's variables; the result is one kernel's entry of the hibernation report."""
    context = _Context(request, env, version_of, clock, clock())
    variables = user_variables(user_ns, hidden)
    result: dict[str, Any] = {"status": "failed", "reason": None, "bytes": 0, "variables": 0, "skipped": []}
    kept = "the previous saved state, if any, is kept"
    try:
        dry = _dry_pass(variables, request.deadline, clock)
        result["skipped"] = dry.skipped
        saveable = {record["name"]: variables[record["name"]] for record in dry.records}
        refusal = _refusal(variables, saveable, dry, context)
        if refusal is not None:
            return {**result, "status": refusal[0], "reason": refusal[1], "bytes": dry.total}
        manifest = _write(saveable, dry.skipped, context)
    except DeadlineExceededError:
        return {**result, "reason": f"the save ran past its time limit; {kept}"}
    except OSError as error:
        return {**result, "reason": f"{disk_reason(error)}; {kept}"}
    except layout.UnsafeStateError as error:
        return {**result, "reason": f"{error}; {kept}"}
    if manifest is None:
        return {**result, "reason": f"none of the {_made_count(variables)} variables can be saved; {kept}"}
    return {
        **result,
        "status": "partly_saved" if manifest["skipped"] else "saved",
        "bytes": manifest["bytes"]["total"],
        "variables": len(made_by_user(manifest["variables"])),
        "skipped": manifest["skipped"],
        "saved_at": manifest["saved_at"],
        "seconds": manifest["seconds"],
    }


def _made_count(variables: Mapping[str, Any]) -> int:
    """How many of ``variables`` the user made: the modules imports bound are saved but not counted."""
    return sum(not is_import(value) for value in variables.values())


def disk_reason(error: OSError) -> str:
    if error.errno in DISK_FULL:
        return f"the home volume is full or over its quota ({os.strerror(error.errno or 0)})"
    return f"could not write the saved state: {error}"


def _refusal(
    variables: Mapping[str, Any], saveable: Mapping[str, Any], dry: _Pass, context: _Context
) -> tuple[str, str] | None:
    """(status, reason) when nothing is written; None when the save goes ahead."""
    kept = "the previous saved state, if any, is kept"
    if not _made_count(variables):  # imports alone: nothing of the user's to keep
        return "empty", f"no variables to save; {kept}"
    if not _made_count(saveable):
        return "failed", f"none of the {_made_count(variables)} variables can be saved; {kept}"
    limit = context.request.limit_bytes
    if dry.total > limit:
        return "skipped_over_limit", (
            f"the variables take {format_bytes(dry.total)}, over the {format_bytes(limit)} left for saved "
            f"states; {kept}"
        )
    free = free_bytes(layout.server_dir(context.env))
    if free is not None and dry.total + FREE_SPACE_MARGIN > free:
        return "skipped_over_limit", (
            f"the variables take {format_bytes(dry.total)}, but only {format_bytes(free)} is free on the home volume; "
            f"{kept}"
        )
    return None


def free_bytes(path: Path) -> int | None:
    """Free bytes for this user on the volume that holds ``path`` (or its nearest existing parent)."""
    for candidate in [path, *path.parents]:
        if candidate.exists():
            stats = os.statvfs(candidate)
            return stats.f_bavail * stats.f_frsize
    return None


def _dry_pass(variables: Mapping[str, Any], deadline: float | None, clock: Callable[[], float]) -> _Pass:
    """Pickle everything into a counter: which variables can be saved, and how many bytes it takes.

    A variable that fails leaves the stream (and the memo it shares with the others) broken, so
    the pass starts again without it: a few more passes over in-memory objects, never over the
    arrays' bytes, which are only counted here.
    """
    skipped = {}
    for name, value in variables.items():
        reason = refusal_of(type(value))  # the common cases, without a pass each
        if reason is not None:
            skipped[name] = {"name": name, "type": type_name(value), "reason": reason}
    while True:
        outcome, failed = _count(variables, skipped, ArrayWriter(None, deadline, clock))
        if failed is None:
            outcome.skipped = [skipped[name] for name in variables if name in skipped]
            return outcome
        skipped[failed["name"]] = failed


def _count(
    variables: Mapping[str, Any], skipped: Mapping[str, Any], arrays: ArrayWriter
) -> tuple[_Pass, dict[str, str] | None]:
    sink = CountingSink()
    outcome = _Pass(arrays)
    pickler = StatePickler(sink, arrays)
    for name, value in variables.items():
        if name in skipped:
            continue
        arrays.check_deadline()
        start, buffers_start = sink.count, arrays.position
        try:
            pickler.dump_variable(value)
        except DeadlineExceededError:
            raise
        except Exception as error:
            return outcome, {"name": name, "type": type_name(value), "reason": describe_error(error)}
        size = sink.count - start + arrays.position - buffers_start
        outcome.records.append({"name": name, "type": type_name(value), "bytes": size})
    outcome.objects_bytes = sink.count
    return outcome, None


def _write(saveable: dict[str, Any], skipped: list[dict[str, str]], context: _Context) -> dict[str, Any] | None:
    """Write a new generation and commit it (None: nothing left to write); on any failure remove it and raise."""
    root = layout.state_root(context.env)
    entry = layout.find_entry(context.env, context.request.notebook_file)
    layout.make_private_dirs(entry)
    layout.check_private_dirs(entry, root)
    layout.remove_generations(entry, keep=_committed_generation(entry, root))  # leftovers of a crash
    skipped = list(skipped)
    for _attempt in range(MAX_RESTARTS + 1):
        if not saveable:
            return None
        generation = _new_generation(entry, context.clock)
        try:
            written = _write_pass(saveable, generation, context)
            if not written.skipped:
                manifest = _manifest(written, skipped, generation.name, saveable, context)
                written.arrays.check_deadline()  # past it, the server has reported the old state kept
                layout.write_private_file(entry / layout.MANIFEST, _json_bytes(manifest))
        except BaseException:
            shutil.rmtree(generation, ignore_errors=True)
            raise
        if written.skipped:  # a variable failed now that passed the dry pass: write again without it
            shutil.rmtree(generation, ignore_errors=True)
            skipped += written.skipped
            for item in written.skipped:
                saveable.pop(item["name"], None)
            continue
        (entry / layout.RESTORED).unlink(missing_ok=True)
        layout.remove_generations(entry, keep=generation.name)
        return manifest
    raise OSError(errno.EIO, "the variables kept changing while they were saved")


def _committed_generation(entry: Path, root: Path) -> str | None:
    try:
        return str(layout.read_manifest(entry, root).get("generation"))
    except (OSError, ValueError):
        return None


def _new_generation(entry: Path, clock: Callable[[], float]) -> Path:
    stamp = datetime.fromtimestamp(clock(), timezone.utc).strftime("%Y%m%dT%H%M%S")
    generation = entry / f"{stamp}-{secrets.token_hex(4)}"
    generation.mkdir(mode=layout.PRIVATE_DIR)
    return generation


def _create(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, layout.PRIVATE_FILE)


def _write_pass(saveable: Mapping[str, Any], generation: Path, context: _Context) -> _Pass:
    with (
        open(_create(generation / layout.ARRAYS), "wb", buffering=0) as arrays_file,
        open(_create(generation / layout.OBJECTS), "wb", buffering=1 << 20) as objects_file,
    ):
        arrays = ArrayWriter(arrays_file, context.request.deadline, context.clock)
        outcome = _Pass(arrays)
        pickler = StatePickler(objects_file, arrays)
        for name, value in saveable.items():
            arrays.check_deadline()
            offset, buffers_first, device_first = objects_file.tell(), len(arrays.out_of_band), len(arrays.device)
            try:
                pickler.dump_variable(value)
            except (DeadlineExceededError, OSError):
                raise
            except Exception as error:
                outcome.skipped.append({"name": name, "type": type_name(value), "reason": describe_error(error)})
                return outcome  # the stream is broken from here: the caller writes again without it
            end = objects_file.tell()
            new_buffers = arrays.out_of_band[buffers_first:] + arrays.device[device_first:]
            outcome.records.append(
                {
                    "name": name,
                    "type": type_name(value),
                    "bytes": end - offset + sum(record.length for record in new_buffers),
                    "offset": offset,
                    "length": end - offset,
                    "buffers": [buffers_first, len(arrays.out_of_band) - buffers_first],
                }
            )
        objects_file.flush()
        os.fsync(objects_file.fileno())
        os.fsync(arrays_file.fileno())
        outcome.objects_bytes = objects_file.tell()
        outcome.device_bytes = pickler.device_bytes
    layout.fsync_dir(generation)
    return outcome


def _records_json(records: list[Record]) -> list[list[int]]:
    return [[record.offset, record.length] for record in records]


def _manifest(
    written: _Pass, skipped: list[dict[str, str]], generation: str, saveable: Mapping[str, Any], context: _Context
) -> dict[str, Any]:
    """schemas/hibernation-manifest.schema.json."""
    finished = context.clock()
    request = context.request
    return {
        "format": FORMAT,
        "saved_at": datetime.fromtimestamp(finished, timezone.utc).isoformat(),
        "seconds": round(finished - context.started, 3),
        "notebook_path": request.notebook_path,
        "notebook_file": request.notebook_file,
        "server_name": context.env.get("JUPYTERHUB_SERVER_NAME", ""),
        "kernel_id": request.kernel_id,
        "generation": generation,
        "bytes": {
            "total": written.total,
            "objects": written.objects_bytes,
            "arrays": written.arrays.position,
            "device_arrays": sum(written.device_bytes.values()),
        },
        "devices": [
            {"framework": framework, "device": device, "bytes": size}
            for (framework, device), size in sorted(written.device_bytes.items())
        ],
        "versions": versions(top_packages(saveable.values()), context.version_of),
        "variables": written.records,
        "skipped": skipped,
        "arrays": {
            "out_of_band": _records_json(written.arrays.out_of_band),
            "device": _records_json(written.arrays.device),
        },
    }


def _json_bytes(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, indent=1).encode()
