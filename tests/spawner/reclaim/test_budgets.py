"""Which PodDisruptionBudgets allow reclaim no eviction, against literal budgets and pods; the shipped lending
objects, the dry run on them, and the service's warning, said once per budget."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from fracnb_spawner.dryrun import main as dry_run
from fracnb_spawner.reclaim.budgets import (
    blocking_budgets,
    blocking_reason,
    controller_of,
    manifest_warnings,
    reclaim_candidates,
)
from fracnb_spawner.reclaim.victims import Card, Holder, Policy
from fracnb_spawner.service.reclaiming import Reclaimer, ReclaimMetrics, Snapshot

LENDING = Path(__file__).resolve().parents[3] / "helm-values" / "lending.yaml"
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
SYNC_FAILED = {
    "type": "DisruptionAllowed",
    "status": "False",
    "reason": "SyncFailed",
    "message": 'found no controllers for pod "run-7-0"',
}


def owner(kind: str, name: str, api_version: str) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u-1", "controller": True}


def pod(name: str, *, owned_by: dict | None = None, ready: bool = True, labels: dict | None = None) -> dict:
    metadata: dict = {"name": name, "namespace": "batch", "labels": labels or {"app": "train"}}
    if owned_by:
        metadata["ownerReferences"] = [owned_by]
    return {"metadata": metadata, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def job_pod(name: str = "train-dra-x7k2p", job: str = "train-dra", **kwargs) -> dict:
    return pod(name, owned_by=owner("Job", job, "batch/v1"), **kwargs)


def budget(name: str = "train", *, status: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "batch"},
        "spec": {**spec, "selector": {"matchLabels": {"app": "train"}}},
        "status": status or {},
    }


def test_the_controlling_owner_is_read_with_its_group() -> None:
    assert controller_of(job_pod()) == ("batch", "Job", "train-dra")
    assert controller_of(pod("rc-1", owned_by=owner("ReplicationController", "rc", "v1"))) == (
        "",
        "ReplicationController",
        "rc",
    )
    not_controlling = pod("p", owned_by={**owner("Job", "j", "batch/v1"), "controller": False})
    assert controller_of(not_controlling) is None
    assert controller_of(pod("bare")) is None


@pytest.mark.parametrize("spec", [{"maxUnavailable": 1}, {"maxUnavailable": "50%"}, {"minAvailable": "50%"}])
def test_a_budget_needing_scale_over_a_jobs_pods_never_allows_one(spec: dict) -> None:
    reason = blocking_reason(budget(**spec), [job_pod()])
    assert reason is not None
    shape = next(f"{key} {value}" for key, value in spec.items())
    assert reason.startswith(f"its {shape} needs the scale subresource of the pods' controller, and Job train-dra")
    assert "give it an integer minAvailable below the number of pods it covers, or no budget" in reason


def test_a_daemonsets_pods_are_the_same() -> None:
    daemon = pod("agent-1", owned_by=owner("DaemonSet", "agent", "apps/v1"))
    assert "DaemonSet agent has none" in (blocking_reason(budget(maxUnavailable=1), [daemon]) or "")


def test_max_unavailable_over_bare_pods_counts_none_of_them() -> None:
    reason = blocking_reason(budget(maxUnavailable=1), [pod("bare-1"), pod("bare-2")])
    assert reason is not None
    assert "its pods have no controller" in reason


def test_shapes_that_work() -> None:
    replica = pod("web-1", owned_by=owner("ReplicaSet", "web", "apps/v1"))
    allowed = {"disruptionsAllowed": 1}
    assert blocking_reason(budget(maxUnavailable=1, status=allowed), [replica]) is None
    assert blocking_reason(budget(minAvailable="50%", status=allowed), [replica]) is None
    assert blocking_reason(budget(minAvailable=0, status=allowed), [job_pod()]) is None
    two = [job_pod("a"), job_pod("b")]
    assert blocking_reason(budget(minAvailable=1, status=allowed), two) is None
    assert blocking_reason(budget(maxUnavailable=1), []) is None  # covers nothing: nothing to say


def test_an_integer_min_available_keeping_every_ready_pod() -> None:
    reason = blocking_reason(budget(minAvailable=1), [job_pod()])
    assert reason is not None
    assert reason.startswith("its minAvailable 1 keeps all 1 ready pods it covers")
    # the Job's second pod not ready (pending): the one running is still kept
    reason = blocking_reason(budget(minAvailable=1), [job_pod("a"), job_pod("b", ready=False)])
    assert reason is not None
    assert "keeps all 1 ready pods" in reason


def test_the_disruption_controllers_sync_failure_is_quoted() -> None:
    custom = pod("run-7-0", owned_by=owner("TrainingRun", "run-7", "example.com/v1"))
    reason = blocking_reason(budget(maxUnavailable=1, status={"conditions": [SYNC_FAILED]}), [custom])
    assert reason is not None
    assert reason.startswith('the disruption controller cannot sync it (found no controllers for pod "run-7-0")')
    insufficient = {**SYNC_FAILED, "reason": "InsufficientPods"}  # a synced budget allowing none now: not "never"
    assert blocking_reason(budget(maxUnavailable=1, status={"conditions": [insufficient]}), [custom]) is None


def test_only_budgets_over_the_candidates_are_named() -> None:
    pods = [job_pod(), pod("web-1", labels={"app": "web"}, owned_by=owner("Job", "web", "batch/v1"))]
    web = {
        **budget("web", maxUnavailable=1),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    pdbs = [budget(maxUnavailable=1), web]
    assert [name for name, _ in blocking_budgets(pdbs, pods)] == [("batch", "train"), ("batch", "web")]
    only = blocking_budgets(pdbs, pods, over=frozenset({("batch", "train-dra-x7k2p")}))
    assert [name for name, _ in only] == [("batch", "train")]


def test_candidates_are_what_the_policy_may_evict() -> None:
    holders = (
        Holder(("batch", "train"), 1, -100, T0),
        Holder(("batch", "urgent"), 1, 10, T0),
        Holder(("jhub", "jupyter-ann"), 1, -100, T0, notebook=True),
        Holder(("other", "train"), 1, -100, T0),
    )
    cards = [Card("gpu/a/0", "a", 4, True, holders)]
    assert reclaim_candidates(cards, Policy(0, frozenset({"batch"}))) == {("batch", "train")}


def shipped_objects() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(LENDING.read_text()) if doc]


def test_the_shipped_lending_objects_have_no_budget_that_blocks_reclaim() -> None:
    assert manifest_warnings(shipped_objects()) == []


def test_the_old_budget_over_the_shipped_jobs_is_named() -> None:
    old = budget(maxUnavailable=1, status=None)
    (warning,) = manifest_warnings([*shipped_objects(), old])
    assert warning.startswith(
        "PodDisruptionBudget batch/train allows reclaim no eviction of its pods: its maxUnavailable 1 needs the"
        " scale subresource of the pods' controller, and Job train-dra has none"
    )
    assert manifest_warnings([*shipped_objects(), budget(minAvailable=1)]) == []  # two Jobs' pods: one may go
    dra_only = [obj for obj in shipped_objects() if obj["metadata"]["name"] != "train-hami"]
    (warning,) = manifest_warnings([*dra_only, budget(minAvailable=1)])
    assert "its minAvailable 1 keeps all 1 ready pods it covers" in warning


def test_the_dry_run_warns_of_the_old_budget(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "lending.yaml"
    path.write_text(LENDING.read_text() + "---\n" + yaml.safe_dump(budget(maxUnavailable=1)))
    assert dry_run([str(path)]) == 2
    err = capsys.readouterr().err
    assert "holds Kubernetes objects to apply with kubectl" in err
    assert "\nWarning: PodDisruptionBudget batch/train allows reclaim no eviction of its pods" in err
    assert dry_run([str(LENDING)]) == 2
    assert "Warning" not in capsys.readouterr().err


def test_the_service_warns_once_per_budget_while_it_blocks(caplog: pytest.LogCaptureFixture) -> None:
    reclaimer = Reclaimer(None, Policy(), 10, lambda _pod: None, ReclaimMetrics(CollectorRegistry()))
    holding = [Card("gpu/a/0", "a", 4, True, (Holder(("batch", "train-dra-x7k2p"), 4, -100, T0),))]
    broken = Snapshot([], [job_pod()], [], [], [budget(maxUnavailable=1)])
    fixed = Snapshot([], [job_pod()], [], [], [])
    caplog.set_level(logging.WARNING, logger="fracnb.reclaim")
    for snapshot in (broken, broken, broken, fixed, broken):
        reclaimer.warn_of_budgets(snapshot, holding)
    warnings = [r.getMessage() for r in caplog.records if r.name == "fracnb.reclaim"]
    assert len(warnings) == 2  # the first pass, and again once broken after it was fixed
    assert warnings[0].startswith("PodDisruptionBudget batch/train allows reclaim no eviction of its pods")
    reclaimer.warn_of_budgets(broken, [])  # its pod holds no card: not a candidate, nothing to say
    assert len([r for r in caplog.records if r.name == "fracnb.reclaim"]) == 2
