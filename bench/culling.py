"""One culling pass over thousands of running servers: fracnb's culler vs jupyterhub-idle-culler.

    python -m bench.culling [--users 5000] [--repeat 5] [--kubeconfig FILE --namespace NS]

How the servers are made: a real JupyterHub (subprocess, configurable-http-proxy from npm)
whose spawner starts nothing and points every server at one shared real HTTP server
(``python -m http.server``), so each of the N users has a server the hub considers running
and ready, with a proxy route, at almost no cost. Users are created in one REST call and
their servers started through the REST API.

Both cullers run in this process, one after the other, against the same hub, with
timeouts long enough that nothing is culled: the pass is paging through the users,
deciding, and (ours) listing the pods. With ``--kubeconfig`` the pods are real objects in
a kube-apiserver (created here, bound to a node that does not exist so nothing schedules
them); without it, ours reads the same pod dicts from memory and the report says so.

Reclaim latency: from a server's idle deadline to the hub having stopped it (the slot is
usable by the next user). It is the wait for the next pass (0 to ``cull_every``) plus the
time the pass takes to reach and stop the server; measured end to end with the service loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from fracnb_spawner.culling import CullPolicy, parse_timestamp
from fracnb_spawner.service.cullpass import CullSettings, cull_pass
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_testbed import hubproc
from fracnb_testbed.hubproc import HubPorts
from fracnb_testbed.procs import free_port

DAY = 86400

# After hubproc.config_head: the loopback ports, the proxy, the files and the dummy authenticator.
HUB_CONFIG = """
from jupyterhub.spawner import Spawner

class AlwaysUpSpawner(Spawner):
    # Every server is the one shared HTTP server; start and stop are bookkeeping.
    running = False

    async def start(self):
        self.running = True
        return "http://127.0.0.1:{stub_port}"

    async def stop(self, now=False):
        self.running = False

    async def poll(self):
        return None if self.running else 0

c.JupyterHub.spawner_class = AlwaysUpSpawner
c.Authenticator.allow_all = True
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.last_activity_interval = 3600
c.JupyterHub.log_level = "WARN"
c.JupyterHub.cleanup_servers = False  # shutting down 5,000 servers one by one is not measured
c.JupyterHub.services = [
    {{"name": "setup", "api_token": {admin_token!r}}},
    {{"name": "culler", "api_token": {culler_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "admin", "services": ["setup"]}},
    {{
        "name": "culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["culler"],
    }},
]
"""


class Hub:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = HubPorts()
        self.stub_port = free_port()
        self.admin_token, self.culler_token = secrets.token_hex(16), secrets.token_hex(16)
        self.url = self.ports.url
        self.api_url = f"{self.url}/hub/api"
        self.log_file = workdir / "jupyterhub.log"

    @contextmanager
    def running(self) -> Iterator[None]:
        """The shared server and the hub, stopped at the end of the block."""
        own = HUB_CONFIG.format(stub_port=self.stub_port, admin_token=self.admin_token, culler_token=self.culler_token)
        config = "\n".join([*hubproc.config_head(self.workdir, self.ports, hubproc.find_proxy()), own])
        stub = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.stub_port)]
        with self.log_file.open("ab") as log:
            server = subprocess.Popen(stub, cwd=self.workdir, stdout=log, stderr=log)
        try:
            with hubproc.running(self.workdir, config, self.url, log_file=self.log_file):
                yield
        finally:
            server.terminate()
            server.wait()


async def call(http, hub: Hub, method: str, path: str, body=None):
    request = HTTPRequest(
        f"{hub.api_url}/{path}",
        method=method,
        headers={"Authorization": f"token {hub.admin_token}"},
        body=None if body is None else json.dumps(body),
        allow_nonstandard_methods=True,
        request_timeout=300,
    )
    response = await http.fetch(request, raise_error=False)
    if response.code >= 400:
        raise RuntimeError(f"{method} {path}: {response.code} {response.body[:200]!r}")
    return json.loads(response.body) if response.body else None


async def ready_users(hub: Hub) -> set[str]:
    api = HubAPI(hub.api_url, hub.admin_token)
    try:
        return {u["name"] async for page in api.iter_users(page_size=200) for u in page}
    finally:
        api.close()


async def start_servers(http, hub: Hub, names: list[str], concurrency: int = 32) -> None:
    """Create the users and start their servers; retry the few a loaded proxy drops."""
    for start in range(0, len(names), 1000):
        await call(http, hub, "POST", "users", {"usernames": names[start : start + 1000]})
    slots = asyncio.Semaphore(concurrency)

    async def spawn(name: str) -> None:
        async with slots:
            await call(http, hub, "POST", f"users/{name}/server", {})

    missing = list(names)
    for _ in range(5):
        results = await asyncio.gather(*(spawn(n) for n in missing), return_exceptions=True)
        failures = [r for r in results if isinstance(r, Exception)]
        await asyncio.sleep(2)
        ready = await ready_users(hub)
        missing = [n for n in names if n not in ready]
        if not missing:
            return
        print(f"{len(missing)} servers not ready ({len(failures)} spawn errors); retrying")
    raise RuntimeError(f"{len(missing)} servers would not start")


def pod_manifest(user: str, idle_timeout: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"jupyter-{user}",
            "labels": {"component": "singleuser-server", "fracnb.io/profile": "eighth"},
            "annotations": {
                "hub.jupyter.org/username": user,
                "hub.jupyter.org/servername": "",
                "fracnb.io/gpu-fraction": "1/8",
                "fracnb.io/idle-timeout": str(idle_timeout),
                "fracnb.io/max-age": "0",
            },
        },
        # Bound to a node that does not exist: stored, never scheduled or run.
        "spec": {
            "nodeName": "bench-nowhere",
            "containers": [{"name": "notebook", "image": "example.invalid/none"}],
        },
    }


class ListedPods:
    def __init__(self, pods: list[dict]) -> None:
        self.pods = pods

    async def list_pods(self) -> list[dict]:
        return self.pods


async def make_pod_source(args, names: list[str]):
    manifests = [pod_manifest(n, DAY) for n in names]
    if not args.kubeconfig:
        return ListedPods(manifests), "in memory"
    from kubernetes_asyncio import client, config

    from fracnb_spawner.service.pods import KubernetesPods

    configuration = client.Configuration()
    await config.load_kube_config(args.kubeconfig, client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        # A fresh cluster has no such namespace yet; without a controller-manager (the testbed), nothing
        # makes its default ServiceAccount, which pods need.
        for create_call, arguments in (
            (core.create_namespace, ({"metadata": {"name": args.namespace}},)),
            (core.create_namespaced_service_account, (args.namespace, {"metadata": {"name": "default"}})),
        ):
            try:
                await create_call(*arguments)
            except client.exceptions.ApiException as error:
                if error.status != 409:  # 409: it exists
                    raise
        slots = asyncio.Semaphore(32)

        async def create(manifest: dict) -> None:
            async with slots:
                await core.create_namespaced_pod(args.namespace, manifest)

        await asyncio.gather(*(create(m) for m in manifests))
    return KubernetesPods(namespace=args.namespace, kubeconfig=args.kubeconfig), "kube-apiserver"


async def time_ours(hub: Hub, pods, page_size: int) -> float:
    api = HubAPI(hub.api_url, hub.culler_token)
    settings = CullSettings(CullPolicy(idle_timeout=DAY), warning_lead=600, page_size=page_size)
    try:
        report = await cull_pass(api, pods, settings, CullMetrics())
    finally:
        api.close()
    assert not report.culled
    return report.duration


async def time_theirs(hub: Hub, page_size: int) -> float:
    from jupyterhub_idle_culler import cull_idle

    logger = logging.getLogger("idle-culler")
    logger.setLevel(logging.WARNING)
    started = time.perf_counter()
    await cull_idle(hub.api_url, hub.culler_token, DAY, logger, api_page_size=page_size)
    return time.perf_counter() - started


async def reclaim_latency(hub: Hub, names: list[str], cull_every: float) -> list[float]:
    """Give ``names`` deadlines spread over one interval; time deadline -> stopped."""
    api = HubAPI(hub.api_url, hub.culler_token)
    models = {}
    for name in names:
        models[name] = (await api.user(name))["servers"][""]
    now = datetime.now(timezone.utc)
    pods, deadlines = [], {}
    for i, name in enumerate(names):
        last = parse_timestamp(models[name]["last_activity"])
        target = now + timedelta(seconds=2 + cull_every * i / len(names))
        idle_timeout = math.ceil((target - last).total_seconds())
        pods.append(pod_manifest(name, idle_timeout))
        deadlines[name] = last + timedelta(seconds=idle_timeout)
    settings = CullSettings(CullPolicy(idle_timeout=DAY), warning_lead=0, page_size=200)
    stopped: dict[str, datetime] = {}
    loop_started = time.monotonic()
    while len(stopped) < len(names) and time.monotonic() - loop_started < 4 * cull_every + 30:
        report = await cull_pass(api, ListedPods(pods), settings, CullMetrics())
        finished = datetime.now(timezone.utc)
        for user, _, _ in report.culled:
            stopped.setdefault(user, finished)
        await asyncio.sleep(cull_every)
    api.close()
    return [(stopped[n] - deadlines[n]).total_seconds() for n in names if n in stopped]


def summary(label: str, values: list[float]) -> str:
    runs = ", ".join(f"{v:.3f}" for v in values)
    return f"{label}: median {statistics.median(values):.3f}s (runs: {runs})"


async def run(args) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="fracnb-bench-"))
    hub = Hub(workdir)
    http = AsyncHTTPClient(force_instance=True, max_clients=64)
    try:
        with hub.running():
            await measure(args, http, hub)
    finally:
        http.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def measure(args, http, hub: Hub) -> None:
    names = [f"bench{i:05d}" for i in range(args.users)]
    t0 = time.perf_counter()
    await start_servers(http, hub, names)
    print(f"{args.users} running servers in {time.perf_counter() - t0:.1f}s")
    pods, pod_origin = await make_pod_source(args, names)
    ours, theirs, theirs_200 = [], [], []
    for _ in range(args.repeat):
        ours.append(await time_ours(hub, pods, 200))
        theirs.append(await time_theirs(hub, 0))
        theirs_200.append(await time_theirs(hub, 200))
    import jupyterhub
    import jupyterhub_idle_culler

    print(
        f"jupyterhub {jupyterhub.__version__}, jupyterhub-idle-culler"
        f" {jupyterhub_idle_culler.__version__}; pods {pod_origin}"
    )
    print(summary("fracnb culler (page 200, + pod LIST)", ours))
    print(summary("idle-culler (default page size)", theirs))
    print(summary("idle-culler (--api-page-size=200)", theirs_200))
    median = statistics.median
    print(f"ratio ours/theirs (default): {median(ours) / median(theirs):.2f}")
    print(f"ratio ours/theirs (page 200): {median(ours) / median(theirs_200):.2f}")
    if hasattr(pods, "close"):
        await pods.close()
    latencies = await reclaim_latency(hub, names[: args.reclaim_servers], args.cull_every)
    print(
        f"reclaim latency with cull_every={args.cull_every:g}s over {len(latencies)} servers:"
        f" median {median(latencies):.2f}s, max {max(latencies):.2f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--kubeconfig", default=os.environ.get("FRACNB_BENCH_KUBECONFIG", ""))
    parser.add_argument("--namespace", default="fracnb-bench")
    parser.add_argument("--cull-every", type=float, default=10)
    parser.add_argument("--reclaim-servers", type=int, default=20)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
