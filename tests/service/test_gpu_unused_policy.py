"""The GPU-unused timeouts, decided with a controlled clock from what the notebooks report (pure).

A server whose kernels are idle and whose GPU has gone unused for its profile's
``gpu_unused_timeout`` is stopped even though the hub saw it active (a browser tab); a server busy
on the CPU is only warned, unless the longer ``gpu_unused_busy_timeout`` says otherwise; an unknown
count (none, ``null``, stale, an earlier session) never counts. The count is never extrapolated.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.common.podkeys import GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION, GPU_UNUSED_TIMEOUT_ANNOTATION
from fracnb_spawner.config.profiles import ProfileConfigError, cull_policy
from fracnb_spawner.culling import (
    Action,
    CullPolicy,
    CullTimingError,
    GpuUnused,
    Reason,
    ServerActivity,
    check_gpu_unused_timing,
    decide,
    isoformat,
    measurability,
    policy_from_annotations,
    server_status,
)
from fracnb_spawner.gpu.contract import contract_fields
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu
from fracnb_spawner.service.meterfacts import MeterFacts
from fracnb_spawner.service.metrics import CullMetrics
from tests.history.records import GIB, gpu_unused, report

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
LEAD = 60
# The hub heard of the server a minute ago (an open JupyterLab tab polls it): an hour's idle timeout is far.
ACTIVE = ServerActivity(started=T0 - timedelta(hours=2), last_activity=T0 - timedelta(minutes=1))
POLICY = CullPolicy(idle_timeout=3600, gpu_unused_timeout=1200)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def unused(seconds: float, *, measured: float = 0, busy: int = 0, memory: int | None = 18 * GIB) -> GpuUnused:
    return GpuUnused(seconds, at(measured), busy, memory)


def test_idle_kernels_with_an_unused_gpu_are_stopped_before_the_idle_timeout():
    decision = decide(ACTIVE, POLICY, now=at(5), warning_lead=LEAD, gpu_unused=unused(1200))
    assert (decision.action, decision.reason) == (Action.CULL, Reason.GPU_UNUSED)
    # 18 min reported: the projected deadline is 2 min away, inside the warning lead.
    decision = decide(ACTIVE, POLICY, now=at(0), warning_lead=LEAD * 3, gpu_unused=unused(1080))
    assert (decision.action, decision.reason, decision.seconds_left) == (Action.WARN, Reason.GPU_UNUSED, 120)


def test_the_count_is_never_extrapolated_past_its_measurement():
    # Reported 19 min unused at t=0; at t=300 the projection says 24 min, but no report has said 20 yet.
    decision = decide(ACTIVE, POLICY, now=at(300), warning_lead=LEAD, gpu_unused=unused(1140))
    assert (decision.action, decision.reason, decision.seconds_left) == (Action.WARN, Reason.GPU_UNUSED, 0)
    # The usual idle deadline still stops it when it comes, whatever the GPU count says.
    idle = ServerActivity(started=T0 - timedelta(hours=2), last_activity=T0 - timedelta(hours=1, seconds=1))
    decision = decide(idle, POLICY, now=at(300), warning_lead=LEAD, gpu_unused=unused(1140))
    assert (decision.action, decision.reason) == (Action.CULL, Reason.IDLE)


def test_a_busy_kernel_is_warned_not_stopped():
    fact = unused(7200, busy=1)
    decision = decide(ACTIVE, POLICY, now=at(5), warning_lead=LEAD, gpu_unused=fact)
    assert decision.action is Action.KEEP
    assert decision.reason is Reason.IDLE  # the idle timeout, an hour after the tab's last poll
    status = server_status(decision, POLICY, fact)
    assert status["gpu_unused"] == {"seconds": 7200, "gpu_memory_bytes": 18 * GIB}
    assert problems(SERVICE_REPORT, status, "/$defs/cullStatus") == []
    # Under the timeout, or idle kernels (the deadline speaks for them): no such warning.
    assert "gpu_unused" not in server_status(decision, POLICY, unused(600, busy=1))
    assert "gpu_unused" not in server_status(decision, POLICY, unused(7200))


def test_an_admin_may_stop_busy_servers_after_a_longer_timeout():
    policy = CullPolicy(idle_timeout=3600, gpu_unused_timeout=1200, gpu_unused_busy_timeout=3600)
    warned = decide(ACTIVE, policy, now=at(0), warning_lead=LEAD, gpu_unused=unused(3590, busy=2))
    assert (warned.action, warned.reason) == (Action.WARN, Reason.GPU_UNUSED_BUSY)
    culled = decide(ACTIVE, policy, now=at(1), warning_lead=LEAD, gpu_unused=unused(3600, busy=2))
    assert (culled.action, culled.reason) == (Action.CULL, Reason.GPU_UNUSED_BUSY)


def test_unknown_never_counts():
    decision = decide(ACTIVE, POLICY, now=at(5), warning_lead=LEAD, gpu_unused=None)
    assert (decision.action, decision.reason) == (Action.KEEP, Reason.IDLE)
    assert decide(ACTIVE, CullPolicy(idle_timeout=3600), now=at(5), warning_lead=LEAD,
                  gpu_unused=unused(10**6)).reason is Reason.IDLE  # fmt: skip


# ---- what the service keeps of the notebooks' reports ------------------------------------------


def session(seconds, *, measured_ago=2, busy=0, session_id="a" * 32, ended=False, fraction=0.25):
    """A session report made at T0 whose GPU-unused count was measured ``measured_ago`` seconds before."""
    document = report(session_id, gpu_unused=gpu_unused(seconds, busy_kernels=busy), fraction=fraction)
    document["reported_at"] = isoformat(T0)
    document["gpu_unused"]["measured_at"] = isoformat(T0 - timedelta(seconds=measured_ago))
    document["ended_at"] = isoformat(T0) if ended else None
    return document


WHO = ("ann", "")


def test_the_latest_report_is_known_until_two_intervals_old_and_only_for_its_session():
    facts = MeterFacts(report_interval=60)
    facts.record_report(WHO, session(1500), received_at=at(10))  # clocks differ: its age is what counts
    found = facts.gpu_unused(WHO, ACTIVE, at(20))
    assert (found.seconds, found.measured_at, found.busy_kernels) == (1500, at(8), 0)
    assert facts.gpu_unused(WHO, ACTIVE, at(8 + 120)) is not None
    assert facts.gpu_unused(WHO, ACTIVE, at(8 + 121)) is None  # stale: unknown, never unused
    restarted = ServerActivity(started=at(9), last_activity=at(9))
    assert facts.gpu_unused(WHO, restarted, at(20)) is None  # measured before this server started
    assert facts.gpu_unused(("bob", ""), ACTIVE, at(20)) is None


def test_null_a_missing_field_and_the_last_report_forget_the_count():
    facts = MeterFacts(report_interval=60)
    facts.record_report(WHO, session(1500), received_at=T0)
    facts.record_report(WHO, session(None), received_at=T0)
    assert facts.gpu_unused(WHO, ACTIVE, T0) is None
    facts.record_report(WHO, session(1500), received_at=T0)
    without = session(1500)
    del without["gpu_unused"]
    facts.record_report(WHO, without, received_at=T0)
    assert facts.gpu_unused(WHO, ACTIVE, T0) is None
    facts.record_report(WHO, session(1500), received_at=T0)
    facts.record_report(WHO, session(1530, ended=True), received_at=T0)
    assert facts.gpu_unused(WHO, ACTIVE, T0) is None


def test_gpu_unused_hours_are_counted_per_profile_between_reports_of_a_session():
    metrics = CullMetrics()
    facts = MeterFacts(report_interval=60, metrics=metrics)
    facts.record_report(WHO, session(600, fraction=0.5), received_at=at(0))  # the first: from here on
    facts.record_report(WHO, session(660, fraction=0.5), received_at=at(60))
    facts.record_report(WHO, session(0, fraction=0.5), received_at=at(120))  # the GPU worked: reset
    facts.record_report(WHO, session(30, fraction=0.5), received_at=at(180))  # 30 s since the reset
    facts.record_report(WHO, session(3600, session_id="b" * 32, fraction=0.5), received_at=at(240))  # a new session
    [family] = [f for f in text_string_to_metric_families(metrics.exposition().decode())
                if f.name == "fracnb_gpu_unused_gpu_hours"]  # fmt: skip
    [sample] = [s for s in family.samples if s.name.endswith("_total")]
    assert sample.labels == {"profile": "a100"}
    assert sample.value == pytest.approx(0.5 * (60 + 30) / 3600)


def test_a_fresh_use_report_replaces_the_hubs_activity_and_a_stale_one_does_not():
    facts = MeterFacts(report_interval=60)
    facts.record_use(WHO, T0 - timedelta(minutes=50), received_at=T0)
    used = facts.activity(WHO, ACTIVE, T0)
    assert used.last_activity == T0 - timedelta(minutes=50)
    # Idle for 50 minutes by use, though the tab polled a minute ago: warned for the idle timeout.
    decision = decide(used, CullPolicy(idle_timeout=3600), now=T0, warning_lead=900)
    assert (decision.action, decision.seconds_left) == (Action.WARN, 600)
    assert facts.activity(WHO, ACTIVE, T0 + timedelta(minutes=11)) == ACTIVE  # no report for 11 min: the hub's
    facts.record_use(WHO, T0 + timedelta(hours=1), received_at=T0)  # never later than its arrival
    assert facts.activity(WHO, ACTIVE, T0).last_activity == T0
    facts.record_use(WHO, T0 - timedelta(hours=3), received_at=T0)  # an earlier session's
    assert facts.activity(WHO, ACTIVE, T0) == ACTIVE
    facts.forget(WHO)
    assert facts.activity(WHO, ACTIVE, T0) == ACTIVE


# ---- configuration -----------------------------------------------------------------------------

QUARTER = parse_gpu_spec({"fraction": 0.25})
DEFAULTS = (CullPolicy(1800), CullPolicy(28800))


def test_profiles_set_the_timeouts_and_the_pod_carries_them():
    policy = cull_policy(QUARTER, {"gpu_unused_timeout": "20m", "gpu_unused_busy_timeout": "1h"}, *DEFAULTS)
    assert (policy.gpu_unused_timeout, policy.gpu_unused_busy_timeout) == (1200, 3600)
    plan = plan_gpu(QUARTER, GPUDefaults("time-slicing", 80 * GIB, "A100-80GB"))
    fields = contract_fields(plan, profile="quarter", choice="", cull=policy, model=None)
    assert fields.annotations[GPU_UNUSED_TIMEOUT_ANNOTATION] == "1200"
    assert fields.annotations[GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION] == "3600"
    assert policy_from_annotations(fields.annotations, CullPolicy()).gpu_unused_busy_timeout == 3600
    plain = contract_fields(plan, profile="quarter", choice="", cull=CullPolicy(1800), model=None)
    assert GPU_UNUSED_TIMEOUT_ANNOTATION not in plain.annotations


@pytest.mark.parametrize(
    ("spec", "cull", "message"),
    [
        (None, {"gpu_unused_timeout": "20m"}, "cull.gpu_unused_timeout applies only to GPU servers"),
        (QUARTER, {"gpu_unused_busy_timeout": "1h"}, "needs cull.gpu_unused_timeout"),
        (QUARTER, {"gpu_unused_timeout": "1h", "gpu_unused_busy_timeout": "30m"}, "must be longer than"),
        (QUARTER, {"gpu_unused_timeout": "soon"}, "cull.gpu_unused_timeout: "),
        (QUARTER, {"gpu_idle_timeout": "1h"}, "unknown cull key(s) ['gpu_idle_timeout']"),
    ],
)
def test_timeouts_that_cannot_work_are_refused_with_the_key(spec, cull, message):
    with pytest.raises(ProfileConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        cull_policy(spec, cull, *DEFAULTS)


def test_the_timing_rule_counts_the_report_interval_and_a_window():
    check_gpu_unused_timing([("quarter: cull.gpu_unused_timeout", 991)], warning_lead=900, report_interval=60)
    with pytest.raises(CullTimingError, match=r"quarter: cull.gpu_unused_timeout: .* more than 990 s"):
        check_gpu_unused_timing([("quarter: cull.gpu_unused_timeout", 990)], warning_lead=900, report_interval=60)


@pytest.mark.parametrize(
    ("backend", "isolation", "measurable"),
    [("time-slicing", "none", True), ("whole", "hard", True), ("hami", "enforced", True), ("mig", "hard", False),
     ("mps", "per-process", False), ("dra", "enforced", False), ("dra", "hard", True)],
)  # fmt: skip
def test_the_dry_run_says_where_the_mechanism_measures(backend, isolation, measurable):
    found, text = measurability(backend, isolation)
    assert found is measurable
    assert text.startswith("yes" if measurable else "no")
