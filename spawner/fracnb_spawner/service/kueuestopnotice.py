"""The notice of a stop Kueue made, from the server's terminating pod and what its notebook saved as it
stopped (``POST api/stop-saves``, service/api/stopsaves.py). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from zoneinfo import ZoneInfo

from fracnb_spawner.common.podkeys import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION
from fracnb_spawner.history.stopnotices import SAVED, StopNotice
from fracnb_spawner.queue.kueue import model as kueue


def saved_variables(report: Mapping[str, Any]) -> int:
    """How many variables a hibernation report's kernels saved."""
    return sum(int(kernel.get("variables") or 0) for kernel in report.get("kernels") or [] if kernel["status"] in SAVED)


def saved_notebooks(report: Mapping[str, Any]) -> list[str]:
    """The notebooks whose kernels saved variables (their paths; a kernel without one by its id), once each."""
    names = (
        kernel.get("path") or kernel["kernel_id"] for kernel in report.get("kernels") or [] if kernel["status"] in SAVED
    )
    return list(dict.fromkeys(names))


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
    words = kueue.pod_stop_reason(pod, saved_variables(report), saved_notebooks(report))
    if pod is None or words is None:
        return None
    at = kueue.terminated_at(pod)
    if at is None:
        return None
    return StopNotice(
        user, server, at, kueue.STOPPED_BY_KUEUE, details={"text": kueue.stop_message(words, at, zone, server)}
    )
