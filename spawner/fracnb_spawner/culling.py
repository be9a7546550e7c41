"""Idle, max-age and GPU-unused culling decisions, pure: the caller passes the server model and ``now``.

A server has one deadline, the earlier of ``last activity + idle timeout`` and ``start +
max age``. While someone waits for the kind of GPU slot the server holds (``demand_since``),
a shorter ``idle_timeout_under_demand`` applies too, but never ends sooner than
``warning_lead`` after the wait began: the notebook is warned before it is stopped. Before the
deadline, within ``warning_lead`` seconds of it, the server is in the
warning state (the notebook shows it; any activity the hub hears about moves an idle
deadline back). At or after the deadline it is culled: stopped, pod deleted.

With a ``gpu_unused_timeout``, the server's GPU-unused time (what its notebook last reported,
:class:`GpuUnused`) gives one more candidate: a server whose kernels are all idle and whose GPU
has been unused that long is stopped (after a hibernation) even if it looks active to the hub.
A server whose stop under demand saves its idle kernels' variables first (:class:`HibernatingDemand`) may
get a shorter timeout under demand and a shorter warning before that stop: such a stop loses no work.
A server with a busy kernel is only warned, unless ``gpu_unused_busy_timeout`` (longer) says to
stop it too. The count is never extrapolated: the stop waits for a report that reaches the
timeout; the projected moment only serves the warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any

from traitlets import TraitError

from fracnb_spawner.common.podkeys import (
    GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION,
    GPU_UNUSED_TIMEOUT_ANNOTATION,
    IDLE_TIMEOUT_ANNOTATION,
    IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION,
    MAX_AGE_ANNOTATION,
)


class Action(str, Enum):
    KEEP = "keep"
    WARN = "warn"
    CULL = "cull"


class Reason(str, Enum):
    IDLE = "idle"
    MAX_AGE = "max-age"
    # Idle while someone waits for the kind of slot the server holds: the shorter timeout applies.
    DEMAND = "demand"
    # Every kernel idle and the GPU unused for gpu_unused_timeout (the notebook's reports).
    GPU_UNUSED = "gpu-unused"
    # A kernel busy on the CPU, the GPU unused for gpu_unused_busy_timeout (an admin's opt-in).
    GPU_UNUSED_BUSY = "gpu-unused-busy"


GPU_UNUSED_REASONS = (Reason.GPU_UNUSED, Reason.GPU_UNUSED_BUSY)


@dataclass(frozen=True)
class CullPolicy:
    """Seconds; 0 disables that limit."""

    idle_timeout: float = 0
    max_age: float = 0
    idle_timeout_under_demand: float = 0
    gpu_unused_timeout: float = 0
    gpu_unused_busy_timeout: float = 0

    @property
    def demand_timeout(self) -> float:
        """The idle timeout while someone waits, if it is shorter than the usual one; else 0."""
        shorter = self.idle_timeout_under_demand
        if shorter > 0 and (self.idle_timeout <= 0 or shorter < self.idle_timeout):
            return shorter
        return 0


@dataclass(frozen=True)
class HibernatingDemand:
    """The timeout under demand and its warning for a GPU server whose stop under demand saves its idle kernels'
    variables first (``FracnbService.idle_timeout_under_demand_hibernating``, ``warning_lead_hibernating``),
    in seconds; 0 leaves the server's own (its profile's timeout under demand, the service's warning lead)."""

    idle_timeout_under_demand: float = 0
    warning_lead: float = 0

    def policy(self, policy: CullPolicy) -> CullPolicy:
        """``policy`` with this timeout under demand where its own is longer or none (0); a shorter one stays."""
        ours, own = self.idle_timeout_under_demand, policy.idle_timeout_under_demand
        if ours <= 0 or 0 < own <= ours:
            return policy
        return replace(policy, idle_timeout_under_demand=ours)

    def lead(self, warning_lead: float) -> float:
        """The warning before a stop under demand: the shorter of this one and ``warning_lead`` (0: none)."""
        return min((lead for lead in (self.warning_lead, warning_lead) if lead > 0), default=0.0)


@dataclass(frozen=True)
class ServerActivity:
    """The parts of a hub server model culling looks at."""

    started: datetime | None
    last_activity: datetime | None
    pending: str | None = None
    ready: bool = True


@dataclass(frozen=True)
class GpuUnused:
    """A server's GPU-unused time as its notebook last reported it, known (never None seconds).

    ``measured_at`` is on the service's clock; ``seconds`` counts up to it and no further.
    """

    seconds: float
    measured_at: datetime
    busy_kernels: int = 0
    gpu_memory_bytes: int | None = None

    def reached(self, timeout: float) -> bool:
        return timeout > 0 and self.seconds >= timeout

    def projected(self, timeout: float) -> datetime:
        """When the count would reach ``timeout`` if the GPU stays unused (for the warning only)."""
        return self.measured_at + timedelta(seconds=max(timeout - self.seconds, 0))


@dataclass(frozen=True)
class CullDecision:
    action: Action
    reason: Reason | None = None
    cull_at: datetime | None = None
    seconds_left: float | None = None


def parse_timestamp(value: str | None) -> datetime | None:
    """Hub timestamps are ISO 8601 with ``Z``; naive ones are UTC."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def server_activity(model: Mapping[str, Any]) -> ServerActivity:
    """Read a server model from ``GET /hub/api/users`` (``user["servers"][name]``)."""
    return ServerActivity(
        started=parse_timestamp(model.get("started")),
        last_activity=parse_timestamp(model.get("last_activity")),
        pending=model.get("pending"),
        ready=bool(model.get("ready")),
    )


def _seconds(annotations: Mapping[str, str], key: str, default: float) -> float:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        return default
    return seconds if seconds >= 0 else default


def policy_from_annotations(annotations: Mapping[str, str], default: CullPolicy) -> CullPolicy:
    """The pod's ``fracnb.io/idle-timeout`` / ``fracnb.io/max-age`` /
    ``fracnb.io/idle-timeout-under-demand``, else ``default``'s.

    An unreadable value falls back to the default rather than disabling culling.
    """
    return CullPolicy(
        idle_timeout=_seconds(annotations, IDLE_TIMEOUT_ANNOTATION, default.idle_timeout),
        max_age=_seconds(annotations, MAX_AGE_ANNOTATION, default.max_age),
        idle_timeout_under_demand=_seconds(
            annotations, IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION, default.idle_timeout_under_demand
        ),
        gpu_unused_timeout=_seconds(annotations, GPU_UNUSED_TIMEOUT_ANNOTATION, default.gpu_unused_timeout),
        gpu_unused_busy_timeout=_seconds(
            annotations, GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION, default.gpu_unused_busy_timeout
        ),
    )


# On a tie, the reason reported is the one the user can act on, and the plainest.
_TIE_ORDER = {Reason.IDLE: 0, Reason.DEMAND: 1, Reason.GPU_UNUSED: 2, Reason.GPU_UNUSED_BUSY: 3, Reason.MAX_AGE: 4}


def _gpu_unused_candidate(policy: CullPolicy, gpu_unused: GpuUnused | None) -> tuple[datetime, Reason] | None:
    """Idle kernels: the GPU-unused timeout; a busy kernel: the opt-in longer one, else none (a warning only)."""
    if gpu_unused is None:
        return None
    if gpu_unused.busy_kernels == 0 and policy.gpu_unused_timeout > 0:
        return gpu_unused.projected(policy.gpu_unused_timeout), Reason.GPU_UNUSED
    if gpu_unused.busy_kernels > 0 and policy.gpu_unused_busy_timeout > 0:
        return gpu_unused.projected(policy.gpu_unused_busy_timeout), Reason.GPU_UNUSED_BUSY
    return None


def _reached(candidate: tuple[datetime, Reason], policy: CullPolicy, gpu_unused: GpuUnused | None) -> bool:
    """Whether a candidate that has passed may stop the server: a GPU-unused one only once reported."""
    reason = candidate[1]
    if reason not in GPU_UNUSED_REASONS or gpu_unused is None:
        return reason not in GPU_UNUSED_REASONS
    timeout = policy.gpu_unused_timeout if reason is Reason.GPU_UNUSED else policy.gpu_unused_busy_timeout
    return gpu_unused.reached(timeout)


def _candidates(
    server: ServerActivity,
    policy: CullPolicy,
    demand_since: datetime | None,
    demand_lead: float,
    gpu_unused: GpuUnused | None = None,
) -> list[tuple[datetime, Reason]]:
    candidates = []
    idle_since = server.last_activity or server.started
    if policy.idle_timeout > 0 and idle_since is not None:
        candidates.append((idle_since + timedelta(seconds=policy.idle_timeout), Reason.IDLE))
    if policy.demand_timeout > 0 and idle_since is not None and demand_since is not None:
        # Demand that appears when a server has long been idle must not stop it unwarned.
        warned_from = demand_since + timedelta(seconds=demand_lead)
        candidates.append((max(idle_since + timedelta(seconds=policy.demand_timeout), warned_from), Reason.DEMAND))
    if policy.max_age > 0 and server.started is not None:
        candidates.append((server.started + timedelta(seconds=policy.max_age), Reason.MAX_AGE))
    gpu_candidate = _gpu_unused_candidate(policy, gpu_unused)
    if gpu_candidate is not None:
        candidates.append(gpu_candidate)
    return candidates


def _earliest(candidates: list[tuple[datetime, Reason]]) -> tuple[datetime, Reason]:
    return min(candidates, key=lambda c: (c[0], _TIE_ORDER[c[1]]))


def decide(
    server: ServerActivity,
    policy: CullPolicy,
    *,
    now: datetime,
    warning_lead: float,
    demand_since: datetime | None = None,
    gpu_unused: GpuUnused | None = None,
    demand_lead: float | None = None,
) -> CullDecision:
    """Keep, warn or cull one server at ``now``.

    ``demand_since``: since when someone has been waiting for the kind of slot the server
    holds, or None while nobody waits (then the shorter timeout under demand plays no part).
    ``gpu_unused``: the server's GPU-unused time if known (unknown never counts as unused).
    ``demand_lead``: the warning before a stop under demand, where it differs from ``warning_lead``
    (:meth:`HibernatingDemand.lead`). The server is warned while any deadline is within its own lead.
    """
    if server.pending or not server.ready:
        return CullDecision(Action.KEEP)
    lead_under_demand = warning_lead if demand_lead is None else demand_lead
    candidates = _candidates(server, policy, demand_since, lead_under_demand, gpu_unused)
    if not candidates:
        return CullDecision(Action.KEEP)
    due = [c for c in candidates if c[0] <= now and _reached(c, policy, gpu_unused)]
    if due:
        cull_at, reason = _earliest(due)
        return CullDecision(Action.CULL, reason, cull_at, 0.0)
    # A GPU-unused moment that has passed but is not reported yet warns until a report reaches it.
    cull_at, reason = _earliest(candidates)
    seconds_left = max((cull_at - now).total_seconds(), 0.0)
    leads = {Reason.DEMAND: lead_under_demand}
    warned = any((moment - now).total_seconds() <= leads.get(why, warning_lead) for moment, why in candidates)
    return CullDecision(Action.WARN if warned else Action.KEEP, reason, cull_at, seconds_left)


def isoformat(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def busy_gpu_unused(policy: CullPolicy, gpu_unused: GpuUnused | None) -> GpuUnused | None:
    """``gpu_unused`` when it calls for the warning without a stop: a busy kernel, the GPU unused for
    the GPU-unused timeout (the opt-in stop of busy servers, if any, has its own deadline)."""
    if gpu_unused is None or gpu_unused.busy_kernels == 0 or not gpu_unused.reached(policy.gpu_unused_timeout):
        return None
    return gpu_unused


def server_status(
    decision: CullDecision, policy: CullPolicy, gpu_unused: GpuUnused | None = None, *, saves_variables: bool = False
) -> dict[str, Any]:
    """The per-server culling status ``GET api/me`` returns (``cullStatus`` in
    schemas/service-me.schema.json): the policy, and the deadline or None when none is set; with
    ``gpu_unused`` while a busy server's GPU has been unused past its GPU-unused timeout. ``saves_variables``:
    the stop at the deadline asks the server to save its variables first (its warning says so)."""
    deadline: dict[str, Any] | None = None
    if decision.reason is not None and decision.cull_at is not None and decision.seconds_left is not None:
        deadline = {
            "reason": decision.reason.value,
            "cull_at": isoformat(decision.cull_at),
            "seconds_left": decision.seconds_left,
            "warning": decision.action is not Action.KEEP,
        }
        if saves_variables:  # only then: a meter of an older version refuses fields it does not know
            deadline["saves_variables"] = True
    # No field for the timeout under demand: a meter of an older version refuses unknown fields,
    # and the deadline's reason says when it applies. For the same reason gpu_unused is there only
    # while it applies.
    status: dict[str, Any] = {
        "idle_timeout_seconds": policy.idle_timeout,
        "max_age_seconds": policy.max_age,
        "deadline": deadline,
    }
    unused = busy_gpu_unused(policy, gpu_unused)
    if unused is not None:
        status["gpu_unused"] = {"seconds": int(unused.seconds), "gpu_memory_bytes": unused.gpu_memory_bytes}
    return status


# ---- what timeouts the activity path can honour ---------------------------------------------


class CullTimingError(TraitError):
    """An idle timeout or warning lead that would warn or stop servers in use.

    A ``TraitError``: the values are traits (FractionalSpawner's, a profile's, FracnbService's),
    and every place that checks a hub config offline refuses trait errors with their message.
    """


@dataclass(frozen=True)
class CullTiming:
    """The service's timing: ``warning_lead`` before a deadline, and ``activity_report_lag``, the
    longest a server's activity takes to reach the hub's ``last_activity`` (seconds)."""

    warning_lead: float
    activity_report_lag: float


def timing_problem(idle_timeout: float, timing: CullTiming) -> str | None:
    """Why ``idle_timeout`` cannot work with ``timing``, or None.

    The hub may know a server's activity up to ``activity_report_lag`` late, so a server in
    constant use can look idle for that long: its idle deadline must stay more than
    ``warning_lead`` away even then, or it is warned (and with a timeout under the lag, stopped).
    """
    lag, lead = timing.activity_report_lag, timing.warning_lead
    if idle_timeout <= 0:
        return None
    if idle_timeout <= lag + lead:
        return (
            f"an idle timeout of {idle_timeout:g} s is not more than FracnbService.warning_lead "
            f"({lead:g} s) plus FracnbService.activity_report_lag ({lag:g} s, how late the hub may "
            f"hear of activity): servers in use would be warned{' and stopped' if idle_timeout <= lag else ''}; "
            f"make it more than {lead + lag:g} s or shorten the warning lead"
        )
    return None


def warning_lead_problem(timing: CullTiming) -> str | None:
    """Why the warning lead is too short for a user to answer it, or None (0 turns warnings off)."""
    lag, lead = timing.activity_report_lag, timing.warning_lead
    if 0 < lead <= lag:
        return (
            f"FracnbService.warning_lead ({lead:g} s) is not more than FracnbService.activity_report_lag "
            f"({lag:g} s): work resumed after the warning could reach the hub only after the server "
            f"is stopped; make it more than {lag:g} s, or 0 for no warning"
        )
    return None


def check_timing(idle_timeouts: Iterable[tuple[str, float]], timing: CullTiming) -> None:
    """Raise :class:`CullTimingError` for the warning lead or the first ``(where, seconds)`` that cannot work."""
    problem = warning_lead_problem(timing)
    if problem:
        raise CullTimingError(problem)
    for where, seconds in idle_timeouts:
        problem = timing_problem(seconds, timing)
        if problem:
            raise CullTimingError(f"{where}: {problem}")


# The GPU-unused timeouts (docs/culling-and-quotas.md, "GPU-unused timeouts"): the service hears of GPU use with
# the notebooks' session reports, up to one report interval after the meter's reading, whose count moves in
# windows of 30 s. A server using its GPU may thus look unused for that long, and a timeout must leave the
# warning lead beyond it, as an idle timeout must beyond the activity report lag (:func:`timing_problem`).

GPU_UNUSED_WINDOW_SECONDS = 30  # FracnbMeter.gpu_unused_window's default


def gpu_unused_report_lag(report_interval: float) -> float:
    """How late the service may hear that a server used its GPU (seconds)."""
    return report_interval + GPU_UNUSED_WINDOW_SECONDS


def gpu_unused_timing_problem(timeout: float, warning_lead: float, report_interval: float) -> str | None:
    lag = gpu_unused_report_lag(report_interval)
    if timeout <= 0 or timeout > lag + warning_lead:
        return None
    return (
        f"a GPU-unused timeout of {timeout:g} s is not more than FracnbService.warning_lead ({warning_lead:g} s)"
        f" plus how late the service may hear of GPU use ({lag:g} s: FracnbService.session_report_interval,"
        f" {report_interval:g} s, and one {GPU_UNUSED_WINDOW_SECONDS} s window): servers using their GPU would be"
        " warned;"
        f" make it more than {lag + warning_lead:g} s or shorten the warning lead"
    )


def check_gpu_unused_timing(timeouts: Iterable[tuple[str, float]], warning_lead: float, report_interval: float) -> None:
    """Raise :class:`CullTimingError` for the first ``(where, seconds)`` that cannot work."""
    for where, seconds in timeouts:
        problem = gpu_unused_timing_problem(seconds, warning_lead, report_interval)
        if problem:
            raise CullTimingError(f"{where}: {problem}")


def measurability(backend: str, isolation: str) -> tuple[bool, str]:
    """Whether the meter can measure GPU-unused time for a choice of this backend, and in words (the dry run).

    It needs NVML's per-process utilisation samples: none on MIG, and under MPS the work runs in the MPS
    server's process (fracnb_meter.gpuunused). A DRA choice with hard isolation may be a MIG slice.
    """
    if backend == "mig":
        return False, "no: MIG gives no per-process utilisation samples, so the GPU-unused timeouts never fire"
    if backend == "mps" or (backend == "dra" and isolation == "enforced"):
        return False, "no: under MPS the work runs in the MPS server's process, so the GPU-unused timeouts never fire"
    caveat = "; not on a MIG device the claim may get" if backend == "dra" and isolation == "hard" else ""
    return True, f"yes, with NVIDIA driver 570.86.15 or newer in the container{caveat}"
