"""Refused spawns in the hub log: one line each, no traceback.

A refusal (over quota, a choice no node offers, a bad option, a wait in the queue that ran out)
is an ordinary event: FractionalSpawner logs one line with the user, the server, the choice and
the reason (:func:`logged_refusals`), at INFO for the refusals a user's request causes (4xx, and
503 for capacity) and at WARNING for those the hub's surroundings cause (the cluster unreadable).
JupyterHub and tornado log the same refusal again as it passes by, with a traceback for form and
query submissions ("Failed to spawn single-user server with form"), as an error for a spawn
("Not starting ann's server"), as a warning for an API request; :class:`QuietRefusals`, a filter
on the hub's loggers, drops those records, and only those: any other error keeps its traceback.
The access log's line per request stays.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from fracnb_spawner.common.errors import RefusedSpawnError
from fracnb_spawner.common.logsafe import shown

# 503s a user's choice causes (no capacity for it), rather than the hub's surroundings.
CAPACITY_REASONS = frozenset({"unschedulable", "queue-timeout"})
RECENT = 64  # refusals remembered for matching the hub's own lines about them


def is_expected(error: BaseException) -> bool:
    """A refusal of the request itself: a 4xx, or a 503 for want of capacity."""
    if not isinstance(error, RefusedSpawnError):
        return False
    status = getattr(error, "status_code", 500)
    return 400 <= status < 500 or (status == 503 and refusal_reason(error) in CAPACITY_REASONS)


def refusal_reason(error: RefusedSpawnError) -> str:
    return str(getattr(error, "fracnb_reason", "") or "")


def choice_words(options: Mapping[str, Any] | None) -> str:
    """ "quarter", "shared (size=half)" for a log line; the user's own text is shown quoted."""
    if not isinstance(options, Mapping) or "profile" not in options:
        return "the default choice"
    profile = options["profile"]
    rest = ", ".join(f"{key}={shown(value, 60)}" for key, value in options.items() if key != "profile")
    return f"{shown(profile, 80)}" + (f" ({rest})" if rest else "")


class QuietRefusals(logging.Filter):
    """Drops the records about refusals fracnb has logged already: a record carrying one as its
    exception, or a warning or error quoting one (JupyterHub's "Not starting ann's server: 403 ...",
    tornado's "400 POST /hub/api/users/ann/server (...): <message>")."""

    def __init__(self) -> None:
        super().__init__()
        self.recent: deque[RefusedSpawnError] = deque(maxlen=RECENT)

    def note(self, error: RefusedSpawnError) -> None:
        self.recent.append(error)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            return not any(error is known for known in self.recent)
        if record.levelno < logging.WARNING or not self.recent:
            return True
        message = record.getMessage()
        return not any(text in message for known in self.recent for text in _quoted(known))


def _quoted(error: RefusedSpawnError) -> tuple[str, ...]:
    return (str(error), str(getattr(error, "jupyterhub_message", str(error))))


def _hub_loggers(log: Any) -> list[logging.Logger]:
    """The spawner's logger (the hub's) and tornado's, which JupyterHub renames after itself."""
    from tornado.log import access_log, app_log, gen_log  # noqa: PLC0415 - only inside a hub

    own = log.logger if isinstance(log, logging.LoggerAdapter) else log
    return [logger for logger in (own, app_log, gen_log, access_log) if isinstance(logger, logging.Logger)]


def quiet_refusals(log: Any) -> QuietRefusals:
    """The one filter on the hub's loggers (added on first use)."""
    loggers = _hub_loggers(log)
    found = next((f for logger in loggers for f in logger.filters if isinstance(f, QuietRefusals)), None)
    found = found or QuietRefusals()
    for logger in loggers:
        if found not in logger.filters:
            logger.addFilter(found)
    return found


@contextmanager
def logged_refusals(log: Any, user: str, server: str, options: Mapping[str, Any] | None) -> Iterator[None]:
    """Log a refusal raised in the block once, as one line, and keep the hub's own lines about it quiet."""
    try:
        yield
    except RefusedSpawnError as error:
        if getattr(error, "fracnb_logged", False):  # an inner block (load_user_options in _start) did
            raise
        error.fracnb_logged = True
        (log.info if is_expected(error) else log.warning)(
            "fracnb: refused a server for %s%s, choice %s: %s [%s %s]",
            shown(user),
            f" (server {shown(server)})" if server else "",
            choice_words(options),
            getattr(error, "jupyterhub_message", str(error)),
            getattr(error, "status_code", ""),
            refusal_reason(error) or "refused",
        )
        quiet_refusals(log).note(error)  # after the line above, which quotes it
        raise
