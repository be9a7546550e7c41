"""The meter reports this server's activity to the hub itself, soon after it happens.

The hub's side is a stand-in that records what JupyterHub's activity API
(``POST /hub/api/users/<name>/activity``) would receive; that the real hub takes it is tested
end to end in tests/e2e/test_culling_browser.py.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from fracnb_meter.activity import HubActivity, activity_body, isoformat
from fracnb_meter.testing.server import MeterServer, start_server
from fracnb_testbed.procs import wait_until


@dataclass
class ActivityRecorder:
    """Records the activity posts it receives: (Authorization header, decoded body)."""

    server: ThreadingHTTPServer
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hub/api/users/ann/activity"

    def stamps(self, server_name: str) -> list[datetime]:
        return [datetime.fromisoformat(body["servers"][server_name]["last_activity"]) for _, body in self.posts]


@pytest.fixture
def recorder() -> Iterator[ActivityRecorder]:
    posts: list[tuple[str, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            posts.append((self.headers.get("Authorization", ""), json.loads(self.rfile.read(length))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ActivityRecorder(server, posts)
    finally:
        server.shutdown()
        server.server_close()


def test_activity_body_is_the_hubs_shape_with_utc_z_timestamps() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=timezone.utc)
    stamp = "2026-03-01T12:00:05.250000Z"
    assert activity_body("gpu", moment) == {"servers": {"gpu": {"last_activity": stamp}}, "last_activity": stamp}
    assert isoformat(moment.replace(tzinfo=None)) == stamp  # naive is UTC, as in jupyter_server


async def test_without_jupyterhub_nothing_is_posted() -> None:
    now = datetime.now(timezone.utc)
    for url, token in (("", "token"), ("http://127.0.0.1:1/hub/api/users/a/activity", ""), ("file:///x", "t")):
        activity = HubActivity(url, token, "")
        assert not activity.enabled
        assert await activity.report(now) is False


async def test_an_unreachable_hub_is_retried_with_the_same_activity(recorder: ActivityRecorder) -> None:
    now = datetime.now(timezone.utc)
    unreachable = HubActivity("http://127.0.0.1:1/hub/api/users/ann/activity", "t", "")
    assert await unreachable.report(now) is False
    assert unreachable.is_new(now)  # not marked as sent: the next interval tries again
    reachable = HubActivity(recorder.url, "t", "")
    assert await reachable.report(now) is True
    assert await reachable.report(now) is False  # nothing newer
    assert len(recorder.posts) == 1


@pytest.fixture
def reporting_server(
    fake_nvml_library: Path, tmp_path: Path, recorder: ActivityRecorder
) -> Iterator[tuple[MeterServer, str]]:
    """A server with the activity settings JupyterHub gives a single-user server, pointing at
    ``recorder``; and its hub token."""
    token = "server-token-" + secrets.token_hex(4)
    server = start_server(
        tmp_path,
        fake_nvml_library,
        None,
        meter_config={"activity_interval": 0.5},
        extra_env={
            "JUPYTERHUB_ACTIVITY_URL": recorder.url,
            "JUPYTERHUB_API_TOKEN": token,
            "JUPYTERHUB_SERVER_NAME": "gpu",
        },
    )
    yield server, token
    server.stop()


def test_a_silent_busy_kernel_reaches_the_hub_within_the_activity_interval(
    reporting_server: tuple[MeterServer, str], recorder: ActivityRecorder
) -> None:
    server, token = reporting_server
    kernel_id = server.start_session("train.ipynb")
    client = server.client(kernel_id)
    # The kernel's start was activity: it is reported without anyone polling the server.
    wait_until(lambda: recorder.posts, what="a first activity report", timeout=30)
    client.execute("import time; time.sleep(6)")  # silent: one "busy" status message, then nothing
    started = datetime.now(timezone.utc)
    # No request reaches the server and the kernel says nothing, yet the hub keeps hearing of activity.
    wait_until(
        lambda: any((stamp - started).total_seconds() > 2 for stamp in recorder.stamps("gpu")),
        what="activity reported from the middle of the silent cell",
        timeout=30,
    )
    client.get_shell_msg(timeout=30)  # the cell finished
    assert {auth for auth, _ in recorder.posts} == {f"token {token}"}
    stamps = recorder.stamps("gpu")
    assert all(earlier < later for earlier, later in pairwise(stamps)), "only newer activity"
    assert all(body["last_activity"] == body["servers"]["gpu"]["last_activity"] for _, body in recorder.posts)
