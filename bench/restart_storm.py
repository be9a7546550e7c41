"""The hub killed and started again under load: 200 users with running servers, 50 spawns queued for a GPU.

    python -m bench.restart_storm [--running 200] [--queued 50] [--in-order 10]

A real JupyterHub with configurable-http-proxy, FractionalSpawner and the fracnb service (the demo's
configuration, :mod:`fracnb_testbed.demo`) on a testbed whose local nodes run each pod as a process:
two nodes with ``running / 2`` quarter-GPU slots each. Every server is a stand-in HTTP server (one
small Python process per pod, answering where jupyterhub-singleuser would): what a restart does to
the hub depends on the pods and on the servers answering, not on what they serve. ``running`` users
start a 0.25 GPU server and fill every slot; ``queued`` more queue, one after the other.

Then the hub, its proxy and the fracnb service are killed with SIGKILL (as a hub pod dies) and the
hub is started again. Measured from the kill:

- the hub answering again;
- every running server listed ready by the hub, once, each with its pod, and the spawn form (of a
  user without a server) counting every slot taken and every waiting spawn once ("queue: 50 waiting");
- every queued spawn resumed with no click (the hub lists it pending again, its pod gated with the
  same enqueue time);

and afterwards, in order: ``in-order`` slots are freed one at a time, each must go to the next in the
queue's order from before the restart; then the rest at once. No gate may be lifted twice (the hub
logs each lift). The figures are printed; the run fails if a property does not hold.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import secrets
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

from fracnb_spawner.common.podkeys import QUEUED_AT_ANNOTATION, has_queue_gate
from fracnb_testbed import hubproc
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import ClusterSpec, parse_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.demo import DemoSettings, RunningDemo, free_port, running_demo, start_hub
from fracnb_testbed.handle import Testbed
from fracnb_testbed.hubapi import token_request
from fracnb_testbed.procs import descendants

TOKEN = secrets.token_hex(16)
STANDIN = (
    "import http.server, os, urllib.parse\n"
    "url = urllib.parse.urlparse(os.environ['JUPYTERHUB_SERVICE_URL'])\n"
    "http.server.ThreadingHTTPServer((url.hostname, url.port), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
)


def storm_cluster(slots: int) -> ClusterSpec:
    """Two local A100 nodes time-sliced to ``slots`` quarter slots in all."""
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    capacity = {"cpu": "512", "memory": "2Ti", "pods": str(slots), "nvidia.com/gpu.shared": str(slots // 2)}
    return parse_cluster({
        "name": "restart-storm",
        "nodeGroups": [{"name": "local-a100", "count": 2, "runner": "local", "labels": labels, "capacity": capacity}],
    })  # fmt: skip


def hub_config(users: list[str]) -> str:
    return "\n".join([
        "import sys",
        f"c.KubeSpawner.cmd = [sys.executable, '-c', {STANDIN!r}]",
        "c.Spawner.args = []",
        "c.JupyterHub.cleanup_servers = False",
        "c.JupyterHub.concurrent_spawn_limit = 0",
        "c.JupyterHub.tornado_settings = {'slow_spawn_timeout': 1}",
        "c.JupyterHub.load_groups = {}",
        f"c.JupyterHub.services = [{{'name': 'bench', 'api_token': {TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'bench', 'scopes': ['admin:users', 'admin:servers', 'tokens'],"
        " 'services': ['bench']}]",
        "c.FracnbQuotas.group_quotas = {}",
        "c.FracnbQuotas.user_quotas = {}",
        f"c.Authenticator.allowed_users = {set(users)!r}",
    ])  # fmt: skip


class Hub:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, *, method: str = "GET", body: Any = None) -> tuple[int, Any]:
        return token_request(f"{self.url}/hub/api/{path}", TOKEN, method=method, body=body, timeout=120)

    def servers(self) -> dict[str, dict[str, Any]]:
        """Each user's default server model, for users the hub lists with one."""
        found: dict[str, dict[str, Any]] = {}
        offset = 0
        while True:
            status, page = self.call(f"users?state=active&limit=200&offset={offset}")
            assert status == 200, page
            items = page if isinstance(page, list) else page["items"]
            for user in items:
                if "" in (user.get("servers") or {}):
                    found[user["name"]] = user["servers"][""]
            if len(items) < 200:
                return found
            offset += 200

    def up(self) -> bool:
        with suppress(OSError):
            urllib.request.urlopen(f"{self.url}/hub/health", timeout=2).close()  # noqa: S310
            return True
        return False


def wait(check, what: str, timeout: float, interval: float = 0.5) -> float:
    """Seconds until ``check()`` holds; fails the benchmark after ``timeout``."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise SystemExit(f"benchmark failed: {what} not within {timeout:.0f} s")
        time.sleep(interval)
    return time.monotonic() - began


def pods(testbed: Testbed, namespace: str) -> dict[str, dict[str, Any]]:
    items = testbed.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=component%3Dsingleuser-server")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def form_counts(hub_url: str, user: str, password: str) -> str:
    """The 0.25 GPU row of ``user``'s spawn form (logged in through the login form)."""
    import http.cookiejar
    import urllib.parse

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{hub_url}/hub/login", timeout=60).close()
    xsrf = next(cookie.value for cookie in jar if cookie.name == "_xsrf")
    form = urllib.parse.urlencode({"username": user, "password": password, "_xsrf": xsrf}).encode()
    opener.open(f"{hub_url}/hub/login", data=form, timeout=60).close()
    with opener.open(f"{hub_url}/hub/spawn", timeout=120) as answer:
        html = answer.read().decode()
    row = re.search(r'data-fracnb-profile="quarter".*?(\d+ free now|queue: \d+ waiting[^<]*)', html, re.DOTALL)
    return row.group(1) if row else "(no count)"


def storm(testbed: Testbed, state_dir: Path, running: int, queued: int, in_order: int) -> None:
    names = [f"r{i:03d}" for i in range(running)] + [f"q{i:03d}" for i in range(queued)] + ["watcher"]
    namespace = testbed.create_namespace("storm")
    settings = DemoSettings(
        state_dir=state_dir, kubeconfig=testbed.kubeconfig, namespace=namespace, port=free_port(),
        users={name: [] for name in names}, extra_config=hub_config(names), idle_timeout=86400,
    )  # fmt: skip
    with running_demo(settings, testbed=testbed) as demo:
        try:
            run = Storm(demo, testbed, namespace, names[:running], names[running:-1])
            run.fill()
            log_offset = len(demo.log_file.read_text(errors="replace"))
            run.kill_and_restart()
            run.in_order(in_order, log_offset)
        finally:
            hubproc.stop(demo.hub)  # the hub started again


class Storm:
    def __init__(self, demo: RunningDemo, testbed: Testbed, namespace: str, running: list[str], queued: list[str]):
        self.demo, self.testbed, self.namespace = demo, testbed, namespace
        self.hub = Hub(demo.settings.url)
        self.running, self.queued = running, queued
        self.places: dict[str, str] = {}  # queued user -> the enqueue time on their pod
        self.first_pods: dict[str, str] = {}  # queued pod -> its uid before the restart

    def form(self) -> str:
        return form_counts(self.demo.settings.url, "watcher", self.demo.settings.password)

    def fill(self) -> None:
        """Every slot taken by a running server, then the queued spawns, one after the other."""
        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            list(pool.map(self.start, self.running))
        ready = lambda: sum(1 for m in self.hub.servers().values() if m.get("ready")) == len(self.running)  # noqa: E731
        wait(ready, "servers ready", 1800, 2)
        print(f"{len(self.running)} servers started in {time.monotonic() - began:.0f} s")
        for user in self.queued:
            self.start(user)
        gated = lambda: [p for p in pods(self.testbed, self.namespace).values() if has_queue_gate(p)]  # noqa: E731
        wait(lambda: len(gated()) == len(self.queued), "queued", 300)
        self.places = {p["metadata"]["name"][len("jupyter-") :]: p["metadata"]["annotations"][QUEUED_AT_ANNOTATION]
                       for p in gated()}  # fmt: skip
        self.first_pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in gated()}
        print(f"{len(self.queued)} spawns queued; the form says: {self.form()}")

    def start(self, user: str) -> None:
        self.hub.call(f"users/{user}/server", method="POST", body={"profile": "quarter"})

    def kill_and_restart(self) -> None:
        demo = self.demo
        for pid in [demo.hub.pid, *descendants(demo.hub.pid)]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        demo.hub.wait(30)
        killed = time.monotonic()
        demo.hub = start_hub(demo.settings, demo.log_file)
        hubproc.wait_ready(demo.settings.url, demo.hub, demo.log_file, timeout=300)
        answering = time.monotonic() - killed
        wait(self.all_counted, "every running server listed ready", 300, 1)
        counted = time.monotonic() - killed
        wait(self.all_resumed, "every queued spawn resumed in its place", 300, 1)
        resumed = time.monotonic() - killed
        form = self.form()
        print(
            f"after the kill: hub answering {answering:.1f} s, {len(self.running)} running servers listed ready "
            f"{counted:.1f} s, {len(self.queued)} queued spawns resumed {resumed:.1f} s; the form says: {form}"
        )
        if not form.startswith(f"queue: {len(self.queued)} waiting"):
            raise SystemExit(f"benchmark failed: the form counts {form!r}")

    def all_counted(self) -> bool:
        """Every running server listed ready by the hub, and each has its pod (and no other pod runs)."""
        models, found = self.hub.servers(), pods(self.testbed, self.namespace)
        ready = sorted(u for u, m in models.items() if m.get("ready"))
        ungated = sorted(name[len("jupyter-") :] for name, p in found.items() if not has_queue_gate(p))
        return ready == ungated == self.running

    def all_resumed(self) -> bool:
        """Every queued spawn pending again and in the queue: its pod made again by the resumed spawn (the old
        one's token is gone with the forgotten server), gated, with the same enqueue time."""
        models, found = self.hub.servers(), pods(self.testbed, self.namespace)
        for user in self.queued:
            pod = found.get(f"jupyter-{user}")
            if (models.get(user) or {}).get("pending") != "spawn" or pod is None or not has_queue_gate(pod):
                return False
            if pod["metadata"]["uid"] == self.first_pods[f"jupyter-{user}"]:
                return False
            if pod["metadata"]["annotations"][QUEUED_AT_ANNOTATION] != self.places[user]:
                return False
        return True

    def in_order(self, count: int, log_offset: int) -> None:
        """Free ``count`` slots one at a time (each must go to the next in line), then the rest at once."""
        expected = sorted(self.queued, key=lambda u: self.places[u])
        latencies = []
        for index in range(count):
            freed = time.monotonic()
            self.hub.call(f"users/{self.running[index]}/server", method="DELETE")
            turn = lambda i=index: (self.hub.servers().get(expected[i]) or {}).get("ready")  # noqa: E731
            wait(turn, f"{expected[index]}'s turn", 120, 0.2)
            latencies.append(time.monotonic() - freed)
            models = self.hub.servers()
            early = sorted(u for u in expected[index + 1 :] if (models.get(u) or {}).get("ready"))
            if early:
                raise SystemExit(f"benchmark failed: {early} started before {expected[index]}")
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            rest = self.running[count : len(self.queued)]
            list(pool.map(lambda u: self.hub.call(f"users/{u}/server", method="DELETE"), rest))
        everyone = lambda: all((self.hub.servers().get(u) or {}).get("ready") for u in self.queued)  # noqa: E731
        wait(everyone, "every queued server", 600, 2)
        log = self.demo.log_file.read_text(errors="replace")[log_offset:]
        lifts = re.findall(r"fracnb: \S+/jupyter-(q\d+)'s turn in the GPU queue", log)
        twice = sorted({u for u in lifts if lifts.count(u) > 1})
        if twice or sorted(lifts) != sorted(self.queued):
            raise SystemExit(f"benchmark failed: gates lifted twice {twice}, {len(lifts)} lifts in all")
        latencies.sort()
        print(
            f"in order: {count} slots freed one at a time went to the next in line (freed -> ready, median "
            f"{latencies[len(latencies) // 2]:.2f} s); every gate lifted once ({len(lifts)} lifts)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--running", type=int, default=200)
    parser.add_argument("--queued", type=int, default=50)
    parser.add_argument("--in-order", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        print("starting the testbed ...")
        state = up(storm_cluster(args.running), Path(directory) / "testbed", bin_dir=find_bin_dir())
        try:
            storm(Testbed(state), Path(directory) / "hub", args.running, args.queued, args.in_order)
        finally:
            down(state.directory)
    sys.exit(0)


if __name__ == "__main__":
    main()
