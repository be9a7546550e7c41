"""What a researcher reads about the GPU queue: their place, an estimate, and why a wait ended. Pure."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from fracnb_spawner.common.clock import clock_text, duration_text, when_text
from fracnb_spawner.culling import Reason
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.gpu.words import describe_plan
from fracnb_spawner.queue.order import ordinal
from fracnb_spawner.queue.releases import Release


def _why(release: Release) -> str:
    if release.reason is Reason.MAX_AGE:
        return f"a {release.fraction_text} GPU server reaches its maximum age then"
    return f"an idle {release.fraction_text} GPU server is due to be stopped then"  # idle, under demand too


def queued_message(
    plan: GPUPlan | None, position: int | None, release: Release | None, now: datetime, zone: ZoneInfo | None = None
) -> str:
    """ "Queued for a 0.25 GPU (time-slicing): 2nd in line. Estimated start about 14:05 CET, in 12 min: ..." """
    share = describe_plan(plan) if plan is not None else "a GPU"
    place = f"{ordinal(position)} in line" if position else "waiting for a place in line"
    if release is None:
        when = "No estimate yet: no server holding one is due to stop."
    else:
        when = f"Estimated start about {when_text(release.at, now, zone)}: {_why(release)}."
    return f"Queued for a {share}: {place}. {when} Stop the server to leave the queue."


def kueue_message(headline: str, release: Release | None, now: datetime, zone: ZoneInfo | None = None) -> str:
    """Kueue's place and reason (``headline``), then the estimate as for the builtin queue: "Waiting in the GPU
    queue: next in line; waiting for 0.25 GPU of team-a's quota. Estimated start about 14:05 CET, in 12 min: ..." """
    if release is None:
        when = "No estimate yet: no server holding this quota is due to stop."
    else:
        when = f"Estimated start about {when_text(release.at, now, zone)}: {_why(release)}."
    return f"{headline} {when} Stop the server to leave the queue."


def kept_place_message(plan: GPUPlan | None, until: datetime, now: datetime, zone: ZoneInfo | None = None) -> str:
    """The form's notice after a hub restart: the queued pod kept its place; starting again rejoins it."""
    queue = f"queue for a {describe_plan(plan)}" if plan is not None else "GPU queue"
    return (
        f"Your place in the {queue} is kept until {when_text(until, now, zone)}: "
        "start the same choice again to rejoin it."
    )


def node_lost_message(node: str, at: datetime, zone: ZoneInfo | None = None) -> str:
    """The form's notice after a server's node left the cluster (the hub deleted the pod and freed its GPU)."""
    return (
        f"Your last server stopped at {clock_text(at, zone)}: the node it ran on ({node}) left the cluster, "
        "and its GPU with it. Nothing of it runs or counts against your quota now; start a server again "
        "to get a GPU on another node."
    )


def left_message(plan: GPUPlan | None) -> str:
    """The confirmation after a user stopped a spawn waiting in the queue."""
    queue = f"queue for a {describe_plan(plan)}" if plan is not None else "GPU queue"
    return (
        f"You left the {queue}: your place in line is given up and no server was started. "
        "Start again to join the queue at its end."
    )


def gave_up_message(plan: GPUPlan | None, waited_seconds: float) -> str:
    """The failure when the maximum wait is over: said plainly, with what to do instead."""
    share = describe_plan(plan) if plan is not None else "a GPU"
    return (
        f"No {share} became free within {duration_text(waited_seconds)}, the longest this hub lets a server wait "
        "in the queue. Choose a smaller share or a CPU-only profile, or try again later."
    )


def form_text(free: int, waiting: int, wait_minutes: float | None) -> str:
    """The form's line per choice: "3 free now", "queue: 2 waiting, about 10 min"."""
    if free > 0 and waiting == 0:
        return f"{free} free now"
    return f"queue: {waiting} waiting, {wait_words(wait_minutes)}"


def wait_words(wait_minutes: float | None) -> str:
    """The form's estimate: "about 10 min" (at least 1), or "no estimate" for None."""
    return f"about {max(1, round(wait_minutes))} min" if wait_minutes is not None else "no estimate"
