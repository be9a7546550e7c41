"""``POST api/stop-saves``: what a server Kueue stopped saved as it stopped (stop-save.schema.json).

Kueue preempts a notebook by deleting its pod. The notebook saves its idle kernels' variables in the pod's grace
period (``FRACNB_STOP_HIBERNATION_TIMEOUT``), after the hub's last look at the pod, so only the notebook knows what
was saved: it posts its report here with the server's own token (anything else is a 403, a malformed report a
400). The service finds the server's pod, still terminating, reads Kueue's reason from its ``TerminationTarget``
condition, and keeps the stop's notice with what was saved in the session history (history/stops.py, reason
``kueue``), where the hub's pages read it: "Your last server stopped at 14:05 CET, preempted by a higher-priority
job of team-b; 41 variables saved. ...". It stands in for the hub's own notice of that stop (same time), which
could not count. A server Kueue did not stop gets no notice from here. A notice told while the session history
is not open yet (the service's first seconds) or cannot be written is kept by the service and written once it can
(:meth:`ServiceState.write_stop`): the notebook tells it once, in its last seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from zoneinfo import ZoneInfo

from tornado import web

from fracnb_schemas import STOP_SAVE
from fracnb_spawner.common.podkeys import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION
from fracnb_spawner.history.stops import SAVED, StopNotice
from fracnb_spawner.queue.kueue import model as kueue
from fracnb_spawner.service.base import ServiceHandler
from fracnb_spawner.service.sessions import require_server_token


def saved_variables(report: Mapping[str, Any]) -> int:
    """How many variables a hibernation report's kernels saved."""
    return sum(int(kernel.get("variables") or 0) for kernel in report.get("kernels") or [] if kernel["status"] in SAVED)


def server_pod(pods: Iterable[Mapping[str, Any]], user: str, server: str) -> Mapping[str, Any] | None:
    """The pod of ``user``'s ``server`` (KubeSpawner's annotations), if it is still there."""
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(USERNAME_ANNOTATION) == user and annotations.get(SERVERNAME_ANNOTATION, "") == server:
            return pod
    return None


def kueue_stop_notice(
    pod: Mapping[str, Any] | None, user: str, server: str, report: Mapping[str, Any], zone: ZoneInfo | None
) -> StopNotice | None:
    """The notice of a stop Kueue made, with what ``report`` saved; None if Kueue did not stop ``pod``."""
    words = kueue.pod_stop_reason(pod, saved_variables(report))
    if pod is None or words is None:
        return None
    at = kueue.terminated_at(pod)
    if at is None:
        return None
    return StopNotice(user, server, at, kueue.STOPPED_BY_KUEUE, details={"text": kueue.stop_message(words, at, zone)})


class StopSaveHandler(ServiceHandler):
    @web.authenticated
    async def post(self) -> None:
        user = self.caller()
        document = self.checked_body(STOP_SAVE, "what the server saved at its stop (stop-save.schema.json)")
        require_server_token(self.current_user, user, document["server_name"], "save at its stop")
        await self.state.record_stop_save(user, document["server_name"], document["hibernation"])
        self.set_status(204)
        self.finish()
