"""Calls from this server to JupyterHub and to the hub's fracnb service, all of them best effort.

The meter never fails because the hub does not answer, and it does not fill the log while the hub
is away:

- :class:`JsonPoster` posts a JSON document with the server's token (activity, session reports).
  A failing endpoint is logged once per outage, and once more when it answers again.
- :class:`ThrottledGet` asks at most every ``min_interval`` seconds and keeps the latest answer,
  parsed (quota and culling status, advice). Anything going wrong gives the fallback value; an
  answer this version cannot understand is logged once per kind of problem, not every poll.
- :func:`get_blocking` is the in-kernel widget's one-off GET, from its own thread.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar
from urllib.error import URLError

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

log = logging.getLogger(__name__)

T = TypeVar("T")
Request = tuple[str, dict[str, str]]  # URL and headers
Parse = Callable[[bytes], tuple[T, str | None]]  # an answer's body -> (value, or the fallback and why)


def service_endpoint(service_url: str, path: str) -> str:
    """``path`` of the hub's fracnb service (FRACNB_SERVICE_URL), or "" when there is no usable service URL."""
    if not service_url.startswith(("http://", "https://")):
        return ""
    return service_url.rstrip("/") + "/" + path


class JsonPoster:
    """POSTs documents to one URL with a token; a no-op without a URL."""

    def __init__(self, url: str, token: str, *, what: str, request_timeout: float = 5.0) -> None:
        """``what`` completes "could not ..." in the log: "report activity to the hub"."""
        self._url = url
        self._token = token
        self._what = what
        self._request_timeout = request_timeout
        self._failing = False

    @property
    def enabled(self) -> bool:
        return bool(self._url)

    async def post(self, document: Mapping[str, Any]) -> bool:
        """True if the endpoint took the document; never raises for a failing endpoint."""
        return await self.post_for_answer(document) is not None

    async def post_for_answer(self, document: Mapping[str, Any]) -> bytes | None:
        """The answer's body (b"" for none) if the endpoint took the document, else None; never raises for a
        failing endpoint."""
        if not self.enabled:
            return None
        try:
            answer = await AsyncHTTPClient().fetch(
                self._url,
                method="POST",
                headers={"Authorization": f"token {self._token}", "Content-Type": "application/json"},
                body=json.dumps(document),
                request_timeout=self._request_timeout,
            )
        except (HTTPClientError, OSError, ValueError) as error:
            if not self._failing:  # once per outage, not every interval
                log.warning("fracnb_meter: could not %s (%s); retrying", self._what, error)
            self._failing = True
            return None
        if self._failing:
            log.info("fracnb_meter: able to %s again", self._what)
        self._failing = False
        return answer.body or b""


class ThrottledGet(Generic[T]):
    """The latest parsed answer of a GET, asked again at most every ``min_interval`` seconds."""

    def __init__(
        self,
        request: Request | None,
        min_interval: float,
        parse: Parse[T],
        fallback: T,
        *,
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``request`` None: nothing to ask, always ``fallback``. ``what`` names the answer in the log."""
        self._request = request
        self._min_interval = min_interval
        self._parse = parse
        self._fallback = fallback
        self._what = what
        self._clock = clock
        self._fetched_at: float | None = None
        self._value: T = fallback
        self._problem: str | None = None

    @property
    def enabled(self) -> bool:
        return self._request is not None

    async def latest(self) -> T:
        if self._request is None:
            return self._fallback
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._min_interval:
            return self._value
        self._fetched_at = now
        url, headers = self._request
        try:
            answer = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=3.0)
        except (HTTPClientError, OSError, ValueError):
            self._value = self._fallback
            return self._value
        self._value, problem = self._parse(answer.body)
        if problem and problem != self._problem:  # once per kind of answer, not every poll
            log.warning("fracnb_meter: ignoring the fracnb service's %s, %s", self._what, problem)
        self._problem = problem
        return self._value


def get_blocking(request: Request | None, timeout: float = 3.0) -> bytes | None:
    """The body of a GET, or None when there is nothing to ask or no usable answer (for the widget's thread)."""
    if request is None:
        return None
    url, headers = request
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as answer:  # noqa: S310 - http(s) only, checked by the callers
            return answer.read()
    except (URLError, OSError, ValueError):
        return None
