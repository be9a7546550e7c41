"""Who chooses the card of a share, backend by backend, under a placement policy: words for the dry run and
docs/spawner.md ("Placement"). Pure."""

from __future__ import annotations

PLUGIN = (
    "card choice is the NVIDIA device plugin's (node-wide, its sharedDevicesAllocationPolicy: distributed or "
    "packed); fracnb does not choose the card"
)
WHO_CHOOSES = {
    "dra": "the hub ranks the cards in each claim (firstAvailable by uuid, then any card) and prefers the first's node",
    "hami": "the hub sets HAMi's per-pod policy (hami.io/gpu-scheduler-policy)",
    "time-slicing": PLUGIN,
    "mps": PLUGIN,
    "mig": PLUGIN.replace("the card", "the MIG device"),
    "kai": "card choice is KAI's (its SchedulingShard's placementStrategy); fracnb does not choose the card",
    "whole": "whole cards: nothing to share, so nothing to place",
}
POLICY_WORDS = {
    "adaptive": "beside the least busy holders while nothing waits for whole cards; "
    "onto the fullest card that fits while a whole-card start or batch pod waits",
    "spread": "beside the least busy holders",
    "packed": "onto the fullest card that fits",
}


def backend_text(backend: str, policy: str) -> str:
    """One backend's line: who chooses the card, and what the hub asks for under ``policy``."""
    who = WHO_CHOOSES.get(backend, "card choice is the backend's; fracnb does not choose the card")
    if backend == "hami" and policy == "packed":
        return f"{who}: hami_gpu_scheduler_policy on every share"
    if backend == "hami" and policy == "adaptive":
        return f"{who}: spread while nothing waits for whole cards, binpack while a whole-card start or batch pod waits"
    if backend == "hami":
        return f"{who}: spread"
    return who


def placement_lines(policy: str, backends: list[str]) -> list[str]:
    """The dry run's section: the policy, then a line per backend the profiles use."""
    lines = [f"placement (FractionalSpawner.placement = {policy!r}): new shares go {POLICY_WORDS[policy]}"]
    return lines + [f"  {backend}: {backend_text(backend, policy)}" for backend in backends if backend != "none"]
