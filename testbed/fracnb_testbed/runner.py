"""The local process runner: a kubelet stand-in for nodes labelled ``fracnb.io/runner: local``.

Pods the real scheduler binds to those nodes run as local processes, one process group per
container, on the pod's own address 127.x.y.N. Run by ``fracnb-testbed up`` as
``python -m fracnb_testbed.runner --state-dir DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_testbed import podspec
from fracnb_testbed.audit import RUNNER_USER_AGENT
from fracnb_testbed.clusters import RUNNER_LABEL
from fracnb_testbed.kubeapi import async_configuration
from fracnb_testbed.procs import ProcessRecord, start_ticks_of
from fracnb_testbed.state import RUNNER_READY_FILE, TestbedState, read_runner_env, save_runner_children

log = logging.getLogger("fracnb_testbed.runner")
HOST_IP = "127.0.0.1"
SHUTDOWN_GRACE = 5.0
WATCH_SECONDS = 240
# What container runtimes report when the executable cannot be started.
START_ERROR_EXIT_CODE = 128


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    name: str
    process: asyncio.subprocess.Process
    record: ProcessRecord
    started_at: str


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    ip: str
    pod: dict[str, Any]
    containers: list[ContainerRun] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)
    start_errors: dict[str, str] = field(default_factory=dict)
    deleting: bool = False


class Runner:
    """Reconciles pods on local nodes with local processes."""

    def __init__(self, state: TestbedState, api: client.CoreV1Api) -> None:
        self.state = state
        self.api = api
        self.pool = podspec.IpPool(state.pod_network)
        self.runs: dict[str, PodRun] = {}
        self.finalising: set[str] = set()
        self.local_nodes: set[str] = set()
        self.other_nodes: set[str] = set()  # nodes looked up that are not local (KWOK's)
        self.tasks: set[asyncio.Task] = set()

    # ---- watching -------------------------------------------------------------------------
    async def run_forever(self) -> None:
        ready_file = self.state.directory / RUNNER_READY_FILE
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._relist()
                    ready_file.touch()
                # A watch the server ends resumes from its last version, as a kubelet's does: a LIST at each
                # end would be cluster-wide LISTs of nodes and pods every few minutes that tests counting the
                # hub's own LISTs would see.
                version = await self._watch(version)
            except (ApiException, OSError, asyncio.TimeoutError, ValueError, aiohttp.ClientError) as error:
                # aiohttp.ClientPayloadError: the apiserver went away in the middle of a watch's stream.
                log.warning("watch interrupted (%r); listing again", error)
                version = None
                await asyncio.sleep(1)

    async def _raw(self, call, **kwargs) -> dict[str, Any]:
        response = await call(_preload_content=False, **kwargs)
        return json.loads(await response.read())

    async def _relist(self) -> str:
        nodes = await self._raw(self.api.list_node, label_selector=f"{RUNNER_LABEL}=local")
        self.local_nodes = {node["metadata"]["name"] for node in nodes["items"]}
        self.other_nodes = set()
        pods = await self._raw(self.api.list_pod_for_all_namespaces)
        for pod in pods["items"]:
            await self.reconcile("ADDED", pod)
        return pods["metadata"]["resourceVersion"]

    async def _watch(self, version: str) -> str | None:
        """Follow pods from ``version`` until the server ends the watch: the last version seen (events and
        bookmarks), or None when the version has expired (410 Gone) and the runner must list again."""
        response = await self.api.list_pod_for_all_namespaces(
            watch=True,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        async with response:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return None  # e.g. 410 Gone: list again
                version = event["object"].get("metadata", {}).get("resourceVersion") or version
                if event["type"] != "BOOKMARK":
                    await self.reconcile(event["type"], event["object"])
        return version

    # ---- reconciling ----------------------------------------------------------------------
    async def reconcile(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        run = self.runs.get(uid)
        # A pod this runner runs is always followed, even once its node is gone (a deleted node's pods go too).
        if run is None and not await self._is_local(pod.get("spec", {}).get("nodeName")):
            return
        if kind == "DELETED":
            if run is not None:
                self._spawn_task(self.terminate(run, grace=1.0, finalise=False))
            return
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in self.finalising:
                self.finalising.add(uid)
                grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                if run is not None:
                    self._spawn_task(self.terminate(run, grace=grace, finalise=True))
                else:
                    self._spawn_task(self.finalise(pod))
            return
        if run is None and pod.get("status", {}).get("phase", "Pending") == "Pending":
            await self.start(pod)

    async def _is_local(self, node_name: str | None) -> bool:
        """Whether ``node_name`` is a local node. The list taken at the last relist can miss one: a node deleted
        as the list was taken and made again since (the fault tests do that) is looked up, not ignored."""
        if not node_name or node_name in self.other_nodes:
            return False
        if node_name in self.local_nodes:
            return True
        try:
            node = await self.api.read_node(node_name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        local = (node.metadata.labels or {}).get(RUNNER_LABEL) == "local"
        (self.local_nodes if local else self.other_nodes).add(node_name)
        return local

    def _spawn_task(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _lookup_keys(self, pod: dict[str, Any]) -> dict[tuple[str, str, str], str]:
        """ConfigMap/Secret values the containers' env refers to, fetched before starting."""
        namespace = pod["metadata"]["namespace"]
        found: dict[tuple[str, str, str], str] = {}
        for container in pod["spec"]["containers"]:
            for entry in container.get("env") or []:
                source = entry.get("valueFrom") or {}
                for kind, read in (
                    ("configMapKeyRef", self.api.read_namespaced_config_map),
                    ("secretKeyRef", self.api.read_namespaced_secret),
                ):
                    if kind not in source:
                        continue
                    ref = source[kind]
                    with contextlib.suppress(ApiException):
                        data = (await self._raw(read, name=ref["name"], namespace=namespace)).get("data") or {}
                        if ref["key"] in data:
                            value = data[ref["key"]]
                            if kind == "secretKeyRef":
                                value = base64.b64decode(value).decode()
                            resource = "configmaps" if kind == "configMapKeyRef" else "secrets"
                            found[(resource, ref["name"], ref["key"])] = value
        return found

    def _pod_dir(self, pod: dict[str, Any]) -> Path:
        meta = pod["metadata"]
        path = self.state.pods / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _home(self, pod: dict[str, Any], pod_dir: Path) -> Path:
        """A hub user's server keeps its home (as on a z2jh PVC); any other pod gets a fresh one."""
        relative = podspec.persistent_home(pod)
        home = self.state.homes_dir / relative if relative else pod_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        return home

    def _base_env(self, pod: dict[str, Any]) -> dict[str, str]:
        # The runner env plays the image's ENV: the pod's env overrides it. PATH and HOME stay
        # local because the image's filesystem does not exist here.
        return {
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **read_runner_env(self.state.directory),
            "HOSTNAME": pod["metadata"]["name"],
        }

    async def start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ip = self.pool.allocate()
        run = PodRun(meta["uid"], meta["namespace"], meta["name"], ip, pod)
        self.runs[run.uid] = run
        directory = self._pod_dir(pod)
        home = self._home(pod, directory)
        keys = await self._lookup_keys(pod)
        launches = []
        for container in pod["spec"]["containers"]:
            try:
                env = podspec.container_env(container, pod, ip, HOST_IP, lambda *k: keys.get(k))
                argv = podspec.container_argv(container, env, ip)
            except podspec.PodSpecError as error:
                await self._cannot_start(run, container, str(error))
                return
            full_env = {
                **self._base_env(pod),
                **env,
                "PATH": local_path(),
                "HOME": str(home),
            }
            launches.append((container, argv, full_env))
        for container, argv, full_env in launches:
            await self._launch(run, container, argv, full_env, directory)
        await self._patch_status(run, self._started_status(run))
        for container_run in run.containers:
            self._spawn_task(self._await_exit(run, container_run))

    def _started_status(self, run: PodRun) -> dict[str, Any]:
        """Running status, with containers that failed to start shown terminated."""
        started = now_iso()
        status = podspec.running_status(run.pod, run.ip, HOST_IP, started)
        containers = {c["name"]: c for c in run.pod["spec"]["containers"]}
        for index, entry in enumerate(status["containerStatuses"]):
            message = run.start_errors.get(entry["name"])
            if message:
                status["containerStatuses"][index] = podspec.terminated_container(
                    containers[entry["name"]],
                    run.uid,
                    exit_code=START_ERROR_EXIT_CODE,
                    started_at=started,
                    finished_at=started,
                    message=message,
                    reason="StartError",
                )
        if len(run.exit_codes) == len(containers):
            status["phase"] = podspec.finished_phase(run.exit_codes)
            self.pool.release(run.ip)
        return status

    async def _launch(self, run: PodRun, container, argv, env, directory: Path) -> None:
        log_path = directory / f"{container['name']}.log"
        with log_path.open("ab") as log_file:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=env["HOME"],  # as an image's WORKDIR is the notebook user's home
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"cannot start {argv[0]}: {error.strerror}"
                log_file.write(f"{message}\n".encode())
                run.start_errors[container["name"]] = message
                run.exit_codes[container["name"]] = START_ERROR_EXIT_CODE
                await self._event(run, "Failed", f"Error: {message}", kind="Warning")
                return
        record = ProcessRecord(
            f"{run.namespace}/{run.name}/{container['name']}",
            process.pid,
            start_ticks_of(process.pid) or 0,
            str(log_path),
        )
        run.containers.append(ContainerRun(container["name"], process, record, now_iso()))
        self._save_children()
        log.info("started %s (pid %d, ip %s): %s", record.name, process.pid, run.ip, argv)
        await self._event(
            run,
            "Pulled",
            f"Container image {container.get('image', '')!r} already present on machine",
        )
        await self._event(run, "Started", f"Started container {container['name']} as local process {process.pid}")

    async def _cannot_start(self, run: PodRun, container, message: str) -> None:
        log.warning("pod %s/%s: %s", run.namespace, run.name, message)
        await self._patch_status(run, podspec.waiting_status(container, "CreateContainerConfigError", message))
        await self._event(run, "Failed", f"Error: {message}", kind="Warning")

    async def _await_exit(self, run: PodRun, container_run: ContainerRun) -> None:
        returncode = await container_run.process.wait()
        code = podspec.exit_code_of(returncode)
        run.exit_codes[container_run.name] = code
        self._save_children()
        log.info("%s exited with %d", container_run.record.name, code)
        if run.deleting:
            return
        container = next(c for c in run.pod["spec"]["containers"] if c["name"] == container_run.name)
        patch: dict[str, Any] = {
            "containerStatuses": [
                podspec.terminated_container(
                    container,
                    run.uid,
                    exit_code=code,
                    started_at=container_run.started_at,
                    finished_at=now_iso(),
                )
            ]
        }
        if len(run.exit_codes) == len(run.pod["spec"]["containers"]):
            patch["phase"] = podspec.finished_phase(run.exit_codes)
            patch["conditions"] = [
                {
                    "type": kind,
                    "status": "False",
                    "lastTransitionTime": now_iso(),
                    "reason": "PodCompleted",
                }
                for kind in ("Ready", "ContainersReady")
            ]
            self.pool.release(run.ip)
        await self._patch_status(run, patch)

    # ---- stopping ---------------------------------------------------------------------------
    async def terminate(self, run: PodRun, grace: float, finalise: bool) -> None:
        """SIGTERM each container's process group, SIGKILL after ``grace``, then finalise."""
        run.deleting = True
        live = [c for c in run.containers if c.process.returncode is None]
        for container_run in live:
            signal_group(container_run.process.pid, signal.SIGTERM)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(c.process.wait() for c in live)), timeout=max(grace, 0.1))
        for container_run in run.containers:
            signal_group(container_run.process.pid, signal.SIGKILL)
            await container_run.process.wait()
        self.runs.pop(run.uid, None)
        self.pool.release(run.ip)
        self._save_children()
        if finalise:
            await self.finalise(run.pod)

    async def finalise(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiException):
            await self.api.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                grace_period_seconds=0,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
        self.finalising.discard(meta["uid"])

    async def shutdown(self) -> None:
        await asyncio.gather(*(self.terminate(run, SHUTDOWN_GRACE, finalise=False) for run in list(self.runs.values())))

    # ---- API helpers ------------------------------------------------------------------------
    async def _patch_status(self, run: PodRun, status: dict[str, Any]) -> None:
        try:
            await self.api.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        except ApiException as error:
            if error.status != 404:
                log.warning("status patch of %s/%s failed: %s", run.namespace, run.name, error.reason)

    async def _event(self, run: PodRun, reason: str, message: str, kind: str = "Normal") -> None:
        timestamp = now_iso()
        body = {
            "metadata": {"generateName": f"{run.name}.", "namespace": run.namespace},
            "involvedObject": {
                "kind": "Pod",
                "name": run.name,
                "namespace": run.namespace,
                "uid": run.uid,
                "apiVersion": "v1",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": run.pod["spec"]["nodeName"]},
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
        }
        with contextlib.suppress(ApiException):
            await self.api.create_namespaced_event(run.namespace, body)

    def _save_children(self) -> None:
        records = [c.record for run in self.runs.values() for c in run.containers if c.process.returncode is None]
        save_runner_children(self.state.directory, records)


def local_path() -> str:
    """The runner's PATH with this interpreter's bin dir first, so venv scripts resolve."""
    own = str(Path(sys.executable).parent)
    rest = [part for part in os.environ.get("PATH", "").split(os.pathsep) if part and part != own]
    return os.pathsep.join([own, *rest])


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def main_async(state_dir: Path) -> None:
    state = TestbedState.load(state_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with client.ApiClient(async_configuration(state.server, state.pki)) as api_client:
        api_client.user_agent = RUNNER_USER_AGENT
        runner = Runner(state, client.CoreV1Api(api_client))
        watching = asyncio.ensure_future(runner.run_forever())
        await stop.wait()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await runner.shutdown()
    (state_dir / RUNNER_READY_FILE).unlink(missing_ok=True)
    log.info("runner stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main_async(args.state_dir.resolve()))


if __name__ == "__main__":
    main()
