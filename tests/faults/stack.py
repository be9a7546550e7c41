"""A hub stack the fault tests can kill: JupyterHub with configurable-http-proxy, FractionalSpawner and
the fracnb service (the demo's, :mod:`fracnb_testbed.demo`) on the ``faults`` cluster, with real
notebook servers on its local nodes; and the invariants every fault test checks afterwards.

A hub "killed" here is what happens to a hub pod's container: SIGKILL to the hub and every process
it started (the proxy and the fracnb service run in sessions of their own, so a signal to the
hub's process group would miss them).
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import secrets
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from fracnb_spawner.common.podkeys import (
    FRACTION_ANNOTATION,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    has_queue_gate,
)
from fracnb_testbed import hubproc
from fracnb_testbed.demo import RunningDemo, start_hub
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import descendants, wait_until
from tests.e2e.stack import demo_with_fake_gpu, request
from tests.gpu_jobs import SHARED, gpu_job

TOKEN = secrets.token_hex(16)
GPU_NODE = "local-a100-ts4-0"  # the faults cluster's local A100, time-sliced 4 ways
SINGLEUSER = "component=singleuser-server"
# Users and groups: team-a shares half a GPU (the demo's quota), the others have half a GPU each.
USERS = {
    "ann": ["team-a"],
    "bob": ["team-a"],
    "carol": ["team-b"],
    "dan": ["team-b"],
    "eve": ["team-b"],
    "fay": ["team-b"],
    "admin": [],
}

# A spawn of a user with a file "<user>.before" in the hold directory waits, just before its pod is
# created, until the file is gone; with "<user>.after", just after. It touches "<user>.<when>.reached"
# when it gets there.
HOLD_HOOK = """
async def _fault_hold(spawner, when):
    import asyncio, pathlib
    hold = pathlib.Path({hold!r}) / f"{{spawner.user.name}}.{{when}}"
    if hold.exists():
        pathlib.Path(f"{{hold}}.reached").touch()
    while hold.exists():
        await asyncio.sleep(0.2)

async def _hold_before(spawner, pod):
    await _fault_hold(spawner, "before")
    return pod

async def _hold_after(spawner, pod):
    await _fault_hold(spawner, "after")

c.KubeSpawner.modify_pod_hook = _hold_before
c.KubeSpawner.after_pod_created_hook = _hold_after
"""


def stack_config(hold_dir: Path, extra: str = "") -> str:
    lines = [
        # As in Zero-to-JupyterHub: a hub that stops leaves the servers (and queued pods) in place.
        "c.JupyterHub.cleanup_servers = False",
        f"c.JupyterHub.services = [{{'name': 'faults', 'api_token': {TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'faults', 'scopes': ['admin:users', 'admin:servers', 'tokens',"
        " 'admin-ui', 'access:services'], 'services': ['faults']}]",
        "c.Spawner.http_timeout = 60",
        # A start request answers after 1 s rather than 10 (the spawn goes on): quicker tests, same spawns.
        "c.JupyterHub.tornado_settings = {'slow_spawn_timeout': 1, 'slow_stop_timeout': 1}",
        "c.FracnbService.resume_every = 2",
        # The faults' stops are timed as plain stops: saving at a user's stop (on by default) is tested in
        # tests/e2e and tests/history, and here it would wait for servers a fault left unable to answer.
        "c.FractionalSpawner.hibernate_on_stop = False",
        # The hub notices a dead managed service within a few seconds and starts it again.
        "c.Spawner.poll_interval = 5",
        HOLD_HOOK.format(hold=str(hold_dir)),
        extra,
    ]
    return "\n".join(lines)


@dataclass
class FaultStack:
    demo: RunningDemo
    testbed: Testbed
    hold_dir: Path

    @property
    def namespace(self) -> str:
        return self.demo.settings.namespace

    @property
    def url(self) -> str:
        return self.demo.settings.url

    # ---- the hub's and the service's APIs ------------------------------------------------------

    def request(self, path: str, *, method: str = "GET", body: Any = None, token: str = TOKEN) -> tuple[int, Any]:
        return request(self.demo, path, token, method=method, body=body)

    def call(self, path: str, *, method: str = "GET", body: Any = None, token: str = TOKEN) -> Any:
        status, answer = self.request(path, method=method, body=body, token=token)
        assert status < 400, f"{method} {path}: {status} {answer}"
        return answer

    def text(self, path: str, token: str = TOKEN) -> str:
        """A plain-text answer (a service's /metrics)."""
        sent = urllib.request.Request(f"{self.url}/{path}", headers={"Authorization": f"token {token}"})  # noqa: S310
        with urllib.request.urlopen(sent, timeout=30) as answer:  # noqa: S310
            return answer.read().decode()

    def server(self, user: str, name: str = "") -> dict[str, Any] | None:
        """The hub's model of a user's server, None when the hub lists none (stopped, or forgotten)."""
        return (self.call(f"hub/api/users/{user}")["servers"] or {}).get(name)

    def start(self, user: str, profile: str = "quarter") -> None:
        self.call(f"hub/api/users/{user}/server", method="POST", body={"profile": profile})

    def stop(self, user: str) -> int:
        status, _ = self.request(f"hub/api/users/{user}/server", method="DELETE")
        return status

    def wait_ready(self, user: str, timeout: float = 180) -> None:
        wait_until(
            lambda: (self.server(user) or {}).get("ready"), what=f"{user}'s server ready", timeout=timeout, interval=1
        )

    def wait_stopped(self, user: str, timeout: float = 120) -> None:
        wait_until(lambda: self.server(user) is None, what=f"{user}'s server gone", timeout=timeout, interval=1)

    def user_token(self, user: str) -> str:
        body = {"note": "faults", "expires_in": 3600}
        return self.call(f"hub/api/users/{user}/tokens", method="POST", body=body)["token"]

    def hub_up(self) -> bool:
        with suppress(OSError, urllib.error.URLError):
            urllib.request.urlopen(f"{self.url}/hub/health", timeout=2).close()  # noqa: S310
            return True
        return False

    # ---- killing and starting the hub and the service ------------------------------------------

    def kill_hub(self) -> None:
        """SIGKILL the hub and everything it started (proxy, fracnb service), as a killed hub pod."""
        hub = self.demo.hub
        pids = [hub.pid, *descendants(hub.pid)]
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        hub.wait(30)
        wait_until(lambda: not any(alive(pid) for pid in pids), what="the hub's processes to die", timeout=30)

    def start_hub(self) -> None:
        self.demo.hub = start_hub(self.demo.settings, self.demo.log_file)
        hubproc.wait_ready(self.url, self.demo.hub, self.demo.log_file)

    def service_pid(self) -> int | None:
        for pid in descendants(self.demo.hub.pid):
            with suppress(OSError):
                if b"fracnb_spawner.service" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        return None

    def kill_service(self) -> int:
        """SIGKILL the fracnb service; the hub starts it again when its poll notices."""
        pid = self.service_pid()
        assert pid is not None, "the fracnb service is not running"
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_service_back(self, killed: int, timeout: float = 90) -> None:
        token = self.user_token("admin")

        def answers() -> bool:
            pid = self.service_pid()
            if pid in (None, killed):
                return False
            with suppress(ValueError):  # the proxy's error page while the service is away
                return self.request("services/fracnb/api/me", token=token)[0] == 200
            return False

        wait_until(answers, what="the hub to start the fracnb service again", timeout=timeout, interval=0.5)

    def hub_log(self) -> str:
        return self.demo.log_file.read_text(errors="replace")

    # ---- the cluster -----------------------------------------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        """The hub's singleuser pods in the stack's namespace, those being deleted left out."""
        items = self.testbed.get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={SINGLEUSER}")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def pod_of(self, user: str) -> dict[str, Any] | None:
        return next((p for p in self.pods() if p["metadata"]["name"] == f"jupyter-{user}"), None)

    def gated(self, user: str) -> bool:
        pod = self.pod_of(user)
        return pod is not None and has_queue_gate(pod)

    def slots_in_use(self) -> int:
        """0.25 slots of the local A100 held by pods bound to it."""
        pods = self.testbed.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{GPU_NODE}")["items"]
        return sum(
            int((container.get("resources") or {}).get("limits", {}).get(SHARED, 0))
            for pod in pods
            if pod["status"].get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp")
            for container in pod["spec"]["containers"]
        )

    def fill(self, slots: int) -> list[str]:
        """Filler jobs (not hub servers) on ``slots`` of the local A100's quarter slots."""
        names = [f"gpu-job-{secrets.token_hex(3)}" for _ in range(slots)]
        before = self.slots_in_use()
        for name in names:
            self.testbed.create_pod(self.namespace, gpu_job(name))
        wait_until(lambda: self.slots_in_use() == before + slots, what="the fillers placed", timeout=60, interval=0.5)
        return names

    def free(self, name: str) -> None:
        self.testbed.delete_pod(self.namespace, name, grace_seconds=0)

    def hold(self, user: str, when: str) -> None:
        """Hold ``user``'s next spawn ``when`` ("before" or "after") its pod is created."""
        (self.hold_dir / f"{user}.{when}").touch()

    def release(self, user: str, when: str) -> None:
        (self.hold_dir / f"{user}.{when}").unlink(missing_ok=True)

    def reached_hold(self, user: str, when: str) -> bool:
        return (self.hold_dir / f"{user}.{when}.reached").exists()

    # ---- the invariants --------------------------------------------------------------------------

    def quota_lines(self, user: str) -> dict[str, Fraction]:
        """What the hub's spawn form says is in use of each quota of ``user`` (theirs: "", their groups' by
        name): the hub's quota ledger and its pod reflector together. Read for a user without a server
        (the form of a running server redirects to it)."""
        html = self.page(f"hub/spawn/{user}")
        assert "data-fracnb-profile" in html, f"no spawn form for {user}"
        found = re.findall(r"(Your GPU quota|\S+ \(your team, together\)): ([\d.]+) of", html)
        return {"" if who == "Your GPU quota" else who.split()[0]: Fraction(used) for who, used in found}

    def page(self, path: str) -> str:
        """A hub page as the hub's admin user sees it (logged in through the login form: pages take no token)."""
        if not hasattr(self, "_browser"):
            jar = http.cookiejar.CookieJar()
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
            opener.open(f"{self.url}/hub/login", timeout=60).close()
            xsrf = next(cookie.value for cookie in jar if cookie.name == "_xsrf")
            form = {"username": "admin", "password": self.demo.settings.password, "_xsrf": xsrf}
            opener.open(f"{self.url}/hub/login", data=urllib.parse.urlencode(form).encode(), timeout=60).close()
            self._browser = opener
        with self._browser.open(f"{self.url}/{path}", timeout=60) as answer:
            text = answer.read().decode()
        assert 'id="login_submit"' not in text, f"not logged in to the hub for {path}"
        return text

    def problems(self) -> list[str]:
        """What breaks the invariants now: pods without a server, servers without a pod, gated pods nobody
        waits on, and quota the hub counts that no pod holds."""
        servers = {}
        for user in self._users():
            for name, model in (user.get("servers") or {}).items():
                servers[(user["name"], name)] = model
        pods = {}
        for pod in self.pods():
            annotations = pod["metadata"].get("annotations") or {}
            pods[(annotations.get(USERNAME_ANNOTATION), annotations.get(SERVERNAME_ANNOTATION, ""))] = pod
        found = pairing_problems(servers, pods)
        if any(m.get("pending") for m in servers.values()):
            return [*found, "a spawn or stop is pending"]
        return found + self.quota_problems(servers, pods)

    def quota_problems(self, servers: dict[tuple, Any], pods: dict[tuple, Any]) -> list[str]:
        held = {user: Fraction(0) for user in USERS}
        for (user, _server), pod in pods.items():
            held[user] += Fraction(pod["metadata"]["annotations"].get(FRACTION_ANNOTATION, "0"))
        found = []
        for user in USERS:
            if any(key[0] == user for key in servers):
                continue
            for who, counted in self.quota_lines(user).items():
                members = [user] if not who else [u for u, groups in USERS.items() if who in groups]
                expected = sum((held[m] for m in members), Fraction(0))
                if counted != expected:
                    found.append(f"the hub counts {counted} GPU in use for {who or user}, the pods hold {expected}")
        return found

    def _users(self) -> list[dict[str, Any]]:
        status, answer = self.request("hub/api/users?state=active")
        assert status == 200, answer
        return answer if isinstance(answer, list) else answer["items"]

    def assert_invariants(self, timeout: float = 60) -> None:
        """The invariants hold (waiting up to ``timeout`` for the hub to settle)."""
        last: list[str] = []

        def holds() -> bool:
            nonlocal last
            last = self.problems()
            return not last

        try:
            wait_until(holds, what="the invariants", timeout=timeout, interval=1)
        except Exception as error:
            raise AssertionError(f"invariants broken: {last}") from error


def pairing_problems(servers: dict[tuple, Any], pods: dict[tuple, Any]) -> list[str]:
    found = []
    for key, pod in pods.items():
        model = servers.get(key)
        if model is None:
            found.append(f"pod {pod['metadata']['name']} has no server in the hub")
        elif has_queue_gate(pod) and model.get("pending") != "spawn":
            found.append(f"gated pod {pod['metadata']['name']} with no spawn waiting on it")
    for key, model in servers.items():
        if model.get("ready") and key not in pods:
            found.append(f"server {key} is ready without a pod")
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextmanager
def fault_stack(testbed: Testbed, state_dir: Path, extra: str = "", **settings: Any) -> Iterator[FaultStack]:
    hold_dir = state_dir / "hold"
    hold_dir.mkdir(parents=True, exist_ok=True)
    config = stack_config(hold_dir, extra)
    with demo_with_fake_gpu(testbed, state_dir, extra_config=config, users=dict(USERS), **settings) as running:
        stack = FaultStack(running, testbed, hold_dir)
        try:
            yield stack
        finally:
            for entry in hold_dir.iterdir():
                entry.unlink()
            if running.hub.poll() is None:
                hubproc.stop(running.hub)  # the hub a test started again
