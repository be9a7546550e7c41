"""The servers the fracnb service stopped, what their hibernation saved, and the notice their users read.

The service records each stop (:func:`record_stop`) once the server's hibernation is over (when one was
asked) and just before it asks the hub to stop the server, in the session history's database (table
``fracnb_stops``), so that a restart of the service forgets none. Wherever the user lands next, the
notice says why and what was saved: the hub's pages (home, "Server not running", the spawn form:
:func:`notice_html`, through the hub's ``announcement`` template variable), the service's page and
``api/me``'s ``stopped``, and JupyterLab's own notice for an open tab, which words it the same way
(extension/test-data/stop-notices.json and hibernation-notices.json hold both sides to it).

A notice is built from a :class:`StopNotice`; what it says comes from :func:`notice_sentences`: why
and when, what was kept and lost, then a line per notebook the hibernation saved or could not save.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.common.clock import clock_text, duration_text
from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT, with_times
from fracnb_spawner.hibernation.words import NOTHING_TO_SAVE, problem_line, report_lines, saved_moment
from fracnb_spawner.history.models import StopRecord

# What a stop keeps and loses (JupyterLab's notice says the same: extension/src/stopped.ts).
CONSEQUENCES = (
    "Your saved files are kept. Running kernels were shut down: their variables and anything not saved are lost."
)
# The same when the hibernation before the stop saved variables (listed after it).
SAVED_CONSEQUENCES = (
    "Your saved files are kept, and the variables listed here: open the notebook again to restore them. "
    "Anything else not saved is lost."
)
# The same when the hibernation found no variables in any kernel (its one line would repeat it).
NOTHING_HELD_CONSEQUENCES = "Your saved files are kept. No kernel held variables, so there were none to save."
SAVED = ("saved", "partly_saved")  # a kernel's statuses that saved variables
NOTICE_DAYS = 7  # a stop older than this is not news any more
# The reasons of the service's own stops (culls): those api/me's ``stopped`` tells (service-me.schema.json).
SERVICE_REASONS = frozenset({"idle", "demand", "gpu-unused", "gpu-unused-busy", "max-age"})
# The hub's own: a stop someone asked for ("Stop My Server", an admin), a stop of every server as JupyterHub
# itself shuts down (with c.JupyterHub.cleanup_servers, as the demo's Ctrl-C does), a spawn its user left while
# it waited in the GPU queue, a pod the hub deleted because its node left the cluster. The last two carry their
# own text.
USER_STOP, HUB_SHUTDOWN, LEFT_QUEUE, NODE_LOST = "user", "hub-shutdown", "left-queue", "node-lost"


@dataclass(frozen=True)
class StopNotice:
    """One stop the service made: whose server, when, why, the limit that applied, and what its
    hibernation came to."""

    user: str
    server: str
    stopped_at: datetime  # UTC (naive as stored)
    reason: str  # culling.Reason: idle, demand, gpu-unused, gpu-unused-busy, max-age
    limit_seconds: float | None = None  # the idle timeout or the maximum age
    details: Mapping[str, Any] = field(default_factory=dict)  # more facts for the notice, as stored (JSON)

    @property
    def hibernation(self) -> Mapping[str, Any] | None:
        """What the hibernation before the stop came to (``hibernation`` of service-me.schema.json's
        ``stoppedServer``: outcome, problem, saved_bytes, kernels); None when none was asked."""
        return self.details.get("hibernation")

    @property
    def saved_any(self) -> bool:
        return any(kernel.get("status") in SAVED for kernel in self.kernels)

    @property
    def nothing_to_save(self) -> bool:
        """A hibernation was asked and answered, and no kernel held variables (none running, or all empty)."""
        return (
            self.hibernation is not None
            and not self.hibernation.get("problem")
            and self.hibernation_lines() == [NOTHING_TO_SAVE]
        )

    @property
    def kernels(self) -> list[Mapping[str, Any]]:
        return list((self.hibernation or {}).get("kernels") or [])

    def hibernation_lines(self, zone: tzinfo | None = None) -> list[str]:
        """A line per notebook the hibernation saved or not ([] when none was asked)."""
        hibernation = self.hibernation
        if hibernation is None:
            return []
        if hibernation.get("problem") and not self.kernels:
            return [problem_line(hibernation["problem"])]
        return report_lines(self.kernels, zone)

    def saved_moments(self) -> list[datetime]:
        """When each kernel's variables were saved, in the order its lines say them."""
        moments = (saved_moment(kernel.get("saved_at")) for kernel in self.kernels if kernel.get("status") in SAVED)
        return [moment for moment in moments if moment is not None]


# Why, where the limit does not matter.
FIXED_PHRASES = {
    "demand": "for being idle while someone waited for a GPU",
    "gpu-unused": "for not using its GPU while idle",
    "gpu-unused-busy": "for not using its GPU for too long",
    USER_STOP: "on request by you or an admin",
    HUB_SHUTDOWN: "as JupyterHub shut down",
}


def stop_phrase(reason: str, limit_seconds: float | None) -> str:
    """ "for being idle for 15 min", "at its maximum age of 8 h": why, after "was stopped"."""
    if reason == "idle":
        return f"for being idle for {duration_text(limit_seconds)}" if limit_seconds else "for being idle"
    if reason == "max-age":
        return f"at its maximum age of {duration_text(limit_seconds)}" if limit_seconds else "at its maximum age"
    return FIXED_PHRASES.get(reason, "")


def stops_heading(stops: list[StopNotice]) -> str:
    """The heading over a user's stop notices: "Stopped by fracnb" only when the fracnb service made them all
    (a stop on request, or JupyterHub's own shutdown, was not fracnb's doing)."""
    if all(stop.reason in SERVICE_REASONS for stop in stops):
        return "Stopped by fracnb"
    return "Your server was stopped" if len(stops) == 1 else "Your servers were stopped"


def notice_headline(notice: StopNotice, zone: ZoneInfo | None = None) -> str:
    """ "Your server was stopped for being idle for 15 min (at 14:05 CET)." """
    which = f"Your server {notice.server!r}" if notice.server else "Your server"
    why = stop_phrase(notice.reason, notice.limit_seconds)
    when = clock_text(notice.stopped_at, zone)
    return f"{which} was stopped {why} (at {when}).".replace("  ", " ")


def notice_summary(notice: StopNotice, zone: ZoneInfo | None = None) -> str:
    """Why and when the server was stopped, and what was kept and lost."""
    if notice.saved_any:
        return f"{notice_headline(notice, zone)} {SAVED_CONSEQUENCES}"
    return f"{notice_headline(notice, zone)} {NOTHING_HELD_CONSEQUENCES if notice.nothing_to_save else CONSEQUENCES}"


def notice_sentences(notice: StopNotice, zone: ZoneInfo | None = None) -> list[str]:
    """What the user reads: the summary, then a line per notebook its hibernation saved or could not save
    (a notice of the hub's that carries its own text: that text)."""
    if notice.details.get("text"):
        return [str(notice.details["text"])]
    if notice.nothing_to_save:  # the summary says it
        return [notice_summary(notice, zone)]
    return [notice_summary(notice, zone), *notice.hibernation_lines(zone)]


def with_code(text: str) -> Markup:
    """``text`` escaped, its `backticked` names (a skipped variable) set as code, as the notebook shows them."""
    parts = str(Markup.escape(text)).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: nothing is code
        return Markup.escape(text)
    return Markup("".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts)))  # noqa: S704 -- escaped above


def notice_html(notice: StopNotice, start_url: str, zone: ZoneInfo | None = None) -> Markup:
    """The notice as a hub page shows it (in its announcement bar), with a link to start again."""
    moments = [notice.stopped_at, *notice.saved_moments()]
    text = with_times(with_code(" ".join(notice_sentences(notice, zone))), moments, zone)
    return Markup(
        '<span class="fracnb-stopped" data-fracnb-stopped="{}">{} <a href="{}">Start it again</a>.</span>{}'
    ).format(notice.reason, text, start_url, LOCAL_TIMES_SCRIPT)


def hibernation_lines_html(notice: StopNotice, zone: ZoneInfo | None = None) -> list[Markup]:
    """:meth:`StopNotice.hibernation_lines` as a page shows them: names as code, each save's time in the
    reader's zone (the page carries LOCAL_TIMES_SCRIPT)."""
    moments = notice.saved_moments()
    return [with_times(with_code(line), moments, zone) for line in notice.hibernation_lines(zone)]


def notice_summary_html(notice: StopNotice, zone: ZoneInfo | None = None) -> Markup:
    """:func:`notice_summary` with its time in the reader's zone (the page carries LOCAL_TIMES_SCRIPT)."""
    return with_times(notice_summary(notice, zone), [notice.stopped_at], zone)


# ---- the table ------------------------------------------------------------------------------------


def record_stop(db: sessionmaker[Session], notice: StopNotice) -> None:
    with db() as session:
        session.add(
            StopRecord(
                user_name=notice.user,
                server_name=notice.server,
                stopped_at=naive_utc(notice.stopped_at),
                reason=notice.reason,
                limit_seconds=notice.limit_seconds,
                details=json.dumps(dict(notice.details)) if notice.details else None,
            )
        )
        session.commit()


def newest_stop(db: sessionmaker[Session], user: str, *, now: datetime, server: str | None = None) -> StopNotice | None:
    """The user's newest stop of the last :data:`NOTICE_DAYS` days, of any of their servers (or of ``server``)."""
    stops = [stop for stop in latest_stops(db, user, now=now) if server is None or stop.server == server]
    return stops[0] if stops else None


def _notice(found: StopRecord) -> StopNotice:
    details = json.loads(found.details) if found.details else {}
    return StopNotice(found.user_name, found.server_name, found.stopped_at, found.reason, found.limit_seconds, details)


def latest_stops(db: sessionmaker[Session], user: str, *, now: datetime) -> list[StopNotice]:
    """The last stop of each of the user's servers in the last :data:`NOTICE_DAYS` days, newest first."""
    since = naive_utc(now) - timedelta(days=NOTICE_DAYS)
    query = (
        select(StopRecord)
        .where(StopRecord.user_name == user, StopRecord.stopped_at >= since)
        .order_by(StopRecord.stopped_at.desc(), StopRecord.id.desc())
    )
    latest: dict[str, StopNotice] = {}
    with db() as session:
        for found in session.scalars(query):
            if found.server_name not in latest:
                latest[found.server_name] = _notice(found)
    return list(latest.values())


def recent_culls(db: sessionmaker[Session], *, now: datetime, limit: int) -> list[StopNotice]:
    """The service's newest ``limit`` stops (culls) of every user in the last :data:`NOTICE_DAYS` days,
    newest first: the admin's list, the same after a restart of the service."""
    since = naive_utc(now) - timedelta(days=NOTICE_DAYS)
    query = (
        select(StopRecord)
        .where(StopRecord.stopped_at >= since, StopRecord.reason.in_(sorted(SERVICE_REASONS)))
        .order_by(StopRecord.stopped_at.desc(), StopRecord.id.desc())
        .limit(limit)
    )
    with db() as session:
        return [_notice(found) for found in session.scalars(query)]


def purge_stops(db: sessionmaker[Session], *, now: datetime, keep_days: float) -> int:
    cutoff = naive_utc(now) - timedelta(days=keep_days)
    with db() as session:
        gone = session.execute(delete(StopRecord).where(StopRecord.stopped_at < cutoff)).rowcount or 0
        session.commit()
    return int(gone)


def naive_utc(moment: datetime) -> datetime:
    """``moment`` as the table keeps it: UTC without a zone."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment
