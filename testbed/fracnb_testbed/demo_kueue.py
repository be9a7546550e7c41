"""The demo on Kueue (``python -m fracnb_testbed.demo --engine kueue``): the parts that differ from the
built-in engine, for :mod:`fracnb_testbed.demo`.

The demo then runs on the testbed's ``kueue`` cluster (Kueue v0.17.0's manager, time-sliced A100s) and
creates the Kueue objects of helm-values/kueue/queues.yaml, what an admin ships, fitted to the demo's
users and groups: the ResourceFlavor, the cohort and the WorkloadPriorityClasses as shipped; one
ClusterQueue per team, from the shipped one, with a quota small enough that a team's second server
waits; one ClusterQueue for users in no team; one LocalQueue per user, named by
``c.FracnbQueue.kueue_local_queue`` and annotated with its user (docs/queue.md, "Per-user LocalQueues"). Only
the choices Kueue can count on that cluster are offered.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from fracnb_spawner.queue import localqueues
from fracnb_spawner.queue.kueue import model as kueue_names
from fracnb_spawner.queue.kueue.model import MILLI_RESOURCE
from fracnb_testbed.handle import Testbed
from fracnb_testbed.kueue import BUILD_SCRIPT, KUEUE_DIR_ENV, KueueBuild, collection_path, default_build_dir
from fracnb_testbed.state import TestbedState

ENGINES = ("builtin", "kueue")
CLUSTER = "kueue"
HELM_QUEUES = Path(__file__).resolve().parents[2] / "helm-values" / "kueue" / "queues.yaml"
MILLI = MILLI_RESOURCE
# What Kueue can count on the kueue cluster: a time-sliced quarter is one nvidia.com/gpu.shared slot, which
# the cluster's manager turns into 250 fracnb.io/gpu-milli. Left out: the MPS slot (the cluster has no MPS
# node) and 1/2 GPU (no 2-way node, and every slot counts as a quarter); DRA and KAI the engine refuses.
PROFILE_SLUGS = ("cpu", "quarter", "small")
# A team's quota in milli-GPUs: one quarter each, so a team's second 0.25 GPU server waits unless it can
# borrow the other team's idle quarter (both are in the shipped cohort). Half the local A100 in all.
TEAM_QUOTAS = {"team-a": 250, "team-b": 250}
# Users in no team (the demo's admin) get a quarter of their own, outside the cohort: it neither lends nor
# borrows, so it never changes what the teams see.
NO_TEAM, NO_TEAM_QUOTA = "no-team", 250
LOCAL_QUEUE_TEMPLATE = "fracnb-{username}"  # c.FracnbQueue.kueue_local_queue's default


def build_problem() -> str | None:
    """Why the demo cannot run on Kueue here (Kueue not built), saying how to build it; else None."""
    explicit = os.environ.get(KUEUE_DIR_ENV)
    missing = KueueBuild(Path(explicit) if explicit else default_build_dir()).missing()
    if not missing:
        return None
    script = BUILD_SCRIPT.relative_to(BUILD_SCRIPT.parents[2])
    return (
        f"--engine kueue needs Kueue's manager, which is not built ({', '.join(missing)} missing). Build it with "
        f"./dev setup (it builds Kueue unless FRACNB_SKIP_KUEUE=1) or {script} (about 13 minutes cold on two "
        f"cores; if you give it another cache, export {KUEUE_DIR_ENV}=<the directory it prints>), then start "
        "the demo again"
    )


def option_problem(engine: str, kubeconfig: Path | None) -> str | None:
    """What is wrong with ``--engine`` beside the other options, or None."""
    if engine == "kueue" and kubeconfig is not None:
        return (
            "--engine kueue runs on the testbed's own kueue cluster; on a cluster of yours, install Kueue, "
            "apply helm-values/kueue/ and set c.FracnbQueue.engine = 'kueue' in your hub's config instead"
        )
    return None


def demo_profiles(profiles: Iterable[Mapping[str, Any]]) -> list[dict]:
    """The demo's profiles that the Kueue engine accepts on the kueue cluster."""
    return [dict(profile) for profile in profiles if profile["slug"] in PROFILE_SLUGS]


def team_of(groups: Iterable[str]) -> str:
    """The ClusterQueue of a user in these JupyterHub groups: their first team, else :data:`NO_TEAM`."""
    return next((group for group in sorted(groups) if group in TEAM_QUOTAS), NO_TEAM)


def local_queue_name(user: str) -> str:
    """The user's LocalQueue, named by the hub's own rule."""
    return localqueues.local_queue_name(LOCAL_QUEUE_TEMPLATE, user)


def shipped_objects() -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(HELM_QUEUES.read_text()) if document]


def queue_objects(users: Mapping[str, Iterable[str]], namespace: str) -> list[dict[str, Any]]:
    """The Kueue objects of the demo's users and groups, in the order to create them."""
    shipped = shipped_objects()
    kept = [doc for doc in shipped if doc["kind"] in ("ResourceFlavor", "Cohort", "WorkloadPriorityClass")]
    template = next(doc for doc in shipped if doc["kind"] == "ClusterQueue")
    queues = [cluster_queue(template, team, milli) for team, milli in TEAM_QUOTAS.items()]
    queues.append(cluster_queue(template, NO_TEAM, NO_TEAM_QUOTA, in_cohort=False))
    local = [
        {
            "apiVersion": template["apiVersion"],
            "kind": "LocalQueue",
            "metadata": {
                "name": local_queue_name(user),
                "namespace": namespace,
                "annotations": {kueue_names.OWNER_ANNOTATION: user},  # the hub refuses a queue marked as another's
            },
            "spec": {"clusterQueue": team_of(groups)},
        }
        for user, groups in users.items()
    ]
    flavors_and_cohort = [doc for doc in kept if doc["kind"] != "WorkloadPriorityClass"]
    classes = [doc for doc in kept if doc["kind"] == "WorkloadPriorityClass"]
    return [*flavors_and_cohort, *queues, *classes, *local]


def cluster_queue(template: Mapping[str, Any], name: str, milli: int, *, in_cohort: bool = True) -> dict[str, Any]:
    """The shipped ClusterQueue with another name and GPU quota; outside the cohort it cannot borrow."""
    queue = copy.deepcopy(dict(template))
    queue["metadata"] = {"name": name}
    if not in_cohort:
        queue["spec"].pop("cohortName", None)
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] != MILLI:
                    continue
                resource["nominalQuota"] = str(milli)
                if not in_cohort:
                    resource.pop("borrowingLimit", None)
    return queue


def install_queues(
    testbed: Testbed, users: Mapping[str, Iterable[str]], namespace: str, progress: Callable[[str], None]
) -> None:
    """Create the Kueue objects of the demo's users, their LocalQueues in ``namespace``."""
    progress("creating Kueue's ResourceFlavor, cohort, ClusterQueues, WorkloadPriorityClasses and LocalQueues")
    create_objects(testbed, queue_objects(users, namespace))


def create_objects(testbed: Testbed, objects: Iterable[Mapping[str, Any]]) -> None:
    """Create the objects (a TestbedError naming the one the API server refused)."""
    rest = testbed.rest()
    try:
        for manifest in objects:
            rest.create(collection_path(manifest), dict(manifest))
    finally:
        rest.close()


def visibility_url(state: TestbedState) -> str:
    """Kueue's visibility API on the manager's own port (the testbed registers no APIService)."""
    return f"https://127.0.0.1:{state.ports['kueue-visibility']}"


def hub_lines(visibility: str) -> list[str]:
    """The jupyterhub_config.py lines of the engine."""
    return [
        "c.FracnbQueue.engine = 'kueue'",
        f"c.FracnbQueue.kueue_local_queue = {LOCAL_QUEUE_TEMPLATE!r}",
        f"c.FracnbQueue.kueue_visibility_url = {visibility!r}",
    ]


def announcement(users: Mapping[str, Iterable[str]]) -> list[str]:
    """What the demo says at start about the engine."""
    teams = ", ".join(f"{team}: {milli / 1000:g} GPU" for team, milli in TEAM_QUOTAS.items())
    members = {team: [user for user, groups in users.items() if team_of(groups) == team] for team in TEAM_QUOTAS}
    who = "; ".join(f"{team}: {', '.join(names)}" for team, names in members.items() if names)
    return [
        f"  queue engine: Kueue; ClusterQueues {teams} (cohort university, borrowing idle quota), "
        f"{NO_TEAM}: {NO_TEAM_QUOTA / 1000:g} GPU for users in no team",
        f"  teams: {who}; each user has the LocalQueue {LOCAL_QUEUE_TEMPLATE}",
        "  choices: CPU only and time-sliced 0.25 GPU (what Kueue counts here; no MPS, 1/2 GPU, DRA or KAI)",
        "  try: carol starts 0.25 GPU, then ann, then bob: bob waits on team-a's quota, with Kueue's reason",
    ]
