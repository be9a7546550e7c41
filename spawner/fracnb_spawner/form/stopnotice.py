"""Why a user's server was stopped, or that they left the GPU queue, on the hub's own pages: the home,
"Server not running", the spawn form.

JupyterHub shows its ``announcement`` template variable at the top of every page, and calls it with the
user when it is a callable. ``setup(c)`` installs :class:`StoppedNotice` there (keeping an admin's own
announcement before it): for a user whose server the fracnb service stopped and who has not started it
again, the notice of :mod:`fracnb_spawner.history.stops`, read-only from the session history. Reads
are cached per user for :data:`CACHE_SECONDS`; anything going wrong means no notice, never a broken page.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

from markupsafe import Markup

from fracnb_spawner.history.stops import StopNotice, notice_html
from fracnb_spawner.hubstate import HubState

log = logging.getLogger("fracnb.stopnotice")
CACHE_SECONDS = 20.0
LEFT_QUEUE_SECONDS = 3600.0
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
            left = _left_the_queue(user)
            if left is not None:
                return Markup('<span class="fracnb-left-queue">{}</span>').format(left)
            notice = self._notice(user)
            if notice is None or _started_again(user, notice):
                return None
            spawner = user.spawners.get(notice.server) or user.spawner
            return notice_html(notice, _spawn_url(spawner, user, notice.server), _zone(spawner))
        except Exception as error:  # no notice rather than a broken hub page
            log.warning("fracnb: no stop notice for %s: %r", getattr(user, "name", "?"), error)
            return None

    def _notice(self, user: Any) -> StopNotice | None:
        cached = self._cache.get(user.name)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        spawner = user.spawner
        reader = spawner.hub_state.history
        notice = reader.newest_stop(spawner.right_sizing_db_url, user.name, datetime.now(timezone.utc))
        self._cache[user.name] = (time.monotonic(), notice)
        return notice


def _left_the_queue(user: Any) -> str | None:
    """The confirmation that the user left the GPU queue, for :data:`LEFT_QUEUE_SECONDS` and until they start
    again (each spawn forgets it)."""
    now = datetime.now(timezone.utc)
    for (name, server), (when, text) in list(HubState.current().left_queue.items()):
        spawner = user.spawners.get(server) if name == user.name else None
        if name == user.name and (now - when).total_seconds() < LEFT_QUEUE_SECONDS and not (spawner and spawner.active):
            return text
    return None


def _started_again(user: Any, notice: StopNotice) -> bool:
    """The stopped server runs again, is starting, or was started after the stop."""
    spawner = user.spawners.get(notice.server)
    if spawner is None:
        return False
    if spawner.active or spawner.ready or getattr(spawner, "pending", None):
        return True
    started = getattr(spawner.orm_spawner, "started", None)
    return started is not None and started.replace(tzinfo=None) >= notice.stopped_at


def _spawn_url(spawner: Any, user: Any, server: str) -> str:
    base = spawner.hub.base_url
    return f"{base}spawn/{user.escaped_name}/{server}" if server else f"{base}spawn"


def _zone(spawner: Any) -> Any:
    settings = getattr(spawner, "queue_settings", None)
    return settings().zone if callable(settings) else None


def install(template_vars: dict[str, Any]) -> dict[str, Any]:
    """The hub's template variables with the notice added to its announcements (once)."""
    installed = dict(template_vars)
    if not isinstance(installed.get("announcement"), StoppedNotice):
        installed["announcement"] = StoppedNotice(installed.get("announcement", ""))
    for key in ANNOUNCEMENTS[1:]:  # an admin's page-specific announcement replaces the general one there
        if key in installed and not isinstance(installed[key], StoppedNotice):
            installed[key] = StoppedNotice(installed[key])
    return installed
