"""The queue's configuration: priorities per user and per JupyterHub group (``c.FracnbQueue``).
A profile's own ``queue`` entry is read by :mod:`fracnb_spawner.config.queuekey`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from zoneinfo import ZoneInfo

from traitlets import Dict, Enum, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from fracnb_spawner.common.clock import zone_named
from fracnb_spawner.queue.localqueues import local_queue_name
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
        Time zone of the times the hub writes (the queue's "Estimated start about 14:05 CET,
        in 12 min", the spawn form's kept place, the stop notices), an IANA name, with its
        abbreviation. In a browser, the hub's pages (the progress page, the spawn form, the hub
        home) and the fracnb service's page show these times in the browser's own zone, and in
        this one only without JavaScript; API clients (the progress events' message) read this
        one. JupyterLab shows times in the browser's zone, also with its abbreviation. An unknown
        name is refused at hub start. Default: "UTC". Notebooks get it as FRACNB_DISPLAY_TIMEZONE, for the kernel's
        times (the widget, %fracnb_restore) until a browser has told its own zone.

        Example: c.FracnbQueue.display_timezone = "Europe/Berlin"
        """,
    ).tag(config=True)

    engine = Enum(
        ["builtin", "kueue"],
        "builtin",
        help="""
        Which engine admits waiting GPU servers. "builtin": fracnb's own queue (docs/queue.md), with
        its order, per-node fit and team quotas. "kueue": Kueue (v0.17 or later, run by the site, with
        its plain-pod integration) admits them: each GPU pod gets the user's LocalQueue
        (`kueue_local_queue`) and a WorkloadPriorityClass from the queue priority, and Kueue's
        ClusterQueues hold the team quotas, borrowing and preemption (helm-values/kueue/). The hub still
        keeps each user's cap and the profile's maximum wait. Profiles with the dra or kai backend are
        refused at hub start with this engine. Default: "builtin".

        Example: c.FracnbQueue.engine = "kueue"
        """,
    ).tag(config=True)

    kueue_local_queue = Unicode(
        "fracnb-{username}",
        help="""
        With engine "kueue": the name of each user's Kueue LocalQueue in the hub's namespace. It must
        contain `{username}`: the hub user's name as it is when that is a DNS label without "---"
        ("ann" -> "fracnb-ann"), else its letters and digits and a hash of it, one for one
        ("carol.smith" -> "fracnb-carol-smith---8a881d04"), within 63 characters. The site creates
        these LocalQueues, each pointing to the user's team ClusterQueue and best annotated
        fracnb.io/hub-user: <username>; a GPU spawn is refused unless the user's exists and any such
        annotation names them (docs/queue.md "Per-user LocalQueues"; `fracnb-dry-run <config>
        --kueue-queue-of <username>` prints one). Default: "fracnb-{username}".

        Example: c.FracnbQueue.kueue_local_queue = "{username}"
        """,
    ).tag(config=True)

    kueue_visibility_url = Unicode(
        "",
        help="""
        With engine "kueue": where the hub reads a waiting server's place in line from Kueue's
        visibility API (visibility.kueue.x-k8s.io/v1beta2, pending workloads of the user's
        LocalQueue). Empty: through the Kubernetes API server, where Kueue registers it as an
        APIService (the usual way). A URL is called with the hub's Kubernetes credentials and TLS
        settings, so its certificate must be one the hub's cluster CA signed: Kueue's visibility
        server presents a self-signed one by default. Without an answer the page shows the reason
        without the place. Default: "".

        Example: c.FracnbQueue.kueue_visibility_url = ""
        """,
    ).tag(config=True)

    kueue_finalizer_timeout = Float(
        10.0,
        min=0,
        help="""
        Seconds past a stopped server's pod grace period after which the hub removes Kueue's finalizer
        (kueue.x-k8s.io/managed) from the pod itself, if Kueue has not. Kueue removes it at once when its
        manager runs; while the manager is down the pod would stay Terminating and the stop would wait
        until start_timeout and fail. The hub log says when it removes one. Default: 10.

        Example: c.FracnbQueue.kueue_finalizer_timeout = 30
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

    @validate("kueue_local_queue")
    def _valid_local_queue(self, proposal: dict[str, Any]) -> Any:
        template = proposal["value"]
        try:
            name = local_queue_name(template, "ann")
        except (KeyError, IndexError, ValueError) as error:
            raise TraitError(
                f"FracnbQueue.kueue_local_queue: {template!r} cannot be formatted ({error}); "
                "use {username} and letters, digits and '-', e.g. 'fracnb-{username}'"
            ) from None
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
            raise TraitError(
                f"FracnbQueue.kueue_local_queue: {template!r} gives {name!r}, not a Kubernetes name; "
                "use lowercase letters, digits, '-' and {username}"
            )
        return template

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
