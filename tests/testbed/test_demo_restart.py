"""The README's main command, run as a researcher does: the demo comes up, Ctrl-C (or a kill) stops it, and
it comes up again, any number of times. A file saved in a user's server survives a stop/start
of that server and a restart of the demo, until ``--reset-homes``.

Heavy (two demo starts): the whole stack runs as ``python -m fracnb_testbed.demo``, the
program ``./dev demo`` runs.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from fracnb_testbed.controlplane import down
from fracnb_testbed.demo import DEMO_PASSWORD, cluster_dir, free_port, homes_dir
from fracnb_testbed.hubapi import token_request
from fracnb_testbed.hubproc import pid_file
from fracnb_testbed.procs import ProcessRecord, is_alive, log_tail, start_ticks_of, wait_until
from fracnb_testbed.state import STATE_FILE, TestbedState, load_runner_children

pytestmark = pytest.mark.k8s

READY = "fracnb demo running at"
START_TIMEOUT = 300.0  # two busy cores: the cluster, the fake GPU build and the hub
SPAWN_TIMEOUT = 180.0
SAVED = "notes/saved.txt"


class DemoProcess:
    """One run of the demo command, in its own process group as a terminal's foreground job."""

    def __init__(self, state_dir: Path, port: int, log: Path, *extra: str) -> None:
        self.state_dir, self.log = state_dir, log
        self.url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "fracnb_testbed.demo", "--state-dir", str(state_dir), "--port", str(port)]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [*argv, *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"the demo exited with {self.process.returncode}:\n{log_tail(self.log, 40)}")
            return READY in self.output()

        wait_until(ready, what="the demo to announce itself", timeout=START_TIMEOUT, interval=0.3)
        with urllib.request.urlopen(f"{self.url}/hub/health", timeout=10) as response:  # noqa: S310
            assert response.status == 200

    def our_processes(self) -> list[ProcessRecord]:
        """The hub, the testbed's processes and the pod processes while the demo runs."""
        hub = int(pid_file(self.state_dir).read_text())
        state = TestbedState.load(cluster_dir(self.state_dir))
        return [
            ProcessRecord("jupyterhub", hub, start_ticks_of(hub) or 0, ""),
            *state.processes,
            *load_runner_children(state.directory),
        ]

    def press_ctrl_c(self, timeout: float = 180) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout)

    def kill(self) -> None:
        """Teardown after a failure: stop it as Ctrl-C would, then whatever it left."""
        if self.process.poll() is None:
            with suppress(subprocess.TimeoutExpired):
                self.press_ctrl_c()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if (cluster_dir(self.state_dir) / STATE_FILE).exists():
            down(cluster_dir(self.state_dir), keep_files=True)


@contextmanager
def demo_run(state_dir: Path, log: Path, *extra: str) -> Iterator[DemoProcess]:
    demo = DemoProcess(state_dir, free_port(), log, *extra)
    try:
        demo.wait_ready()
        yield demo
    finally:
        demo.kill()


class Hub:
    """The demo hub's REST API as the admin, and the contents API of a user's server."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.token = self._admin_token()

    def _admin_token(self) -> str:
        """Log in with the demo password (the login form needs the XSRF cookie) and make a token."""
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

        def xsrf() -> str:
            return next(cookie.value for cookie in jar if cookie.name == "_xsrf")

        browser.open(f"{self.url}/hub/login", timeout=30).close()
        form = {"username": "admin", "password": DEMO_PASSWORD, "_xsrf": xsrf()}
        browser.open(
            f"{self.url}/hub/login?next=%2Fhub%2Fhome", urllib.parse.urlencode(form).encode(), timeout=30
        ).close()
        # Logging in starts a session with a new XSRF token.
        request = urllib.request.Request(  # noqa: S310
            f"{self.url}/hub/api/users/admin/tokens",
            data=json.dumps({"note": "demo restart test", "expires_in": 3600}).encode(),
            headers={"X-XSRFToken": xsrf(), "Content-Type": "application/json"},
            method="POST",
        )
        with browser.open(request, timeout=30) as response:
            return json.loads(response.read())["token"]

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return token_request(f"{self.url}{path}", self.token, method=method, body=body, timeout=60)

    def server(self, user: str) -> dict[str, Any] | None:
        status, model = self.call("GET", f"/hub/api/users/{user}")
        assert status == 200, model
        return model["servers"].get("")

    def start(self, user: str) -> None:
        status, answer = self.call("POST", f"/hub/api/users/{user}/server", {"profile": "cpu"})
        assert status in (201, 202), answer
        wait_until(
            lambda: (self.server(user) or {}).get("ready"),
            what=f"{user}'s server to be ready",
            timeout=SPAWN_TIMEOUT,
            interval=0.3,
        )

    def stop(self, user: str) -> None:
        status, answer = self.call("DELETE", f"/hub/api/users/{user}/server")
        assert status in (202, 204), answer
        wait_until(
            lambda: self.server(user) is None, what=f"{user}'s server to stop", timeout=SPAWN_TIMEOUT, interval=0.3
        )

    def save(self, user: str, path: str, text: str) -> None:
        folder = path.rsplit("/", 1)[0]
        status, answer = self.call("PUT", f"/user/{user}/api/contents/{folder}", {"type": "directory"})
        assert status in (200, 201), answer
        body = {"type": "file", "format": "text", "content": text}
        status, answer = self.call("PUT", f"/user/{user}/api/contents/{path}", body)
        assert status in (200, 201), answer

    def read(self, user: str, path: str) -> str | None:
        """The file's text as the user's server sees it; None when it does not exist."""
        status, answer = self.call("GET", f"/user/{user}/api/contents/{path}?type=file&format=text")
        if status == 404:
            return None
        assert status == 200, answer
        return answer["content"]


def assert_stopped_cleanly(demo: DemoProcess) -> None:
    ours = demo.our_processes()
    assert demo.press_ctrl_c() == 0, log_tail(demo.log, 40)
    assert "[demo] stopped" in demo.output()
    assert [record.name for record in ours if is_alive(record)] == []
    assert not (cluster_dir(demo.state_dir) / STATE_FILE).exists()


def kill_outright(demo: DemoProcess) -> list[ProcessRecord]:
    """``kill -9`` of the demo: its hub and cluster, in sessions of their own, go on running."""
    left = demo.our_processes()
    os.killpg(demo.process.pid, signal.SIGKILL)
    demo.process.wait()
    assert [record.name for record in left if not is_alive(record)] == []
    return left


def test_demo_starts_again_after_a_kill_keeps_homes_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """Two starts: the first is killed outright, the second cleans up after it and stops on Ctrl-C. A start
    after a Ctrl-C takes the same path as this second one (the cluster's files kept, a new cluster started
    in them), and --reset-homes is tested without a cluster in test_startup_errors."""
    state_dir = tmp_path / "demo"
    text = f"saved before the restart {time.time()}"

    first = DemoProcess(state_dir, free_port(), tmp_path / "first.log")
    left: list[ProcessRecord] = []
    try:
        first.wait_ready()
        hub = Hub(first.url)
        hub.start("ann")
        hub.save("ann", SAVED, text)
        hub.stop("ann")  # "Stop My Server" (or an idle cull)
        hub.start("ann")
        assert hub.read("ann", SAVED) == text
        # Kept like a z2jh PVC: one home per namespace and user, outside the cluster's files.
        assert (homes_dir(state_dir) / "fracnb-demo" / "ann" / SAVED).read_text() == text
        left = kill_outright(first)

        # Before the fix this start died in seconds: creating Node 'a100-ts4-0' failed (409).
        with demo_run(state_dir, tmp_path / "second.log") as second:
            assert "stopping the JupyterHub a previous demo left running" in second.output()
            assert "stopping the testbed a previous demo left running" in second.output()
            assert [record.name for record in left if is_alive(record)] == []
            hub = Hub(second.url)
            hub.start("ann")
            assert hub.read("ann", SAVED) == text
            assert_stopped_cleanly(second)
    finally:
        first.kill()
        for record in left:
            if is_alive(record):
                os.killpg(record.pid, signal.SIGKILL)
