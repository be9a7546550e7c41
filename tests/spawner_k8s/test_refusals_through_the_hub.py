"""FractionalSpawner's refusals through a real JupyterHub (the installed version: 6.x, or 5.5 in
``./dev compat``): the spawn form, /hub/spawn query arguments and the REST API answer with the
refusal's status and message, before any pod exists, and not as a traceback."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import jupyterhub
import pytest
import requests

from fracnb_testbed.demo import DemoSettings, RunningDemo, free_port, running_demo

pytestmark = pytest.mark.k8s

TOKEN = secrets.token_hex(16)
# JupyterHub 6 does not count refusals toward the limit; 5.x counts every failed REST spawn.
COUNTS_REFUSALS = int(jupyterhub.__version__.split(".")[0]) < 6
EXTRA_CONFIG = f"""
c.JupyterHub.services = [{{"name": "refusal-tester", "api_token": {TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["refusal-tester"]}}]
c.FracnbQuotas.user_quotas = {{"ann": "1/8"}}
c.Spawner.consecutive_failure_limit = {0 if COUNTS_REFUSALS else 2}
"""


@pytest.fixture(scope="module")
def hub(testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    namespace = testbed.create_namespace()
    settings = DemoSettings(
        state_dir=tmp_path_factory.mktemp("refusals-hub"),
        kubeconfig=testbed.kubeconfig,
        namespace=namespace,
        port=free_port(),
        extra_config=EXTRA_CONFIG,
    )
    try:
        with running_demo(settings, testbed=testbed) as running:
            yield running
    finally:
        testbed.delete_namespace(namespace)


def xsrf(session: requests.Session) -> str:
    return next(cookie.value for cookie in session.cookies if cookie.name == "_xsrf")


@pytest.fixture
def ann(hub: RunningDemo) -> Iterator[requests.Session]:
    """A browser-like session logged in as ann (quota: 1/8 GPU)."""
    with requests.Session() as session:
        session.get(f"{hub.settings.url}/hub/login", timeout=30).raise_for_status()
        fields = {"username": "ann", "password": hub.settings.password, "_xsrf": xsrf(session)}
        answer = session.post(f"{hub.settings.url}/hub/login", data=fields, allow_redirects=False, timeout=30)
        assert answer.status_code == 302, answer.text[-2000:]
        yield session


def submit_form(hub: RunningDemo, session: requests.Session, fields: dict[str, str]) -> requests.Response:
    session.get(f"{hub.settings.url}/hub/spawn", timeout=30).raise_for_status()
    data = {**fields, "_xsrf": xsrf(session)}
    return session.post(f"{hub.settings.url}/hub/spawn", data=data, allow_redirects=False, timeout=60)


def assert_no_pod(hub: RunningDemo) -> None:
    assert hub.testbed is not None
    assert hub.testbed.list_pods(hub.settings.namespace) == []


FORM_REFUSALS = {
    "no such profile": ({"profile": "nope"}, 400, "Invalid server options: no such profile"),
    "unknown option": (
        {"profile": "quarter", "profile-option-quarter--size": "huge"},
        400,
        "Invalid server options: unknown option(s)",
    ),
    "over quota": (
        {"profile": "quarter"},
        403,
        "Over GPU quota: you use 0 of your 0.125 GPU; this choice needs 0.25 GPU. "
        "Choose a share of at most 0.125 GPU, or stop one of your other servers first.",
    ),
    # The demo's "1/2 GPU" needs a 2-way time-sliced node; its cluster has none.
    "no node offers it": (
        {"profile": "half"},
        503,
        "No node in this cluster offers 0.5 GPU (time-slicing), so it cannot start; "
        "choose another option, or ask your hub admin",
    ),
}
RAW = ("SpawnException", "HTTP 4", "HTTP 5", "(reason=", "Traceback", "nodes are available")


@pytest.mark.parametrize(("fields", "status", "message"), FORM_REFUSALS.values(), ids=FORM_REFUSALS.keys())
def test_the_form_shows_the_refusal(hub, ann, fields: dict, status: int, message: str) -> None:
    answer = submit_form(hub, ann, fields)
    assert answer.status_code == status, answer.text[-2000:]
    assert message in answer.text.replace("&#39;", "'")
    assert 'name="profile"' in answer.text, "the form is shown again"
    assert not [raw for raw in RAW if raw in answer.text]
    if fields["profile"] != "nope":
        assert re.search(rf'value="{fields["profile"]}"\s+checked', answer.text), "the choice is kept"
    assert_no_pod(hub)


def test_query_arguments_are_refused_on_the_form(hub, ann) -> None:
    answer = ann.get(f"{hub.settings.url}/hub/spawn?profile=nope", allow_redirects=False, timeout=60)
    assert answer.status_code == 400, answer.text[-2000:]
    text = answer.text.replace("&#39;", "'").replace("&#34;", '"').replace("&quot;", '"')
    # The choices that can start, by the names the form shows (and the slugs the REST API takes).
    assert 'no such profile \'nope\'; choose one of: "CPU only" (cpu), "0.25 GPU" (quarter), "Small GPU' in text
    assert "(half)" not in text
    assert_no_pod(hub)


def test_the_rest_api_answers_with_the_refusal(hub) -> None:
    headers = {"Authorization": f"token {TOKEN}"}
    for _attempt in range(3):  # past the failure limit of 2 on JupyterHub 6
        answer = requests.post(
            f"{hub.settings.url}/hub/api/users/bob/server",
            json={"profile": "quarter", "size": "forged"},
            headers=headers,
            timeout=60,
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["message"].startswith("Invalid server options: unknown option(s) 'size'")
    assert_no_pod(hub)
    # JupyterHub schedules its exit the moment the limit is reached; the log says so first.
    requests.get(f"{hub.settings.url}/hub/health", timeout=30).raise_for_status()
    log = hub.log_file.read_text(errors="replace")
    assert "Aborting due to" not in log
    assert "consecutive spawns failed" not in log
    assert "Received unhandled user_options" not in log
    assert hub.hub.poll() is None


def test_the_rest_api_refuses_a_choice_no_node_offers_at_once(hub) -> None:
    headers = {"Authorization": f"token {TOKEN}"}
    started = time.monotonic()
    answer = requests.post(
        f"{hub.settings.url}/hub/api/users/carol/server", json={"profile": "half"}, headers=headers, timeout=60
    )
    assert time.monotonic() - started < 30, "refused at once, not after the start timeout"
    assert answer.status_code == 503, answer.text
    assert answer.json()["message"].startswith("No node in this cluster offers 0.5 GPU (time-slicing)")
    assert_no_pod(hub)


def test_the_hub_log_has_one_info_line_per_refusal_and_no_traceback(hub) -> None:
    """Runs last: every refusal above is in the hub log as one INFO line naming the user, the choice and
    the reason, and JupyterHub's own lines about them (with their tracebacks) are gone."""
    log = hub.log_file.read_text(errors="replace")
    assert "Traceback" not in log
    assert "Failed to spawn single-user server" not in log
    over_quota = re.compile(
        r"^\[I .*fracnb: refused a server for 'ann', choice 'quarter': Over GPU quota: .* \[403 quota\]$", re.M
    )
    assert len(over_quota.findall(log)) == 1, log[-3000:]
    assert re.search(
        r"^\[I .*refused a server for 'carol', choice 'half': No node .* \[503 unschedulable\]$", log, re.M
    )
    assert re.search(
        r"^\[I .*refused a server for 'bob', choice 'quarter' \(size='forged'\): Invalid server", log, re.M
    )
    assert not re.search(r"^\[E .*(RefusedSpawnError|Over GPU quota|No node in this cluster)", log, re.M)
