"""What happened to a user's server, one store for the hub's pages (form/stopnotice.py, the spawn form).

The fracnb service records its own stops (culls, with what their hibernation saved) in the session
history (history/stopnotices.py). The hub adds its own here: a stop someone asked for ("Stop My Server", an
admin's stop; with what ``hibernate_on_stop`` saved), a spawn its user left while it waited in the GPU
queue, and a pod it deleted because its node left the cluster. All are :class:`StopNotice` records;
each page shows the user's newest, whoever made it, so that an older stop's "your variables were
saved" never outlives a newer stop that saved nothing.

A user's stop is also written to the session history (when it exists), so that a hub restart forgets
it no more than the service's; the other two are news for this hub process only.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fracnb_spawner.common.clock import SYSTEM_CLOCK
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import hibernation_json
from fracnb_spawner.history.stopnotices import HUB_SHUTDOWN, LEFT_QUEUE, USER_STOP, StopNotice, naive_utc

LEFT_QUEUE_SECONDS = 3600.0  # "you left the queue" is news for an hour


class HubStops:
    """The hub's own stops of this process, by (user, server), newest only."""

    def __init__(self) -> None:
        self._recent: dict[tuple[str, str], StopNotice] = {}
        self.hub_shutting_down = False  # JupyterHub's cleanup has begun: its stops are not someone's request

    def note(self, notice: StopNotice) -> None:
        self._recent[(notice.user, notice.server)] = notice

    def forget(self, user: str, server: str) -> None:
        """The server starts again: its last stop is old news."""
        self._recent.pop((user, server), None)

    def watch_hub_shutdown(self, app: Any) -> None:
        """Note when the JupyterHub application ``app`` begins its cleanup (on SIGTERM or SIGINT; with
        ``c.JupyterHub.cleanup_servers`` it then stops every server), so that those stops are told as the hub's
        shutdown. JupyterHub has no hook for it: the instance's ``cleanup`` is wrapped, once."""
        if getattr(app, "_fracnb_watched_shutdown", False):
            return
        cleanup = app.cleanup

        async def cleanup_noted() -> None:
            self.hub_shutting_down = True
            await cleanup()

        app.cleanup, app._fracnb_watched_shutdown = cleanup_noted, True

    def of_server(self, user: str, server: str) -> StopNotice | None:
        return self._recent.get((user, server))

    def newest(self, user: str, stored: StopNotice | None, now: datetime) -> StopNotice | None:
        """The user's newest stop: ``stored`` (the history's newest) or one of this hub's, whichever came last;
        ``stored`` on a tie: the service's notice of a stop Kueue made counts what the hub's could not."""
        candidates = [] if stored is None else [stored]
        candidates += [notice for (name, _), notice in self._recent.items() if name == user and _news(notice, now)]
        return max(candidates, key=lambda notice: naive_utc(notice.stopped_at), default=None)


def _news(notice: StopNotice, now: datetime) -> bool:
    return (
        notice.reason != LEFT_QUEUE
        or (naive_utc(now) - naive_utc(notice.stopped_at)).total_seconds() < LEFT_QUEUE_SECONDS
    )


async def record_user_stop(spawner: Any, hibernation: Hibernation | None) -> None:
    """Keep the record of a stop someone asked for of ``spawner``'s running server, with what its
    hibernation saved (history/hubstopnotices.py). Not for a spawn that failed or was given up (still pending),
    nor for a cull or a lost node, whose record the service or the hub wrote just before (newer than the
    server's start)."""
    started = getattr(getattr(spawner, "orm_spawner", None), "started", None)
    if getattr(spawner, "_spawn_pending", False) or started is None:
        return
    user, server, state = spawner.user.name, spawner.name, spawner.hub_state
    started, now = naive_utc(started), SYSTEM_CLOCK.now()
    url = spawner.right_sizing_db_url
    if _told(state.stops.of_server(user, server), started):  # a lost node: the hub's own record
        return
    try:
        # This server's newest: a cull of another server of the user's, recorded since, does not hide this one's.
        if _told(await asyncio.to_thread(state.history.newest_stop, url, user, now, server), started):
            return
        details = {"hibernation": hibernation_json(hibernation)} if hibernation is not None else {}
        notice = StopNotice(
            user, server, now, HUB_SHUTDOWN if state.stops.hub_shutting_down else USER_STOP, details=details
        )
        state.stops.note(notice)
        await asyncio.to_thread(state.history.record_stop, url, notice)
    except Exception as error:  # the notice is for the user's next page: the stop goes ahead without it
        spawner.log.warning("fracnb: could not record the stop of %s: %r", spawner._log_name, error)


def _told(notice: StopNotice | None, started: datetime) -> bool:
    """Whether ``notice`` (of this server) already tells this stop: another reason's, since its start."""
    if notice is None or notice.reason in (USER_STOP, HUB_SHUTDOWN):
        return False
    return naive_utc(notice.stopped_at) >= started
