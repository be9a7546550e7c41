"""A hibernation in words and as a metric outcome. Pure.

The lines are the stopped-server notice's: "Variables of train.ipynb saved at 14:05 CET: 3.2 GiB, 41
variables; 2 skipped: `loader` (an open file), `gen` (a generator)." The notebook's front end writes
the same from the report it keeps (extension/src/hibernationnotice.ts); both are held to
extension/test-data/hibernation-notices.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from fracnb_spawner.common.clock import clock_text
from fracnb_spawner.common.units import format_bytes

SKIPPED_LISTED = 4  # more skipped variables than this: the first three, and how many more
NOTHING_TO_SAVE = "No variables to save."
_NOT_SAVED = ("failed", "skipped_over_limit", "not_supported")


def outcome(kernels: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``fracnb_hibernations_total`` outcome: saved (every kernel that had something to save, fully),
    partly-saved, failed or skipped-over-limit (nothing saved); None when no kernel had anything to save
    (none running, all busy or empty)."""
    statuses = [kernel["status"] for kernel in kernels]
    saved = [s for s in statuses if s in ("saved", "partly_saved")]
    unsaved = [s for s in statuses if s in ("failed", "skipped_over_limit")]
    if saved:
        return "saved" if not unsaved and all(s == "saved" for s in saved) else "partly-saved"
    if "failed" in unsaved:
        return "failed"
    return "skipped-over-limit" if unsaved else None


def _sentence(text: str | None) -> str:
    return (text or "no reason given").strip().rstrip(".")


def saved_moment(stamp: str | None) -> datetime | None:
    """A kernel's ``saved_at`` as a time, or None (none, or not a time)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _clock(stamp: str | None, zone: tzinfo | None) -> str | None:
    moment = saved_moment(stamp)
    return None if moment is None else clock_text(moment, zone)


def _skipped_text(skipped: Sequence[Mapping[str, Any]]) -> str:
    shown = skipped if len(skipped) <= SKIPPED_LISTED else skipped[: SKIPPED_LISTED - 1]
    names = ", ".join(f"`{item['name']}` ({_sentence(item['reason'])})" for item in shown)
    more = len(skipped) - len(shown)
    return f"{len(skipped)} skipped: {names}" + (f", and {more} more" if more else "")


def kernel_line(kernel: Mapping[str, Any], zone: tzinfo | None = None) -> str | None:
    """One kernel's line, or None for a kernel without variables."""
    notebook = kernel.get("path") or "a kernel without a notebook"
    status = kernel["status"]
    if status in ("saved", "partly_saved"):
        count = kernel["variables"]
        at = _clock(kernel.get("saved_at"), zone)
        text = f"Variables of {notebook} saved{f' at {at}' if at else ''}: {format_bytes(kernel['bytes'])}, "
        text += f"{count} variable{'' if count == 1 else 's'}"
        skipped = kernel.get("skipped") or []
        return text + (f"; {_skipped_text(skipped)}." if skipped else ".")
    if status == "busy":
        return f"{notebook} was running a cell: its variables were not saved."
    if status in _NOT_SAVED:
        return f"Variables of {notebook} not saved: {_sentence(kernel.get('reason'))}."
    return None


def report_lines(kernels: Sequence[Mapping[str, Any]], zone: tzinfo | None = None) -> list[str]:
    """A line per kernel, or the one line saying there was nothing to save."""
    lines = [line for line in (kernel_line(kernel, zone) for kernel in kernels) if line is not None]
    return lines or [NOTHING_TO_SAVE]


def problem_line(problem: str) -> str:
    """The line when no report came: "Variables not saved: the server gave no answer within 135 s." """
    return f"Variables not saved: {_sentence(problem)}."
