"""Which choice the spawn form shows selected, and the line that says why. Pure.

In this order: the choice the user just submitted (shown again after a refusal); the choice of a server of
theirs whose variables were saved at its stop and wait to be restored (said in a line, since it may not be the
server's own last choice nor the admin's default); this server's own last choice; the right-sizing advice where
the admin has it preselected; else nothing, and the form selects the admin's default profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from fracnb_spawner.common.clock import clock_text


@dataclass(frozen=True)
class SavedChoice:
    """A stopped server whose variables were saved and wait: its name ("" the default server), the choice it
    ran with (its ``user_options``), and when it stopped."""

    server: str
    options: Mapping[str, Any]
    stopped_at: datetime


@dataclass(frozen=True)
class Preselection:
    """``options``: user_options to show selected ({}: the admin's default); ``why``: the form's line saying
    why, or None where the choice needs no word; ``moments``: the times ``why`` names (shown in the reader's zone)."""

    options: Mapping[str, Any]
    why: str | None = None
    moments: list[datetime] = field(default_factory=list)


def preselection(
    submitted: Mapping[str, Any],
    saved: SavedChoice | None,
    last: Mapping[str, Any],
    advised: Mapping[str, Any] | None,
    *,
    valid: Callable[[Mapping[str, Any]], bool],
    zone: ZoneInfo | None = None,
) -> Preselection:
    """The choice to show selected. ``valid`` says whether options still select a choice of the form (a saved
    server's choice may name a profile the admin has since removed: then it is passed over)."""
    if submitted:
        return Preselection(submitted)
    if saved is not None and saved.options and valid(saved.options):
        return Preselection(saved.options, saved_line(saved, zone), [saved.stopped_at])
    if last:
        return Preselection(last)
    return Preselection(advised or {})


def saved_line(saved: SavedChoice, zone: ZoneInfo | None = None) -> str:
    """ "Preselected: the choice of your server 'gpu', whose variables were saved when it stopped at 14:05 CET.
    Start on it to restore them." """
    which = f"your server {saved.server!r}" if saved.server else "your server"
    return (
        f"Preselected: the choice of {which}, whose variables were saved when it stopped at "
        f"{clock_text(saved.stopped_at, zone)}. Start on it to restore them."
    )
