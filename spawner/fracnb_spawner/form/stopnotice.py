"""What happened to a user's server, on the hub's own pages: the home, "Server not running", the spawn form.

JupyterHub shows its ``announcement`` template variable at the top of every page, and calls it with the
user when it is a callable. ``setup(c)`` installs :class:`StoppedNotice` there (keeping an admin's own
announcement before it): for a user who has not started the server again, the notice of their newest
stop, whoever made it (history/hubstopnotices.py): a cull by the fracnb service (from the session history), a
stop they or an admin asked for, a spawn they left in the GPU queue (a node that left the cluster is said
on the server's spawn form instead), or a spawn of theirs waiting in the queue. Reads
of the history are cached per user for :data:`CACHE_SECONDS`; anything going wrong means no notice,
never a broken page.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from markupsafe import Markup

from fracnb_spawner.common.clock import SYSTEM_CLOCK
from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT
from fracnb_spawner.form.preselect import SavedChoice
from fracnb_spawner.history.stopnotices import LEFT_QUEUE, NODE_LOST, StopNotice, naive_utc, notice_html
from fracnb_spawner.hubstate import HubState

log = logging.getLogger("fracnb.stopnotice")
CACHE_SECONDS = 20.0
QUEUED_HTML = Markup(
    '<span class="fracnb-queued">{} is waiting in the GPU queue. {} <a href="{}">Follow its start</a>.</span>{}'
)
ANNOUNCEMENTS = ("announcement", "announcement_home", "announcement_spawn")


class StoppedNotice:
    """The hub's ``announcement`` (or ``announcement_home``...): ``own`` first, then the user's stop notice."""

    def __init__(self, own: Any = "") -> None:
        self.own = own
        self._cache: dict[str, tuple[float, StopNotice | None]] = {}

    def __call__(self, user: Any = None) -> Any:
        own = self.own(user) if callable(self.own) else self.own
        notice = self._html(user) if user is not None else None
        if notice is None:
            return own
        # The admin's own announcement is HTML by JupyterHub's rules (shown with | safe): it stays as written.
        return Markup("{}<br>{}").format(Markup(own), notice) if own else notice  # noqa: S704

    def _html(self, user: Any) -> Markup | None:
        try:
            queued = _queued(user)
            if queued is not None:
                return queued
            now = SYSTEM_CLOCK.now()
            notice = HubState.current().stops.newest(user.name, self._stored(user, now), now)
            if notice is None or notice.reason == NODE_LOST or _started_again(user, notice):
                return None  # a lost node: the spawn form of that server says it (choosing.py)
            if notice.reason == LEFT_QUEUE:
                return Markup('<span class="fracnb-{}">{}</span>').format(notice.reason, notice.details.get("text"))
            spawner = user.spawners.get(notice.server) or user.spawner
            return notice_html(notice, _spawn_url(spawner, user, notice.server), _zone(spawner))
        except Exception as error:  # no notice rather than a broken hub page
            log.warning("fracnb: no stop notice for %s: %r", getattr(user, "name", "?"), error)
            return None

    def _stored(self, user: Any, now: datetime) -> StopNotice | None:
        """The user's newest stop in the session history (the service's culls, and stops on request)."""
        cached = self._cache.get(user.name)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        spawner = user.spawner
        notice = spawner.hub_state.history.newest_stop(spawner.right_sizing_db_url, user.name, now)
        self._cache[user.name] = (time.monotonic(), notice)
        return notice


def saved_choice(spawner: Any) -> SavedChoice | None:
    """The choice of the user's server whose variables were saved at its newest stop, and wait to be restored (the
    server has not started since), for the spawn form to preselect (form/preselect.py); None without one, or
    when the history cannot be read (a form without the preselection rather than a broken one)."""
    user, now = spawner.user, SYSTEM_CLOCK.now()
    try:
        stored = spawner.hub_state.history.newest_stop(spawner.right_sizing_db_url, user.name, now)
        notice = spawner.hub_state.stops.newest(user.name, stored, now)
        if notice is None or not notice.saved_any or _started_again(user, notice):
            return None
        stopped = user.spawners.get(notice.server)
        options = getattr(getattr(stopped, "orm_spawner", None), "user_options", None) or {}
        return SavedChoice(notice.server, dict(options), notice.stopped_at)
    except Exception as error:
        log.warning("fracnb: no saved choice to preselect for %s: %r", getattr(user, "name", "?"), error)
        return None


def _queued(user: Any) -> Markup | None:
    """A spawn of the user's that waits in the GPU queue, said with its place (as its progress page says it)."""
    for server, spawner in sorted(user.spawners.items()):
        queue = getattr(spawner, "queue", None)
        text = queue.status_html() if queue is not None and spawner.pending == "spawn" else None
        if text:
            which = f"Your server {server!r}" if server else "Your server"
            url = f"{spawner.hub.base_url}spawn-pending/{user.escaped_name}/{server}".rstrip("/")
            return QUEUED_HTML.format(which, text, url, LOCAL_TIMES_SCRIPT)
    return None


def _started_again(user: Any, notice: StopNotice) -> bool:
    """The stopped server runs again, is starting, or was started after the stop (a spawn left in the queue
    was started before it)."""
    spawner = user.spawners.get(notice.server)
    if spawner is None:
        return False
    if spawner.active or spawner.ready or getattr(spawner, "pending", None):
        return True
    started = getattr(spawner.orm_spawner, "started", None)
    return started is not None and naive_utc(started) >= naive_utc(notice.stopped_at)


def _spawn_url(spawner: Any, user: Any, server: str) -> str:
    base = spawner.hub.base_url
    return f"{base}spawn/{user.escaped_name}/{server}" if server else f"{base}spawn"


def _zone(spawner: Any) -> Any:
    settings = getattr(spawner, "queue_settings", None)
    return settings().zone if callable(settings) else None


def install(template_vars: dict[str, Any]) -> dict[str, Any]:
    """The hub's template variables with the notice added to its announcements (once), and
    ``fracnb_local_times``, the script that shows the progress page's times in the reader's zone."""
    installed = dict(template_vars)
    installed["fracnb_local_times"] = LOCAL_TIMES_SCRIPT
    if not isinstance(installed.get("announcement"), StoppedNotice):
        installed["announcement"] = StoppedNotice(installed.get("announcement", ""))
    for key in ANNOUNCEMENTS[1:]:  # an admin's page-specific announcement replaces the general one there
        if key in installed and not isinstance(installed[key], StoppedNotice):
            installed[key] = StoppedNotice(installed[key])
    return installed
