"""Stop notices the session history could not take yet, kept in a file a restart of the service reads back.

The service writes why it stopped a server (history/stopnotices.py) before the hub stops it. While the
history is not open yet (the service's first seconds) or the database is away, the notice is kept
(:meth:`.state.ServiceState.write_stop`) and written once the database answers. The kept notices are
also in a file beside the kept session reports (:mod:`.keptreports`; one JSON line each, readable by the
service's user only), rewritten whenever they change and removed once all are written, so that a
service restarted during the outage still tells the users why their servers stopped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fracnb_spawner.history.stopnotices import StopNotice

log = logging.getLogger("fracnb.service")


def kept_stops_file(kept_reports_file: str) -> Path | None:
    """Where the kept stop notices go: beside the kept reports' file (``fracnb-kept-reports.jsonl`` ->
    ``fracnb-kept-reports.stops.jsonl``); None where reports are kept in memory only."""
    if not kept_reports_file:
        return None
    path = Path(kept_reports_file)
    return path.with_name(f"{path.stem}.stops{path.suffix or '.jsonl'}")


def notice_json(notice: StopNotice) -> dict[str, Any]:
    stopped_at = notice.stopped_at if notice.stopped_at.tzinfo else notice.stopped_at.replace(tzinfo=timezone.utc)
    return {
        "user": notice.user,
        "server": notice.server,
        "stopped_at": stopped_at.isoformat(),
        "reason": notice.reason,
        "limit_seconds": notice.limit_seconds,
        "details": dict(notice.details),
    }


def notice_from_json(entry: Mapping[str, Any]) -> StopNotice:
    """The notice :func:`notice_json` wrote; KeyError, TypeError or ValueError for anything else."""
    limit = entry.get("limit_seconds")
    return StopNotice(
        str(entry["user"]),
        str(entry["server"]),
        datetime.fromisoformat(entry["stopped_at"]),
        str(entry["reason"]),
        float(limit) if limit is not None else None,
        dict(entry.get("details") or {}),
    )


def save_kept_stops(path: Path | None, notices: Iterable[StopNotice]) -> None:
    """The file holds ``notices``, replaced at once (a crash leaves the old file or the new one); no
    notices: no file. A file that cannot be written leaves the notices in memory, said in the log."""
    if path is None:
        return
    notices = list(notices)
    try:
        if not notices:
            path.unlink(missing_ok=True)
            return
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write("".join(json.dumps(notice_json(notice)) + "\n" for notice in notices))
        os.replace(partial, path)
    except OSError as error:
        log.error("Could not write the kept stop notices to %s: %s", path, error)


def read_kept_stops(path: Path | None) -> list[StopNotice]:
    """The notices the file holds, oldest first; a line that is not one is skipped, said in the log."""
    if path is None or not path.is_file():
        return []
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            found.append(notice_from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("Skipped line %d of %s: not a kept stop notice", number, path)
    if found:
        log.info("Read %d stop notices kept while the database was away from %s", len(found), path)
    return found
