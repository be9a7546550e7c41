"""fracnb-dry-run: check a hub configuration before deploying it.

Loads a jupyterhub_config.py (or a Zero-to-JupyterHub values file), validates the
profiles, the quotas (FracnbQuotas) and the fracnb service's settings (FracnbService)
exactly as the hub and the service would, and prints for every profile and choice the
GPU resources, node selection, scheduler, memory budget, isolation and idle policy,
then a summary of quotas and idle policies; --manifest prints the full pod. Nothing
connects to a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from traitlets import TraitError
from traitlets.config import Config, PyFileConfigLoader

from fracnb_spawner.borrowing.words import borrowing_summary
from fracnb_spawner.cluster.kube import offline_kubeconfig
from fracnb_spawner.common.clock import duration_text
from fracnb_spawner.common.podkeys import CLAIM_POD_ANNOTATION
from fracnb_spawner.common.units import format_bytes, share_text
from fracnb_spawner.config.overrides import OverrideError
from fracnb_spawner.config.profiles import UNLISTED, ProfileConfigError, initialize_profiles, iter_combinations
from fracnb_spawner.config.traits import configured_traits
from fracnb_spawner.configure import check_config
from fracnb_spawner.culling import CullPolicy, HibernatingDemand, measurability
from fracnb_spawner.gpu.backends import KAI_FRACTION_ANNOTATION
from fracnb_spawner.gpu.words import plan_summary
from fracnb_spawner.placement.words import placement_lines
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.engine import Engine
from fracnb_spawner.queue.engines import engine_of
from fracnb_spawner.queue.kueue.model import GROUP as KUEUE_GROUP
from fracnb_spawner.queue.kueue.model import OWNER_ANNOTATION
from fracnb_spawner.queue.kueue.model import VERSION as KUEUE_VERSION
from fracnb_spawner.queue.localqueues import local_queue_name
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.reclaim.budgets import manifest_warnings
from fracnb_spawner.reclaim.config import FracnbReclaim
from fracnb_spawner.reclaim.lending import lending_of

VALUES_KEYS = ("hub", "singleuser")  # the chart's sections a values file for fracnb sets
WHAT_TO_GIVE = (
    "Give it a jupyterhub_config.py or a Zero-to-JupyterHub values file (helm-values/README.md says which is which)."
)


class NotHubConfigError(ValueError):
    """The file is not a hub configuration: the message says what it is and that nothing was checked."""


def load_hub_config(path: Path) -> Config:
    """A jupyterhub_config.py as the hub loads it, or the hub config a z2jh values file yields."""
    if path.suffix in (".yaml", ".yml"):
        return config_from_values(values_of(path))
    return PyFileConfigLoader(path.name, path=str(path.parent.resolve())).load_config()


def values_of(path: Path) -> dict:
    """The values of a z2jh values file; ``NotHubConfigError`` for Kubernetes objects or other YAML."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except yaml.YAMLError as error:
        raise NotHubConfigError(f"{path.name} is not valid YAML ({_first_line(error)}). {WHAT_TO_GIVE}") from None
    objects = [doc for doc in documents if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc]
    if objects:
        kinds = ", ".join(_object_name(doc) for doc in objects)
        raise NotHubConfigError(
            f"{path.name} holds Kubernetes objects to apply with kubectl ({kinds}), not hub values: "
            f"there is nothing in it to check. {WHAT_TO_GIVE}{budget_notes(objects)}"
        )
    if len(documents) != 1 or not isinstance(documents[0], dict) or not set(VALUES_KEYS) & set(documents[0]):
        raise NotHubConfigError(
            f"{path.name} has no hub or singleuser values: there is nothing in it to check. {WHAT_TO_GIVE}"
        )
    return documents[0]


def budget_notes(objects: list[dict]) -> str:
    """The file's PodDisruptionBudgets that would allow reclaim no eviction of its workloads' pods, one per line."""
    return "".join(f"\nWarning: {warning}" for warning in manifest_warnings(objects))


def _object_name(document: dict) -> str:
    name = (document.get("metadata") or {}).get("name")
    return f"{document['kind']} {name}" if name else str(document["kind"])


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]


def config_from_values(values: dict) -> Config:
    """The FractionalSpawner-relevant part of what the chart's hub config makes of ``values``."""
    config = Config()
    singleuser = values.get("singleuser") or {}
    if singleuser.get("profileList"):
        config.KubeSpawner.profile_list = singleuser["profileList"]
    limits = (singleuser.get("extraResource") or {}).get("limits")
    if limits:
        config.KubeSpawner.extra_resource_limits = limits
    for section, settings in ((values.get("hub") or {}).get("config") or {}).items():
        config[section].update(settings)
    return config


def _rows(spawner_class: type, config: Config) -> Iterator[tuple[str, str, dict]]:
    raw = config.FractionalSpawner.get("profile_list", config.KubeSpawner.get("profile_list", []))
    for profile in initialize_profiles(raw):
        for chosen, _spec, _cull in iter_combinations(profile):
            if any(choice == UNLISTED for _, choice in chosen):
                continue
            options = {"profile": profile["slug"], **dict(chosen)}
            yield profile["slug"], ",".join(f"{o}={c}" for o, c in chosen), options


async def _describe(config: Config, manifest: bool) -> list[dict]:
    from kubespawner import KubeSpawner  # noqa: PLC0415 - `fracnb-dry-run --help` need not load JupyterHub

    from fracnb_spawner.spawner import FractionalSpawner  # noqa: PLC0415

    results = []
    check_config(config)  # the checks of setup(c), with their messages (profiles, traits, FracnbQuotas)
    config = Config(config)
    # Checked above; the spawner would count quotas against a cluster the dry run has not got.
    config.pop("FracnbQuotas", None)
    try:
        FractionalSpawner(_mock=True, config=config)  # refuses bad configuration as the hub would
        for slug, choice, options in _rows(FractionalSpawner, config):
            spawner = FractionalSpawner(_mock=True, config=config)
            spawner.user_options = options
            await spawner.load_user_options()
            pod = await spawner.get_pod_manifest()
            container = pod.spec.containers[0]
            spawn = spawner.spawn_plan  # what the hub resolves the choice into; the pod is built from it
            plan = spawn.gpu if spawn else None
            cull = spawn.cull if spawn else CullPolicy()
            entry: dict[str, Any] = {
                "profile": slug,
                "choice": choice,
                "gpu_resources": {k: v for k, v in (container.resources.limits or {}).items() if "/" in k},
                "node_selector": pod.spec.node_selector or {},
                "scheduler": pod.spec.scheduler_name or "(default)",
                "memory_budget_bytes": plan.memory_bytes if plan else 0,
                "isolation": plan.isolation if plan else "none",
                "backend": plan.backend if plan else "none",
                "summary": plan_summary(plan) if plan else "",
                "kai_fraction": spawn.pod.annotations.get(KAI_FRACTION_ANNOTATION) if spawn else None,
                # Objects created beside the pod, as the spawner creates them (a DRA ResourceClaim).
                "companions": [named_for_any_pod(c, spawner.pod_name) for c in spawn.pod.companions] if spawn else [],
                "idle_timeout_seconds": int(cull.idle_timeout),
                "max_age_seconds": int(cull.max_age),
                "idle_timeout_under_demand_seconds": int(cull.demand_timeout) if plan and plan.fraction else 0,
                "queue_slot_kind": spawn.ask.kind if spawn and spawn.ask else None,
                "queue_max_wait_seconds": spawn.max_wait if spawn else 0,
                "gpu_unused_timeout_seconds": int(cull.gpu_unused_timeout),
                "gpu_unused_busy_timeout_seconds": int(cull.gpu_unused_busy_timeout),
                "gpu_unused_measurable": measurability(plan.backend, plan.isolation)[0] if plan else False,
            }
            if manifest:
                entry["pod"] = spawner.api.api_client.sanitize_for_serialization(pod)
            results.append(entry)
    finally:
        await KubeSpawner._stop_all_reflectors()
    return results


POD_NAME = "<pod name>"  # a companion's name in the dry run: each server's own pod's, not the dry run's mock user's


def named_for_any_pod(companion: dict[str, Any], pod_name: str) -> dict[str, Any]:
    """``companion`` with the dry run's pod name in its name said as :data:`POD_NAME` ("<pod name>-gpu")."""
    metadata = dict(companion.get("metadata") or {})
    name = str(metadata.get("name", ""))
    if not name.startswith(pod_name):
        return companion
    metadata["name"] = POD_NAME + name[len(pod_name) :]
    annotations = metadata.get("annotations") or {}
    if CLAIM_POD_ANNOTATION in annotations:
        metadata["annotations"] = {**annotations, CLAIM_POD_ANNOTATION: POD_NAME}
    return {**companion, "metadata": metadata}


def _gpu_resources_text(row: dict) -> str:
    resources = ", ".join(f"{k}: {v}" for k, v in row["gpu_resources"].items())
    if resources:
        return resources
    if row.get("companions"):
        return "none requested: the pod claims its GPU through the DRA ResourceClaim below"
    if row.get("kai_fraction"):
        return (
            "none requested: the KAI scheduler gives the pod its share by the GPU-fraction annotation"
            f" ({KAI_FRACTION_ANNOTATION}: {row['kai_fraction']})"
        )
    return "none (CPU only)"


def _print_table(rows: list[dict]) -> None:
    for row in rows:
        title = row["profile"] + (f" [{row['choice']}]" if row["choice"] else "")
        print(title)
        print(f"  {row['summary']}")
        selector = ", ".join(f"{k}={v}" for k, v in row["node_selector"].items()) or "any node"
        print(f"  GPU resources: {_gpu_resources_text(row)}")
        print(f"  node selection: {selector}")
        print(f"  scheduler: {row['scheduler']}")
        print(f"  isolation: {row['isolation']}")
        for companion in row.get("companions") or []:
            print(f"  {companion['kind']} (created with the pod, then owned by it, deleted at stop):")
            print("    " + yaml.safe_dump(companion, sort_keys=False).replace("\n", "\n    ").rstrip())
        policy = idle_policy_text(row["idle_timeout_seconds"], row["max_age_seconds"])
        if row["idle_timeout_under_demand_seconds"]:
            policy += (
                f"; {duration_text(row['idle_timeout_under_demand_seconds'])} idle while someone waits for its GPU"
            )
        print(f"  idle policy: {policy}")
        if row.get("queue_slot_kind"):
            wait = row["queue_max_wait_seconds"]
            waits = f"waits up to {duration_text(wait)} in the GPU queue" if wait else "never waits in the queue"
            print(f"  when no slot is free: {waits} (slot kind {row['queue_slot_kind']})")
        if row["gpu_unused_timeout_seconds"]:
            print(f"  GPU unused: {gpu_unused_policy_text(row)}")
        if "pod" in row:
            print("  pod manifest:")
            print("    " + yaml.safe_dump(row["pod"], sort_keys=False).replace("\n", "\n    ").rstrip())
        print()


def gpu_unused_policy_text(row: dict) -> str:
    """ "hibernated and stopped after 20 min without GPU work while its kernels are idle; ... measurable: yes, ..." """
    unused, busy = row["gpu_unused_timeout_seconds"], row["gpu_unused_busy_timeout_seconds"]
    text = f"hibernated and stopped after {duration_text(unused)} without GPU work while its kernels are idle"
    if busy:
        text += f"; with a kernel busy, warned then, and stopped after {duration_text(busy)}"
    else:
        text += "; with a kernel busy, only warned"
    return f"{text}. Measurable: {measurability(row['backend'], row['isolation'])[1]}"


def idle_policy_text(idle_timeout: float, max_age: float) -> str:
    """ "stops after 30 min idle, and 8 h after it started"; 0 disables either limit."""
    idle = f"stops after {duration_text(idle_timeout)} idle" if idle_timeout else "never stopped for idleness"
    age = f"and {duration_text(max_age)} after it started" if max_age else "no maximum age"
    return f"{idle}, {age}"


def quota_lines(policy: QuotaPolicy) -> list[str]:
    """The FracnbQuotas part of the summary."""
    lines = [f"  each user: {share_text(policy.default_user)}" + (", unless named below" if policy.users else "")]
    if policy.users:
        lines.append(
            "  users: " + ", ".join(f"{name} {share_text(limit)}" for name, limit in sorted(policy.users.items()))
        )
    if policy.groups:
        named = ", ".join(f"{name} {share_text(limit)}" for name, limit in sorted(policy.groups.items()))
        lines.append(f"  groups (all members together): {named}")
    return lines


def service_lines(service: Any) -> list[str]:
    """The FracnbService part of the summary: culling of servers the profiles say nothing about."""
    default = CullPolicy(service.default_idle_timeout, service.default_max_age)
    return [
        f"  servers without fracnb annotations: {idle_policy_text(default.idle_timeout, default.max_age)}",
        f"  warning shown in the notebook {duration_text(service.warning_lead)} before a deadline;"
        f" a culling pass every {duration_text(service.cull_every)}",
        f"  GPU-unused time: as the notebooks report it every {duration_text(service.session_report_interval)};"
        f" older than {duration_text(2 * service.session_report_interval)} counts as unknown, never unused",
    ]


def hibernating_demand_line(service: Any) -> str:
    """How soon an idle GPU server stops while someone waits, since its stop saves its variables first (defaults
    that do not fit the activity report lag turned off, as the service does; set values were checked before)."""
    service.check_hibernating_timing()
    timeout, lead = service.idle_timeout_under_demand_hibernating, service.warning_lead_hibernating
    if not timeout and not lead:
        return "  while someone waits for its kind of GPU: each profile's own timeout under demand and warning_lead"
    shorter = f"after at most {duration_text(timeout)} idle" if timeout else "after its profile's timeout"
    warned = duration_text(HibernatingDemand(timeout, lead).lead(service.warning_lead))
    return (
        f"  while someone waits for its kind of GPU, an idle GPU server stops {shorter}, warned {warned} ahead"
        " (FracnbService.idle_timeout_under_demand_hibernating, warning_lead_hibernating): its idle kernels"
        " save their variables first"
    )


def hibernation_lines(service: Any, spawner: Any, engine: Engine) -> list[str]:
    """What the service and the spawner (``configured_traits``) do before stopping a GPU server, and what a
    server the queue ``engine`` preempts does (``c.FracnbQueue.engine``)."""
    settings = service.hibernation()
    if not settings.enabled:
        return ["  off (FracnbService.hibernation_timeout = 0): GPU servers are stopped without saving variables"]
    limit = (
        f"at most {format_bytes(settings.max_bytes)} per server (FracnbService.hibernation_max_bytes)"
        if settings.max_bytes
        else "within the notebook's own size limit (FracnbMeter.hibernation_max_bytes, 4 GiB by default)"
    )
    return [
        f"  before an idle GPU server is stopped (idle, idle under demand, GPU unused), its idle kernels save"
        f" their variables, {limit}; the stop waits at most {duration_text(settings.timeout)} for them"
        " (FracnbService.hibernation_timeout)",
        hibernating_demand_line(service),
        f"  also before stops at the maximum age: {'yes' if settings.at_max_age else 'no'}"
        " (FracnbService.hibernate_at_max_age)",
        f"  also before stops users and admins ask for: {'yes' if spawner.hibernate_on_stop else 'no'}"
        " (FractionalSpawner.hibernate_on_stop); a server that does not answer within"
        f" {spawner.hibernate_on_stop_answer_timeout:g} s is stopped without"
        " (FractionalSpawner.hibernate_on_stop_answer_timeout)",
        "  also when Kueue preempts a server: "
        + (
            f"yes, it saves on SIGTERM within {duration_text(settings.timeout)} of its grace period"
            " (FRACNB_STOP_HIBERNATION_TIMEOUT)"
            if engine.preempts
            else f"not with the {engine.name} engine (FracnbQueue.engine)"
        ),
    ]


NAMING_EXAMPLES = ("ann", "carol.smith", "carol_smith")


def kueue_queue_lines(queue: FracnbQueue) -> list[str]:
    """How an admin names and marks the per-user LocalQueues with engine "kueue"; none with builtin."""
    template = engine_of(queue).local_queue_template(queue)
    if template is None:
        return []
    examples = ", ".join(f"{user} -> {local_queue_name(template, user)}" for user in NAMING_EXAMPLES)
    return [
        "per-user LocalQueues (engine kueue, docs/queue.md):",
        f"  each user's, in the hub's namespace: {template} (FracnbQueue.kueue_local_queue); a name that is a DNS"
        f" label without '---' is kept, any other gets a hash of it: {examples}",
        f"  annotate each with {OWNER_ANNOTATION}: <exact hub username>; a GPU spawn is refused before its pod"
        " unless the user's LocalQueue exists and any such annotation names that user",
        "  a user's queue, ready to fill in: fracnb-dry-run <config> --kueue-queue-of <username> ...",
    ]


def local_queue_manifests(queue: FracnbQueue, users: Iterable[str]) -> str:
    """The LocalQueue of each user (``--kueue-queue-of``), as YAML to fill in and apply."""
    return yaml.safe_dump_all(
        [
            {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
                "kind": "LocalQueue",
                "metadata": {
                    "name": local_queue_name(queue.kueue_local_queue, user),
                    "namespace": "<the hub's namespace>",
                    "annotations": {OWNER_ANNOTATION: user},
                },
                "spec": {"clusterQueue": "<the user's team ClusterQueue>"},
            }
            for user in users
        ],
        sort_keys=False,
    )


def lending_lines(config: Config, backends: Iterable[str]) -> list[str]:
    """Which of the profiles' backends can lend to lower-priority batch work, and the reclaim policy."""
    lines = [f"  {backend}: {lending_of(backend).text()}" for backend in dict.fromkeys(backends) if backend != "none"]
    return ["lending and reclaim (docs/lending.md):", *lines, *FracnbReclaim(config=config).summary()]


def borrowing_lines(config: Config) -> list[str]:
    """Whether a start whose own pool is full borrows a card of the borrowable nodes, and where."""
    spawner, engine = configured_traits(config), engine_of(FracnbQueue(config=config)).name
    reclaim = FracnbReclaim(config=config).enabled
    line = borrowing_summary(spawner.borrowable_node_selector, spawner.borrowable_tolerations, engine, reclaim)
    return ["borrowing a training card (docs/lending.md):", line]


def summary(config: Config, *, choices: int = 1, backends: Iterable[str] = ()) -> list[str]:
    """Quotas, idle policies and lending as the hub and the fracnb service will apply them (``choices``: how
    many choices the listing above shows; ``backends``: theirs)."""
    from fracnb_spawner.service.app import FracnbService  # noqa: PLC0415 -- the service's imports, only for the summary

    gpu, cpu = configured_traits(config).cull_defaults()
    lines = [] if choices else ["no profiles: every server gets the spawner's own settings", ""]
    lines += ["quotas (FracnbQuotas):", *quota_lines(FracnbQuotas(config=config).policy())]
    lines += [
        "idle policies (each choice above shows its own):" if choices else "idle policies:",
        f"  GPU servers by default: {idle_policy_text(gpu.idle_timeout, gpu.max_age)}",
        f"  CPU-only servers by default: {idle_policy_text(cpu.idle_timeout, cpu.max_age)}",
        *service_lines(FracnbService(config=config)),
        "hibernation (docs/hibernation.md):",
        *hibernation_lines(
            FracnbService(config=config), configured_traits(config), engine_of(FracnbQueue(config=config))
        ),
        *placement_lines(configured_traits(config).placement, list(dict.fromkeys(backends))),
        *borrowing_lines(config),
        *lending_lines(config, backends),
        *kueue_queue_lines(FracnbQueue(config=config)),
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fracnb-dry-run",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", type=Path, help="jupyterhub_config.py, or a Zero-to-JupyterHub values .yaml")
    parser.add_argument("--manifest", action="store_true", help="also print the full pod manifest of every choice")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--kueue-queue-of",
        nargs="+",
        metavar="USERNAME",
        help="print only these hub users' Kueue LocalQueues (named by FracnbQueue.kueue_local_queue), to fill in",
    )
    args = parser.parse_args(argv)
    if not args.config.exists():
        print(f"fracnb-dry-run: {args.config} does not exist", file=sys.stderr)
        return 2
    with offline_kubeconfig():
        try:
            config = load_hub_config(args.config)
            rows = asyncio.run(_describe(config, args.manifest))
            # also refuses what FracnbService would refuse at its start
            totals = summary(config, choices=len(rows), backends=[row["backend"] for row in rows])
        except NotHubConfigError as error:
            print(f"fracnb-dry-run: {error}", file=sys.stderr)
            return 2
        except (TraitError, ProfileConfigError, OverrideError) as error:
            print(f"fracnb-dry-run: configuration refused: {error}", file=sys.stderr)
            return 1
    if args.kueue_queue_of:
        print(local_queue_manifests(FracnbQueue(config=config), args.kueue_queue_of), end="")
    elif args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        _print_table(rows)
        print("\n".join(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
