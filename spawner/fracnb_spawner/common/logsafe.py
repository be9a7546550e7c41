"""Log lines that users cannot forge.

User names, server names, URLs and option values reach log messages. A newline in one of them
(``%0A`` in a URL path, decoded by the router) would start what looks like a new, hub-written log
line; a carriage return, an ANSI escape or a bidi override can hide or rewrite text on a terminal.
Messages therefore show such text with :func:`shown` (its ``repr``), and the service's log handler
escapes whatever non-printable character still arrives (:class:`EscapeControlCharacters`).
"""

from __future__ import annotations

import logging


def shown(text: object, limit: int = 200) -> str:
    """``text`` for a log line or an error message: its repr (quoted, escaped), cut to ``limit``."""
    value = repr(text)
    return value if len(value) <= limit else value[: limit - 3] + "..."


def server_shown(user: str, server: str) -> str:
    """A user's server for a log line: "server 'gpu' of 'ann'", and "the default server of 'ann'" for the one
    without a name (not "server ''"); names as :func:`shown` writes them."""
    return f"server {shown(server)} of {shown(user)}" if server else f"the default server of {shown(user)}"


def escape_controls(text: str) -> str:
    """``text`` with every non-printable character (newline, CR, ESC, U+2028, bidi controls) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class EscapeControlCharacters(logging.Filter):
    """A handler filter: each record's message becomes one line of printable text.

    Tracebacks are added by the formatter after filtering, so they keep their lines.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        safe = escape_controls(message)
        if safe != message:
            record.msg, record.args = safe, None
        return True


def join_hub_log(hub_log: logging.Logger | logging.LoggerAdapter) -> None:
    """Send the ``fracnb`` loggers' lines (``fracnb.queue``, a hibernation at a user's stop...) through the
    hub log's own handlers, at its level.

    Without this they reach only Python's last-resort handler, which drops everything below WARNING: the
    hub's INFO lines about fracnb would be lost. Called with the hub's log (the spawner's ``log``); a log
    without handlers of its own (no hub application: offline tests) changes nothing.
    """
    logger = hub_log.logger if isinstance(hub_log, logging.LoggerAdapter) else hub_log
    source: logging.Logger | None = logger
    while source is not None and not _writes(source):
        source = source.parent if source.propagate else None
    if source is None or source is logging.getLogger() or source.name.split(".")[0] == "fracnb":
        return  # nothing to join, or fracnb's lines reach it already through the root logger
    fracnb = logging.getLogger("fracnb")
    fracnb.handlers = list(source.handlers)
    fracnb.setLevel(logger.getEffectiveLevel())
    fracnb.propagate = False


def _writes(logger: logging.Logger) -> bool:
    return any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers)
