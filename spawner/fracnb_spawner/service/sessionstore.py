"""The session history as the service uses it: each database call in a thread, its failures counted and
logged (a 503 to an API caller), and a notebook's session report stored and counted in the metrics with its
user's JupyterHub groups."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from tornado import web

from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.history.store import store_report

log = logging.getLogger("fracnb.service")

GROUPS_TTL = 600.0  # seconds a user's groups are reused for the per-group metrics


async def user_groups(state: Any, user: str) -> list[str]:
    """The user's JupyterHub groups, asked of the hub at most every GROUPS_TTL seconds; [] if it fails."""
    cache: dict[str, tuple[float, list[str]]] = state.__dict__.setdefault("_groups_cache", {})
    now = time.monotonic()
    if user in cache and now - cache[user][0] < GROUPS_TTL:
        return cache[user][1]
    try:
        groups = list((await state.hub.user(user)).get("groups") or [])
    except Exception as error:
        log.warning("Could not read the groups of %s for the session metrics: %s", shown(user), error)
        groups = []
    cache[user] = (now, groups)
    return groups


def history_of(state: Any) -> Any:
    """The service's session factory, or a 503 while there is none."""
    history = getattr(state, "history", None)
    if history is None:
        raise web.HTTPError(503, "the session history database is not open yet: try again shortly")
    return history


Result = TypeVar("Result")


async def in_database(state: Any, operation: str, work: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """``work(history, *args, **kwargs)`` in a thread; a database failure is counted
    (``fracnb_session_database_errors_total``), logged, and raised again (``SQLAlchemyError``)."""
    history = history_of(state)
    try:
        return await asyncio.to_thread(work, history, *args, **kwargs)
    except SQLAlchemyError as error:
        state.history_metrics.database_errors.labels(operation=operation).inc()
        log.error("The session history database failed (%s): %s", operation, error)
        raise


async def in_history(state: Any, operation: str, work: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """:func:`in_database`, a database failure answered 503."""
    try:
        return await in_database(state, operation, work, *args, **kwargs)
    except SQLAlchemyError:
        raise web.HTTPError(503, "the session history database is unavailable: try again shortly") from None


async def store_and_count(state: Any, user: str, report: Any) -> None:
    """Store a report and count what it added in the metrics; ``SQLAlchemyError`` (counted) while the
    database is away."""
    stored = await in_database(state, "store", store_report, user, report)
    if stored is not None:
        state.history_metrics.record(stored, await user_groups(state, user))
