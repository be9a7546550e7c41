"""Reclaim: a notebook asked for while lower-priority batch work holds its GPU, until it runs.

Both ways side by side in one run, rounds alternating, on two testbed clusters at once:

1. kube-scheduler's preemption (extended resource, ``mixed`` cluster): a batch pod of priority
   -100 holds all 8 ``nvidia.com/gpu`` of ``a100-whole-0``; a fracnb spawn of one whole GPU pinned
   to that node. The queue counts the batch units as free, so the pod goes to the scheduler, which
   preempts the batch pod.
2. The fracnb service's eviction (DRA, ``dra`` cluster): a batch pod of priority -100 holds the
   A100 whole through a ResourceClaim; a fracnb spawn of a 20 GiB slice of it queues gated, the
   service's reclaim loop (``c.FracnbReclaim.every``, default 5 s) evicts the batch pod, the claim
   is freed, the hub's queue lifts the gate, kube-scheduler allocates.

Each sample is the time from ``start()`` to its return (the server running). KWOK deletes an
evicted or preempted pod at once: a real pod's grace period (its time to checkpoint) adds to both.

    python -m bench.reclaim [--rounds 7] [--every 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from traitlets.config import Config

from bench.queue import A100, A100_CEL, bound, spawner
from fracnb_spawner.cluster.kube import close_shared_clients, kubeconfig_at
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed

LENDING = Path(__file__).resolve().parents[1] / "helm-values" / "lending.yaml"
WHOLE_NODE = "a100-whole-0"


def lending_priority_class() -> dict[str, Any]:
    """The shipped batch PriorityClass (helm-values/lending.yaml's first object): -100, never preempting."""
    return next(yaml.safe_load_all(LENDING.read_text()))


BATCH = lending_priority_class()["metadata"]["name"]


def batch_priority(testbed: Testbed) -> None:
    """Create the shipped batch PriorityClass in ``testbed`` (kept if it exists)."""
    rest = testbed.rest()
    try:
        rest.create("/apis/scheduling.k8s.io/v1/priorityclasses", lending_priority_class(), exist_ok=True)
    finally:
        rest.close()


def batch_pod(name: str, *, units: int = 0) -> dict[str, Any]:
    """Priority -100: ``units`` of nvidia.com/gpu on the whole-GPU node, or (0) the A100 claim."""
    container: dict[str, Any] = {"name": "train", "image": "x"}
    spec: dict[str, Any] = {"priorityClassName": BATCH, "terminationGracePeriodSeconds": 30}
    if units:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(units)}}
        spec["nodeSelector"] = {"kubernetes.io/hostname": WHOLE_NODE}
    else:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "whole-a100"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {**spec, "containers": [container]}}


WHOLE_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "whole-a100"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": A100_CEL}}],
    }}]}}},
}  # fmt: skip


def hub_config(namespace: str, dra: bool) -> Config:
    c = Config()
    if dra:
        gpu: dict[str, Any] = {"fraction": 0.25, "backend": "dra", "product": A100}
    else:
        gpu = {"count": 1}
        c.FractionalSpawner.node_selector = {"kubernetes.io/hostname": WHOLE_NODE}
    c.FractionalSpawner.profile_list = [{"display_name": "GPU", "slug": "g", "gpu": gpu}]
    c.FractionalSpawner.namespace = namespace
    c.FractionalSpawner.start_timeout = 120
    c.FractionalSpawner.delete_grace_period = 0
    return c


async def one_round(testbed: Testbed, namespace: str, index: int, *, dra: bool) -> float:
    name = f"train-{index}"
    testbed.create_pod(namespace, batch_pod(name, units=0 if dra else 8))
    await bound(testbed, namespace, name)
    from fracnb_spawner.spawner import FractionalSpawner

    s = spawner(FractionalSpawner, hub_config(namespace, dra), f"nb{index}", profile="g")
    asked = time.perf_counter()
    await s.start()
    running = time.perf_counter() - asked
    rest = testbed.rest()
    try:
        status, batch = rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    finally:
        rest.close()
    if status == 200 and not batch["metadata"].get("deletionTimestamp"):
        raise RuntimeError(f"{name} still runs beside the notebook: nothing was reclaimed")
    await s.stop()
    testbed.delete_pod(namespace, name, grace_seconds=0)  # if the notebook's stop came first, it ran again
    return running


async def run(scheduler_bed: Testbed, dra_bed: Testbed, rounds: int, every: float) -> None:
    from fracnb_spawner.hubstate import HubState
    from fracnb_spawner.reclaim.victims import Policy
    from fracnb_spawner.service.choices import hub_choices
    from fracnb_spawner.service.loops import reclaim_forever
    from fracnb_spawner.service.reclaiming import KubeReclaimApi, Reclaimer, ReclaimMetrics, want_from_choices

    namespaces = {}
    for bed, dra in ((scheduler_bed, False), (dra_bed, True)):
        batch_priority(bed)
        namespaces[dra] = bed.create_namespace("bench")
    rest = dra_bed.rest()
    try:
        rest.create(f"/apis/resource.k8s.io/v1/namespaces/{namespaces[True]}/resourceclaimtemplates", WHOLE_TEMPLATE)
    finally:
        rest.close()
    api = KubeReclaimApi(dra_bed.api_client())
    wants = want_from_choices(hub_choices(hub_config(namespaces[True], True)))
    reclaimer = Reclaimer(api, Policy(), 10, wants, ReclaimMetrics(CollectorRegistry()))
    loop = asyncio.ensure_future(reclaim_forever(reclaimer, every))
    samples: dict[str, list[float]] = {"preemption": [], "eviction": []}
    beds = {"preemption": (scheduler_bed, False), "eviction": (dra_bed, True)}
    try:
        for index in range(rounds):
            for way in ("preemption", "eviction") if index % 2 == 0 else ("eviction", "preemption"):
                bed, dra = beds[way]
                with kubeconfig_at(bed.kubeconfig):  # a fresh hub state per round, on its own cluster
                    seconds = await one_round(bed, namespaces[dra], index, dra=dra)
                    await HubState.discard()
                    await close_shared_clients()
                samples[way].append(seconds)
                print(f"round {index + 1} {way:10}: notebook running {seconds:.2f} s after it was asked for")
    finally:
        loop.cancel()
        await api.core.api_client.close()
    for way, values in samples.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        median = statistics.median(values)
        print(f"{way}: median {median:.2f} s, p95 {p95:.2f} s, max {max(values):.2f} s ({len(values)} rounds)")
    ratio = statistics.median(samples["eviction"]) / statistics.median(samples["preemption"])
    print(f"eviction / preemption, medians: {ratio:.2f} (reclaim pass every {every:g} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--every", type=float, default=5.0, help="c.FracnbReclaim.every: seconds between passes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        print("starting the testbed (mixed and dra clusters) ...")
        mixed = up(load_cluster("mixed"), Path(directory) / "mixed", bin_dir=find_bin_dir())
        try:
            dra = up(load_cluster("dra"), Path(directory) / "dra", bin_dir=find_bin_dir())
            try:
                asyncio.run(run(Testbed(mixed), Testbed(dra), args.rounds, args.every))
            finally:
                down(dra.directory)
        finally:
            down(mixed.directory)


if __name__ == "__main__":
    main()
