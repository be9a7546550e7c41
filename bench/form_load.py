"""Spawn-form loads: the hub-wide watch (ours) vs a LIST of nodes and pods per load (before).

Runs against the ``large`` testbed cluster (460 KWOK nodes) with ``--pods`` GPU pods bound to
its nodes. Each round, ``--users`` users load the form at once, with free counts and a quota
check on; the variants alternate. Reported: the median time of one form load, the median time
for the whole round, and the hub's own LISTs of pods and nodes (the apiserver's audit log, counted for the hub's
client alone: the testbed's scheduler, controllers and KWOK list too).

    python -m bench.form_load [--rounds 3] [--users 20] [--pods 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

from traitlets.config import Config

from fracnb_spawner.cluster.kube import kubeconfig_at
from fracnb_testbed.audit import count_by_resource
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed

PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}},
    {"display_name": "Eighth", "slug": "eighth", "gpu": {"fraction": "1/8", "backend": "mps"}},
    {"display_name": "Whole", "slug": "whole", "gpu": {"count": 1}},
]


def config_for(namespace: str) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = PROFILES
    config.FractionalSpawner.namespace = namespace
    config.FracnbQuotas.default_user_quota = 2
    return config


def list_requests(testbed: Testbed, hub_agent: str) -> int:
    """The hub's LISTs of pods and nodes so far (both variants list through the hub's one API client)."""
    return sum(count_by_resource(testbed.audited_requests(), hub_agent).values())


def make_pods(testbed: Testbed, namespace: str, count: int) -> None:
    """GPU pods bound straight to time-sliced nodes (as the scheduler would), labelled like a hub's."""
    nodes = [n["metadata"]["name"] for n in testbed.list_nodes("nvidia.com/gpu.sharing-strategy=time-slicing")]
    rest = testbed.rest()
    try:
        for index in range(count):
            rest.create(
                f"/api/v1/namespaces/{namespace}/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"load-{index}",
                        "labels": {"component": "singleuser-server"},
                        "annotations": {"hub.jupyter.org/username": f"u{index}", "fracnb.io/gpu-fraction": "1/4"},
                    },
                    "spec": {
                        "nodeName": nodes[index % len(nodes)],
                        "containers": [
                            {
                                "name": "notebook",
                                "image": "example.invalid/notebook",
                                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                            }
                        ],
                    },
                },
            )
    finally:
        rest.close()


def uncached_class() -> type:
    """The spawner as it was: a LIST of nodes, of all pods and of the hub's pods on every form load."""
    from fracnb_spawner.choosing import Choosing
    from fracnb_spawner.cluster.kube import list_pods, singleuser_selector
    from fracnb_spawner.cluster.slots import Cluster
    from fracnb_spawner.cluster.view import LIVE_PODS
    from fracnb_spawner.quota import admission
    from fracnb_spawner.quota.policy import allocations_from_pods
    from fracnb_spawner.spawner import FractionalSpawner

    class Listing(Choosing):
        """What the form reads, listed when one load first asks for it (each load is a new spawner here)."""

        listed: Cluster | None = None
        held: list | None = None

        async def read_cluster(self, ask: Any, *, wait: bool) -> Cluster:
            if self.listed is None:
                api = self.host.api
                serialize = api.api_client.sanitize_for_serialization
                nodes = await api.list_node()
                pods = await api.list_pod_for_all_namespaces(field_selector=LIVE_PODS)
                self.listed = Cluster(serialize(nodes)["items"], serialize(pods)["items"])
            return self.listed

        async def quota_decision_now(self, row: Any) -> Any:
            if self.held is None:
                host = self.host
                self.held = allocations_from_pods(await list_pods(host.api, host.namespace, singleuser_selector()))
            fraction = row.plan.fraction if row is not None else Fraction(0)
            ledger = self.host.hub_state.ledger
            return admission.decision(self.quota_policy(), ledger, self.held, self._applicant(), fraction)

    class Uncached(FractionalSpawner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.choosing = Listing(self)

    return Uncached


async def round_of(spawner_class: type, config: Config, users: int, tag: str) -> tuple[list[float], float]:
    spawners: list[Any] = []
    for index in range(users):
        spawner = spawner_class(_mock=True, config=config)
        spawner.user.name = f"{tag}-{index}"
        spawner.user.groups = []
        spawners.append(spawner)

    async def timed(spawner: Any) -> float:
        started = time.perf_counter()
        html = await spawner.render_options_form()
        assert "free now" in html, "the form shows free counts"
        return time.perf_counter() - started

    started = time.perf_counter()
    latencies = await asyncio.gather(*(timed(s) for s in spawners))
    return list(latencies), time.perf_counter() - started


async def run(testbed: Testbed, rounds: int, users: int, pods: int) -> None:
    from kubespawner import KubeSpawner

    from fracnb_spawner.hubstate import HubState
    from fracnb_spawner.spawner import FractionalSpawner

    namespace = testbed.create_namespace("bench")
    print(f"creating {pods} GPU pods ...")
    make_pods(testbed, namespace, pods)
    variants = [("ours", FractionalSpawner), ("before", uncached_class())]
    latencies: dict[str, list[float]] = {name: [] for name, _ in variants}
    walls: dict[str, list[float]] = {name: [] for name, _ in variants}
    lists: Counter[str] = Counter()
    hub_agent = FractionalSpawner(_mock=True, config=config_for(namespace)).api.api_client.user_agent
    for name, cls in variants:  # warm-up: the watch's first LIST, connection pools
        await round_of(cls, config_for(namespace), 5, f"warm-{name}")
    for index in range(rounds):
        for name, cls in variants[index % 2 :] + variants[: index % 2]:
            before = list_requests(testbed, hub_agent)
            samples, wall = await round_of(cls, config_for(namespace), users, f"{name}{index}")
            lists[name] += list_requests(testbed, hub_agent) - before
            latencies[name].extend(samples)
            walls[name].append(wall)
            print(f"round {index + 1} {name:6}: median load {statistics.median(samples):.3f} s, round {wall:.2f} s")
    await HubState.discard()
    await KubeSpawner._stop_all_reflectors()
    for name, _ in variants:
        print(
            f"{name:6}: median form load {statistics.median(latencies[name]):.3f} s,"
            f" median round of {users} {statistics.median(walls[name]):.2f} s,"
            f" the hub's LISTs {lists[name]} for {rounds * users} loads"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--pods", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        print("starting the testbed (large cluster) ...")
        state = up(load_cluster("large"), Path(directory) / "state", bin_dir=find_bin_dir())
        try:
            with kubeconfig_at(state.kubeconfig):
                asyncio.run(run(Testbed(state), args.rounds, args.users, args.pods))
        finally:
            down(state.directory)


if __name__ == "__main__":
    main()
