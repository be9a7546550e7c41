"""A server's stop that Kueue's finalizer would hold (Kueue's manager down).

Kueue's webhook puts the finalizer ``kueue.x-k8s.io/managed`` on each pod it manages, and its manager removes it
once the pod has stopped. While the manager is down nothing removes it: the deleted pod stays Terminating, and
KubeSpawner's stop would wait for it until ``start_timeout`` and then fail. So once a stopped server's pod has
been held ``FracnbQueue.kueue_finalizer_timeout`` seconds past its grace period (its containers are stopped by
then), the hub removes the finalizer itself, and the pod goes. Kueue's validating pod webhook (``vpod.kb.io``,
failurePolicy Fail, on UPDATE too) is down with the manager and refuses that patch unless the site exempts pods
being deleted from it; then the stop ends anyway, leaving the pod Terminating until Kueue is back and removes its
finalizer. Either way the hub log says so (docs/queue.md).

A pod Kueue itself deletes (preempted, evicted) carries Kueue's reason in its condition ``TerminationTarget``;
the hub's poll, which sees it while it terminates, keeps that as the server's stop notice (:func:`note_stop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.history.stopnotices import StopNotice
from fracnb_spawner.queue.kueue import model as kueue

POLL_SECONDS = 1.0  # how often a waiting stop looks at its pod


async def stop_past_kueue(
    stopping: Awaitable[Any],
    pod: Callable[[], dict | None],
    *,
    api: Any,
    log: Any,
    timeout: float,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Await ``stopping`` (KubeSpawner's stop, which waits for the pod to be gone); meanwhile, once Kueue's
    finalizer has held ``pod()`` (the server's pod as the hub's watch has it) ``timeout`` seconds past its
    grace period, remove it, or, if Kueue's webhook refuses that, end the stop with the pod left Terminating.
    A pod without that finalizer (every pod of the builtin engine) is Kueue's for no moment of its stop: Kueue's
    webhook puts the finalizer on at the pod's creation, so one the watch has without it never gets it."""
    current = pod()
    if current is not None and kueue.MANAGED_FINALIZER not in ((current.get("metadata") or {}).get("finalizers") or []):
        await stopping
        return
    task = asyncio.ensure_future(stopping)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=POLL_SECONDS)
            if not task.done() and await _release(pod(), api, log, timeout, clock) is False:
                return
        task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _release(pod: dict | None, api: Any, log: Any, timeout: float, clock: Clock) -> bool | None:
    """Take Kueue's finalizer off a pod it has held too long: True if removed, False if Kueue's webhook (down
    with its manager) refused, None if there was nothing to do yet."""
    patch = kueue.stuck_finalizer_patch(pod, clock.now(), timeout)
    if patch is None or pod is None:
        return None
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    try:
        await api.patch_namespaced_pod(name, namespace, patch)
    except ApiException as error:
        if error.status in (404, 422):  # gone, or Kueue took its finalizer off meanwhile
            return None
        log.warning(
            "fracnb: pod %s/%s is held by Kueue's finalizer %s more than %g s past its grace period, and removing "
            "it failed (%s %s: is Kueue's manager down? its pod webhook refuses updates while it is); the stop "
            "ends and the pod stays Terminating until Kueue is back and removes its finalizer",
            namespace, name, kueue.MANAGED_FINALIZER, timeout, error.status, error.reason,
        )  # fmt: skip
        return False
    log.warning(
        "fracnb: pod %s/%s was held by Kueue's finalizer %s more than %g s past its grace period (is Kueue's "
        "manager down?); removed the finalizer so that the stop ends",
        namespace, name, kueue.MANAGED_FINALIZER, timeout,
    )  # fmt: skip
    return True


def note_stop(host: Any, pod: dict | None, clock: Clock = SYSTEM_CLOCK) -> None:
    """If Kueue is deleting ``pod`` (``host``'s server's), keep why as the server's stop notice
    (``HubState.stops``, which the spawn form shows), once per stop, with a line in the hub log."""
    words = kueue.pod_stop_reason(pod, None)
    if words is None or pod is None:
        return
    at = kueue.terminated_at(pod) or clock.now()
    user, server, stops = host.user.name, host.name, host.hub_state.stops
    known = stops.of_server(user, server)
    if known is not None and (known.reason, known.stopped_at) == (kueue.STOPPED_BY_KUEUE, at):
        return
    text = kueue.stop_message(words, at, host.queue_settings().zone, server)
    stops.note(StopNotice(user, server, at, kueue.STOPPED_BY_KUEUE, details={"text": text}))
    host.log.warning("fracnb: Kueue stopped %s: %s", host._log_name, words)
