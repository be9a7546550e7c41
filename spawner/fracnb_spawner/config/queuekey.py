"""A profile's ``queue`` entry (``queue: {max_wait: "1h"}``): how long its spawns may wait for a GPU."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fracnb_spawner.common.units import QuantityError, parse_duration

QUEUE_KEYS = ("max_wait",)
DEFAULT_MAX_WAIT = 3600


class QueueConfigError(ValueError):
    """A profile's ``queue`` entry that cannot work; the message names the key and the fix."""


def queue_max_wait(entry: Mapping[str, Any] | None) -> float:
    """Seconds a spawn of this profile may wait in the queue (0: it never queues), from its ``queue`` entry."""
    entry = entry or {}
    unknown = sorted(str(key) for key in entry if key not in QUEUE_KEYS)
    if unknown:
        raise QueueConfigError(f"unknown queue key(s) {unknown}; valid keys: {', '.join(QUEUE_KEYS)}")
    if "max_wait" not in entry:
        return DEFAULT_MAX_WAIT
    try:
        return parse_duration(entry["max_wait"])
    except QuantityError as error:
        raise QueueConfigError(f"queue.max_wait: {error}; use seconds or e.g. '30m', 0 never to queue") from None
