"""The GPU queue's costs on the testbed (the ``mixed`` cluster), side by side in one run.

1. Slot freed -> queued server running: every quarter slot of the time-sliced nodes is taken, one
   spawn waits gated, a filler pod is deleted; the time until that spawn's start() returns. Beside
   it, the scheduler's own binding time: a plain pod created into a free slot, until it is bound.
2. start() with a free slot, the queue enabled (``queue.max_wait`` 3600) vs without (0), in
   alternating rounds of starts one after the other: medians and their ratio.

With ``--dra``, on the ``dra`` cluster instead: row 1 for a DRA memory slice. Four pods with 20 GiB
claims (from one ResourceClaimTemplate) fill the 80 GiB A100, a fracnb spawn of a 20 GiB DRA slice
waits gated, a filler is deleted; the time until that spawn's start() returns, and beside it the
scheduler's own time to allocate a pending plain pod's claim and bind it after the same event.

    python -m bench.queue [--rounds 5] [--notebooks 20] [--frees 5] [--dra]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traitlets.config import Config

from fracnb_spawner.cluster.kube import kubeconfig_at
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until_async

TS4 = {"type": "kwok", "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
SLOTS = 64


def config(namespace: str, max_wait: int) -> Config:
    c = Config()
    c.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25}, "queue": {"max_wait": max_wait}}
    ]
    c.FractionalSpawner.namespace = namespace
    c.FractionalSpawner.node_selector = {"type": "kwok"}
    c.FractionalSpawner.start_timeout = 60
    return c


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": TS4,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
        },
    }


def spawner(cls: type, c: Config, name: str, profile: str = "q") -> Any:
    """A spawner of ``cls`` for user ``name`` choosing ``profile``, outside a hub (the benchmarks' one)."""
    s = cls(_mock=True, config=c)
    s.user.name = name
    s.user.groups = []
    s.pod_name = f"jupyter-{name}"
    s.user_options = {"profile": profile}
    return s


async def bound(testbed: Testbed, namespace: str, name: str) -> float:
    while True:
        pod = testbed.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod and pod.get("spec", {}).get("nodeName"):
            return time.perf_counter()
        await asyncio.sleep(0.01)


async def queued(waiting: Any, task: asyncio.Future) -> None:
    """Until the spawn holds a place in line (polled: the place is a plain attribute)."""

    def placed() -> bool:
        if waiting.queue.went_straight or task.done():
            raise RuntimeError(f"{waiting.pod_name} did not queue: the hub saw a free slot")
        ticket = getattr(waiting.queue.place, "ticket", None)  # its coordinator ticket, once it waits
        return ticket is not None and ticket.position is not None

    await wait_until_async(placed, what=f"{waiting.pod_name}'s place in the queue", timeout=60, interval=0.01)


async def hub_sees(waiting: Any, what: str, seen: Callable[[Any], bool]) -> None:
    """Until the hub's watches (``ClusterWatches``) show what the cluster holds: a spawn the queue admits
    on an older picture, with a slot still free in it, goes straight to the scheduler instead of queueing."""
    watches = waiting.hub_state.cluster(waiting.api, waiting.log)
    await wait_until_async(lambda: seen(watches), what=f"the hub's watch to show {what}", timeout=60, interval=0.01)


def fillers_bound(watches: Any) -> bool:
    pods = watches.view.pods.objects()
    return sum(1 for p in pods if p["metadata"]["name"].startswith("filler-") and p["spec"].get("nodeName")) == SLOTS


async def slot_freed_to_running(cls: type, testbed: Testbed, namespace: str, index: int) -> tuple[float, float]:
    waiting = spawner(cls, config(namespace, 3600), f"queued{index}")
    await hub_sees(waiting, "every slot taken", fillers_bound)
    task = asyncio.ensure_future(waiting.start())
    await queued(waiting, task)
    freed = time.perf_counter()
    testbed.delete_pod(namespace, f"filler-{index:02d}", grace_seconds=0)
    try:
        await task
    except Exception:
        pod = testbed.get(f"/api/v1/namespaces/{namespace}/pods/{waiting.pod_name}")
        print("the queued pod did not start:", pod.get("spec", {}).get("schedulingGates"), pod.get("status"))
        print("events:", [e.get("message") for e in testbed.events_for(namespace, waiting.pod_name)])
        raise
    running = time.perf_counter() - freed
    await waiting.stop()
    testbed.create_pod(namespace, plain_pod(f"filler-{index:02d}"))  # full again
    return running, await scheduler_binding_in_full(testbed, namespace, index)


async def scheduler_binding_in_full(testbed: Testbed, namespace: str, index: int) -> float:
    """The scheduler's floor for the same event: a pending plain pod, a slot freed, until it is bound."""
    await bound(testbed, namespace, f"filler-{index:02d}")
    testbed.create_pod(namespace, plain_pod(f"pending-{index}"))
    await asyncio.sleep(0.5)  # let the scheduler find it unschedulable first
    freed = time.perf_counter()
    testbed.delete_pod(namespace, f"filler-{index:02d}", grace_seconds=0)
    done = await bound(testbed, namespace, f"pending-{index}")
    testbed.delete_pod(namespace, f"pending-{index}", grace_seconds=0)
    testbed.create_pod(namespace, plain_pod(f"filler-{index:02d}"))
    await bound(testbed, namespace, f"filler-{index:02d}")
    return done - freed


async def one_by_one(cls: type, c: Config, notebooks: int, tag: str) -> list[float]:
    """start() of ``notebooks`` servers one after the other (each alone: the queue's own cost, not contention)."""
    spawners = [spawner(cls, c, f"{tag}-{i}") for i in range(notebooks)]
    latencies = []
    for s in spawners:
        started = time.perf_counter()
        await s.start()
        latencies.append(time.perf_counter() - started)
    await asyncio.gather(*(s.stop() for s in spawners))
    return latencies


async def run(testbed: Testbed, rounds: int, notebooks: int, frees: int) -> None:
    from kubespawner import KubeSpawner

    from fracnb_spawner.hubstate import HubState
    from fracnb_spawner.spawner import FractionalSpawner

    namespace = testbed.create_namespace("bench")
    cls = FractionalSpawner

    variants = [("queue", 3600), ("no-queue", 0)]
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    for name, wait in variants:  # warm-up
        await one_by_one(cls, config(namespace, wait), 5, f"warm-{name}")
    for round_ in range(rounds):
        order = variants if round_ % 2 == 0 else variants[::-1]
        for name, wait in order:
            latencies = await one_by_one(cls, config(namespace, wait), notebooks, f"{name}{round_}")
            samples[name].extend(latencies)
            print(f"round {round_ + 1} {name:8}: median start {statistics.median(latencies):.3f} s")
    ours, theirs = statistics.median(samples["queue"]), statistics.median(samples["no-queue"])
    print(f"start() with a free slot: queue {ours:.3f} s vs no queue {theirs:.3f} s, ratio {ours / theirs:.3f}")

    for index in range(SLOTS):
        testbed.create_pod(namespace, plain_pod(f"filler-{index:02d}"))
    for index in range(SLOTS):
        await bound(testbed, namespace, f"filler-{index:02d}")
    ours_freed, floor = [], []
    for index in range(frees):
        running, binding = await slot_freed_to_running(cls, testbed, namespace, index)
        ours_freed.append(running)
        floor.append(binding)
        print(
            f"free {index + 1}: queued server running {running:.3f} s after the slot freed; scheduler {binding:.3f} s"
        )
    print(
        f"slot freed -> queued server running: median {statistics.median(ours_freed):.3f} s;"
        f" scheduler's own binding of a pending pod: median {statistics.median(floor):.3f} s"
    )
    await HubState.discard()
    await KubeSpawner._stop_all_reflectors()


A100 = "NVIDIA-A100-SXM4-80GB"
A100_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"
DRA_FILLERS = 4  # 20 GiB claims on the dra cluster's one 80 GiB A100
QUARTER_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "a100-quarter"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "capacity": {"requests": {"memory": "20Gi"}},
        "selectors": [{"cel": {"expression": A100_CEL}}],
    }}]}}},
}  # fmt: skip


def dra_config(namespace: str) -> Config:
    c = Config()
    c.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25, "backend": "dra", "product": A100}}
    ]
    c.FractionalSpawner.namespace = namespace
    c.FractionalSpawner.start_timeout = 60
    return c


def claiming_pod(name: str) -> dict[str, Any]:
    """A plain pod holding a 20 GiB slice of the A100 through the shared template."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100-quarter"}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


async def dra_slot_freed_to_running(cls: type, testbed: Testbed, namespace: str, index: int) -> tuple[float, float]:
    filler = f"filler-{index % DRA_FILLERS}"
    waiting = spawner(cls, dra_config(namespace), f"queued{index}")
    await hub_sees(waiting, "the A100 full", lambda watches: len(watches.device_view().claims.objects()) == DRA_FILLERS)
    task = asyncio.ensure_future(waiting.start())
    await queued(waiting, task)
    freed = time.perf_counter()
    testbed.delete_pod(namespace, filler, grace_seconds=0)
    await task
    running = time.perf_counter() - freed
    await waiting.stop()
    testbed.create_pod(namespace, claiming_pod(filler))  # full again, once the spawn's claim is gone
    await bound(testbed, namespace, filler)
    testbed.create_pod(namespace, claiming_pod(f"pending-{index}"))
    await asyncio.sleep(0.5)  # let the scheduler find it unschedulable first
    freed = time.perf_counter()
    testbed.delete_pod(namespace, filler, grace_seconds=0)
    done = await bound(testbed, namespace, f"pending-{index}")
    testbed.delete_pod(namespace, f"pending-{index}", grace_seconds=0)
    testbed.create_pod(namespace, claiming_pod(filler))
    await bound(testbed, namespace, filler)
    return running, done - freed


async def run_dra(testbed: Testbed, frees: int) -> None:
    from kubespawner import KubeSpawner

    from fracnb_spawner.hubstate import HubState
    from fracnb_spawner.spawner import FractionalSpawner

    namespace = testbed.create_namespace("bench")
    rest = testbed.rest()
    try:
        rest.create(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates", QUARTER_TEMPLATE)
    finally:
        rest.close()
    for index in range(DRA_FILLERS):
        testbed.create_pod(namespace, claiming_pod(f"filler-{index}"))
    for index in range(DRA_FILLERS):
        await bound(testbed, namespace, f"filler-{index}")
    ours, floor = [], []
    for index in range(frees):
        running, binding = await dra_slot_freed_to_running(FractionalSpawner, testbed, namespace, index)
        ours.append(running)
        floor.append(binding)
        print(
            f"free {index + 1}: queued DRA server running {running:.3f} s after the slice freed;"
            f" scheduler {binding:.3f} s"
        )
    print(
        f"DRA slice freed -> queued server running: median {statistics.median(ours):.3f} s;"
        f" scheduler's own allocation and binding of a pending pod: median {statistics.median(floor):.3f} s"
    )
    await HubState.discard()
    await KubeSpawner._stop_all_reflectors()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--notebooks", type=int, default=20)
    parser.add_argument("--frees", type=int, default=5)
    parser.add_argument("--dra", action="store_true", help="a DRA slice freed -> the queued server running")
    args = parser.parse_args()
    cluster = "dra" if args.dra else "mixed"
    with tempfile.TemporaryDirectory() as directory:
        print(f"starting the testbed ({cluster} cluster) ...")
        state = up(load_cluster(cluster), Path(directory) / "state", bin_dir=find_bin_dir())
        try:
            with kubeconfig_at(state.kubeconfig):
                if args.dra:
                    asyncio.run(run_dra(Testbed(state), args.frees))
                else:
                    asyncio.run(run(Testbed(state), args.rounds, args.notebooks, args.frees))
        finally:
            down(state.directory)


if __name__ == "__main__":
    main()
