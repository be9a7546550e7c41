"""The fracnb service marks a notebook's pod ``fracnb.io/busy-since`` while its session reports say a kernel runs
a cell, for the hub's placement: against a real JupyterHub and the testbed's apiserver, and its pure rule against
literal reports."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from fracnb_spawner.common.podkeys import BUSY_SINCE_ANNOTATION
from fracnb_spawner.culling import parse_timestamp
from fracnb_spawner.service.busymarks import (
    BusyMarks,
    PodMark,
    Stretch,
    mark_patch,
    mark_text,
    next_stretch,
    pod_marks,
)
from fracnb_spawner.service.pods import KubernetesPods
from fracnb_testbed.procs import wait_until
from tests.history.records import gpu_unused, report
from tests.service.calls import post, server_token, user_token
from tests.spawner_k8s.rbac import hub_with_rules

RBAC_YAML = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"
ARRIVED = datetime(2026, 11, 1, 11, 0, 2, tzinfo=timezone.utc)  # reported_at 11:00:00, measured 10:59:55


def busy(kernels: int, session: str = "a" * 32, **fields) -> dict:
    return report(session, gpu_unused=gpu_unused(0, busy_kernels=kernels, **fields))


def test_a_busy_stretch_starts_at_the_first_busy_reading_and_lasts_while_reports_say_busy() -> None:
    first = next_stretch(None, busy(1), ARRIVED)
    assert first == Stretch("a" * 32, ARRIVED - timedelta(seconds=5))  # the reading, on the service's clock
    later = next_stretch(first, busy(2, measured_at="2026-11-01T11:00:55Z"), ARRIVED + timedelta(minutes=1))
    assert later == first
    assert next_stretch(later, busy(0), ARRIVED) == Stretch("a" * 32, None)
    assert next_stretch(later, report("a" * 32), ARRIVED) == Stretch("a" * 32, None)  # no field: not known busy
    # Another session of the server (a restart) starts its own stretch.
    assert next_stretch(later, busy(1, "b" * 32), ARRIVED).since == ARRIVED - timedelta(seconds=5)


def test_the_annotation_is_rfc3339_in_whole_seconds_and_a_merge_patch_removes_it() -> None:
    assert mark_text(datetime(2026, 11, 1, 10, 59, 55, 123456, tzinfo=timezone.utc)) == "2026-11-01T10:59:55Z"
    assert mark_text(None) is None
    assert mark_patch(None) == {"metadata": {"annotations": {BUSY_SINCE_ANNOTATION: None}}}


def test_pods_are_found_by_their_servers_and_a_pod_being_deleted_is_not() -> None:
    def pod(name: str, user: str, server: str = "", **metadata) -> dict:
        annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server}
        return {"metadata": {"name": name, "namespace": "hub", "annotations": annotations, **metadata}}

    marked = pod("jupyter-bob--gpu", "bob", "gpu")
    marked["metadata"]["annotations"][BUSY_SINCE_ANNOTATION] = "2026-11-01T10:00:00Z"
    pods = [pod("jupyter-ann", "ann"), marked, pod("jupyter-cat", "cat", deletionTimestamp="2026-11-01T10:00:00Z")]
    assert pod_marks(pods) == {
        ("ann", ""): PodMark("hub", "jupyter-ann", None),
        ("bob", "gpu"): PodMark("hub", "jupyter-bob--gpu", "2026-11-01T10:00:00Z"),
    }


def test_a_busy_report_marks_the_pod_and_an_idle_one_clears_it(hub, new_user, make_pod, testbed, hub_namespace):
    user = new_user()
    reader = user_token(hub, user)  # the service answers 503 until its session history is open
    wait_until(lambda: hub.http("GET", hub.service_url + "api/sessions", token=reader)[0] != 503,
               what="the session history to open", timeout=60)  # fmt: skip
    name = make_pod(user)
    token = server_token(hub, user)

    def mark() -> str | None:
        [pod] = [p for p in testbed.list_pods(hub_namespace) if p["metadata"]["name"] == name]
        return (pod["metadata"].get("annotations") or {}).get(BUSY_SINCE_ANNOTATION)

    def reported(kernels: int, age: int) -> dict:
        now = datetime.now(timezone.utc)
        measured = (now - timedelta(seconds=age)).isoformat()
        return report(
            "c" * 32, reported=now.isoformat(), gpu_unused=gpu_unused(0, busy_kernels=kernels, measured_at=measured)
        )

    assert post(hub, reported(0, 5), token)[0] == 204
    assert mark() is None
    sent_at = datetime.now(timezone.utc)
    assert post(hub, reported(2, 5), token)[0] == 204
    wait_until(lambda: mark() is not None, what="the pod marked busy", timeout=30)
    since = parse_timestamp(mark())
    assert sent_at - timedelta(seconds=8) <= since <= sent_at, (since, sent_at)  # the reading, 5 s before its report
    # Busy still, read 10 minutes earlier by this report's clocks: the stretch goes on from its first report.
    assert post(hub, reported(1, 600), token)[0] == 204
    assert parse_timestamp(mark()) == since
    assert post(hub, reported(0, 5), token)[0] == 204
    wait_until(lambda: mark() is None, what="the mark cleared", timeout=30)


def notebook_pod_in(testbed, namespace: str) -> None:
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "jupyter-ann", "labels": {"component": "singleuser-server"},
                     "annotations": {"hub.jupyter.org/username": "ann", "hub.jupyter.org/servername": ""}},
        "spec": {"nodeName": "fracnb-nowhere", "containers": [{"name": "notebook", "image": "example.invalid/nb"}]},
    })  # fmt: skip


async def test_the_role_of_rbac_yaml_lets_the_service_mark_pods_and_without_it_the_report_still_counts(
    testbed, caplog
) -> None:
    """The hub's ServiceAccount with the chart's pod rules (no ``patch``), then (in another namespace) with the
    Role of helm-values/rbac.yaml added: the first logs the refusal once and fails nothing, the second marks."""
    chart = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list", "create", "delete"]}]
    sent = busy(1)
    refused = testbed.create_namespace()
    notebook_pod_in(testbed, refused)
    async with hub_with_rules(testbed, refused, chart) as api:
        marks = BusyMarks(KubernetesPods(namespace=refused, core_api=api))
        caplog.set_level(logging.WARNING, logger="fracnb.service")
        await marks.note(("ann", ""), sent, ARRIVED)
        await marks.note(("ann", ""), busy(0), ARRIVED)
        await marks.note(("ann", ""), sent, ARRIVED)
    refusals = [r.getMessage() for r in caplog.records if "Could not mark" in r.getMessage()]
    assert refusals == [
        "Could not mark the default server of 'ann' busy or idle on its pod: 403 Forbidden "
        "(the hub's service account needs patch on pods: helm-values/rbac.yaml)"
    ]
    documents = yaml.safe_load_all(RBAC_YAML.read_text())
    (role,) = [d for d in documents if (d["kind"], d["metadata"]["name"]) == ("Role", "fracnb-hub-pod-patch")]
    granted = testbed.create_namespace()
    notebook_pod_in(testbed, granted)
    async with hub_with_rules(testbed, granted, chart + role["rules"]) as api:
        marks = BusyMarks(KubernetesPods(namespace=granted, core_api=api))
        await marks.note(("ann", ""), sent, ARRIVED)
    [marked] = testbed.list_pods(granted)
    assert marked["metadata"]["annotations"][BUSY_SINCE_ANNOTATION] == "2026-11-01T10:59:57Z"
