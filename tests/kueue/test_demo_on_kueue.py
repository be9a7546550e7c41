"""The demo on the Kueue engine (``--engine kueue``) on the real Kueue: with the Kueue objects the demo creates,
ann's quarter GPU server becomes ready once Kueue admits its Workload in team-a's ClusterQueue; with team-b's
quota held by carol, bob (team-a too) finds team-a's quota used and nothing to borrow, so he waits, and the
hub's progress API says Kueue's reason and his place; when ann stops, bob's server starts. A notebook Kueue
preempts for a higher-priority batch job saves its variables within its grace period, and they come back."""

from __future__ import annotations

import json
import re
import secrets
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from fracnb_spawner.history.reading import HistoryReader
from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.e2e.stack import answer_of, demo_with_fake_gpu, progress_until, request, run_cell
from tests.kueue.objects import API, condition, ensure_priority_class, gates, gpu_pod
from tests.service.test_service_page import Tables, parse

TOKEN = secrets.token_hex(16)
SPAWN_TIMEOUT = 180.0
ADMISSION_GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def kueue_demo(kueue_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    extra_config = "\n".join([
        f"c.JupyterHub.services = [{{'name': 'e2e', 'api_token': {TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'e2e', 'scopes': ['admin:users', 'admin:servers', 'access:servers',"
        " 'tokens'], 'services': ['e2e']}]",
    ])  # fmt: skip
    state_dir = tmp_path_factory.mktemp("kueue-demo")
    with demo_with_fake_gpu(kueue_testbed, state_dir, engine="kueue", extra_config=extra_config) as running:
        yield running


def server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return answer_of(demo, f"hub/api/users/{user}", TOKEN)["servers"].get("")


def start(demo: RunningDemo, user: str, profile: str = "quarter") -> None:
    status, answer = request(demo, f"hub/api/users/{user}/server", TOKEN, method="POST", body={"profile": profile})
    assert status in (201, 202), answer


def wait_ready(demo: RunningDemo, user: str) -> None:
    wait_until(lambda: (server(demo, user) or {}).get("ready"), what=f"{user}'s server ready", timeout=SPAWN_TIMEOUT)


def pod_of(testbed: Testbed, namespace: str, user: str) -> dict[str, Any]:
    return testbed.get(f"/api/v1/namespaces/{namespace}/pods/jupyter-{user}")


def user_token(demo: RunningDemo, user: str) -> str:
    body = {"note": "e2e", "expires_in": 900}
    return answer_of(demo, f"hub/api/users/{user}/tokens", TOKEN, method="POST", body=body)["token"]


def fracnb_page(demo: RunningDemo, token: str) -> Tables:
    """The fracnb service's page as the user of ``token`` sees it."""
    url, headers = f"{demo.settings.url}/services/fracnb/", {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:  # noqa: S310
        return parse(answer.read().decode())


def words(tables: Tables, section: str) -> str:
    return " ".join(tables.text.get(section, "").split())


def workload_of(testbed: Testbed, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    uid = pod["metadata"]["uid"]
    items = testbed.get(f"{API}/namespaces/{namespace}/workloads?labelSelector=kueue.x-k8s.io/job-uid%3D{uid}")
    return (items["items"] or [None])[0]


def test_a_teams_second_quarter_waits_on_kueue_with_its_reason_and_starts_when_the_first_stops(
    kueue_demo: RunningDemo, kueue_testbed: Testbed
) -> None:
    demo, testbed, ns = kueue_demo, kueue_testbed, kueue_demo.settings.namespace
    start(demo, "ann")
    wait_ready(demo, "ann")
    ann = pod_of(testbed, ns, "ann")
    assert ann["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "fracnb-ann"
    assert not gates(ann)
    admitted = workload_of(testbed, ns, ann)
    assert condition(admitted, "Admitted")["status"] == "True"
    assert admitted["status"]["admission"]["clusterQueue"] == "team-a"

    # carol holds team-b's quarter, so team-a has nothing to borrow in the cohort.
    start(demo, "carol")
    wait_ready(demo, "carol")
    assert workload_of(testbed, ns, pod_of(testbed, ns, "carol"))["status"]["admission"]["clusterQueue"] == "team-b"

    start(demo, "bob")
    said = progress_until(demo, "bob", TOKEN, lambda text: "next in line" in text and "team-a's quota" in text)
    # The estimate, as with the builtin queue: the idle servers holding the cohort's quota (ann's, carol's).
    assert re.fullmatch(
        r"Waiting in the GPU queue: next in line; waiting for 0\.25 GPU of team-a's quota\. Estimated start about "
        r"\d\d:\d\d \w+, in \d+ min: an idle 0\.25 GPU server is due to be stopped then\. "
        r"Stop the server to leave the queue\.",
        said[-1],
    ), said[-1]
    bob = pod_of(testbed, ns, "bob")
    assert ADMISSION_GATE in gates(bob)
    assert condition(workload_of(testbed, ns, bob), "QuotaReserved")["status"] == "False"
    assert (server(demo, "bob") or {}).get("pending") == "spawn"
    # The fracnb page says what holds bob back: team-a's ClusterQueue (its quota, use and nothing to borrow).
    team_a = ["team-a", "0.25 GPU", "0.25 GPU; 1 waiting", "nothing to borrow now, from cohort university"]
    bob_token = user_token(demo, "bob")
    mine = wait_until(lambda: (p := fracnb_page(demo, bob_token)).rows["quota"] == [team_a] and p,
                      what="bob's page to show team-a's quota with him waiting", timeout=30)  # fmt: skip
    assert "Kueue admits each GPU server on team-a's quota, and 1 is waiting for it already" in words(mine, "quota")
    assert "no limit" not in words(mine, "quota")
    admin = fracnb_page(demo, user_token(demo, "admin"))
    assert team_a in admin.rows["teams"]
    assert ["team-b", "0.25 GPU", "0.25 GPU", "nothing to borrow now, from cohort university"] in admin.rows["teams"]
    assert "Kueue admits a GPU server only within its team's quota" in words(admin, "kinds")

    status, answer = request(demo, "hub/api/users/ann/server", TOKEN, method="DELETE")
    assert status in (202, 204), answer
    wait_ready(demo, "bob")
    assert workload_of(testbed, ns, pod_of(testbed, ns, "bob"))["status"]["admission"]["clusterQueue"] == "team-a"


def gone(testbed: Testbed, namespace: str, pod: dict[str, Any]) -> bool:
    """Whether ``pod`` is deleted (its name free, or taken by another pod)."""
    status, found = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    return status == 404 or (status == 200 and found["metadata"]["uid"] != pod["metadata"]["uid"])


def saved_manifests(testbed: Testbed, user: str) -> list[dict[str, Any]]:
    """The manifests of ``user``'s saved states, in their home on the cluster's homes volume."""
    found = testbed.state.homes_dir.rglob(f"{user}/.local/state/fracnb/hibernation/default/*/manifest.json")
    return [json.loads(path.read_text()) for path in found]


def test_a_notebook_kueue_preempts_saves_its_variables_in_its_grace_period_and_gets_them_back(
    kueue_demo: RunningDemo, kueue_testbed: Testbed
) -> None:
    demo, testbed, ns = kueue_demo, kueue_testbed, kueue_demo.settings.namespace
    start(demo, "admin")  # in no team: the demo's ClusterQueue of its own holds one quarter
    wait_ready(demo, "admin")
    notebook = "preempted.ipynb"
    session = answer_of(demo, "user/admin/api/sessions", TOKEN, method="POST",
                        body={"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})  # fmt: skip
    run_cell(demo, "admin", session["kernel"]["id"], "epoch = 41\nweights = [0.5] * 1000", TOKEN)
    notebook_pod = pod_of(testbed, ns, "admin")

    ensure_priority_class(testbed, "urgent-batch", 5000)
    testbed.create_pod(ns, gpu_pod("urgent-for-admin", "fracnb-admin", priority_class="urgent-batch"))
    wait_until(lambda: gone(testbed, ns, notebook_pod), what="Kueue to preempt admin's notebook for the urgent job, and "
               "its pod to go", timeout=SPAWN_TIMEOUT)  # fmt: skip
    [saved] = saved_manifests(testbed, "admin")
    assert saved["notebook_path"] == notebook
    assert {"epoch", "weights"} <= {variable["name"] for variable in saved["variables"]}
    wait_until(lambda: server(demo, "admin") is None, what="the hub to see admin's server stopped", timeout=60)
    # The notebook told the fracnb service what it saved; its notice, in the session history, counts it.
    history = f"sqlite:///{demo.settings.state_dir / 'fracnb-service.sqlite'}"
    notice = wait_until(lambda: HistoryReader().newest_stop(history, "admin", datetime.now(timezone.utc)),
                        what="the stop's notice in the session history", timeout=30)  # fmt: skip
    assert "preempted by a higher-priority job" in notice.details["text"]
    assert "; 2 variables of preempted.ipynb saved." in notice.details["text"]

    testbed.delete_pod(ns, "urgent-for-admin", grace_seconds=0)
    start(demo, "admin")
    wait_ready(demo, "admin")
    states = answer_of(demo, "user/admin/fracnb/api/hibernation/states", TOKEN)["states"]
    [state] = [entry for entry in states if entry["path"] == notebook]
    fresh = answer_of(demo, "user/admin/api/sessions", TOKEN, method="POST",
                      body={"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})  # fmt: skip
    report = answer_of(demo, "user/admin/fracnb/api/hibernation/restore", TOKEN, method="POST",
                       body={"key": state["key"], "kernel_id": fresh["kernel"]["id"]})  # fmt: skip
    assert report["status"] == "restored", report
    assert {"epoch", "weights"} <= set(report["restored"])
    request(demo, "hub/api/users/admin/server", TOKEN, method="DELETE")
