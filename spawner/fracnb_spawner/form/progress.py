"""Plain-language spawn progress: a headline for every Kubernetes event, the event itself in the event log.

JupyterHub's progress page shows each event's message as the headline and adds it to the event log
below. KubeSpawner's messages are the raw events ("2026-11-25T15:28:03Z [Normal] Started container
notebook as local process 16796"); :func:`page_event` gives each one an ``html_message`` that shows a
plain headline and keeps the raw text for the event log only (a style rule in the message hides
each part where it does not belong). The ``message`` (what API clients read) is the plain headline.
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.gpu.table import backend_named
from fracnb_spawner.gpu.words import describe_plan, where


def _waits_for_a_slot(scheduler_text: str, plan: GPUPlan | None) -> bool:
    # "0/10 nodes are available: 2 Insufficient nvidia.com/gpu.shared, 8 node(s) didn't match ...":
    # some node offers the resource and is full. Without "Insufficient", no node offers it at all.
    # Each backend's record says how its scheduler words "full" (gpu.table.Backend.full_markers).
    backend = (plan.scheduler_backend or plan.backend) if plan else "none"
    return any(marker in scheduler_text for marker in backend_named(backend).full_markers)


def waiting_message(plan: GPUPlan | None, raw_event: Mapping) -> str | None:
    """A plain headline for a scheduler's "no room" event about the user's GPU share, else None.

    "Waiting for a slot" only when slots exist and are all taken; when no node offers the share,
    it says so. The scheduler's own text stays in the event log (the raw event KubeSpawner reports).
    """
    if plan is None or plan.backend == "none":
        return None
    if raw_event.get("reason") != "FailedScheduling":
        return None
    share = describe_plan(plan)
    if not _waits_for_a_slot(str(raw_event.get("message") or ""), plan):
        return (
            f"No node in this cluster offers {share}{where(plan)} right now: "
            "your server starts only if one is added (see the event log)."
        )
    slot = f"a free {share} slot" if plan.backend not in ("whole",) else f"{share} to be free"
    return (
        f"Waiting for {slot}{where(plan)}: every matching GPU is in use right now. "
        "Your server starts as soon as one is released."
    )


def unschedulable_message(plan: GPUPlan | None, waited_seconds: float, *, slots_exist: bool) -> str:
    """The refusal when no node took the pod in time: plain words; the scheduler's text goes to the log.

    ``slots_exist``: some node offers the share (all were taken), rather than none at all.
    """
    share = describe_plan(plan) if plan else "this server"
    headline = f"No node could take {share} within {waited_seconds:g} s"
    if slots_exist:
        return f"{headline}: every matching GPU stayed in use. Try again later, or choose a smaller share."
    place = where(plan) if plan else ""
    return f"{headline}: no node in this cluster offers it{place}. Choose another option, or ask your hub admin."


def scheduler_saw_slots(scheduler_text: str, plan: GPUPlan | None = None) -> bool:
    """Whether the scheduler's refusal says some node offers the resource (and is full)."""
    return _waits_for_a_slot(scheduler_text, plan)


# Hidden where they do not belong: the raw event in the headline, the plain headline in the log.
_PARTS_STYLE = "<style>#progress-message .fracnb-event-raw,#progress-log .fracnb-event-headline{display:none}</style>"


def plain_headline(plan: GPUPlan | None, raw_event: Mapping) -> str:
    """What a Kubernetes event of the user's spawn means, in plain words."""
    reason = str(raw_event.get("reason") or "")
    share = describe_plan(plan) if plan is not None and plan.backend != "none" else None
    if reason == "FailedScheduling":
        return waiting_message(plan, raw_event) or "Waiting for a node to take your server (see the event log)."
    if reason == "Scheduled":
        return (
            f"A node with a free {share} took your server: starting it."
            if share
            else "A node took your server: starting it."
        )
    if reason in ("Pulling", "Pulled"):
        return "Getting the notebook image ready (a node's first start takes longer)."
    if raw_event.get("type") == "Warning":
        return "Starting your server; the cluster reported a problem (see the event log)."
    return "Starting your notebook server."


def page_event(plan: GPUPlan | None, event: Mapping[str, Any]) -> dict[str, Any]:
    """KubeSpawner's progress event with an ``html_message``: the plain headline on the page, the raw event
    in its event log."""
    raw_event = event.get("raw_event")
    if not raw_event:
        return dict(event)
    headline = plain_headline(plan, raw_event)
    raw = html.escape(str(event.get("message") or ""))
    return {
        **event,
        "message": headline,
        "html_message": f'<span class="fracnb-event-headline">{html.escape(headline)}</span>'
        f'<span class="fracnb-event-raw">{raw}</span>{_PARTS_STYLE}',
    }


async def with_plain_headlines(
    events: AsyncIterator[dict], plan: Callable[[], GPUPlan | None], hides_patience: Callable[[], bool]
) -> AsyncIterator[dict]:
    """KubeSpawner's progress ``events``, each with a plain headline about the spawn's ``plan()``
    (:func:`page_event`; read at each event: a progress page may open before the spawn has its plan), and
    without its "taking longer than expected" while ``hides_patience()`` (the queue's headline says more)."""
    async for event in events:
        if "raw_event" not in event and hides_patience():
            continue
        yield page_event(plan(), event)
