"""``api/stop-saves`` of the fracnb service, against a real JupyterHub and apiserver: a server Kueue preempted
tells what it saved as it stopped, and the service keeps the stop's notice, with the count, in the session
history the hub's pages read; only the server's own token may tell it, and a stop Kueue did not make gets no
notice. The pure parts (the count, the words) are tested against literal dicts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy.exc import OperationalError

from fracnb_schemas import STOP_SAVE_ANSWER, problems
from fracnb_spawner.history.reading import HistoryReader
from fracnb_spawner.queue.kueue.model import STOPPED_BY_KUEUE
from fracnb_spawner.service.kueuestopnotice import kueue_stop_notice, saved_notebooks, saved_variables, server_pod
from fracnb_testbed.procs import wait_until
from tests.service.calls import server_token, user_token

PREEMPTED = (
    "Preempted to accommodate a workload (UID: 5b1f, JobUID: 9c2e) due to prioritization in the ClusterQueue; "
    "preemptor path: /university/team-b; preemptee path: /university/team-b"
)


def termination(at: str = "2026-11-23T14:00:00Z") -> dict:
    """Kueue's condition on a pod it preempts, set at ``at``."""
    return {
        "type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
        "message": PREEMPTED, "lastTransitionTime": at,
    }  # fmt: skip


TERMINATION = termination()


def report(*kernels: tuple[str, int]) -> dict:
    """A hibernation report (hibernation-report.schema.json) of kernels with these statuses and counts."""
    entries = [
        {"kernel_id": f"k{i}", "path": f"n{i}.ipynb", "status": status, "reason": None, "bytes": 10 * count,
         "variables": count, "skipped": [], "saved_at": "2026-11-23T14:00:05+00:00", "seconds": 0.1}
        for i, (status, count) in enumerate(kernels)
    ]  # fmt: skip
    statuses = ("saved", "partly_saved", "failed", "skipped_over_limit", "busy", "empty", "not_supported")
    totals = {status: sum(1 for e in entries if e["status"] == status) for status in statuses}
    return {"started_at": "2026-11-23T14:00:01+00:00", "seconds": 1.0, "timeout_seconds": 120,
            "limit_bytes": 1 << 30, "saved_bytes": sum(e["bytes"] for e in entries), "totals": totals,
            "kernels": entries}  # fmt: skip


def evicted(user: str) -> dict:
    annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}
    return {
        "metadata": {"name": f"jupyter-{user}", "annotations": annotations},
        "status": {"conditions": [TERMINATION]},
    }


def test_the_notice_counts_what_the_kernels_saved_in_kueues_words():
    saved = report(("saved", 3), ("partly_saved", 2), ("failed", 0), ("empty", 0))
    assert saved_variables(saved) == 5
    notice = kueue_stop_notice(evicted("ann"), "ann", "", saved, None)
    assert notice.reason == STOPPED_BY_KUEUE
    assert notice.stopped_at == datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
    assert saved_notebooks(saved) == ["n0.ipynb", "n1.ipynb"]
    assert notice.details["text"] == (
        "Your server stopped at 14:00 UTC, preempted by a higher-priority job of team-b; 5 variables of n0.ipynb "
        "and n1.ipynb saved. Files in your home are kept; starting it again waits in Kueue's queue for a GPU."
    )
    assert kueue_stop_notice({"metadata": evicted("ann")["metadata"]}, "ann", "", saved, None) is None
    assert server_pod([evicted("bob"), evicted("ann")], "ann", "")["metadata"]["name"] == "jupyter-ann"
    assert server_pod([evicted("bob")], "ann", "") is None


def test_the_notice_names_the_server_and_the_notebooks_as_the_other_stop_notices_do():
    """A named server by its name ("Your server 'gpu' was stopped for being idle ..." in a cull's notice), and
    the notebook whose variables were saved, not only their count."""
    pod = evicted("ann")
    pod["metadata"]["annotations"]["hub.jupyter.org/servername"] = "gpu"
    one = report(("saved", 1), ("empty", 0))
    notice = kueue_stop_notice(pod, "ann", "gpu", one, None)
    assert notice.details["text"].startswith(
        "Your server 'gpu' stopped at 14:00 UTC, preempted by a higher-priority job of team-b; 1 variable of n0.ipynb "
        "saved. "
    )
    nothing = kueue_stop_notice(pod, "ann", "gpu", report(("empty", 0)), None)
    assert "team-b; no variables to save. Files" in nothing.details["text"]


def stored_stop(hub, user):
    """The user's newest stop as the hub's pages read it from the session history; None while the service
    has not migrated it yet (a busy machine: the notice is kept meanwhile, and written once it is)."""
    url = f"sqlite:///{hub.config_file.parent / 'fracnb-service.sqlite'}"
    try:
        return HistoryReader().newest_stop(url, user, datetime.now(timezone.utc))
    except OperationalError:
        return None


def post(hub, body, token):
    return hub.http("POST", hub.service_url + "api/stop-saves", body, token=token)


def test_a_server_kueue_preempted_leaves_its_notice_with_what_it_saved(hub, new_user, make_pod, testbed, hub_namespace):
    user = new_user()
    name = make_pod(user)
    # Now: the hub's pages tell only stops of the last week (history.stopnotices.NOTICE_DAYS).
    just_now = (datetime.now(timezone.utc) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    testbed._call("PATCH", f"/api/v1/namespaces/{hub_namespace}/pods/{name}/status",
                  {"status": {"conditions": [termination(just_now)]}})  # fmt: skip
    try:
        status, answer = post(hub, {"server_name": "", "hibernation": report(("saved", 41))}, server_token(hub, user))
        assert status == 200, answer
        assert not problems(STOP_SAVE_ANSWER, answer)
        found = wait_until(lambda: stored_stop(hub, user), what="the stop's notice in the session history", timeout=60)
        assert found.reason == STOPPED_BY_KUEUE
        assert "preempted by a higher-priority job of team-b; 41 variables of n0.ipynb saved" in found.details["text"]
        # The answer is the notice the hub's pages show: the notebook passes it on to its open tabs.
        assert answer == {"notice": found.details["text"]}
    finally:
        testbed.delete_pod(hub_namespace, name, grace_seconds=0)


def test_a_save_at_a_stop_kueue_did_not_make_leaves_no_notice(hub, new_user, make_pod, hub_namespace, testbed):
    user = new_user()
    name = make_pod(user)
    try:
        status, answer = post(hub, {"server_name": "", "hibernation": report(("saved", 2))}, server_token(hub, user))
        assert (status, answer) == (200, {"notice": None})
        assert stored_stop(hub, user) is None
    finally:
        testbed.delete_pod(hub_namespace, name, grace_seconds=0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"server_name": ""}, "'hibernation' is a required property"),
        ({"server_name": "", "hibernation": {"kernels": []}}, "is a required property"),
    ],
)
def test_malformed_saves_are_refused(hub, new_user, body, message):
    status, answer = post(hub, body, server_token(hub, new_user()))
    assert status == 400
    assert message in answer["message"]


def test_only_the_servers_own_token_may_tell(hub, new_user):
    status, answer = post(hub, {"server_name": "", "hibernation": report()}, user_token(hub, new_user()))
    assert status == 403, answer
    assert "only the token of server '' of" in answer["message"]
