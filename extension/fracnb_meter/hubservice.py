"""The hub's fracnb service, seen from the notebook: the user's GPU quota and this server's cull status.

The service answers ``GET {FRACNB_SERVICE_URL}api/me`` for the server's own token
(``JUPYTERHUB_API_TOKEN``). Anything going wrong there means "no quota information",
never an error for the meter.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.error import URLError

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

Report = tuple[dict[str, Any] | None, dict[str, Any] | None]
NO_REPORT: Report = (None, None)


def _gpus(amount: Mapping[str, Any] | None) -> float | None:
    return None if not amount else amount.get("gpus")


def report_from_me(me: Mapping[str, Any], server_name: str) -> Report:
    """(quota, cull) in the usage document's shapes, from the service's ``api/me`` answer."""
    quota = {
        "user": {"used": _gpus(me.get("used")) or 0.0, "limit": _gpus(me.get("quota"))},
        "groups": [
            {"name": g["name"], "used": _gpus(g.get("used")) or 0.0, "limit": _gpus(g.get("quota"))}
            for g in me.get("groups") or []
            if _gpus(g.get("quota")) is not None
        ],
    }
    status = (me.get("culling") or {}).get(server_name)
    cull = None
    if status:
        cull = {
            "idle_timeout_seconds": status.get("idle_timeout_seconds"),
            "cull_at": status.get("cull_at"),
            "seconds_left": status.get("seconds_left"),
            "warning": bool(status.get("warning")),
            "reason": status.get("reason"),
        }
    return quota, cull


def _request_parts(service_url: str, token: str) -> tuple[str, dict[str, str]] | None:
    if not service_url.startswith(("http://", "https://")) or not token:
        return None
    return service_url.rstrip("/") + "/api/me", {"Authorization": f"token {token}", "Accept": "application/json"}


def fetch_report_blocking(service_url: str, token: str, server_name: str, timeout: float = 3.0) -> Report:
    """For the in-kernel widget's thread."""
    parts = _request_parts(service_url, token)
    if parts is None:
        return NO_REPORT
    request = urllib.request.Request(parts[0], headers=parts[1])  # noqa: S310 - http(s) only, checked above
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            return report_from_me(json.load(answer), server_name)
    except (URLError, OSError, ValueError, KeyError, TypeError):
        return NO_REPORT


class ServiceReports:
    """For the server extension: the latest report, refreshed at most every ``min_interval`` seconds."""

    def __init__(self, service_url: str, token: str, server_name: str, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._parts = _request_parts(service_url, token)
        self._server_name = server_name
        self._min_interval = min_interval
        self._clock = clock
        self._fetched_at: float | None = None
        self._report: Report = NO_REPORT

    @property
    def enabled(self) -> bool:
        return self._parts is not None

    async def latest(self) -> Report:
        if self._parts is None:
            return NO_REPORT
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._min_interval:
            return self._report
        self._fetched_at = now
        url, headers = self._parts
        try:
            answer = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=3.0)
            self._report = report_from_me(json.loads(answer.body), self._server_name)
        except (HTTPClientError, OSError, ValueError, KeyError, TypeError):
            self._report = NO_REPORT
        return self._report
