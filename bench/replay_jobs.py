"""The replay's batch queue: training streams (bench/replay_training.py) as plain pods, the same in every run.

A job is a pod of the PriorityClass ``replay-batch``, below notebooks (priority 0), on the training
servers: one whole GPU, ``nvidia.com/gpu`` from the device plugin or a ResourceClaim for one whole
device on a DRA cluster. Pending jobs wait for kube-scheduler, which also preempts them for a
notebook that needs their card (device-plugin resources only: kube-scheduler 1.36 does not preempt
to free a claim's device). A job checkpoints every ``checkpoint`` seconds of its run (modelled): a
preempted or reclaimed job is submitted again with the work it had left at its last checkpoint, and
the work since then is counted as redone. A finished job lets its stream think, then submit the next.

With lending (bench/replay_lending.py) a waiting job may be moved onto a free development card
(:meth:`BatchQueue.move`), and the run may take it back for a notebook (:meth:`BatchQueue.reclaimed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.replay_training import Stream

JOB_LABEL = "replay.fracnb.io/job"
BATCH_PRIORITY_CLASS = "replay-batch"
BATCH_PRIORITY = -100
JOB_CLAIM_TEMPLATE = "replay-train-gpu"
DRA_DEVICE_CLASS = "gpu.nvidia.com"


def is_job(pod: Mapping[str, Any]) -> bool:
    return JOB_LABEL in ((pod.get("metadata") or {}).get("labels") or {})


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


def job_manifest(name: str, *, dra: bool, pool: str = "training") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "train",
        "image": "example.invalid/train",
        "resources": {"requests": {"cpu": "4", "memory": "32Gi"}},
    }
    spec: dict[str, Any] = {
        "nodeSelector": {"node-pool": pool},
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
    pool: str = "training"  # where its pod asks to run


def saved_by_checkpoints(ran: int, checkpoint: int) -> int:
    """Seconds of a run of ``ran`` seconds that its last checkpoint kept (all of it when ``checkpoint`` is 0)."""
    return ran if checkpoint <= 0 else ran - ran % checkpoint


class BatchQueue:
    """The streams' state; the day driver calls :meth:`due`, :meth:`observe` and :meth:`finished` each step."""

    def __init__(self, streams: tuple[Stream, ...], checkpoint: int = 0) -> None:
        self.checkpoint = checkpoint  # seconds of work between a job's checkpoints; 0: it never loses work
        self.states = []
        for stream in streams:
            state = StreamState(stream, left=stream.jobs[0].duration)
            state.submit_at = 0 if stream.warm_left else stream.first_submit
            self.states.append(state)
        self.finished_jobs = 0
        self.preempted = 0  # by kube-scheduler, for a notebook
        self.reclaimed_jobs = 0  # by the run, from a lent card, for a notebook
        self.redone = 0  # seconds of work lost since the last checkpoint, to be done again

    def _stopped(self, state: StreamState, moment: int) -> None:
        """The job's pod is gone while it ran: it goes back to the queue from its last checkpoint."""
        assert state.running_since is not None
        ran = moment - state.running_since
        saved = saved_by_checkpoints(ran, self.checkpoint)
        state.left -= saved
        self.redone += ran - saved
        state.pod, state.running_since, state.submit_at, state.pool = None, None, moment, "training"

    def due(self, moment: int) -> list[str]:
        """Pods to create now: streams whose thinking is over (or whose job was preempted)."""
        names = []
        for state in self.states:
            if state.pod is None and state.submit_at is not None and state.submit_at <= moment:
                state.pod = self._next_pod(state)
                state.submit_at = None
                names.append(state.pod)
        return names

    @staticmethod
    def _next_pod(state: StreamState) -> str:
        state.attempt += 1
        return f"{state.stream.jobs[state.index].name}-{state.attempt}"

    def pool_of(self, pod: str) -> str:
        return next((s.pool for s in self.states if s.pod == pod), "training")

    def move(self, pod: str, pool: str) -> str:
        """A waiting (not running) job's pod is replaced by one asking for ``pool``; the new pod's name."""
        state = next(s for s in self.states if s.pod == pod)
        assert state.running_since is None, f"{pod} runs: it cannot be moved"
        state.pod, state.pool = self._next_pod(state), pool
        return state.pod

    def since_checkpoint(self, pod: str, moment: int) -> int:
        """Seconds of work a running job would lose if stopped now."""
        state = next(s for s in self.states if s.pod == pod)
        if state.running_since is None:
            return 0
        ran = moment - state.running_since
        return ran - saved_by_checkpoints(ran, self.checkpoint)

    def reclaimed(self, pod: str, moment: int) -> None:
        """The run deleted this running job's pod to give its card back to notebooks."""
        state = next(s for s in self.states if s.pod == pod)
        if state.running_since is None:
            state.pod, state.submit_at, state.pool = None, moment, "training"
            return
        self._stopped(state, moment)
        self.reclaimed_jobs += 1

    def observe(self, moment: int, running: set[str], present: set[str]) -> None:
        """What the cluster shows: job pods running now, and all job pods that exist."""
        for state in self.states:
            if state.pod is None:
                continue
            if state.running_since is not None and state.pod not in present:
                # Gone while running and not finished by us: kube-scheduler preempted it for a notebook.
                self._stopped(state, moment)
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
            state.pod, state.running_since, state.attempt, state.pool = None, None, 0, "training"
            state.submit_at = moment + think
            self.finished_jobs += 1
        return done

    def pods(self) -> list[str]:
        return [state.pod for state in self.states if state.pod is not None]
