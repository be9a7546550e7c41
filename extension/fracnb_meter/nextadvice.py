"""The user's advice for next time, from the hub's fracnb service, for the panel and the widget.

The service answers ``GET {FRACNB_SERVICE_URL}api/advice?profile=<FRACNB_PROFILE>&choice=<FRACNB_CHOICE>``
for the server's own token (``JUPYTERHUB_API_TOKEN``) with the spawn form's advice on this
server's choice, from the user's own sessions (schemas/service-advice.schema.json, checked here
on receipt). The meter computes no advice itself. Anything going wrong (no service, no answer, a
shape this version does not know) means no advice: the usage document's ``advice`` is null and
the panel and the widget say nothing about it.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.error import URLError
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from .schema import SERVICE_ADVICE, check

log = logging.getLogger(__name__)

Advice = dict[str, Any] | None


def advice_request(
    service_url: str, token: str, profile: str | None, choice: str | None
) -> tuple[str, dict[str, str]] | None:
    """The URL and headers of the request, or None when there is nothing to ask (no service, no GPU profile)."""
    if not service_url.startswith(("http://", "https://")) or not token or not profile:
        return None
    query = urlencode({"profile": profile, "choice": choice or ""})
    return f"{service_url.rstrip('/')}/api/advice?{query}", {
        "Authorization": f"token {token}",
        "Accept": "application/json",
    }


def parse_advice(body: bytes) -> tuple[Advice, str | None]:
    """The advice in an answer's body, or None and why."""
    try:
        document = json.loads(body)
        check(SERVICE_ADVICE, document)
    except ValueError as error:  # bad JSON, or a SchemaMismatchError
        return None, str(error)
    return document, None


def fetch_advice_blocking(request: tuple[str, dict[str, str]] | None, timeout: float = 3.0) -> Advice:
    """For the in-kernel widget's thread."""
    if request is None:
        return None
    url, headers = request
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as answer:  # noqa: S310 - http(s) only
            return parse_advice(answer.read())[0]
    except (URLError, OSError, ValueError):
        return None


class ServiceAdvice:
    """For the server extension: the latest advice, asked again at most every ``min_interval`` seconds.

    The advice changes only when this server's (or another of the user's) sessions are reported,
    every ``FracnbMeter.session_report_interval`` seconds: asking more often gains nothing.
    """

    def __init__(self, request: tuple[str, dict[str, str]] | None, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._request = request
        self._min_interval = min_interval
        self._clock = clock
        self._fetched_at: float | None = None
        self._advice: Advice = None
        self._problem: str | None = None

    async def latest(self) -> Advice:
        if self._request is None:
            return None
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._min_interval:
            return self._advice
        self._fetched_at = now
        url, headers = self._request
        try:
            answer = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=3.0)
        except (HTTPClientError, OSError, ValueError):
            self._advice = None
            return None
        self._advice, problem = parse_advice(answer.body)
        if problem and problem != self._problem:  # once per kind of answer, not every poll
            log.warning("fracnb_meter: ignoring the fracnb service's advice, %s", problem)
        self._problem = problem
        return self._advice
