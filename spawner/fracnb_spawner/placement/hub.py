"""Placing a new share just before its pod (and claim) is created: the hub's thin part of placement.

It reads what the hub already watches (ResourceSlices, claims, pods of every namespace: a holder's pod says
whether it is busy now, ``fracnb.io/busy-since``) and the session history's busy time of the cards' holders,
asks :func:`.decide.decide`, and writes the answer where the
backend lets the hub choose:

- ``dra``: the claim prefers the ranked cards by ``uuid`` (``firstAvailable``, then any card), and the pod
  prefers the first card's node (a preferred node affinity: across nodes the claim's order is only a preference);
- ``hami``: the per-pod card policy ``hami.io/gpu-scheduler-policy`` (``spread`` or ``binpack``);
- other backends: nothing; the device plugin (time-slicing, MPS, MIG) or KAI picks the card.

The choice and its reason go to the hub log and to the pod's ``fracnb.io/placement`` annotation. A failure
here never fails a start: the share then goes where the scheduler puts it.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any, Protocol

from kubernetes_asyncio.client.models import (
    V1Affinity,
    V1NodeAffinity,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1PreferredSchedulingTerm,
)

from fracnb_spawner.cluster.slots import DraAsk
from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.podkeys import PLACEMENT_ANNOTATION
from fracnb_spawner.gpu.backends import HAMI_GPU_POLICY_ANNOTATION
from fracnb_spawner.gpu.dra import with_card_preference
from fracnb_spawner.placement.cards import dra_cards, dra_competitor, whole_card_waiting
from fracnb_spawner.placement.decide import (
    NO_HISTORY_AVERAGE,
    Busyness,
    Placement,
    decide,
    mode_of,
    scheduler_policy,
)

HISTORY_DAYS = 30  # the sessions whose busy time says how busy a holder is expected to be
NODE_PREFERENCE_WEIGHT = 100


class PlacementHost(Protocol):
    """What placement reads of its spawner."""

    placement: str
    placement_reserve_cards: int
    pod_name: str
    right_sizing_db_url: str
    spawn_plan: Any
    companions: Any
    hub_state: Any
    api: Any
    log: Any

    def backend_settings(self) -> Any: ...


async def place(host: PlacementHost, pod: Any, borrowed: Any = None, clock: Clock = SYSTEM_CLOCK) -> Placement | None:
    """Prefer a card for this spawn's share (``pod``: KubeSpawner's V1Pod, changed in place); what was chosen.
    ``borrowed``: the ask of a borrowable pool the spawn starts on instead of its own (:mod:`.borrowing`);
    ``clock``: where it reads the time (the holders' busy-since, the history's window)."""
    plan = host.spawn_plan
    if plan is None:
        return None
    ask = borrowed or plan.ask
    try:
        if plan.gpu.backend == "dra" and plan.gpu.mig_slice is None and isinstance(ask, DraAsk):
            placement = await _place_dra(host, pod, ask, clock)
        elif plan.gpu.backend == "hami" and plan.gpu.fraction < 1 and host.placement != "packed":
            placement = await _place_hami(host, pod)
        else:
            return None
    except Exception as error:  # the scheduler's own choice is still a working one
        host.log.warning("fracnb: no placement for %s, the scheduler chooses: %r", host.pod_name, error)
        return None
    if placement is not None:
        host.log.info("fracnb: placing %s (placement %s): %s", host.pod_name, placement.policy, placement.reason)
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), PLACEMENT_ANNOTATION: placement.reason}
    return placement


async def _place_dra(host: PlacementHost, pod: Any, ask: DraAsk, clock: Clock) -> Placement | None:
    cluster = await host.hub_state.cluster(host.api, host.log).read(devices=True, wait=True)
    if cluster is None or ask.want.memory is None:
        return None
    cards = dra_cards(cluster, ask.want, clock.now())
    users = sorted({holder.user for card in cards for holder in card.holders if holder.user})
    settings = host.backend_settings()
    competes = dra_competitor(settings.dra_device_class, ask.want)
    waiting = whole_card_waiting(cluster.pods, competes, claims=cluster.claims, device_class=settings.dra_device_class)
    history = await busyness(host, users, clock)
    placement = decide(host.placement, cards, ask.want.memory, history, waiting, reserve=host.placement_reserve_cards)
    if placement is None or not placement.uuids:
        return None
    driver = settings.dra_driver
    host.companions.plan([
        {**obj, "spec": with_card_preference(obj["spec"], placement.uuids, driver)}
        if obj.get("kind") == "ResourceClaim" else obj
        for obj in host.companions.wanted
    ])  # fmt: skip
    prefer_node(pod, placement.ranked[0].node)
    return placement


async def _place_hami(host: PlacementHost, pod: Any) -> Placement:
    cluster = await host.hub_state.cluster(host.api, host.log).read(devices=False, wait=True)
    whole = host.backend_settings().whole_gpu_resource
    waiting = whole_card_waiting(cluster.pods if cluster is not None else [], whole_resource=whole)
    mode = mode_of(host.placement, waiting)
    policy = scheduler_policy(mode)
    pod.metadata.annotations = {**(pod.metadata.annotations or {}), HAMI_GPU_POLICY_ANNOTATION: policy}
    why = f"{waiting} waits for whole cards" if waiting else "nothing waits for whole cards"
    return Placement(host.placement, mode, (), f"HAMi's {policy} policy picks the card of the node; {why}")


async def busyness(host: PlacementHost, users: list[str], clock: Clock = SYSTEM_CLOCK) -> Busyness:
    """The users' busy time from the session history; without a readable history every user is average."""
    since = clock.now().replace(tzinfo=None) - timedelta(days=HISTORY_DAYS)
    try:
        shares, average = await asyncio.to_thread(
            host.hub_state.history.busy_shares, host.right_sizing_db_url, users, since
        )
    except Exception as error:  # no table yet, a database down: place by holder counts
        host.log.warning("fracnb: placement reads no busy time, the session history is unreadable: %s", error)
        shares, average = {}, None
    return Busyness(shares, NO_HISTORY_AVERAGE if average is None else average)


def prefer_node(pod: Any, node: str) -> None:
    """Add a preferred node affinity for ``node`` to the V1Pod (KubeSpawner's affinity objects are copied)."""
    term = V1PreferredSchedulingTerm(
        weight=NODE_PREFERENCE_WEIGHT,
        preference=V1NodeSelectorTerm(
            match_fields=[V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])]
        ),
    )
    affinity = copy.copy(pod.spec.affinity) if pod.spec.affinity is not None else V1Affinity()
    node_affinity = copy.copy(affinity.node_affinity) if affinity.node_affinity is not None else V1NodeAffinity()
    preferred = list(node_affinity.preferred_during_scheduling_ignored_during_execution or [])
    if term not in preferred:
        node_affinity.preferred_during_scheduling_ignored_during_execution = [*preferred, term]
    affinity.node_affinity = node_affinity
    pod.spec.affinity = affinity
