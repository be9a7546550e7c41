"""The meter's calls to the hub and its service (fracnb_meter.hubcalls), against a real local HTTP
server whose answer each test sets: what a caller gets back, and what reaches the log."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fracnb_meter.hubcalls import JsonPoster, ThrottledGet, get_blocking


@dataclass
class Endpoint:
    """Answers every request with ``status`` and ``body``; records the requests."""

    server: ThreadingHTTPServer
    status: int = 200
    body: bytes = b"{}"
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)  # method, Authorization, body

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    holder: list[Endpoint] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            state = holder[0]
            state.requests.append((self.command, self.headers.get("Authorization", ""), self.rfile.read(length)))
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Endpoint(server))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


def warnings_and_infos(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "fracnb_meter.hubcalls"]


async def test_a_post_failing_for_a_while_is_logged_once_and_its_end_once(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fracnb_meter.hubcalls")
    poster = JsonPoster(endpoint.url, "secret", what="report something to the hub")
    endpoint.status = 503
    assert [await poster.post({"n": n}) for n in range(3)] == [False, False, False]
    endpoint.status = 200
    assert await poster.post({"n": 3}) is True
    assert await poster.post({"n": 4}) is True
    logged = warnings_and_infos(caplog)
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO]
    assert logged[0][1].startswith("fracnb_meter: could not report something to the hub (HTTP 503")
    assert logged[1][1] == "fracnb_meter: able to report something to the hub again"
    assert [(m, a, json.loads(b)) for m, a, b in endpoint.requests][-1] == ("POST", "token secret", {"n": 4})


async def test_without_a_url_nothing_is_posted(endpoint: Endpoint) -> None:
    poster = JsonPoster("", "secret", what="report")
    assert not poster.enabled
    assert await poster.post({}) is False
    assert endpoint.requests == []


def parse_number(body: bytes) -> tuple[int, str | None]:
    document = json.loads(body)
    return (document, None) if isinstance(document, int) else (-1, f"{document!r} is not a number")


async def test_a_get_is_asked_at_most_every_interval_and_falls_back(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    get = ThrottledGet((endpoint.url, {}), 10.0, parse_number, -1, what="number", clock=lambda: now[0])
    endpoint.body = b"7"
    assert await get.latest() == 7
    endpoint.body = b"8"
    now[0] = 9.9
    assert await get.latest() == 7, "within the interval: the answer kept, no request"
    assert len(endpoint.requests) == 1
    now[0] = 10.0
    assert await get.latest() == 8
    endpoint.status = 500
    now[0] = 20.0
    assert await get.latest() == -1, "a failing service: the fallback, not the last answer"
    endpoint.status, endpoint.body = 200, b'"eight"'
    for moment in (30.0, 40.0):
        now[0] = moment
        assert await get.latest() == -1
    assert warnings_and_infos(caplog) == [
        (logging.WARNING, "fracnb_meter: ignoring the fracnb service's number, 'eight' is not a number")
    ], "one line per kind of problem, not one per poll"
    assert not ThrottledGet(None, 1.0, parse_number, -1, what="number").enabled


def test_the_widgets_blocking_get(endpoint: Endpoint) -> None:
    endpoint.body = b"42"
    assert get_blocking((endpoint.url, {"Authorization": "token t"})) == b"42"
    assert endpoint.requests[-1][:2] == ("GET", "token t")
    endpoint.status = 404
    assert get_blocking((endpoint.url, {})) is None
    assert get_blocking(None) is None
