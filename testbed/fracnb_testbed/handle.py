"""``Testbed``: a running testbed as tests and the demo use it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from fracnb_testbed.audit import HELPER_USER_AGENT, AuditedRequest, requests_in
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.kubeapi import KubeRest, async_configuration, ensure_namespace
from fracnb_testbed.procs import ProcessRecord, is_alive
from fracnb_testbed.state import (
    TestbedState,
    load_runner_children,
    read_runner_env,
    write_runner_env,
)

PodPredicate = Callable[["dict[str, Any] | None"], bool]


class Testbed:
    """Paths, a sync REST client and async helpers for one running testbed.

    Pods and nodes are plain dicts as the API returns them (camelCase keys, like kubectl -o json).
    """

    __test__ = False

    def __init__(self, state: TestbedState, namespace: str = "default") -> None:
        self.state = state
        self.namespace = namespace

    @property
    def kubeconfig(self) -> Path:
        return self.state.kubeconfig

    @property
    def server(self) -> str:
        return self.state.server

    def api_client(self) -> client.ApiClient:
        """An admin kubernetes_asyncio ApiClient: ``async with testbed.api_client() as api``."""
        api_client = client.ApiClient(async_configuration(self.server, self.state.pki))
        api_client.user_agent = HELPER_USER_AGENT
        return api_client

    def audited_requests(self) -> list[AuditedRequest]:
        """The LISTs and WATCHes of pods and nodes the apiserver has answered, each with who asked."""
        return requests_in(self.state.directory)

    def rest(self) -> KubeRest:
        """A blocking JSON client (close it, or use it briefly)."""
        return KubeRest("127.0.0.1", self.state.ports["apiserver"], self.state.pki)

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        rest = self.rest()
        try:
            return rest.request(method, path, body)
        finally:
            rest.close()

    def get(self, path: str) -> Any:
        """GET an API path; a TestbedError on anything but 200."""
        status, answer = self._call("GET", path)
        if status != 200:
            raise TestbedError(f"GET {path} answered {status}: {answer}")
        return answer

    # ---- namespaces and nodes ---------------------------------------------------------------
    def create_namespace(self, name: str | None = None) -> str:
        """Create a namespace (random name by default) with its ``default`` ServiceAccount."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        rest = self.rest()
        try:
            ensure_namespace(rest, name)
        finally:
            rest.close()
        return name

    def delete_namespace(self, name: str) -> None:
        """Force-delete the namespace's pods (their processes stop), then the namespace.

        Without a controller-manager the namespace itself stays Terminating, which is harmless.
        """
        self._call("DELETE", f"/api/v1/namespaces/{name}/pods?gracePeriodSeconds=0")
        self._call("DELETE", f"/api/v1/namespaces/{name}")

    def list_nodes(self, label_selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={label_selector}" if label_selector else ""
        return self.get(f"/api/v1/nodes{query}")["items"]

    def delete_node(self, name: str) -> None:
        """Delete a Node, as a cloud does when its machine goes (its pods stay until something removes them)."""
        status, answer = self._call("DELETE", f"/api/v1/nodes/{name}")
        if status >= 300:
            raise TestbedError(f"deleting node {name} failed ({status}): {answer}")

    def create_node(self, node: dict[str, Any]) -> None:
        """Create a Node again from its manifest (as read before :meth:`delete_node`)."""
        metadata = {k: v for k, v in node["metadata"].items() if k in ("name", "labels", "annotations")}
        manifest = {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {}, "status": node["status"]}
        status, answer = self._call("POST", "/api/v1/nodes", manifest)
        if status >= 300:
            raise TestbedError(f"creating node {metadata['name']} failed ({status}): {answer}")

    def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v1/namespaces/{namespace}/pods")["items"]

    def events_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Events about one object, oldest first."""
        query = f"fieldSelector=involvedObject.name%3D{name}"
        return self.get(f"/api/v1/namespaces/{namespace}/events?{query}")["items"]

    def create_pod(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        status, answer = self._call("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)
        if status >= 300:
            raise TestbedError(f"creating pod failed ({status}): {answer}")
        return answer

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the pod; ``None`` values remove keys."""
        status, answer = self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch)
        if status >= 300:
            raise TestbedError(f"patching pod {namespace}/{name} failed ({status}): {answer}")
        return answer

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        query = "" if grace_seconds is None else f"?gracePeriodSeconds={grace_seconds}"
        self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}{query}")

    # ---- waiting ----------------------------------------------------------------------------
    async def wait_for_pod(
        self, namespace: str, name: str, predicate: PodPredicate, timeout: float = 30.0
    ) -> dict[str, Any] | None:
        """Poll the pod until ``predicate(pod)`` holds (``pod`` is None once it is gone)."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        async with self.api_client() as api:
            core = client.CoreV1Api(api)
            while True:
                last = await _read_pod(core, namespace, name)
                if predicate(last):
                    return last
                if time.monotonic() > deadline:
                    status = last.get("status") if last else "gone"
                    raise TimeoutError(
                        f"pod {namespace}/{name} did not reach the condition in {timeout}s; last status: {status}"
                    )
                await asyncio.sleep(0.1)

    # ---- local processes --------------------------------------------------------------------
    def set_runner_env(self, env: dict[str, str]) -> None:
        """Extra env for local pod processes started from now on (e.g. LD_LIBRARY_PATH)."""
        write_runner_env(self.state.directory, env)

    def runner_env(self) -> dict[str, str]:
        return read_runner_env(self.state.directory)

    def local_processes(self) -> list[ProcessRecord]:
        """The runner's live pod processes; ``name`` is ``namespace/pod/container``."""
        return [r for r in load_runner_children(self.state.directory) if is_alive(r)]

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        """stdout+stderr of a local pod's container ("" if it never started)."""
        logs = sorted(self.state.pods.glob(f"{namespace}_{name}_*/{container}.log"))
        return logs[-1].read_text(errors="replace") if logs else ""


async def _read_pod(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod as a dict, or None when it does not exist."""
    try:
        response = await core.read_namespaced_pod(name, namespace, _preload_content=False)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    body = json.loads(await response.read())
    if response.status == 404 or body.get("kind") == "Status":
        return None
    return body


def pod_phase_is(*phases: str) -> PodPredicate:
    """Predicate: the pod exists and its phase is one of ``phases``."""
    return lambda pod: pod is not None and pod.get("status", {}).get("phase") in phases


def pod_is_running_with_ip(pod: dict[str, Any] | None) -> bool:
    """What KubeSpawner's is_pod_running checks: Running, a pod IP, all containers ready."""
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status", {})
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and bool(statuses)
        and all(s.get("ready") for s in statuses)
    )


def pod_is_gone(pod: dict[str, Any] | None) -> bool:
    return pod is None
