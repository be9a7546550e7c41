"""The meter's cost of GPU-unused sampling: the server's CPU time with it on, against off, at 32 kernels.

Two real jupyter servers side by side in one run, with the same number of real kernels, on one
fake NVML state: 256 GPU processes (one per kernel, the rest other tenants'), and per-process
utilisation samples for a quarter of the kernels, on the driver's sampling ticks. Both differ only
in ``FracnbMeter.gpu_unused_interval`` (0: off; 5 s: on). No page polls them: what is measured is
the meter's own background reading. Each round reads both servers' CPU time (user + system, the
server process only; kernels are processes of their own) over the same ``--seconds``, and the
report gives the median over rounds of each, in percent of one core, and the difference.

Two sets, one after the other:

- ``bare``: nothing else reads NVML in the background (``record_sessions`` off, no history timer),
  so "on" pays for the whole 5 s polling of NVML, the process tree and the kernels. A third server
  reads every 0.5 s: ten times the readings make the cost of one reading stand out of the noise
  (``per_reading_ms``, and what that makes at one reading per 5 s);
- ``default``: the shipped settings (session statistics read every 5 s, the charts every 10 s),
  which already read the per-process samples for the busy share, so "on" adds the counting only.

A third figure, without servers: the cost of one reading's counting (``work_of`` and
``GpuUnused.observe``) for 32 kernels and 256 busy processes (a quarter of the kernels, and other
tenants' processes, which /proc does not show), median of many, in microseconds.

    python -m bench.gpu_unused [--kernels 32] [--processes 256] [--rounds 6] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.meter_latency import gpu_processes, server_cpu_seconds, start_kernels
from fracnb_meter.gpuunused import GpuUnused, work_of
from fracnb_meter.nvml import GpuReading
from fracnb_meter.processes import parent_pid
from fracnb_meter.testing.fakenvml import FakeDevice, FakeState, FakeUtilization, build
from fracnb_meter.testing.server import MeterServer, StateFile, start_server

DRIVER = "570.86.15"
SETS = {
    "bare": ({"record_sessions": False, "history_interval": 0}, {"off": 0.0, "on": 5.0, "on_every_0.5s": 0.5}),
    "default": ({}, {"off": 0.0, "on": 5.0}),
}


def cpu_rounds(servers: dict[str, MeterServer], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Each server's CPU in percent of one core, per round; all servers measured over the same time."""
    per_round: dict[str, list[float]] = {label: [] for label in servers}
    for _ in range(rounds):
        before = {label: server_cpu_seconds(server) for label, server in servers.items()}
        start = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        for label, server in servers.items():
            per_round[label].append(100 * (server_cpu_seconds(server) - before[label]) / elapsed)
    return per_round


def measure_set(work: Path, library: Path, state: StateFile, meter: tuple[dict[str, object], dict[str, float]],
                args: argparse.Namespace) -> dict[str, object]:  # fmt: skip
    """``meter``: the settings all servers share, and each server's gpu_unused_interval by label."""
    settings, intervals = meter
    servers: dict[str, MeterServer] = {}
    try:
        for label, interval in intervals.items():
            (work / label).mkdir()
            config = {"in_container": True, "activity_interval": 0, **settings, "gpu_unused_interval": interval}
            servers[label] = start_server(work / label, library, state, meter_config=config)
        kernel_pids = {label: start_kernels(server, args.kernels) for label, server in servers.items()}
        share = args.processes // len(servers)
        processes = [p for label, server in servers.items() for p in gpu_processes(kernel_pids[label], server, share)]
        working = [pid for pids in kernel_pids.values() for pid in pids[: len(pids) // 4]]
        utilization = [FakeUtilization(0, pid, 40) for pid in working]
        state.write(FakeState(driver_version=DRIVER, devices=[FakeDevice.a100(0)], processes=processes,
                              utilization=utilization))  # fmt: skip
        counted = servers["on"].usage()["gpu_unused"]
        if counted["reason"] is not None and "first window" not in counted["reason"]:
            raise RuntimeError(f"the meter does not count GPU-unused time here: {counted['reason']}")
        time.sleep(args.seconds)  # past the kernels' start-up work
        per_round = cpu_rounds(servers, args.rounds, args.seconds)
        medians = {label: statistics.median(values) for label, values in per_round.items()}
        result: dict[str, object] = {
            "cpu_percent_of_a_core_median": {label: round(value, 3) for label, value in medians.items()},
            "difference_percent_of_a_core": round(medians["on"] - medians["off"], 3),
            "ratio_on_over_off": round(medians["on"] / medians["off"], 3) if medians["off"] > 0 else None,
            "rounds": {label: [round(v, 3) for v in values] for label, values in per_round.items()},
        }
        if "on_every_0.5s" in medians:
            # percent of a core = ms of CPU per second / 10; two readings a second
            per_reading_ms = (medians["on_every_0.5s"] - medians["off"]) * 10 / 2
            result["per_reading_ms"] = round(per_reading_ms, 2)
            result["per_reading_at_5s_percent_of_a_core"] = round(per_reading_ms / 5000 * 100, 3)
        return result
    finally:
        for server in servers.values():
            server.stop()


def counting_cost(kernels: int, processes: int, repeats: int = 2000) -> dict[str, float]:
    """Microseconds for one reading's counting (attribution of busy pids to kernels, and the windows)."""
    server_pid = 1_000_000
    kernel_pids = {f"kernel-{i}": server_pid + 1 + i for i in range(kernels)}
    parents = dict.fromkeys(kernel_pids.values(), server_pid)

    def parent_of(pid: int) -> int | None:  # other tenants' pids are looked up in /proc, and are not there
        return parents[pid] if pid in parents else parent_pid(pid)

    others = set(range(4_000_000, 4_000_000 + processes - kernels // 4))  # above pid_max: no such process
    busy = frozenset(others | set(list(kernel_pids.values())[: kernels // 4]))
    reading = GpuReading(available=True, driver_version=DRIVER, busy_pids=busy)
    counts = GpuUnused()
    timings = []
    for read in range(repeats):
        start = time.perf_counter()
        work = work_of(reading, kernel_pids, server_pid, parent_of, in_container=True)
        counts.observe(read, read * 5.0, work)
        timings.append(time.perf_counter() - start)
    return {"median_us": round(1e6 * statistics.median(timings), 1), "p99_us": round(1e6 * sorted(timings)[
        int(0.99 * len(timings))], 1)}  # fmt: skip


def main() -> None:
    # Stop the servers (finally blocks) when interrupted by a time limit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=32)
    parser.add_argument("--processes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of one round")
    parser.add_argument("--sets", default="bare,default", help="which sets to run: bare, default")
    args = parser.parse_args()
    results: dict[str, object] = {"kernels": args.kernels, "gpu_processes": args.processes, "driver": DRIVER}
    results["counting_one_reading"] = counting_cost(args.kernels, args.processes)
    with tempfile.TemporaryDirectory(prefix="fracnb-bench-") as directory:
        work = Path(directory)
        library = build(work / "lib")
        state = StateFile(work / "nvml-state")
        state.write(FakeState(driver_version=DRIVER, devices=[FakeDevice.a100(0)]))
        for name in args.sets.split(","):
            (work / name).mkdir()
            results[name] = measure_set(work / name, library, state, SETS[name], args)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
