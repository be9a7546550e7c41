"""A cluster, an apiserver and a clock for the GPU queue's coordinator, each as small as what it reads.

- :class:`FakeCluster` is the ``ClusterWatches`` the coordinator reads: ``.view`` (a change event
  and ``snapshot()``), ``read()`` and ``device_view()``. It keeps whole pods and nodes and gives
  them out trimmed by the real view's own functions, so the coordinator sees what the hub's watch
  would keep of them.
- :class:`FakeApi` is the ``CoreV1Api`` it patches and deletes pods with: it records each call and
  applies it to the cluster as the apiserver would (the JSON patch's ``test`` operation included;
  404 for a pod that is not there).
- :class:`FakeClock` is a :class:`fracnb_spawner.common.clock.Clock` that moves only when told.
- :class:`FakeLocalQueues` answers the GET of a Kueue LocalQueue (the Kueue engine's check that it is the user's).
"""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.cluster.slots import Cluster, ResourceAsk, slot_kind
from fracnb_spawner.cluster.view import object_key, trim_node, trim_pod
from tests.hub_pods import pod

RESOURCE = "nvidia.com/gpu.shared"
SELECTOR = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
KIND = slot_kind(RESOURCE, SELECTOR)
T0 = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)


def ask(units: int = 1) -> ResourceAsk:
    """A quarter (or ``units`` quarters) of a time-sliced GPU: what a queued spawn of :data:`KIND` asks."""
    return ResourceAsk(KIND, RESOURCE, SELECTOR, units)


def node(name: str, slots: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": dict(SELECTOR)},
        "spec": {},
        "status": {"allocatable": {RESOURCE: str(slots)}},
    }


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def gpu_pod(user: str, *, server: str = "", units: int = 1, fraction: str = "1/4", **annotations: str) -> dict:
    """The pod of ``user``'s server of :data:`KIND` as FractionalSpawner makes it, not yet bound to a node."""
    made = pod(user, server, kind=KIND, fraction=fraction, **annotations)
    if server:
        made["metadata"]["name"] = f"jupyter-{user}-{server}"
    made["spec"]["containers"][0]["resources"] = {"limits": {RESOURCE: str(units)}}
    made["status"]["phase"] = "Pending"
    return made


def running(user: str, node_name: str = "gpu-0", **kwargs: Any) -> dict[str, Any]:
    """A server holding its slot on ``node_name``."""
    made = gpu_pod(user, **kwargs)
    made["spec"]["nodeName"] = node_name
    made["status"]["phase"] = "Running"
    return made


def gated(user: str, queued_at: datetime, *, priority: int = 0, max_wait: float = 600, **kwargs: Any) -> dict:
    """A pod waiting in the queue, with the place its annotations give it."""
    made = gpu_pod(
        user,
        **{
            "fracnb.io/queued-at": stamp(queued_at),
            "fracnb.io/queue-priority": str(priority),
            "fracnb.io/max-wait": f"{max_wait:g}",
        },
        **kwargs,
    )
    made["spec"]["schedulingGates"] = [{"name": "fracnb.io/queue"}]
    return made


class FakeView:
    """The part of ``ClusterView`` the coordinator reads."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.changed = asyncio.Event()

    async def snapshot(self, wait: float = 10.0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if not self.cluster.readable:
            return [], []
        pods = (trim_pod(p) for p in self.cluster.pods.values())
        return [trim_node(n) for n in self.cluster.nodes], [p for p in pods if p is not None]


class FakeCluster:
    """Nodes and pods as the apiserver holds them; every change wakes the queue, as a watch event does."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes = list(nodes)
        self.pods: dict[str, dict[str, Any]] = {}
        self.readable = True
        self.view = FakeView(self)

    # What the coordinator calls.
    async def read(self, *, devices: bool, wait: bool) -> Cluster | None:
        assert not devices, "these tests ask for device-plugin slots only"
        nodes, pods = await self.view.snapshot()
        return Cluster(nodes, pods) if nodes else None

    def device_view(self) -> Any:
        raise AssertionError("a device-plugin ask never reads ResourceSlices")

    # What the tests do to the cluster.
    def add(self, *pods: dict[str, Any]) -> None:
        for added in pods:
            self.pods[object_key(added)] = copy.deepcopy(added)
        self.view.changed.set()

    def remove(self, key: str) -> None:
        del self.pods[key]
        self.view.changed.set()

    def bind(self, key: str, node_name: str = "gpu-0") -> None:
        """What the scheduler does to an ungated pod."""
        assert not self.pods[key]["spec"].get("schedulingGates"), f"{key} is still gated"
        self.pods[key]["spec"]["nodeName"] = node_name
        self.pods[key]["status"]["phase"] = "Running"
        self.view.changed.set()

    def is_gated(self, key: str) -> bool:
        return bool(self.pods[key]["spec"].get("schedulingGates"))


class FakeApi:
    """``patch_namespaced_pod`` and ``delete_namespaced_pod`` of a ``CoreV1Api``, on a :class:`FakeCluster`."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.patches: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.deletes: list[tuple[str, str, int | None]] = []
        self.watch_lags = False  # True: a patch is taken, but the view does not show it yet

    async def patch_namespaced_pod(self, name: str, namespace: str, body: list[dict[str, Any]]) -> None:
        self.patches.append((namespace, name, body))
        target = self.cluster.pods.get(f"{namespace}/{name}")
        if target is None:
            raise ApiException(status=404, reason="Not Found")
        spec = copy.deepcopy(target["spec"]) if self.watch_lags else target["spec"]
        for operation in body:
            path = operation["path"].removeprefix("/spec/")
            if operation["op"] == "test" and spec.get(path) != operation["value"]:
                raise ApiException(status=422, reason=f"test failed on {operation['path']}")
            if operation["op"] == "remove":
                del spec[path]
        self.cluster.view.changed.set()

    async def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> None:
        self.deletes.append((namespace, name, grace_period_seconds))
        if f"{namespace}/{name}" not in self.cluster.pods:
            raise ApiException(status=404, reason="Not Found")
        self.cluster.remove(f"{namespace}/{name}")

    def lifted(self) -> list[str]:
        """The pods whose gate was asked off, in order."""
        return [name for _namespace, name, _body in self.patches]


class FakeClock:
    """Wall time from :data:`T0` and a monotonic count, both moved by :meth:`advance` alone."""

    def __init__(self) -> None:
        self.wall = T0
        self.count = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.count

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.count += seconds


class FakeLocalQueues:
    """The ``ApiClient`` a ``CustomObjectsApi`` GETs Kueue's LocalQueues through: the named one as the apiserver
    holds it, or its 404; ``status``: the apiserver's failure (e.g. 503) for every call instead."""

    client_side_validation = False

    def __init__(self, *queues: dict[str, Any], status: int | None = None) -> None:
        self.queues = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in queues}
        self.status = status

    def select_header_accept(self, accepts: list[str]) -> str:
        return accepts[0]

    async def call_api(self, path: str, method: str, path_params: dict[str, str], *_: Any, **__: Any) -> Any:
        assert (method, path_params["plural"]) == ("GET", "localqueues"), f"{method} {path} is not a LocalQueue's GET"
        if self.status is not None:
            raise ApiException(status=self.status, reason="Service Unavailable")
        found = self.queues.get((path_params["namespace"], path_params["name"]))
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(found)


def local_queue(namespace: str, name: str, owner: str | None = None) -> dict[str, Any]:
    """A LocalQueue of team-a, annotated as ``owner``'s (fracnb.io/hub-user) if one is given."""
    annotations = {"fracnb.io/hub-user": owner} if owner is not None else {}
    metadata = {"name": name, "namespace": namespace, "annotations": annotations}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": metadata,
        "spec": {"clusterQueue": "team-a"},
    }
