"""The hub's fracnb service, seen from the notebook: the user's GPU quota and this server's cull status.

The service answers ``GET {FRACNB_SERVICE_URL}api/me`` for the server's own token
(``JUPYTERHUB_API_TOKEN``) with a document of schemas/service-me.schema.json, checked here
on receipt. Anything going wrong there (no answer, or a shape this version does not know,
say from a hub running another fracnb version) means "no quota information", never an
error for the meter and never a half-understood report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, cast

from fracnb_schemas import SERVICE_REPORT, check

from .hubcalls import ThrottledGet, get_blocking

Report = tuple[dict[str, Any] | None, dict[str, Any] | None]
NO_REPORT: Report = (None, None)


def report_from_me(me: object, server_name: str) -> Report:
    """(quota, cull) in the usage document's shapes, from the service's ``api/me`` answer.

    Raises :class:`~fracnb_schemas.SchemaMismatchError` when ``me`` is not a service report.
    ``cull`` is None when the service does not know this server (yet).
    """
    check(SERVICE_REPORT, me)
    report = cast(Mapping[str, Any], me)  # the schema says it is an object
    quota: dict[str, Any] = {
        "user": {"used": report["used"], "limit": report["quota"]},
        "groups": [
            {"name": group["name"], "used": group["used"], "limit": group["quota"]}
            for group in report["groups"]
            if group["quota"]["state"] == "limited"
        ],
    }
    if report.get("borrowing"):  # with Kueue, while the team runs on lent quota
        quota["borrowing"] = report["borrowing"]
    return quota, report["culling"].get(server_name)


def _parse(body: bytes, server_name: str) -> tuple[Report, str | None]:
    """The report in an answer's body, or NO_REPORT and why."""
    try:
        return report_from_me(json.loads(body), server_name), None
    except ValueError as error:  # bad JSON, or a SchemaMismatchError
        return NO_REPORT, str(error)


def _request_parts(service_url: str, token: str) -> tuple[str, dict[str, str]] | None:
    if not service_url.startswith(("http://", "https://")) or not token:
        return None
    return service_url.rstrip("/") + "/api/me", {"Authorization": f"token {token}", "Accept": "application/json"}


def fetch_report_blocking(service_url: str, token: str, server_name: str, timeout: float = 3.0) -> Report:
    """For the in-kernel widget's thread."""
    body = get_blocking(_request_parts(service_url, token), timeout)
    return NO_REPORT if body is None else _parse(body, server_name)[0]


class ServiceReports(ThrottledGet[Report]):
    """For the server extension: the latest report, refreshed at most every ``min_interval`` seconds."""

    def __init__(self, service_url: str, token: str, server_name: str, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        parse = partial(_parse, server_name=server_name)
        super().__init__(_request_parts(service_url, token), min_interval, parse, NO_REPORT, what="answer", clock=clock)
