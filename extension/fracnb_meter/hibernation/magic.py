"""``%fracnb_restore``: restore this notebook's saved variables from code (docs/hibernation.md).

%load_ext fracnb_meter.hibernation     (or %load_ext fracnb_meter, which shows the meter too)
%fracnb_restore                        restore this notebook's saved variables
%fracnb_restore --force                ... even if they were saved with other versions
%fracnb_restore --list                 what is saved, without restoring
%fracnb_restore --discard              delete the saved state
%fracnb_restore other.ipynb            another notebook's state (a path, relative to the kernel's folder)
"""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from typing import Any

from ..wording import format_bytes, restore_offer, restore_summary
from . import kernelside

USAGE = "usage: %fracnb_restore [--force | --list | --discard] [NOTEBOOK]"


def fracnb_restore(line: str) -> None:
    """Restore this notebook's variables saved when its server was stopped (see %fracnb_restore?)."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        print(f"{error}; {USAGE}")  # noqa: T201 - a magic prints
        return
    flags = {word for word in words if word.startswith("--")}
    names = [word for word in words if not word.startswith("--")]
    if flags - {"--force", "--list", "--discard"} or len(names) > 1 or len(flags & {"--list", "--discard"}) > 1:
        print(USAGE)  # noqa: T201
        return
    notebook = names[0] if names else None
    if "--list" in flags:
        print(listing(kernelside.saved_state(notebook)))  # noqa: T201
    elif "--discard" in flags:
        removed = kernelside.discard(notebook)
        print("The saved state was discarded." if removed else "There was no saved state.")  # noqa: T201
    else:
        report = kernelside.restore(notebook, force="--force" in flags)
        print("\n".join(restore_summary(report)))  # noqa: T201
        if report["status"] == "confirm":
            print("Run %fracnb_restore --force to restore anyway.")  # noqa: T201


def listing(manifest: dict[str, Any] | None) -> str:
    if manifest is None:
        return "No saved variables for this notebook."
    saved_at = datetime.fromisoformat(manifest["saved_at"])
    offer = restore_offer(saved_at, manifest["bytes"]["total"], datetime.now(timezone.utc))
    names = ", ".join(variable["name"] for variable in manifest["variables"])
    lines = [f"{offer}: {names}."]
    lines += [f"Not saved: {item['name']} ({item['reason']})." for item in manifest["skipped"]]
    device = manifest["bytes"]["device_arrays"]
    if device:
        lines.append(f"Of which framework arrays: {format_bytes(device)}.")
    return "\n".join(lines)


def register(ipython: Any) -> None:
    ipython.register_magic_function(fracnb_restore, magic_kind="line", magic_name="fracnb_restore")
