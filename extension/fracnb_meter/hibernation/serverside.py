"""The server's part of hibernation: which kernels to save, in what order, within what limits, and
the documents the endpoints answer (fracnb_meter.hibernation.handlers).

The server reads manifests (JSON) and never unpickles: saving and restoring run in the kernels.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import layout
from .damage import lost_in_entry
from .manifestcheck import check_manifest
from .namespace import made_by_user

STATUSES = ("saved", "partly_saved", "failed", "skipped_over_limit", "busy", "empty", "not_supported")
ANSWER_MARGIN_S = 0.5  # the kernel stops this long before the deadline, so its answer arrives in time
# jupyter_server says "starting" until a client's first request is answered: such a kernel has run no
# cell (JupyterLab leaves one behind when its tab closes between starting a session and naming it), and a
# restarting kernel has lost what it held. Neither has variables to save, and neither was running a cell.
NOTHING_HELD_STATES = ("starting", "restarting", "autorestarting")


@dataclass(frozen=True)
class KernelView:
    """What the server knows of one kernel when a hibernation starts."""

    id: str
    language: str | None  # from its kernel spec; None when unknown
    path: str | None  # the notebook's path under the server's root, from its session
    notebook_file: str | None  # the notebook's absolute file path
    state: str | None  # jupyter_server's execution_state
    last_activity: datetime | None


Call = Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]]  # (kernel id, function, args, timeout)


def kernel_views(kernels: list[Any], manager: Any, spec_manager: Any, root_dir: str) -> list[KernelView]:
    """The server's kernels (fracnb_meter.usage.KernelInfo) as a hibernation sees them."""
    views = []
    for info in kernels:
        language = None
        try:
            language = spec_manager.get_kernel_spec(info.name).language if spec_manager else None
        except Exception:
            language = None
        notebook_file = os.path.normpath(os.path.join(root_dir, info.path)) if info.path else None
        last_activity = getattr(manager.get_kernel(info.id), "last_activity", None)
        views.append(KernelView(info.id, language, info.path, notebook_file, info.execution_state, last_activity))
    return views


def order(kernels: list[KernelView]) -> list[KernelView]:
    """The most recently used first: when the limit cannot hold every kernel, those are kept."""
    oldest = datetime.min.replace(tzinfo=timezone.utc)
    return sorted(kernels, key=lambda k: (k.last_activity or oldest, k.id), reverse=True)


def _entry(kernel: KernelView, status: str, reason: str | None, **more: Any) -> dict[str, Any]:
    base = {"kernel_id": kernel.id, "path": kernel.path, "status": status, "reason": reason}
    return base | {"bytes": 0, "variables": 0, "skipped": [], "saved_at": None, "seconds": None} | more


def _not_saved(kernel: KernelView) -> dict[str, Any] | None:
    """The kernel's entry when it is not even asked; None when it is."""
    if kernel.state == "busy":
        return _entry(kernel, "busy", f"the kernel is {kernel.state}: it is left alone and not saved")
    if kernel.state in NOTHING_HELD_STATES:
        return _entry(kernel, "empty", f"the kernel is {kernel.state}: it holds no variables yet")
    if kernel.state == "dead":
        return _entry(kernel, "failed", "the kernel is dead")
    if kernel.language is not None and kernel.language.lower() != "python":
        return _entry(kernel, "not_supported", f"a {kernel.language} kernel: only Python kernels are saved")
    if kernel.notebook_file is None:
        return _entry(kernel, "not_supported", "the kernel belongs to no notebook")
    return None


async def hibernate(
    kernels: list[KernelView],
    call: Call,
    *,
    limit_bytes: int,
    timeout_s: float,
    clock: Callable[[], float] = time.time,
    started_at: datetime | None = None,
    if_changed: bool = False,
) -> dict[str, Any]:
    """Save every idle kernel, one after the other, within ``limit_bytes`` and ``timeout_s`` in all
    (``if_changed``: a kernel that ran no cell since its last save answers that save again).

    Busy kernels are never asked (a request would wait behind the running cell, and nothing
    interrupts it). The result is schemas/hibernation-report.schema.json.
    """
    start = clock()
    deadline = start + timeout_s
    left = limit_bytes
    entries = []
    for kernel in order(kernels):
        entry = _not_saved(kernel)
        if entry is None:
            entry = await _save_one(kernel, call, left, deadline, clock, if_changed=if_changed)
            left -= entry["bytes"] if entry["status"] in ("saved", "partly_saved") else 0
        entries.append(entry)
    totals = {status: sum(1 for e in entries if e["status"] == status) for status in STATUSES}
    saved_bytes = sum(e["bytes"] for e in entries if e["status"] in ("saved", "partly_saved"))
    return {
        "started_at": (started_at or datetime.fromtimestamp(start, timezone.utc)).isoformat(),
        "seconds": round(clock() - start, 3),
        "timeout_seconds": timeout_s,
        "limit_bytes": limit_bytes,
        "saved_bytes": saved_bytes,
        "totals": totals,
        "kernels": entries,
    }


async def _save_one(
    kernel: KernelView, call: Call, left: int, deadline: float, clock: Callable[[], float], *, if_changed: bool
) -> dict[str, Any]:
    remaining = deadline - clock()
    if remaining <= ANSWER_MARGIN_S:
        return _entry(kernel, "failed", "not reached within the time limit; the previous saved state, if any, is kept")
    arguments = {
        "notebook_path": kernel.path,
        "notebook_file": kernel.notebook_file,
        "kernel_id": kernel.id,
        "limit_bytes": max(0, left),
        "deadline": deadline - ANSWER_MARGIN_S,
        "if_changed": if_changed,
    }
    try:
        result = await call(kernel.id, "hibernate", arguments, remaining)
    except Exception as error:
        return _entry(kernel, "failed", f"{error}; the previous saved state, if any, is kept")
    status = result.get("status")
    if status not in STATUSES:
        return _entry(kernel, "failed", f"the kernel answered an unknown status {status!r}")
    fields = ("bytes", "variables", "skipped", "saved_at", "seconds")
    return _entry(kernel, status, result.get("reason"), **{key: result[key] for key in fields if key in result})


# ---- saved states, for the notebook's own front ends -----------------------------------------------


def list_states(env: Mapping[str, str]) -> dict[str, Any]:
    """This server's saved states (schemas/hibernation-states.schema.json), from their manifests only."""
    root, server = layout.state_root(env), layout.server_dir(env)
    states = []
    for entry in layout.entries(server):
        try:
            manifest = layout.read_manifest(entry, root)
        except FileNotFoundError:
            continue  # a save in progress, or a discard
        except (OSError, ValueError, layout.UnsafeStateError) as error:
            states.append(_unusable(entry.name, str(error)))
            continue
        try:
            check_manifest(manifest)  # what the loader would refuse is refused here, before a kernel is asked
            states.append(_state(entry, manifest))
        except layout.DamagedStateError as error:
            states.append(_unusable(entry.name, str(error)))
        except (TypeError, ValueError, AttributeError):  # JSON, but not of the manifest's shape
            states.append(_unusable(entry.name, f"the saved state is damaged: {entry.name}'s manifest is not "
                                    "one fracnb wrote; discard it"))  # fmt: skip
    states.sort(key=lambda state: state["saved_at"] or "", reverse=True)
    return {"directory": str(server), "states": states}


def _state(entry: Any, manifest: Mapping[str, Any]) -> dict[str, Any]:
    restored = layout.read_restored(entry)
    generation_restored = restored is not None and restored.get("generation") == manifest.get("generation")
    byte_counts = manifest.get("bytes") or {}
    if not all(
        isinstance(manifest.get(key), (str, type(None))) for key in ("saved_at", "notebook_path", "notebook_file")
    ):
        raise TypeError("a time or a path that is not text")
    lost = lost_in_entry(entry, manifest)  # a damaged state offers only what can come back
    gone = {item["name"] for item in lost}
    kept = [variable for variable in manifest.get("variables", []) if str(variable["name"]) not in gone]
    total = int(byte_counts.get("total", 0))
    return {
        "key": entry.name,
        "path": manifest.get("notebook_path"),
        "notebook_file": manifest.get("notebook_file"),
        "saved_at": manifest.get("saved_at"),
        "bytes": total if not lost else sum(int(v.get("bytes", 0)) for v in kept),
        "device_bytes": int(byte_counts.get("device_arrays", 0)),
        "variables": [str(v["name"]) for v in made_by_user(kept)],
        "lost": lost,
        "skipped": list(manifest.get("skipped", [])),
        "versions": dict(manifest.get("versions", {})),
        "restored_at": restored.get("restored_at") if generation_restored and restored else None,
        "problem": None,
    }


def _unusable(key: str, problem: str) -> dict[str, Any]:
    return {
        "key": key,
        "path": None,
        "notebook_file": None,
        "saved_at": None,
        "bytes": 0,
        "device_bytes": 0,
        "variables": [],
        "lost": [],
        "skipped": [],
        "versions": {},
        "restored_at": None,
        "problem": problem,
    }


def state_entry(env: Mapping[str, str], key: str) -> Any:
    """The entry folder of ``key``; ValueError for a key that is not one (never a path outside)."""
    if len(key) != 32 or any(c not in "0123456789abcdef" for c in key):
        raise ValueError(f"{key!r} is not the key of a saved state (32 hexadecimal digits)")
    return layout.server_dir(env) / key


def discard_state(env: Mapping[str, str], key: str) -> bool:
    """Remove one saved state; False when there was none (UnsafeStateError through a symbolic link)."""
    entry = state_entry(env, key)
    layout.refuse_links(entry, layout.state_root(env))
    if not entry.is_dir():
        return False
    layout.discard(entry, layout.state_root(env))
    return True
