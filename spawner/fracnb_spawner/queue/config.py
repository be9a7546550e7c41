"""The queue's configuration: priorities per user and per JupyterHub group (``c.FracnbQueue``).
A profile's own ``queue`` entry is read by :mod:`fracnb_spawner.config.queuekey`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from zoneinfo import ZoneInfo

from traitlets import Dict, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from fracnb_spawner.common.clock import zone_named
from fracnb_spawner.queue.order import user_priority

MAX_PRIORITY = 1000  # beyond any sensible number of tiers; keeps the annotation short


def _checked_priority(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise TraitError(
            f"FracnbQueue.{where}: {value!r} is not a priority; use a whole number from "
            f"{-MAX_PRIORITY} to {MAX_PRIORITY} (higher goes first, 0 is the default)"
        )
    return value


class FracnbQueue(Configurable):
    """Who goes first in the GPU queue (docs/queue.md)."""

    default_priority = Int(
        0,
        help="""
        Queue priority of users whom neither `user_priorities` nor `group_priorities` names.
        A whole number from -1000 to 1000; higher goes first. Default: 0.

        Example: c.FracnbQueue.default_priority = 0
        """,
    ).tag(config=True)

    display_timezone = Unicode(
        "UTC",
        help="""
        Time zone of the times the hub's pages show (the queue's "Estimated start about
        14:05 CET, in 12 min", the spawn form, the fracnb service's page): an IANA name, written
        with its abbreviation on every page. JupyterLab shows times in the browser's zone, also
        with its abbreviation. An unknown name is refused at hub start. Default: "UTC".

        Example: c.FracnbQueue.display_timezone = "Europe/Berlin"
        """,
    ).tag(config=True)

    group_priorities = Dict(
        help="""
        Queue priority per JupyterHub group: group name -> whole number from -1000 to 1000, higher
        first. A user in several groups gets the highest of them. Default: {}.

        Example: c.FracnbQueue.group_priorities = {"course-staff": 10, "guests": -5}
        """,
    ).tag(config=True)

    user_priorities = Dict(
        help="""
        Queue priority per user, overriding their groups': username -> whole number from -1000
        to 1000, higher first. Default: {}.

        Example: c.FracnbQueue.user_priorities = {"alice": 20}
        """,
    ).tag(config=True)

    @validate("default_priority")
    def _valid_default(self, proposal: dict[str, Any]) -> Any:
        return _checked_priority("default_priority", proposal["value"])

    @validate("display_timezone")
    def _valid_zone(self, proposal: dict[str, Any]) -> Any:
        try:
            zone_named(proposal["value"])
        except ValueError as error:
            raise TraitError(f"FracnbQueue.display_timezone: {error}") from None
        return proposal["value"]

    @validate("group_priorities", "user_priorities")
    def _valid_map(self, proposal: dict[str, Any]) -> Any:
        name = proposal["trait"].name
        for key, value in proposal["value"].items():
            _checked_priority(f"{name}[{key!r}]", value)
        return proposal["value"]

    @property
    def zone(self) -> ZoneInfo:
        return zone_named(self.display_timezone)

    def priority(self, user: str, groups: Iterable[str]) -> int:
        return user_priority(
            user,
            groups,
            users=self.user_priorities,
            groups_priority=self.group_priorities,
            default=self.default_priority,
        )
