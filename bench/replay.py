"""Replay a research group's day on the testbed: stock Zero-to-JupyterHub vs fracnb, side by side (issue 20).

    python -m bench.replay [--seed 1] [--step 60] [--quick] [--days normal,busy] [--runs ...] [--policy packed]
                           [--no-hibernation] [--mps] [--out bench/results/replay]

Two days are generated from the seed (bench/replay_model.py): the normal day (the reference case's
50 researchers) and a busy day (80) on which starts find their kind of slot full. Each day goes
through nine runs (bench/replay_runs.py), each on its own testbed with its cluster description:
on the calibrated training backlog the baseline on ``reference-whole``, fracnb time-sliced on
``reference``, fracnb on DRA on ``reference-dra``, fracnb on DRA lending free development cards to
training jobs, and fracnb on DRA placing adaptively; on a saturating backlog the baseline, the
lending run and the adaptive lending run; last the adaptive run borrowing training cards. Each run
names its contention rule, and prints the fluid bound beside its slowdown p95. A run
drives one real spawner per researcher and the batch queue's training jobs through the day on a
virtual clock (bench/replay_day.py) and measures each step (bench/replay_measures.py). The output
is one Markdown table per day (also written to ``<out>/replay.md``), a plot ``<out>/replay.png``,
the baseline's calibration against the reference case, and last one line per day and run
(``replay[<day>/<run>]: ...``). ``--quick`` replays reduced days (6 and 10 researchers, 5-minute
steps) for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.replay_contention import SUMMED_DEMAND
from bench.replay_day import DayRun
from bench.replay_day_placement import placed_spawner_class
from bench.replay_jobs import claim_template, priority_class
from bench.replay_measures import StepFigures, Summary, summarize
from bench.replay_model import (
    SOURCES,
    Day,
    Parameters,
    busy_parameters,
    generate_day,
    quick_parameters,
    saturating_backlog,
)
from bench.replay_report import plot, run_lines, table
from bench.replay_runs import SATURATING, USER_SCHEDULER, RunSetup, runs
from bench.replay_training import Calibration
from fracnb_spawner.cluster.kube import kubeconfig_at
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import ALLOCATION_POLICIES, ClusterSpec, load_cluster
from fracnb_testbed.controlplane import GPU_PACKING_SCHEDULER, down, up
from fracnb_testbed.handle import Testbed

REPO = Path(__file__).resolve().parents[1]
DAYS = ("normal", "busy")


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
    if setup.adaptive:
        cls = placed_spawner_class()
    groups = {g: SimpleNamespace(name=g, users=[SimpleNamespace(name=m) for m in day.members(g)]) for g in day.groups}

    def make(researcher: Any) -> Any:
        spawner = cls(_mock=True, config=config)
        spawner.user.name = researcher.name
        spawner.user.groups = [groups[researcher.group]]
        spawner.pod_name = f"jupyter-{researcher.name}"
        return spawner

    return make


async def close_kube_clients() -> None:
    from fracnb_spawner.cluster.kube import close_shared_clients
    from fracnb_spawner.hubstate import HubState

    await HubState.discard()
    await close_shared_clients()


async def prepare(api: Any, namespace: str, dra: bool) -> None:
    """The batch queue's PriorityClass, and on DRA clusters its jobs' claim template."""
    from kubernetes_asyncio import client

    custom = client.CustomObjectsApi(api)
    await custom.create_cluster_custom_object("scheduling.k8s.io", "v1", "priorityclasses", priority_class())
    if dra:
        await custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", claim_template()
        )


async def drive(
    setup: RunSetup, testbed: Testbed, spec: ClusterSpec, day: Day, *, params: Parameters, step: int
) -> RunResult:
    namespace = testbed.create_namespace(f"replay-{setup.name}")
    quotas = dict.fromkeys(day.groups, params.group_quota_gpus)
    policies = {name: group.allocation_policy for group in spec.groups for name in group.node_names()}
    started = time.perf_counter()
    async with testbed.api_client() as api:
        await prepare(api, namespace, setup.cards_from_claims)
        run = DayRun(setup, day, params=params, step=step, api=api, namespace=namespace, policies=policies)
        try:
            outcomes = await run.run(spawner_factory(setup, setup.config(namespace, quotas), day))
        finally:
            await close_kube_clients()
    summary = summarize(run.steps, outcomes)
    return RunResult(setup.name, run.steps, summary, time.perf_counter() - started)


def cluster_for(setup: RunSetup, policy: str | None) -> ClusterSpec:
    """The run's cluster description; ``policy`` replaces the device plugin's policy where replicas are shared."""
    spec = load_cluster(setup.cluster)
    if policy is None:
        return spec
    groups = tuple(
        replace(g, allocation_policy=policy) if g.labels.get("nvidia.com/gpu.sharing-strategy") == "time-slicing" else g
        for g in spec.groups
    )
    return replace(spec, groups=groups)


def run_one(
    setup: RunSetup, day: Day, *, params: Parameters, step: int, state_root: Path, policy: str | None
) -> RunResult:
    spec = cluster_for(setup, policy)
    print(f"[replay] {setup.name}: starting the testbed ({spec.name} cluster) ...", flush=True)
    state = up(spec, state_root / setup.name, bin_dir=find_bin_dir())
    try:
        with kubeconfig_at(state.kubeconfig):
            result = asyncio.run(drive(setup, Testbed(state), spec, day, params=params, step=step))
    finally:
        down(state.directory)
    print(f"[replay] {setup.name}: {len(result.steps)} steps in {result.seconds:.0f} s", flush=True)
    return result


def describe(name: str, day: Day, params: Parameters, seed: int, step: int) -> str:
    sessions = sum(len(r.sessions) for r in day.researchers)
    assumptions = sum(1 for source in SOURCES.values() if source.startswith("assumption"))
    return (
        f"{name} day: seed {seed}; {len(day.researchers)} researchers in {len(day.groups)} groups (quota "
        f"{params.group_quota_gpus} GPUs each), {sessions} sessions, {len(day.streams)} training streams; "
        f"{day.length // 3600} h from 07:00 in steps of {step} s; {assumptions} of {len(SOURCES)} "
        "model figures are assumptions (bench/replay_model.py)"
    )


def day_parameters(name: str, quick: bool) -> Parameters:
    if quick:
        base = quick_parameters()
        return base if name == "normal" else replace(base, groups=2, researchers_per_group=5, training_streams=6)
    return Parameters() if name == "normal" else busy_parameters()


def is_fracnb_run(name: str) -> bool:
    return name.startswith("fracnb")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="which days to generate (default 1)")
    parser.add_argument("--step", type=int, default=0, help="virtual seconds per step (default 60; 300 with --quick)")
    parser.add_argument("--quick", action="store_true", help="reduced days (6 and 10 researchers), for CI")
    parser.add_argument(
        "--days", default=",".join(DAYS), help=f"which days, comma-separated (default {','.join(DAYS)})"
    )
    parser.add_argument(
        "--runs",
        default="",
        help="which runs, comma-separated (default all: baseline,fracnb,fracnb-dra,fracnb-dra-lend,"
        "fracnb-dra-adaptive,baseline-saturating,fracnb-dra-lend-saturating,fracnb-dra-adaptive-lend-saturating)",
    )
    parser.add_argument(
        "--mps",
        action="store_true",
        help="DRA shares run kernels side by side (MPS: the summed-demand contention rule) instead of time-sliced "
        "(NVIDIA's DRA driver refuses MPS with consumable shares today)",
    )
    parser.add_argument(
        "--policy",
        choices=ALLOCATION_POLICIES,
        help="the device plugin's shared-device allocation policy for the time-sliced servers "
        "(default: the cluster description's, packed)",
    )
    parser.add_argument(
        "--gpu-scoring",
        action="store_true",
        help="fracnb's notebooks use z2jh's user-scheduler with GPU shares in its MostAllocated scoring "
        "(docs/spawner.md), not the chart's profile as it is",
    )
    parser.add_argument(
        "--no-hibernation",
        dest="hibernation",
        action="store_false",
        help="fracnb's runs without hibernation (the product ships with it on: an idle server's cull saves its "
        "kernel state)",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "replay", help="where replay.md and replay.png go"
    )
    args = parser.parse_args(argv)
    args.days = [d for d in args.days.split(",") if d]
    if not args.days or set(args.days) - set(DAYS):
        parser.error(f"--days takes {' and/or '.join(DAYS)}, comma-separated")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # The spawners' own warnings (e.g. "No pod ... to delete" after a refused start) are expected here.
    logging.basicConfig(level=logging.ERROR, format="[replay] %(message)s")
    logging.getLogger("replay").setLevel(logging.INFO if os.environ.get("REPLAY_DEBUG") else logging.WARNING)
    step = args.step or (300 if args.quick else 60)
    scheduler = GPU_PACKING_SCHEDULER if args.gpu_scoring else USER_SCHEDULER
    every = runs(args.hibernation, scheduler, mps=args.mps)
    setups = tuple(s for s in every if not args.runs or s.name in args.runs.split(","))
    labels = {s.name: s.label for s in setups}
    if args.mps:
        labels = {s.name: f"{s.label}, MPS" if s.contention == SUMMED_DEMAND else s.label for s in setups}
    if not args.hibernation:
        labels = {name: f"{label}, no hibernation" if is_fracnb_run(name) else label for name, label in labels.items()}
    started = time.perf_counter()
    summaries: dict[str, dict[str, Summary]] = {}
    steps: dict[str, dict[str, list[StepFigures]]] = {}
    report = []
    with tempfile.TemporaryDirectory(prefix="fracnb-replay-") as directory:
        for name in args.days:
            params = day_parameters(name, args.quick)
            day = generate_day(params, args.seed)
            text = describe(name, day, params, args.seed, step)
            print(f"[replay] {text}", flush=True)
            root = Path(directory) / name
            results = {}
            for setup in setups:
                backlog = saturating_backlog(params) if setup.backlog == SATURATING else params
                days = day if backlog is params else generate_day(backlog, args.seed)
                results[setup.name] = run_one(
                    setup, days, params=backlog, step=step, state_root=root, policy=args.policy
                )
            summaries[name] = {run: result.summary for run, result in results.items()}
            steps[name] = {run: result.steps for run, result in results.items()}
            report.append(f"## {name} day\n\n{text}\n\n{table(summaries[name], labels)}")
            if "baseline" in summaries[name]:
                base = summaries[name]["baseline"]
                report[-1] += f"\n\nbaseline {Calibration(base.cluster.occupancy, base.jobs_a_week).line()}"
            print(report[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = run_lines(summaries)
    elapsed = f"{len(args.days)} days x {len(setups)} runs in {time.perf_counter() - started:.0f} s"
    (args.out / "replay.md").write_text("\n\n".join(report) + f"\n\n{elapsed}\n\n" + "\n".join(lines) + "\n")
    plot(steps, labels, args.out / "replay.png")
    print(f"[replay] {elapsed}; tables and plot in {args.out}/replay.md and replay.png", flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
