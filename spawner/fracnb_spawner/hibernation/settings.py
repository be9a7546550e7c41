"""When and for how long fracnb asks a server to hibernate before stopping it. Pure.

The admin sets it on the fracnb service (``c.FracnbService.hibernation_timeout`` and friends);
FractionalSpawner reads the same values from the hub's config for the stops users ask for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The notebook side's bound on a request's timeout_seconds (hibernation-request.schema.json).
MAX_TIMEOUT_SECONDS = 3600
DEFAULT_TIMEOUT_SECONDS = 120
# The HTTP timeout is this much above the hibernation's own: the answer's transfer, and the meter
# holding it until a page that polls it has read the outcome (at most a few seconds, within the timeout).
HTTP_MARGIN_SECONDS = 15
# Stop reasons that hibernate whenever hibernation is on: the server was stopped for being idle.
IDLE_REASONS = frozenset({"idle", "demand", "gpu-unused"})


@dataclass(frozen=True)
class HibernationSettings:
    """``timeout``: seconds the server may take to save (0: never ask); ``max_bytes``: the most it may
    write (0: its own limit); ``at_max_age``: also at max-age stops."""

    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_bytes: int = 0
    at_max_age: bool = False

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def applies(self, reason: str) -> bool:
        """Whether a stop for ``reason`` (a culling.Reason value) hibernates first. A busy server stopped
        by the opt-in GPU-unused timeout for busy servers never does: its busy kernel cannot be saved."""
        if not self.enabled:
            return False
        return reason in IDLE_REASONS or (reason == "max-age" and self.at_max_age)

    def request_body(self) -> dict[str, Any]:
        """The body of ``POST fracnb/api/hibernate`` (hibernation-request.schema.json)."""
        body: dict[str, Any] = {"timeout_seconds": self.timeout}
        if self.max_bytes > 0:
            body["max_bytes"] = self.max_bytes
        return body


def timeout_problem(timeout: float) -> str | None:
    """Why ``timeout`` cannot be a hibernation timeout, or None."""
    if not 0 <= timeout <= MAX_TIMEOUT_SECONDS:
        return (
            f"FracnbService.hibernation_timeout ({timeout:g} s) must be between 0 (no hibernation) and"
            f" {MAX_TIMEOUT_SECONDS} s, the most a notebook accepts"
        )
    return None


def settings_from_config(section: Mapping[str, Any]) -> HibernationSettings:
    """The settings as ``c.FracnbService`` (``section``) sets them, with the service's defaults."""
    return HibernationSettings(
        timeout=float(section.get("hibernation_timeout", DEFAULT_TIMEOUT_SECONDS)),
        max_bytes=int(section.get("hibernation_max_bytes", 0)),
        at_max_age=bool(section.get("hibernate_at_max_age", False)),
    )
