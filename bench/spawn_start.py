"""start() to running for 100 notebooks: FractionalSpawner 0.25 GPU vs stock KubeSpawner, 1 whole GPU.

Both run against the same testbed (the ``large`` cluster: 150 A100 nodes time-sliced 4 ways,
30 H100 nodes with 8 whole GPUs, ...), alternating, 100 concurrent starts per batch. Each
sample is one notebook's start() call; pods are deleted between batches.

    python -m bench.spawn_start [--rounds 3] [--notebooks 100]

With ``--dra``: FractionalSpawner's 0.25 GPU as a DRA memory slice (a ResourceClaim per
server, made by the hub right after the pod and allocated by kube-scheduler) vs the
same 0.25 GPU time-sliced, on one testbed that has both (:func:`dra_bench_cluster`).

    python -m bench.spawn_start --dra [--rounds 3] [--notebooks 100] [--phases] [--controller-qps 200]

``--together`` starts every variant's notebooks in one batch, interleaved (``--notebooks`` of each), so
that a load swing on a shared machine meets both alike; without it, each variant's batch runs alone, in
turn. ``--phases`` prints, per variant, the median time between a start's steps as watches see them
(:mod:`bench.start_phases`): pod created, claim created, claim allocated, pod bound, ready.
``--controller-qps`` first restarts kube-controller-manager with a higher client rate than its
default (20 requests/s, burst 30), which the resourceclaim controller shares with its pod updates;
``--scheduler-qps`` kube-scheduler (default 50 requests/s, burst 100), which writes each claim's
allocation besides each binding.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from traitlets.config import Config

from bench.start_phases import Phases
from fracnb_spawner.cluster.kube import kubeconfig_at
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import ClusterSpec, load_cluster, parse_cluster
from fracnb_testbed.controlplane import down, start_component, stop_component, up
from fracnb_testbed.handle import Testbed


def ours_config(namespace: str) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [{"display_name": "0.25 GPU", "slug": "gpu", "gpu": {"fraction": 0.25}}]
    config.FractionalSpawner.namespace = namespace
    config.FractionalSpawner.node_selector = {"type": "kwok"}
    config.FractionalSpawner.start_timeout = 300
    return config


def dra_config(namespace: str) -> Config:
    """Ours, the same quarter as a DRA memory slice."""
    config = ours_config(namespace)
    config.FractionalSpawner.profile_list = [
        {"display_name": "0.25 GPU", "slug": "gpu", "gpu": {"fraction": 0.25, "backend": "dra"}}
    ]
    return config


def dra_bench_cluster(nodes: int) -> ClusterSpec:
    """``nodes`` A100 nodes time-sliced 4 ways and ``nodes`` with one 80 GiB DRA GPU: 4 x nodes quarters each."""
    machine = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    gpus = [{"product": "NVIDIA A100-SXM4-80GB", "memory": "80Gi", "count": 1}]
    shared = {**machine, "nvidia.com/gpu.shared": "4"}
    return parse_cluster({
        "name": "dra-bench",
        "nodeGroups": [
            {"name": "a100-ts4", "count": nodes, "labels": labels, "capacity": shared},
            {"name": "a100-dra", "count": nodes, "capacity": machine, "draDevices": {"gpus": gpus}},
        ],
    })  # fmt: skip


def stock_config(namespace: str, override: dict | None = None) -> Config:
    """Stock KubeSpawner, one whole GPU per notebook (unless ``override`` says otherwise)."""
    config = Config()
    override = override or {"extra_resource_limits": {"nvidia.com/gpu": "1"}}
    config.KubeSpawner.profile_list = [{"display_name": "GPU", "slug": "gpu", "kubespawner_override": override}]
    config.KubeSpawner.namespace = namespace
    config.KubeSpawner.node_selector = {"type": "kwok"}
    config.KubeSpawner.start_timeout = 300
    return config


def stock_shared_config(namespace: str) -> Config:
    """Stock KubeSpawner with the same time-sliced quarter written by hand: same nodes as ours."""
    override = {
        "extra_resource_limits": {"nvidia.com/gpu.shared": "1"},
        "node_selector": {
            "type": "kwok",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.replicas": "4",
        },
    }
    return stock_config(namespace, override)


def spawners_of(spawner_class: type, config: Config, notebooks: int, tag: str) -> list[Any]:
    spawners = []
    for index in range(notebooks):
        spawner = spawner_class(_mock=True, config=config)
        spawner.pod_name = f"jupyter-{tag}-{index}"
        spawner.user_options = {"profile": "gpu"}
        spawners.append(spawner)
    return spawners


async def batch(
    spawner_class: type, config: Config, notebooks: int, tag: str, phases: Phases | None = None
) -> tuple[list[float], float]:
    return await started(spawners_of(spawner_class, config, notebooks, tag), phases)


async def started(spawners: list[Any], phases: Phases | None = None) -> tuple[list[float], float]:
    """Start all ``spawners`` at once: each one's start() time, and the batch's; then stop them."""

    async def timed(spawner) -> float:
        started = time.perf_counter()
        if phases is not None:
            phases.mark(spawner.pod_name, "called")
        await spawner.start()
        if phases is not None:
            phases.mark(spawner.pod_name, "returned")
        return time.perf_counter() - started

    started = time.perf_counter()
    latencies = await asyncio.gather(*(timed(s) for s in spawners))
    wall = time.perf_counter() - started
    await asyncio.gather(*(s.stop() for s in spawners))
    return list(latencies), wall


async def run(
    testbed: Testbed, rounds: int, notebooks: int, *, dra: bool = False, phases: bool = False, together: bool = False
) -> None:
    from kubespawner import KubeSpawner

    from fracnb_spawner.spawner import FractionalSpawner

    namespace = testbed.create_namespace("bench")
    variants = [
        ("ours", FractionalSpawner, ours_config),
        ("stock", KubeSpawner, stock_config),
        ("stock-shared", KubeSpawner, stock_shared_config),
    ]
    if dra:
        variants = [("ours-dra", FractionalSpawner, dra_config), ("ours", FractionalSpawner, ours_config)]
    recorder = None
    if phases:
        watch_client = testbed.api_client()
        recorder = Phases(watch_client, namespace)
        recorder.start()
    latencies: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    walls: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for name, cls, make in variants:  # warm-up: reflectors, connection pools, scheduler caches
        await batch(cls, make(namespace), 10, f"warm-{name}")
    for round_ in range(rounds):
        shift = round_ % len(variants)
        if together:
            await together_round(variants, namespace, notebooks, round_, recorder, latencies=latencies)
            continue
        for name, cls, make in variants[shift:] + variants[:shift]:
            samples, wall = await batch(cls, make(namespace), notebooks, f"{name}{round_}", recorder)
            latencies[name].extend(samples)
            walls[name].append(wall)
            print(f"round {round_ + 1} {name:12}: median start {statistics.median(samples):.3f} s, batch {wall:.1f} s")
    await KubeSpawner._stop_all_reflectors()
    if recorder is not None:
        await recorder.stop()
        await watch_client.close()
        for name, _cls, _make in variants:
            steps = recorder.summary(rf"jupyter-{re.escape(name)}\d+-\d+")
            print(f"{name:12} median between steps: {steps}")
    first = variants[0][0]
    ours = statistics.median(latencies[first])
    for peer, _cls, _make in variants[1:]:
        theirs = statistics.median(latencies[peer])
        batches = ""
        if walls[first]:
            batches = f"; batch ratio {statistics.median(walls[first]) / statistics.median(walls[peer]):.3f}"
        print(f"{first} vs {peer:12}: median start {ours:.3f} s vs {theirs:.3f} s, ratio {ours / theirs:.3f}{batches}")


async def together_round(
    variants: list, namespace: str, notebooks: int, round_: int, recorder: Phases | None, *, latencies: dict
) -> None:
    """One batch holding every variant's notebooks, interleaved: each meets the same load at the same moments."""
    groups = [spawners_of(cls, make(namespace), notebooks, f"{name}{round_}") for name, cls, make in variants]
    mixed = [spawner for row in zip(*groups, strict=True) for spawner in row]
    samples, wall = await started(mixed, recorder)
    for offset, (name, _cls, _make) in enumerate(variants):
        mine = samples[offset :: len(variants)]
        latencies[name].extend(mine)
        print(f"round {round_ + 1} {name:12}: median start {statistics.median(mine):.3f} s (batch of all {wall:.1f} s)")


def faster_controller_manager(state_dir: Path, qps: float) -> None:
    """kube-controller-manager again with a higher client rate (its default is 20 requests/s, burst 30)."""
    stopped = stop_component(state_dir, "kube-controller-manager", grace=10)
    argv = [a for a in stopped.argv if not a.startswith(("--kube-api-qps", "--kube-api-burst"))]
    argv += [f"--kube-api-qps={qps:g}", f"--kube-api-burst={2 * qps:g}"]
    start_component(state_dir, replace(stopped, argv=argv))
    time.sleep(5)  # its informers list before it creates claims; the warm-up batch absorbs the rest


def faster_scheduler(state_dir: Path, qps: float) -> None:
    """kube-scheduler again with a higher client rate (its default is 50 requests/s, burst 100)."""
    stopped = stop_component(state_dir, "kube-scheduler", grace=10)
    old = next(a for a in stopped.argv if a.startswith("--config="))
    config = yaml.safe_load(Path(old.split("=", 1)[1]).read_text())
    config["clientConnection"].update({"qps": qps, "burst": int(2 * qps)})
    path = state_dir / "scheduler-config-faster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    start_component(state_dir, replace(stopped, argv=[f"--config={path}" if a == old else a for a in stopped.argv]))
    time.sleep(5)  # its informers list before it schedules; the warm-up batch absorbs the rest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--notebooks", type=int, default=100)
    parser.add_argument("--dra", action="store_true", help="DRA memory slices vs time-sliced quarters")
    parser.add_argument("--phases", action="store_true", help="where the time goes: each pod's steps, from watches")
    parser.add_argument(
        "--together", action="store_true",
        help="start the variants' notebooks in one batch, interleaved, rather than batch after batch",
    )  # fmt: skip
    parser.add_argument(
        "--controller-qps", type=float, default=0,
        help="restart kube-controller-manager with this client rate (--kube-api-qps; burst twice that) first",
    )  # fmt: skip
    parser.add_argument(
        "--scheduler-qps", type=float, default=0,
        help="restart kube-scheduler with this client rate (clientConnection.qps; burst twice that) first",
    )  # fmt: skip
    args = parser.parse_args()
    # Room for a batch while the last batch's claims are still being freed.
    cluster = dra_bench_cluster(-(-(args.notebooks + 10) // 4)) if args.dra else load_cluster("large")
    with tempfile.TemporaryDirectory() as directory:
        print(f"starting the testbed ({cluster.name} cluster) ...")
        state = up(cluster, Path(directory) / "state", bin_dir=find_bin_dir())
        try:
            if args.controller_qps:
                faster_controller_manager(state.directory, args.controller_qps)
            if args.scheduler_qps:
                faster_scheduler(state.directory, args.scheduler_qps)
            with kubeconfig_at(state.kubeconfig):
                bench = run(
                    Testbed(state),
                    args.rounds,
                    args.notebooks,
                    dra=args.dra,
                    phases=args.phases,
                    together=args.together,
                )
                asyncio.run(bench)
        finally:
            down(state.directory)


if __name__ == "__main__":
    main()
