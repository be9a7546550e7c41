"""A start the cluster's API server failed, in plain words (pure).

The apiserver can refuse an object built from the profile and the user's choices (400, 422: it
repeats for every spawn of that choice), fail (5xx, 429), not answer in time, or not be reachable.
Each becomes a :class:`~fracnb_spawner.common.errors.RefusedSpawnError` the user reads as is; a
start that fails so holds no quota (the spawner releases it). A timeout after the pod was created
is the scheduler's business (``Choosing.no_node_refusal``), not the apiserver's.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.common.errors import RefusedSpawnError

INVALID_OBJECT_STATUSES = (400, 422)  # the apiserver's BadRequest and Invalid


def start_refusal(error: Exception, *, pod_created: bool) -> RefusedSpawnError | None:
    """What the user reads when a start fails because of the apiserver; None: not the apiserver's doing
    (a timeout once the pod exists included), the error goes on as it is."""
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        if pod_created:
            return None
        # Every attempt to create the pod went unanswered.
        return RefusedSpawnError(503, cluster_unavailable_message("did not answer in time"), reason="cluster")
    if isinstance(error, ApiException):
        return _api_refusal(error)
    if isinstance(error, (aiohttp.ClientError, ConnectionError)):
        return RefusedSpawnError(503, cluster_unavailable_message("could not be reached"), reason="cluster")
    return None


def _api_refusal(error: ApiException) -> RefusedSpawnError | None:
    if error.status in INVALID_OBJECT_STATUSES:
        return RefusedSpawnError(
            400, f"The cluster refused this server's pod: {api_message(error)}", reason="invalid-pod"
        )
    if (error.status or 0) >= 500 and _kueue_unreachable(error):
        return RefusedSpawnError(503, KUEUE_DOWN_MESSAGE, reason="kueue")
    if (error.status or 0) >= 500 or error.status == 429:
        return RefusedSpawnError(
            503, cluster_unavailable_message(f"answered {error.status} {error.reason}"), reason="cluster"
        )
    return None


# Kueue's pod webhooks (engine "kueue") fail closed: with its manager down, a queued pod cannot be created.
KUEUE_WEBHOOKS = ('"mpod.kb.io"', '"vpod.kb.io"')
KUEUE_DOWN_MESSAGE = (
    "Kueue, the cluster's GPU queue, did not answer while this server was being created, so nothing was "
    "started and none of your quota is held. CPU-only servers still start. Try again in a few minutes; if it "
    "keeps failing, tell your hub admin (Kueue's manager in kueue-system is down)."
)


def _kueue_unreachable(error: ApiException) -> bool:
    text = api_message(error)
    return "failed calling webhook" in text and any(name in text for name in KUEUE_WEBHOOKS)


def cluster_unavailable_message(what_it_did: str) -> str:
    """A start the cluster's API server failed, in plain words ("The cluster's API server did not answer ...")."""
    return (
        f"The cluster's API server {what_it_did} while this server was being created, so nothing was started "
        "and none of your quota is held. Try again in a minute; if it keeps failing, tell your hub admin."
    )


def api_message(error: ApiException, limit: int = 500) -> str:
    """The apiserver's own message from an error answer (its Status object), shortened."""
    try:
        message = str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        message = str(error.reason)
    return message if len(message) <= limit else message[: limit - 1] + "…"
