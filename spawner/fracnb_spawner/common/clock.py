"""Times of day and durations as researchers read them: "about 14:05 CET, in 12 min" (pure); and the
one seam through which a long-lived hub object reads the time (:class:`Clock`).

The hub shows times in one configured zone (``c.FracnbQueue.display_timezone``); the server's
own clock and every stored time stay in UTC.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fracnb_spawner.common.units import rounded_text

UTC_NAME = "UTC"


class Clock(Protocol):
    """Where an object that outlives a request reads the time; tests pass one they move by hand."""

    def now(self) -> datetime:
        """The wall clock, aware, in UTC: for times written on pods or compared with them."""

    def monotonic(self) -> float:
        """Seconds that never go back, from an arbitrary start: for intervals, which a step of the
        system clock must not stretch or shrink."""


class SystemClock:
    """The real time: :func:`datetime.now` in UTC and :func:`time.monotonic` (the event loop's time)."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


def zone_named(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` ("Europe/Berlin"); ValueError saying what to write instead."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone this hub knows; use an IANA name such as 'Europe/Berlin' or 'UTC' "
            "(the names come from the system's time zone database or the tzdata Python package)"
        ) from None


def duration_text(seconds: float | None) -> str:
    """A configured duration: "45 s", "2.5 min", "25 min", "8 h", "1 h 30 min", "2 d"; ``None`` or 0 is
    "never". Under an hour, minutes to one decimal (150 s is "2.5 min", not "3 min"); the front end
    writes the same (extension/test-data/durations.json)."""
    if not seconds:
        return "never"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes_text = rounded_text(whole / 60, 1)
    if float(minutes_text) < 60:
        return f"{minutes_text} min"
    hours, minutes = divmod(round(whole / 60), 60)
    if hours >= 48 and not minutes:
        return f"{hours // 24} d" if hours % 24 == 0 else f"{hours} h"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def clock_text(moment: datetime, zone: tzinfo | None = None) -> str:
    """ "14:05 CET": the time of day in ``zone`` (default UTC) with the zone's abbreviation; a naive
    ``moment`` is UTC (as the hub's database stores times)."""
    local = _local(moment, zone)
    return local.strftime("%H:%M ") + (local.tzname() or UTC_NAME)


def time_of_day(moment: datetime, zone: tzinfo | None = None) -> str:
    """ "14:05": the time of day in ``zone`` (default UTC), without the zone, where a line says it once."""
    return _local(moment, zone).strftime("%H:%M")


def moment_text(moment: datetime, zone: ZoneInfo | None = None) -> str:
    """ "2026-11-25 14:05 CET": a date and time of day, with the zone said as on every page."""
    return f"{_local(moment, zone):%Y-%m-%d} {clock_text(moment, zone)}"


def _local(moment: datetime, zone: tzinfo | None) -> datetime:
    """``moment`` in ``zone`` (default UTC); a naive ``moment`` is UTC (as the databases store times)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(zone or timezone.utc)


def countdown_text(seconds: float) -> str:
    """Time left in whole minutes, rounded: "12 min", "1 h 5 min", "under a minute"."""
    if seconds < 60:
        return "under a minute"
    return duration_text(math.floor(seconds / 60 + 0.5) * 60)  # halves up, as everywhere


def relative_text(moment: datetime, now: datetime) -> str:
    """ "in 12 min", "in 1 h 5 min", "in under a minute"; whole minutes, rounded."""
    return f"in {countdown_text((moment - now).total_seconds())}"


def when_text(moment: datetime, now: datetime, zone: ZoneInfo | None = None) -> str:
    """ "14:05 CET, in 12 min": when something is due, on the clock and from now."""
    return f"{clock_text(moment, zone)}, {relative_text(moment, now)}"
