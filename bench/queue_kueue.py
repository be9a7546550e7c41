"""Slot freed -> queued notebook running, on Kueue (``c.FracnbQueue.engine = "kueue"``) and on fracnb's own
queue, side by side in one run on the testbed's ``kueue`` cluster (Kueue v0.17.0's manager, built by
testbed/go/build-kueue.sh).

Each round does both, in alternating order:

- builtin: every quarter slot of the cluster's time-sliced KWOK node is taken by plain pods, one spawn
  waits gated by fracnb's queue, a filler is deleted; the time until that spawn's start() returns.
- kueue: a team ClusterQueue with quota for one quarter GPU, held by an admitted pod; one spawn waits
  gated by Kueue; the holder is deleted; the time until that spawn's start() returns (Kueue's garbage-
  collected Workload, its next scheduling cycle, the gate lifted, the scheduler's binding).

For both, also the time from the gate lifted (seen by polling the pod every 10 ms) to start() returning: with
Kueue, fracnb's part on top of Kueue's own admission (with the scheduler's binding and KubeSpawner's detection of
the running pod in it).

    python -m bench.queue_kueue [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from traitlets.config import Config

from bench.queue import spawner
from fracnb_spawner.cluster.kube import close_shared_clients, kubeconfig_at
from fracnb_spawner.hubstate import HubState
from fracnb_spawner.spawner import FractionalSpawner
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed
from fracnb_testbed.kueue import find_kueue
from fracnb_testbed.procs import wait_until_async
from tests.kueue.objects import cluster_queue, create, ensure_priority_class, flavor, gpu_pod, local_queue

SLOTS = 8  # the kueue cluster's a100-ts4-0: 2 GPUs x 4


def config(namespace: str, engine: str) -> Config:
    c = Config()
    c.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25}, "queue": {"max_wait": 3600}}
    ]
    c.FractionalSpawner.namespace = namespace
    c.FractionalSpawner.node_selector = {"type": "kwok"}
    c.FractionalSpawner.start_timeout = 60
    c.FractionalSpawner.delete_grace_period = 0
    c.FracnbQueue.engine = engine
    return c


def placed(testbed: Testbed, namespace: str, name: str) -> bool:
    status, pod = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return status == 200 and bool(pod["spec"].get("nodeName"))


def gated(testbed: Testbed, namespace: str, name: str) -> bool:
    status, pod = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return status == 200 and bool(pod["spec"].get("schedulingGates"))


def gate_lifted_at(testbed: Testbed, namespace: str, name: str, deadline: float) -> float | None:
    """When this process first saw the pod without a scheduling gate (polled every 10 ms, in a thread)."""
    while time.perf_counter() < deadline:
        if not gated(testbed, namespace, name):
            return time.perf_counter()
        time.sleep(0.01)
    return None


async def freed_to_running(
    testbed: Testbed, namespace: str, engine: str, holders: list[str], index: int
) -> tuple[float, float]:
    """Seconds from the holder's deletion to the spawn's start() returning, and from the gate lifted (by Kueue,
    or by fracnb's queue) to the same moment: with Kueue, fracnb's part on top of Kueue's admission."""
    waiting = spawner(FractionalSpawner, config(namespace, engine), f"{engine}{index}")
    task = asyncio.ensure_future(waiting.start())
    await wait_until_async(lambda: gated(testbed, namespace, waiting.pod_name), what="the spawn gated", timeout=60)
    await asyncio.sleep(1.5)  # Kueue: past its requeue batch, so the wait is steady, not a first look
    if task.done():
        raise RuntimeError(f"{waiting.pod_name} started before a slot was freed: {task.result()!r}")
    began = time.perf_counter()
    lifting = asyncio.ensure_future(asyncio.to_thread(gate_lifted_at, testbed, namespace, waiting.pod_name, began + 60))
    testbed.delete_pod(namespace, holders[0], grace_seconds=0)
    await asyncio.wait_for(task, 60)
    ended = time.perf_counter()
    lifted = await lifting
    await waiting.stop(now=True)
    await wait_until_async(lambda: not placed(testbed, namespace, waiting.pod_name), what="the pod gone", timeout=60)
    return ended - began, ended - (lifted if lifted is not None else began)


async def fill(testbed: Testbed, namespace: str, manifests: list[dict]) -> list[str]:
    names = [testbed.create_pod(namespace, m)["metadata"]["name"] for m in manifests]
    for name in names:
        await wait_until_async(lambda n=name: placed(testbed, namespace, n), what=f"{name} placed", timeout=60)
    return names


async def run(testbed: Testbed, rounds: int) -> None:
    namespace = testbed.create_namespace("bench-kueue")
    ensure_priority_class(testbed, "fracnb-notebook", 1000)
    create(testbed, flavor("bench-flavor"))
    create(testbed, cluster_queue("bench-team", "bench-flavor", "bench-alone", 250))
    results: dict[str, list[float]] = {"builtin": [], "kueue": []}
    after_gate: dict[str, list[float]] = {"builtin": [], "kueue": []}
    for index in range(rounds):
        order = ("builtin", "kueue") if index % 2 == 0 else ("kueue", "builtin")
        for engine in order:
            tag = f"{engine}{index}"
            if engine == "kueue":
                create(testbed, local_queue(namespace, f"fracnb-{tag}", "bench-team"))
                create(testbed, local_queue(namespace, f"holder-{index}", "bench-team"))
                # The holder has the notebooks' priority: a lower one would be preempted at once.
                holder = gpu_pod(f"holder-{index}", f"holder-{index}", priority_class="fracnb-notebook")
                holders = await fill(testbed, namespace, [holder])
            else:
                holders = await fill(testbed, namespace, [gpu_pod(f"f{index}-{s}", None) for s in range(SLOTS)])
            total, after = await freed_to_running(testbed, namespace, engine, holders, index)
            results[engine].append(total)
            after_gate[engine].append(after)
            for name in holders[1:]:
                testbed.delete_pod(namespace, name, grace_seconds=0)
            print(f"round {index} {engine}: {total:.3f} s, {after:.3f} s after the gate was lifted", file=sys.stderr)
    await HubState.discard()
    await close_shared_clients()
    builtin, on_kueue = (statistics.median(results[e]) for e in ("builtin", "kueue"))
    print(f"slot freed -> queued notebook's start() returned, {rounds} rounds, medians:")
    print(f"  builtin queue: {builtin:.3f} s  (all: {', '.join(f'{t:.3f}' for t in results['builtin'])})")
    print(f"  Kueue v0.17:   {on_kueue:.3f} s  (all: {', '.join(f'{t:.3f}' for t in results['kueue'])})")
    print(f"  ratio Kueue / builtin: {on_kueue / builtin:.1f}")
    print("gate lifted (by Kueue's admission, or by fracnb's queue) -> start() returned, medians:")
    for engine, label in (("builtin", "builtin queue"), ("kueue", "Kueue v0.17")):
        times = after_gate[engine]
        print(f"  {label + ':':15}{statistics.median(times):.3f} s  (all: {', '.join(f'{t:.3f}' for t in times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    find_kueue()
    with tempfile.TemporaryDirectory() as directory:
        state = up(load_cluster("kueue"), Path(directory) / "tb", bin_dir=find_bin_dir())
        try:
            with kubeconfig_at(state.kubeconfig):
                asyncio.run(run(Testbed(state), args.rounds))
        finally:
            down(state.directory)


if __name__ == "__main__":
    main()
