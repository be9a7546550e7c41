"""Replay a research group's day on the testbed: stock KubeSpawner vs fracnb, side by side (issue 14).

    python -m bench.replay [--seed 1] [--step 60] [--quick] [--out bench/results/replay]

The day (bench/replay_model.py) is generated once from the seed; each run (bench/replay_runs.py)
starts its own testbed with its cluster description (``reference-whole`` for the baseline,
``reference`` for fracnb), drives one real spawner per researcher through the day on a virtual
clock (bench/replay_day.py), and measures each step (bench/replay_measures.py). The output is
a Markdown table of both runs (also written to ``<out>/replay.md``), a plot ``<out>/replay.png``,
and as the last line a one-line summary. ``--quick`` replays a reduced day (one group of 6,
5-minute steps) for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.replay_day import DayRun
from bench.replay_measures import StepFigures, Summary, final_line, summarize
from bench.replay_model import SOURCES, Day, Parameters, generate_day, quick_parameters
from bench.replay_report import plot, table
from bench.replay_runs import RUNS, RunSetup
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.handle import Testbed

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RunResult:
    name: str
    steps: list[StepFigures]
    summary: Summary
    seconds: float


def spawner_factory(setup: RunSetup, config: Any, day: Day) -> Any:
    from kubespawner import KubeSpawner

    from fracnb_spawner.spawner import FractionalSpawner

    cls = FractionalSpawner if setup.spawner == "FractionalSpawner" else KubeSpawner
    groups = {g: SimpleNamespace(name=g, users=[SimpleNamespace(name=m) for m in day.members(g)]) for g in day.groups}

    def make(researcher: Any) -> Any:
        spawner = cls(_mock=True, config=config)
        spawner.user.name = researcher.name
        spawner.user.groups = [groups[researcher.group]]
        spawner.pod_name = f"jupyter-{researcher.name}"
        return spawner

    return make


async def close_kube_clients() -> None:
    from kubespawner import KubeSpawner, clients

    from fracnb_spawner.hubstate import HubState

    await HubState.discard()
    await KubeSpawner._stop_all_reflectors()
    loop = asyncio.get_running_loop()
    for key, shared in list(clients._client_cache.items()):
        if key[0] is loop:
            await shared.api_client.close()
            clients._client_cache.pop(key, None)


async def drive(
    setup: RunSetup, testbed: Testbed, day: Day, params: Parameters, step: int, *, packed: bool
) -> RunResult:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.config import kube_config
    from kubespawner import clients

    os.environ["KUBECONFIG"] = str(testbed.kubeconfig)
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(testbed.kubeconfig)
    clients.load_config.cache_clear()
    namespace = testbed.create_namespace(f"replay-{setup.name}")
    quotas = dict.fromkeys(day.groups, params.group_quota_gpus)
    started = time.perf_counter()
    async with testbed.api_client() as api:
        core = client.CoreV1Api(api)
        run = DayRun(setup, day, params=params, step=step, core=core, namespace=namespace, packed=packed)
        try:
            outcomes = await run.run(spawner_factory(setup, setup.config(namespace, quotas), day))
        finally:
            await close_kube_clients()
    cards = run.cards.all_cards()
    dev_cards = [c for c in cards if c.startswith("dev-")]
    summary = summarize(run.steps, step, len(cards), len(dev_cards), outcomes)
    return RunResult(setup.name, run.steps, summary, time.perf_counter() - started)


def run_one(setup: RunSetup, day: Day, params: Parameters, step: int, state_root: Path, *, packed: bool) -> RunResult:
    print(f"[replay] {setup.name}: starting the testbed ({setup.cluster} cluster) ...", flush=True)
    state = up(load_cluster(setup.cluster), state_root / setup.name, bin_dir=find_bin_dir())
    try:
        result = asyncio.run(drive(setup, Testbed(state), day, params, step, packed=packed))
    finally:
        down(state.directory)
    print(f"[replay] {setup.name}: {len(result.steps)} steps in {result.seconds:.0f} s", flush=True)
    return result


def describe(day: Day, params: Parameters, seed: int, step: int) -> str:
    sessions = sum(len(r.sessions) for r in day.researchers)
    assumptions = sum(1 for source in SOURCES.values() if source.startswith("assumption"))
    return (
        f"seed {seed}; {len(day.researchers)} researchers in {len(day.groups)} groups (quota "
        f"{params.group_quota_gpus} GPUs each), {sessions} sessions, {len(day.jobs)} training jobs; "
        f"{day.length // 3600} h from 07:00 in steps of {step} s; {assumptions} of {len(SOURCES)} "
        "model figures are assumptions (bench/replay_model.py)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="which day to generate (default 1)")
    parser.add_argument("--step", type=int, default=0, help="virtual seconds per step (default 60; 300 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a reduced day (one group of 6), for CI")
    parser.add_argument(
        "--packed",
        action="store_true",
        help="model a device plugin that packs shares onto the fullest card instead of spreading them (what-if)",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "replay", help="where replay.md and replay.png go"
    )
    args = parser.parse_args(argv)
    # The spawners' own warnings (e.g. "No pod ... to delete" after a refused start) are expected here.
    logging.basicConfig(level=logging.ERROR, format="[replay] %(message)s")
    logging.getLogger("replay").setLevel(logging.WARNING)
    params = quick_parameters() if args.quick else Parameters()
    step = args.step or (300 if args.quick else 60)
    day = generate_day(params, args.seed)
    print(f"[replay] {describe(day, params, args.seed, step)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fracnb-replay-") as directory:
        results = {setup.name: run_one(setup, day, params, step, Path(directory), packed=args.packed) for setup in RUNS}
    baseline, fracnb = results["baseline"].summary, results["fracnb"].summary
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(baseline, fracnb)
    line = final_line(baseline, fracnb)
    (args.out / "replay.md").write_text(f"{describe(day, params, args.seed, step)}\n\n{text}\n\n{line}\n")
    plot({name: result.steps for name, result in results.items()}, args.out / "replay.png")
    print(text)
    print(f"[replay] table and plot in {args.out}/replay.md and replay.png", flush=True)
    print(line)


if __name__ == "__main__":
    main()
