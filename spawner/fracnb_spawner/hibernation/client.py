"""Asking a notebook server to hibernate: ``POST {server}/fracnb/api/hibernate`` (docs/hibernation.md).

The answer is a hibernation report (hibernation-report.schema.json), or a plain reason why there
is none (turned off on that server, no answer in time, an error). Nothing here raises: the caller
stops the server whatever happened. The report comes from the user's own server, so only the
fields the hub reads are checked and used, and only as text and counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from fracnb_spawner.hibernation.settings import HTTP_MARGIN_SECONDS, HibernationSettings

ENDPOINT = "fracnb/api/hibernate"
STATUSES = ("saved", "partly_saved", "failed", "skipped_over_limit", "busy", "empty", "not_supported")
_LONGEST_TEXT = 500  # a reason or a name longer than this is cut: it is shown on the user's pages


@dataclass(frozen=True)
class Hibernation:
    """What became of one request: the server's ``report`` (checked), or the ``problem`` why there is none."""

    report: Mapping[str, Any] | None
    problem: str | None
    seconds: float
    turned_off: bool = False  # the server answered 404: hibernation is off there (no failure)

    @property
    def kernels(self) -> list[Mapping[str, Any]]:
        return list(self.report["kernels"]) if self.report else []

    def any_busy(self) -> bool:
        return any(kernel["status"] == "busy" for kernel in self.kernels)


def server_url(address: str | None, port: int | None, base_url: str | None) -> str | None:
    """``http://10.1.2.3:8888/user/ann/`` from a pod's IP and port and the server's base URL, or None."""
    if not address or not port or not base_url or not base_url.startswith("/"):
        return None
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}{base_url if base_url.endswith('/') else base_url + '/'}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= _LONGEST_TEXT else text[: _LONGEST_TEXT - 1] + "…"


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def _kernel(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping) or entry.get("status") not in STATUSES:
        raise ValueError("not a kernel outcome")
    skipped = entry.get("skipped") or []
    if not isinstance(skipped, list) or not all(isinstance(item, Mapping) for item in skipped):
        raise ValueError("skipped is not a list of variables")
    return {
        "path": _text(entry.get("path")),
        "status": entry["status"],
        "reason": _text(entry.get("reason")),
        "bytes": _count(entry.get("bytes", 0)),
        "variables": _count(entry.get("variables", 0)),
        "skipped": [
            {"name": _text(item.get("name")) or "?", "reason": _text(item.get("reason")) or ""} for item in skipped
        ],
        "saved_at": _text(entry.get("saved_at")),
    }


def checked_report(document: Any) -> dict[str, Any]:
    """The parts of a hibernation report the hub uses; ValueError when ``document`` is not one."""
    if not isinstance(document, Mapping) or not isinstance(document.get("kernels"), list):
        raise ValueError("not a hibernation report")
    return {
        "started_at": _text(document.get("started_at")),
        "seconds": float(document.get("seconds") or 0),
        "saved_bytes": _count(document.get("saved_bytes", 0)),
        "kernels": [_kernel(entry) for entry in document["kernels"]],
    }


def _problem_of(error: HTTPClientError, timeout: float) -> str:
    if error.code == 599:
        return f"the server gave no answer within {timeout:g} s"
    if error.code == 404:
        return "hibernation is turned off on this server"
    if error.code in (401, 403):
        return "the server refused the fracnb service's credentials"
    return f"the server answered with HTTP status {error.code}"


async def ask_to_hibernate(
    url: str, token: str, settings: HibernationSettings, *, stop: str, http: AsyncHTTPClient | None = None
) -> Hibernation:
    """POST the hibernation request to the server at ``url`` (its base URL) with ``token``, saying why it is about
    to be stopped (``stop``: "user", or the cull's reason) in the query, where a meter that does not read it
    ignores it (the body's schema refuses any field it does not know)."""
    started = time.monotonic()

    def failed(problem: str, *, turned_off: bool = False) -> Hibernation:
        return Hibernation(None, problem, time.monotonic() - started, turned_off=turned_off)

    timeout = settings.timeout + HTTP_MARGIN_SECONDS
    request = HTTPRequest(
        url.rstrip("/") + "/" + ENDPOINT + "?" + urlencode({"stop": stop}),
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        body=json.dumps(settings.request_body()),
        connect_timeout=min(timeout, 10),
        request_timeout=timeout,
    )
    client = http or AsyncHTTPClient()
    try:
        response = await client.fetch(request)
        report = checked_report(json.loads(response.body))
    except HTTPClientError as error:
        return Hibernation(None, _problem_of(error, timeout), time.monotonic() - started, turned_off=error.code == 404)
    except (ValueError, TypeError):
        return Hibernation(None, "the server's answer was not a hibernation report", time.monotonic() - started)
    except OSError as error:
        return Hibernation(
            None, f"the server could not be reached ({error.strerror or error})", time.monotonic() - started
        )
    return Hibernation(report, None, time.monotonic() - started)
