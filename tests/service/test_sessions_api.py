"""``api/sessions`` of the fracnb service, against a real JupyterHub: who may report and read what."""

from __future__ import annotations

import sqlite3

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fracnb_schemas import HISTORY_REPORT, SESSION_RECORDS, problems
from fracnb_testbed.procs import wait_until
from tests.history.records import GIB, gpu_unused, report
from tests.service.calls import ACCESS, get, new_report, post, server_token, user_token


@pytest.fixture(autouse=True)
def history_open(hub, new_user):
    """The service answers 503 until it has opened (and migrated) its database, after it listens."""
    token = user_token(hub, new_user())
    wait_until(lambda: hub.http("GET", hub.service_url + "api/sessions", token=token)[0] != 503,
               what="the session history to open", timeout=60)  # fmt: skip


def test_a_server_reports_its_sessions_and_its_user_reads_them(hub, new_user):
    user = new_user()
    sent = new_report(peak_bytes=6 * GIB, ended="2026-11-01T11:00:00Z", gpu_unused=gpu_unused(1800))
    assert post(hub, sent, server_token(hub, user))[0] == 204
    status, body = hub.http("GET", hub.service_url + "api/sessions", token=user_token(hub, user))
    assert status == 200, body
    assert problems(SESSION_RECORDS, body, check_formats=True) == []
    [record] = body["sessions"]
    assert (record["session_id"], record["user_name"], record["peak_bytes"]) == (sent["session_id"], user, 6 * GIB)
    assert record["ended_at"] == "2026-11-01T11:00:00Z"
    status, metrics = hub.http("GET", hub.service_url + "metrics", token=user_token(hub, user))
    assert 'fracnb_gpu_hours_allocated_total{profile="a100"}' in metrics
    assert 'fracnb_session_peak_budget_ratio_bucket{le="0.25",profile="a100"}' in metrics


def test_named_servers_report_with_their_own_token(hub, new_user):
    user = new_user()
    assert post(hub, new_report(server_name="gpu"), server_token(hub, user, "gpu"))[0] == 204
    status, body = post(hub, new_report(server_name="gpu"), server_token(hub, user, ""))
    assert status == 403
    assert "only the token of server 'gpu'" in body["message"]


@pytest.mark.parametrize(
    "scopes",
    [(ACCESS,), ("access:servers!user", ACCESS), ("inherit",)],
    ids=["service-access-only", "all-of-the-users-servers", "inherit"],
)
def test_tokens_other_than_the_servers_own_cannot_report(hub, new_user, scopes):
    user = new_user()
    status, _ = post(hub, new_report(), user_token(hub, user, scopes=scopes))
    assert status == 403


def test_another_users_server_token_cannot_report_for_it(hub, new_user):
    owner, other = new_user(), new_user()
    # The report names no user: it is stored for the token's owner, so other can only write their own.
    assert post(hub, new_report(), server_token(hub, other))[0] == 204
    status, body = hub.http("GET", hub.service_url + "api/sessions", token=user_token(hub, owner))
    assert (status, body["sessions"]) == (200, [])


def test_no_token_a_bad_token_and_a_service_token_are_refused(hub):
    for token in (None, "not-a-token", hub.admin_token):
        assert post(hub, new_report(), token)[0] == 403, token
        assert hub.http("GET", hub.service_url + "api/sessions", token=token)[0] == 403, token


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "not a session report"),
        ({"session_id": "x"}, "not a session report"),
        ({**report(), "peak_bytes": -1}, "not a session report"),
        ({**report(), "notebook": "secret.ipynb"}, "not a session report"),
        ({**report(), "gpu_unused": gpu_unused(-30)}, "not a session report"),
    ],
    ids=["text", "partial", "negative", "extra-field", "negative-gpu-unused"],
)
def test_malformed_reports_are_refused_before_anything_is_stored(hub, new_user, body, message):
    user = new_user()
    status, answer = post(hub, body, server_token(hub, user))
    assert status == 400
    assert message in answer["message"]
    assert hub.http("GET", hub.service_url + "api/sessions", token=user_token(hub, user))[1]["sessions"] == []


def test_users_read_only_their_own_records_and_admins_read_all(hub, new_user):
    owner, other, admin = new_user(), new_user(), new_user("admin")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    post(hub, new_report(), server_token(hub, owner))
    path = f"{hub.service_url}api/users/{owner}/sessions"
    status, body = hub.http("GET", path, token=user_token(hub, other))
    assert status == 403
    assert f"{other!r} may not read the sessions of {owner!r}" in body["message"]
    assert hub.http("GET", path, token=user_token(hub, owner))[0] == 200
    status, body = hub.http("GET", path, token=user_token(hub, admin, scopes=("inherit",)))
    assert status == 200, body
    assert [r["user_name"] for r in body["sessions"]] == [owner]


def admin_token(hub, new_user):
    admin = new_user("admin")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    return user_token(hub, admin, scopes=("inherit",))


def test_the_report_is_for_admins_only(hub, new_user):
    user = new_user()
    post(hub, new_report(), server_token(hub, user))
    for path in ("api/report", "report"):
        for token in (None, "not-a-token", user_token(hub, user), hub.admin_token):
            status, headers, _ = get(hub.service_url + path, token=token)  # redirects not followed
            if token is None and path == "report":  # a browser without a session: the hub's login
                assert (status, "/hub/api/oauth2/authorize" in headers["location"]) == (302, True)
            else:
                assert status == 403, (path, token, status)


def test_admins_get_the_report_as_json_csv_text_and_a_page(hub, new_user):
    user = new_user()
    for _ in range(3):
        assert post(hub, new_report(peak_bytes=4 * GIB), server_token(hub, user))[0] == 204
    token = admin_token(hub, new_user)
    status, body = hub.http("GET", hub.service_url + "api/report", token=token)
    assert status == 200, body
    assert problems(HISTORY_REPORT, body) == []
    [half] = [row for row in body["choices"] if row["choice"] == "size=half"]
    assert half["sessions"] >= 3
    status, text = hub.http("GET", hub.service_url + "api/report?format=csv", token=token)
    assert (status, text.splitlines()[0].split(",")[:2]) == (200, ["profile", "choice"])
    status, text = hub.http("GET", hub.service_url + "api/report?format=text", token=token)
    assert status == 200
    assert "1/2 GPU" in text  # the choice's display name (the service reads the hub's profile list)
    status, page = hub.http("GET", hub.service_url + "report", token=token)
    assert status == 200
    assert "GPU right-sizing report" in page
    assert "1/2 GPU" in page
    status, body = hub.http("GET", hub.service_url + "api/report?format=xml", token=token)
    assert (status, body["message"]) == (400, "format must be one of json, csv, text")


def database_errors(hub, user, operation):
    _, text = hub.http("GET", hub.service_url + "metrics", token=user_token(hub, user))
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "fracnb_session_database_errors"]
    return next(s.value for s in family.samples if s.labels == {"operation": operation})


def test_a_locked_database_is_counted_and_the_report_kept(hub, new_user):
    """SQLite locked by another writer for longer than the busy timeout: the service keeps the meter's
    report (202) and stores it once the lock goes (tests/service/test_database_locked.py), and the failure
    shows in the metrics, once."""
    user = new_user()
    token, reader = server_token(hub, user), user_token(hub, user)
    before = database_errors(hub, user, "store")
    sent = new_report(peak_bytes=3 * GIB)
    lock = sqlite3.connect(hub.config_file.parent / "fracnb-service.sqlite", timeout=10, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        status, _ = post(hub, sent, token)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert status == 202
    assert database_errors(hub, user, "store") == before + 1
    [record] = wait_until(
        lambda: hub.http("GET", hub.service_url + "api/sessions", token=reader)[1]["sessions"],
        what="the kept report stored", timeout=30, interval=0.5,
    )  # fmt: skip
    assert (record["session_id"], record["peak_bytes"]) == (sent["session_id"], 3 * GIB)
    assert database_errors(hub, user, "store") == before + 1
