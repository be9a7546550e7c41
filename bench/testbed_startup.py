"""Testbed start-up and tear-down time: ``python -m bench.testbed_startup [runs]``.

Times ``up`` + ``down`` of the built-in ``mixed`` and ``large`` clusters, and the time from
creating a pod to it running, on a KWOK node and as a local process. Needs the binaries
($FRACNB_TESTBED_BIN or testbed/go/build.sh).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed, pod_is_running_with_ip


def pod(name: str, selector: dict[str, str], command: list[str] | None) -> dict:
    container = {"name": "c", "image": "x"}
    if command:
        container["command"] = command
    return {
        "metadata": {"name": name},
        "spec": {"nodeSelector": selector, "containers": [container]},
    }


async def time_pod(testbed: Testbed, name: str, selector, command) -> float:
    started = time.perf_counter()
    testbed.create_pod("default", pod(name, selector, command))
    await testbed.wait_for_pod("default", name, pod_is_running_with_ip, 30)
    elapsed = time.perf_counter() - started
    testbed.delete_pod("default", name, grace_seconds=0)
    return elapsed


def one_run(cluster: str, bin_dir: Path, index: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        t0 = time.perf_counter()
        state = up(load_cluster(cluster), Path(directory) / "state", bin_dir=bin_dir)
        t1 = time.perf_counter()
        testbed = Testbed(state)
        kwok_pod = asyncio.run(time_pod(testbed, f"k{index}", {"type": "kwok"}, None))
        local = {"fracnb.io/runner": "local"}
        command = [sys.executable, "-c", "import time; time.sleep(60)"]
        local_pod = (
            asyncio.run(time_pod(testbed, f"l{index}", local, command))
            if testbed.list_nodes("fracnb.io/runner=local")
            else float("nan")
        )
        t2 = time.perf_counter()
        down(state.directory)
        t3 = time.perf_counter()
    return {
        "up": t1 - t0,
        "down": t3 - t2,
        "kwok pod running": kwok_pod,
        "local pod running": local_pod,
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    bin_dir = find_bin_dir()
    for cluster in ("mixed", "large"):
        results = [one_run(cluster, bin_dir, index) for index in range(runs)]
        nodes = load_cluster(cluster).node_count
        for metric in results[0]:
            values = [result[metric] for result in results]
            if any(math.isnan(value) for value in values):  # the cluster has no such node
                continue
            median = statistics.median(values)
            print(
                f"{cluster:6} ({nodes:3} nodes) {metric:18} median {median:7.3f}s"
                f"  (min {min(values):.3f}, max {max(values):.3f}, n={runs})"
            )


if __name__ == "__main__":
    main()
