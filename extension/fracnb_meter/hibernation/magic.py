"""``%fracnb_restore``: restore this notebook's saved variables from code (docs/hibernation.md).

%load_ext fracnb_meter.hibernation     (or %load_ext fracnb_meter, which shows the meter too)
%fracnb_restore                        restore this notebook's saved variables
%fracnb_restore --force                ... even if they were saved with other versions
%fracnb_restore --keep-mine            ... but keep the values this kernel already has
%fracnb_restore --take-saved           ... and replace the values this kernel already has
%fracnb_restore --list                 what is saved, without restoring
%fracnb_restore --discard              say what would be deleted, and how to confirm
%fracnb_restore --discard --yes        delete the saved state (it cannot be restored afterwards)
%fracnb_restore other.ipynb            another notebook's state (a path, relative to the kernel's folder)
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timezone
from typing import Any

from ..displayzone import display_zone
from ..wording import format_bytes, restore_offer, restore_summary, saved_variables
from . import kernelside, layout
from .namespace import as_shown, made_by_user

USAGE = "usage: %fracnb_restore [--force] [--keep-mine | --take-saved | --list | --discard [--yes]] [NOTEBOOK]"
CHOICES = {"--keep-mine": "keep", "--take-saved": "take"}
FLAGS = {"--force", "--list", "--discard", "--yes", *CHOICES}


def fracnb_restore(line: str) -> None:
    """Restore this notebook's variables saved when its server was stopped (see %fracnb_restore?)."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        print(f"{error}; {USAGE}")  # noqa: T201 - a magic prints
        return
    flags = {word for word in words if word.startswith("--")}
    names = [word for word in words if not word.startswith("--")]
    exclusive = flags & {"--list", "--discard", *CHOICES}
    if flags - FLAGS or len(names) > 1 or len(exclusive) > 1 or ("--yes" in flags and "--discard" not in flags):
        print(USAGE)  # noqa: T201
        return
    notebook = names[0] if names else None
    if "--list" in flags:
        manifest = kernelside.saved_state(notebook)
        lost = [] if manifest is None else kernelside.lost_variables(notebook, manifest)
        print(listing(manifest, lost))  # noqa: T201
    elif "--discard" in flags:
        print(discarding(notebook, confirmed="--yes" in flags, line=line))  # noqa: T201
    else:
        choice = next((CHOICES[flag] for flag in flags if flag in CHOICES), None)
        report = kernelside.restore(notebook, force="--force" in flags, on_conflict=choice)
        print("\n".join(restore_summary(report)))  # noqa: T201
        if report["status"] == "confirm":
            print("Run %fracnb_restore --force to restore anyway.")  # noqa: T201
        elif report["status"] == "conflict":
            print(  # noqa: T201
                "Run %fracnb_restore --keep-mine to restore the others and keep yours, "
                "or %fracnb_restore --take-saved to replace them with the saved values."
            )


def discarding(notebook: str | None, *, confirmed: bool, line: str = "--discard") -> str:
    """Deleting saved work asks first: without --yes, what would be deleted and how to confirm."""
    manifest = kernelside.saved_state(notebook)
    if not confirmed:
        if manifest is None:
            return "There is no saved state to discard."
        what = saved_variables(as_shown(manifest), datetime.now(timezone.utc), display_zone(os.environ))
        return (
            f"This deletes {what}; they cannot be restored afterwards.\n"
            f"To delete them, run: %fracnb_restore {line.strip()} --yes"
        )
    try:
        removed = kernelside.discard(notebook)
    except layout.UnsafeStateError as error:
        return f"{error}. Nothing was deleted."
    return "The saved variables were discarded." if removed else "There was no saved state."


def listing(manifest: dict[str, Any] | None, lost: list[dict[str, str]] | None = None) -> str:
    """What ``--list`` prints: the variables that can be restored, and those a damaged state has ``lost``."""
    if manifest is None:
        return "No saved variables for this notebook."
    gone = {item["name"] for item in lost or []}
    kept = [variable for variable in manifest["variables"] if variable["name"] not in gone]
    total = manifest["bytes"]["total"] if not gone else sum(int(v.get("bytes", 0)) for v in kept)
    saved_at = datetime.fromisoformat(manifest["saved_at"])
    offer = restore_offer(saved_at, total, datetime.now(timezone.utc), display_zone(os.environ))
    names = ", ".join(variable["name"] for variable in made_by_user(kept))
    lines = [f"{offer}: {names or 'nothing'}."]
    lines += [f"Lost: {item['name']} (the saved state is damaged: {item['reason']})." for item in lost or []]
    lines += [f"Not saved: {item['name']} ({item['reason']})." for item in manifest["skipped"]]
    device = manifest["bytes"]["device_arrays"]
    if device:
        lines.append(f"Of which framework arrays: {format_bytes(device)}.")
    return "\n".join(lines)


def register(ipython: Any) -> None:
    ipython.register_magic_function(fracnb_restore, magic_kind="line", magic_name="fracnb_restore")
