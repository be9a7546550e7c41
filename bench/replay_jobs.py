"""The replay's batch queue: training streams (bench/replay_training.py) as plain pods, the same in every run.

A job is a pod of the PriorityClass ``replay-batch``, below notebooks (priority 0), on the training
servers: one whole GPU, ``nvidia.com/gpu`` from the device plugin or a ResourceClaim for one whole
device on a DRA cluster. Pending jobs wait for kube-scheduler, which also preempts them for a
notebook that needs their card (device-plugin resources only: kube-scheduler 1.36 does not preempt
to free a claim's device). A preempted job is submitted again with the work it had left (it
checkpoints); a finished one lets its stream think, then submit the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.replay_training import Stream

JOB_LABEL = "replay.fracnb.io/job"
BATCH_PRIORITY_CLASS = "replay-batch"
BATCH_PRIORITY = -100
JOB_CLAIM_TEMPLATE = "replay-train-gpu"
DRA_DEVICE_CLASS = "gpu.nvidia.com"


def priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": BATCH_PRIORITY_CLASS},
        "value": BATCH_PRIORITY,
        "description": "Training jobs of the replay: below notebooks, preempted for them",
    }


def claim_template() -> dict[str, Any]:
    """One whole DRA device (``count`` takes all of a shareable device's memory by its request policy)."""
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": JOB_CLAIM_TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def job_manifest(name: str, *, dra: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "train",
        "image": "example.invalid/train",
        "resources": {"requests": {"cpu": "4", "memory": "32Gi"}},
    }
    spec: dict[str, Any] = {
        "nodeSelector": {"node-pool": "training"},
        "priorityClassName": BATCH_PRIORITY_CLASS,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if dra:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": JOB_CLAIM_TEMPLATE}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    else:
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {JOB_LABEL: "true"}}, "spec": spec}


@dataclass
class StreamState:
    """Where one stream is: thinking until ``submit_at``, or with job ``index`` as pod ``pod``."""

    stream: Stream
    index: int = 0
    pod: str | None = None
    left: int = 0  # seconds of work the current job still needs
    running_since: int | None = None  # when its current pod started running
    submit_at: int | None = None
    attempt: int = 0  # pods made for the current job (a preempted job gets a new one)


class BatchQueue:
    """The streams' state; the day driver calls :meth:`due`, :meth:`observe` and :meth:`finished` each step."""

    def __init__(self, streams: tuple[Stream, ...]) -> None:
        self.states = []
        for stream in streams:
            state = StreamState(stream, left=stream.jobs[0].duration)
            state.submit_at = 0 if stream.warm_left else stream.first_submit
            self.states.append(state)
        self.finished_jobs = 0
        self.preempted = 0

    def due(self, moment: int) -> list[str]:
        """Pods to create now: streams whose thinking is over (or whose job was preempted)."""
        names = []
        for state in self.states:
            if state.pod is None and state.submit_at is not None and state.submit_at <= moment:
                state.attempt += 1
                state.pod = f"{state.stream.jobs[state.index].name}-{state.attempt}"
                state.submit_at = None
                names.append(state.pod)
        return names

    def observe(self, moment: int, running: set[str], present: set[str]) -> None:
        """What the cluster shows: job pods running now, and all job pods that exist."""
        for state in self.states:
            if state.pod is None:
                continue
            if state.running_since is not None and state.pod not in present:
                # Gone while running and not finished by us: kube-scheduler preempted it for a notebook.
                state.left -= moment - state.running_since
                state.pod, state.running_since, state.submit_at = None, None, moment
                self.preempted += 1
            elif state.running_since is None and state.pod in running:
                state.running_since = moment

    def finished(self, moment: int) -> list[str]:
        """Pods whose job has done its work by ``moment``; their streams start thinking."""
        done = []
        for state in self.states:
            if state.running_since is None or moment - state.running_since < state.left:
                continue
            done.append(state.pod or "")
            think = state.stream.thinks[state.index]
            state.index = min(state.index + 1, len(state.stream.jobs) - 1)
            state.left = state.stream.jobs[state.index].duration
            state.pod, state.running_since, state.attempt = None, None, 0
            state.submit_at = moment + think
            self.finished_jobs += 1
        return done

    def pods(self) -> list[str]:
        return [state.pod for state in self.states if state.pod is not None]
