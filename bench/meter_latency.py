"""Latency of GET fracnb/api/usage next to jupyter-resource-usage's GET api/metrics/v1.

One real jupyter server (both extensions enabled) with 32 real kernels, and a fake NVML
state listing 256 GPU processes: one per kernel, the rest other tenants' (existing
processes outside the server, and pids that no longer exist). Requests alternate between
the two endpoints over one keep-alive connection each, in several rounds; the report gives
the median over rounds of each round's p50 and p99, and the ratio ours / peer.

The meter runs with sample_interval_floor = 0, so every request re-reads NVML, the
process tree and the sessions (its worst case); with the default floor of 1 s, requests in
between are served from the cached reading. Then the server's CPU time is measured over
``--poll-seconds`` of 1 Hz polling (default floor), against the same time without polling.

The cost of session recording (FracnbMeter.record_sessions: peaks, time near the budget, reports
to the hub's service) is measured in the same run: two servers, one recording and one not, with
the same kernels and GPU processes, take interleaved requests to the usage endpoint; the report
gives both medians and the overhead in percent (the target is at most 2 %).

    python -m bench.meter_latency [--kernels 32] [--processes 256] [--rounds 5] [--recording-rounds 9]
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState, build
from fracnb_meter.testing.server import MeterServer, StateFile, start_server

GIB = 1 << 30
OURS, PEER = "fracnb/api/usage", "api/metrics/v1"


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def gpu_processes(kernel_pids: list[int], server: MeterServer, total: int) -> list[FakeProcess]:
    ours = {server.process.pid, *kernel_pids}
    for pid in kernel_pids:
        try:
            ours.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    listed = [FakeProcess(0, pid, GIB // 4) for pid in kernel_pids]
    strangers = [pid for pid in psutil.pids() if pid not in ours and pid > 1]
    strangers = strangers[: (total - len(listed)) // 2]
    listed += [FakeProcess(0, pid, GIB // 8) for pid in strangers]
    gone = 4_000_000  # above the default pid_max: no such process
    while len(listed) < total:
        listed.append(FakeProcess(0, gone, GIB // 16))
        gone += 1
    return listed


def start_kernels(server: MeterServer, count: int) -> list[int]:
    """Start ``count`` notebook sessions and wait until each kernel answers kernel_info."""
    for index in range(count):
        kernel_id = server.start_session(f"notebook-{index:02d}.ipynb")
        server.client(kernel_id).stop_channels()
    kernels = server.usage()["kernels"]
    if len(kernels) != count or any(k["pid"] is None for k in kernels):
        raise RuntimeError(f"expected {count} local kernels, the meter lists {kernels}")
    return [k["pid"] for k in kernels]


def timed_get(connection: http.client.HTTPConnection, path: str, token: str) -> float:
    start = time.perf_counter()
    connection.request("GET", "/" + path, headers={"Authorization": f"token {token}"})
    response = connection.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise RuntimeError(f"GET {path} answered {response.status}: {body[:200]!r}")
    return elapsed


def latency_rounds(server: MeterServer, rounds: int, requests: int) -> dict[str, dict[str, float]]:
    host = server.url.split("//")[1].rstrip("/")
    connections = {path: http.client.HTTPConnection(host, timeout=60) for path in (OURS, PEER)}
    per_round: dict[str, dict[str, list[float]]] = {p: {"p50": [], "p99": []} for p in connections}
    for _ in range(rounds):
        samples: dict[str, list[float]] = {path: [] for path in connections}
        for _ in range(requests):
            for path, connection in connections.items():  # interleaved: same conditions
                samples[path].append(timed_get(connection, path, server.token))
        for path, values in samples.items():
            per_round[path]["p50"].append(percentile(values, 0.50))
            per_round[path]["p99"].append(percentile(values, 0.99))
    for connection in connections.values():
        connection.close()
    return {
        path: {key: 1000 * statistics.median(values) for key, values in stats.items()}
        for path, stats in per_round.items()
    }


def server_cpu_seconds(server: MeterServer) -> float:
    times = psutil.Process(server.process.pid).cpu_times()
    return times.user + times.system


def polling_cost(server: MeterServer, path: str | None, seconds: float) -> float:
    """Server CPU time over ``seconds`` of 1 Hz requests to ``path`` (None: no requests)."""
    host = server.url.split("//")[1].rstrip("/")
    connection = http.client.HTTPConnection(host, timeout=60)
    before, start = server_cpu_seconds(server), time.monotonic()
    tick = start
    while time.monotonic() - start < seconds:
        if path is not None:
            timed_get(connection, path, server.token)
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
    connection.close()
    return 100 * (server_cpu_seconds(server) - before) / (time.monotonic() - start)


def recording_rounds(servers: dict[str, MeterServer], rounds: int, requests: int) -> dict[str, float]:
    """Median over rounds of each round's p50 (ms) of the usage endpoint, per server, interleaved."""
    connections = {
        label: http.client.HTTPConnection(server.url.split("//")[1].rstrip("/"), timeout=60)
        for label, server in servers.items()
    }
    per_round: dict[str, list[float]] = {label: [] for label in servers}
    labels = list(servers)
    for _ in range(rounds):
        samples: dict[str, list[float]] = {label: [] for label in servers}
        for request in range(requests):
            for label in labels if request % 2 else reversed(labels):  # neither always goes first
                samples[label].append(timed_get(connections[label], OURS, servers[label].token))
        for label, values in samples.items():
            per_round[label].append(percentile(values, 0.50))
    for connection in connections.values():
        connection.close()
    result = {f"{label}_p50_ms": 1000 * statistics.median(values) for label, values in per_round.items()}
    result["overhead_percent"] = 100 * (result["recording_p50_ms"] / result["not_recording_p50_ms"] - 1)
    return result


def recording_cost(work: Path, library: Path, state: StateFile, args: argparse.Namespace) -> dict[str, float]:
    servers: dict[str, MeterServer] = {}
    try:
        for label, record in (("not_recording", False), ("recording", True)):
            (work / label).mkdir()
            config = {"sample_interval_floor": 0.0, "in_container": True, "record_sessions": record}
            servers[label] = start_server(work / label, library, state, meter_config=config)
        pids = [pid for server in servers.values() for pid in start_kernels(server, args.kernels)]
        state.write(FakeState(devices=[FakeDevice.a100(0)], processes=gpu_processes(pids, servers["recording"],
                                                                                     args.processes)))  # fmt: skip
        return recording_rounds(servers, args.recording_rounds, args.requests)
    finally:
        for server in servers.values():
            server.stop()


def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="fracnb-bench-") as directory:
        work = Path(directory)
        library = build(work / "lib")
        state = StateFile(work / "nvml-state")
        state.write(FakeState(devices=[FakeDevice.a100(0)]))
        results: dict[str, object] = {"kernels": args.kernels, "gpu_processes": args.processes}
        for floor, label in ((0.0, "floor_0"), (1.0, "floor_1s")):
            if label == "floor_1s" and args.poll_seconds <= 0:
                continue
            server_dir = work / label
            server_dir.mkdir()
            server = start_server(
                server_dir,
                library,
                state,
                meter_config={"sample_interval_floor": floor, "in_container": True},
                extensions={"jupyter_resource_usage": True},
            )
            try:
                pids = start_kernels(server, args.kernels)
                state.write(
                    FakeState(
                        devices=[FakeDevice.a100(0)],
                        processes=gpu_processes(pids, server, args.processes),
                    )
                )
                time.sleep(floor + 0.1)  # past the cached reading from before the write
                kernels = server.usage()["kernels"]
                if sum(k["gpu_memory_bytes"] or 0 for k in kernels) != args.kernels * GIB // 4:
                    raise RuntimeError("the meter did not attribute the kernels' GPU memory")
                if label == "floor_0":
                    results["latency_ms"] = latency_rounds(server, args.rounds, args.requests)
                else:
                    cost = {"idle": polling_cost(server, None, args.poll_seconds)}
                    cost["ours_1hz"] = polling_cost(server, OURS, args.poll_seconds)
                    cost["peer_1hz"] = polling_cost(server, PEER, args.poll_seconds)
                    results["server_cpu_percent_of_a_core"] = cost
            finally:
                server.stop()
        if args.recording_rounds > 0:
            results["session_recording"] = recording_cost(work, library, state, args)
        return results


def main() -> None:
    # Stop the servers (finally blocks) when interrupted by a time limit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=32)
    parser.add_argument("--processes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="per endpoint and round")
    parser.add_argument("--poll-seconds", type=float, default=60.0, help="0 skips the CPU part")
    parser.add_argument("--recording-rounds", type=int, default=9, help="0 skips the session recording part")
    results = run(parser.parse_args())
    latency = results["latency_ms"]
    ours, peer = latency[OURS], latency[PEER]
    results["ratio_ours_over_peer"] = {k: ours[k] / peer[k] for k in ("p50", "p99")}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
