"""The service's web page (Services > fracnb) against a real JupyterHub: who sees what, and who is refused."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.service.calls import ACCESS, get, user_token

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "service"


class Tables(HTMLParser):
    """Rows of cell texts per ``<section id=...>``, and every section's text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.text: dict[str, str] = {}
        self._section = ""
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self._section = dict(attrs).get("id", "")
            self.rows.setdefault(self._section, [])
            self.text.setdefault(self._section, "")
        elif tag == "tr":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row:
            self.rows[self._section].append(self._row)
            self._row = None
        elif tag == "section":
            self._section = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._section:
            self.text[self._section] += data


def parse(html: str) -> Tables:
    tables = Tables()
    tables.feed(html)
    return tables


def page(hub, token: str) -> Tables:
    status, headers, body = get(hub.service_url, token=token)
    assert status == 200, body
    assert headers["content-type"].startswith("text/html")
    return parse(body)


def test_anonymous_is_sent_to_the_hub_login(hub):
    status, headers, _ = get(hub.service_url)
    assert status == 302
    assert "/hub/api/oauth2/authorize" in headers["location"]
    assert "client_id=service-fracnb" in headers["location"]


@pytest.mark.parametrize("authorization", ["token not-a-real-token", "Bearer 0000"])
def test_wrong_token_is_refused(hub, authorization):
    status, _, body = get(hub.service_url, authorization=authorization)
    assert status == 403, body
    assert "not valid for the fracnb service" in body
    # A token in the URL (which the hub may not accept at all) never shows the page.
    status, _, _ = get(hub.service_url + "?token=not-a-real-token")
    assert status in (302, 403)


def test_token_without_service_access_is_refused(hub, new_user):
    token = user_token(hub, new_user(), scopes=("read:users:activity!user",))
    status, _, _ = get(hub.service_url, token=token)
    assert status == 403


def test_user_sees_only_their_own_servers_and_quota(hub, new_user, make_pod):
    ann, bob = new_user("ann"), new_user("bob")
    group = f"team-{ann}"
    assert hub.api("POST", f"groups/{group}", {"users": [ann, bob]})[0] == 201
    hub.start_server(ann)
    hub.start_server(bob)
    make_pod(ann, fraction="1/4", profile="quarter", idle_timeout=1800)
    make_pod(bob, fraction="1/2", profile="half")
    tables = page(hub, user_token(hub, ann))
    (server,) = tables.rows["mine"]
    assert server[:4] == ["default server", "quarter", "0.25 GPU", "—"]  # a profile the hub lacks: its slug
    assert re.fullmatch(r"in (29|30) min \(idle, at \d\d:\d\d UTC\)", server[4]), server
    # The hub config gives every user 1 GPU; the group has no quota, and holds ann's and bob's.
    quota = " ".join(tables.text["quota"].split())
    assert "You hold 0.25 GPU of your quota of 1 GPU." in quota
    assert "One more server could take up to 0.75 GPU." in quota
    assert [group, "0.75 GPU", "no limit"] in tables.rows["quota"]
    assert bob not in str(tables.rows["mine"])
    # No admin sections for a user.
    assert not {"kinds", "groups", "users", "warnings", "culls"} & set(tables.rows)


def test_admin_sees_the_whole_cluster(hub, new_user, make_pod, testbed, hub_namespace):
    admin, holder = new_user("admin"), new_user("holder")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    admin_token = user_token(hub, admin, scopes=(ACCESS,))
    # Only what the hub's choices use, in GPUs: 1/8 GPU on the 8-way time-sliced node (64 replicas); no
    # node offers 1/2 GPU (2-way), and the other GPU nodes are nothing to this hub.
    before = {r[0]: r for r in page(hub, admin_token).rows["kinds"]}
    assert list(before) == ["0.125 GPU (time-slicing)"]
    assert before["0.125 GPU (time-slicing)"][1:5] == ["A100: 1/8 GPU", "NVIDIA-A100-SXM4-80GB", "1", "8 GPUs"]
    # A pod holding 3 time-slicing replicas on that node.
    node = next(
        n["metadata"]["name"]
        for n in testbed.list_nodes()
        if n["metadata"]["labels"].get("nvidia.com/gpu.replicas") == "8"
        and n["metadata"]["labels"].get("nvidia.com/gpu.sharing-strategy") == "time-slicing"
    )
    testbed.create_pod(
        hub_namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"gpu-holder-{holder}"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "c",
                        "image": "example.invalid/x",
                        "resources": {"limits": {"nvidia.com/gpu.shared": "3"}},
                    }
                ],
            },
        },
    )
    hub.start_server(holder)
    make_pod(holder, fraction="1/2", profile="half", idle_timeout=600)  # within the 900 s warning lead
    tables = page(hub, admin_token)
    after = {r[0]: r for r in tables.rows["kinds"]}

    def gpus(text: str) -> float:
        return float(text.split(maxsplit=1)[0])

    (_, _, _, _, total, in_use, _, free) = after["0.125 GPU (time-slicing)"]
    assert gpus(in_use) == gpus(before["0.125 GPU (time-slicing)"][5]) + 3 / 8
    assert gpus(free) == gpus(total) - gpus(in_use)
    assert [holder, "1", "0.5 GPU", "1 GPU"] in tables.rows["users"]
    assert any(row[0] == holder and row[1] == "default server" for row in tables.rows["warnings"]), tables.rows
    assert "team-a" in [row[0] for row in tables.rows["groups"]]  # every group with a quota
    # The admin is a user too: their own (empty) part comes first.
    assert "You have no server running." in tables.text["mine"]


def test_the_hub_health_check_gets_no_404(hub):
    """The hub GETs the service's URL every JupyterHub.service_check_interval (60 s); that was a 404 each time."""
    service_port = re.search(r'"url": "http://127.0.0.1:(\d+)"', hub.config_file.read_text())[1]
    status, _, _ = get(f"http://127.0.0.1:{service_port}/services/fracnb/")
    assert status == 302
    assert "404 GET /services/fracnb/ " not in hub.log_file.read_text()


async def test_browser_views(hub, new_user, make_pod):
    """Log in through the hub's login page and OAuth as a user, then as an admin; keep screenshots."""
    from playwright.async_api import async_playwright

    from fracnb_meter.testing.chromium import CHROMIUM, CHROMIUM_ARGS

    researcher, admin = new_user("researcher"), new_user("admin")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    assert hub.api("POST", f"groups/lab-{researcher}", {"users": [researcher]})[0] == 201
    hub.start_server(researcher)
    make_pod(researcher, fraction="1/4", profile="quarter", idle_timeout=3600, memory_bytes=20 * 2**30)
    hub.start_server(researcher, "training")
    make_pod(researcher, "training", fraction="1/2", profile="half", idle_timeout=600, memory_bytes=40 * 2**30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            for name, shot in ((researcher, "service-page-user.png"), (admin, "service-page-admin.png")):
                context = await browser.new_context(viewport={"width": 1100, "height": 900})
                tab = await context.new_page()
                await tab.goto(f"{hub.url}/hub/login?next=/services/fracnb/")
                await tab.fill("input[name=username]", name)
                await tab.fill("input[name=password]", "any")
                await tab.click("input[type=submit], button[type=submit]")
                await tab.wait_for_selector("section#mine")
                assert tab.url.rstrip("/").endswith("/services/fracnb")
                text = await tab.inner_text("body")
                assert name in text
                if name == admin:
                    await tab.wait_for_selector("section#kinds table")
                    assert researcher in await tab.inner_text("section#warnings")
                else:
                    assert await tab.locator("section#kinds").count() == 0
                    mine = await tab.inner_text("section#mine")
                    assert "0.5 GPU" in mine
                    assert "40 GiB" in mine
                await tab.screenshot(path=str(ARTIFACTS / shot), full_page=True)
                await context.close()
        finally:
            await browser.close()


async def test_recent_culls_reach_the_admin_view_and_each_stop_outlives_a_restart(
    hub, new_user, make_pod, pod_source, tmp_path
):
    """A culling pass of the service's state records what it stopped; the admin view lists it; the
    user's page and api/me still say why after the service starts again."""
    from datetime import timedelta

    from jupyterhub.services.auth import HubAuth

    from fracnb_spawner.culling import CullPolicy
    from fracnb_spawner.history import db
    from fracnb_spawner.quota.config import FracnbQuotas
    from fracnb_spawner.service.cullpass import CullSettings, utcnow
    from fracnb_spawner.service.hubapi import HubAPI
    from fracnb_spawner.service.state import ServiceState
    from fracnb_spawner.service.web import PageSources, admin_view, user_view

    idle = new_user("idle")
    hub.start_server(idle)
    make_pod(idle, idle_timeout=60)
    later = utcnow() + timedelta(minutes=5)
    api = HubAPI(hub.api_url, hub.service_token)
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"

    def service_state() -> ServiceState:
        state = ServiceState(
            hub=api,
            pods=pod_source,
            quotas=FracnbQuotas(),
            settings=CullSettings(default_policy=CullPolicy(3600), warning_lead=30),
            hub_auth=HubAuth(api_url=hub.api_url, api_token=hub.service_token),
            clock=lambda: later,
        )
        state.history = db.open_database(url)
        return state

    state = service_state()
    try:
        report = await state.cull_pass()
        assert (idle, "", "idle") in report.culled
        view = await admin_view(PageSources(state, hub_oauth=None, is_gpu=lambda name: "nvidia.com/" in name), later)
        db.close(state.history)
        restarted = service_state()  # the service started again: its memory is new, the record is not
        mine = await user_view(restarted, idle, later)
        me = await restarted.user_report(idle)
        culls_after_restart = await restarted.recent_culls()
        db.close(restarted.history)
    finally:
        api.close()
    (record,) = [c for c in view.culls if c.user == idle]
    assert (record.server, record.reason, record.stopped_at) == ("", "idle", later.replace(tzinfo=None))  # as stored
    assert not hub.server_running(idle)
    assert [c for c in culls_after_restart if c.user == idle] == [record]  # the admin's list outlives it too
    (stop,) = mine.stops
    assert (stop.server, stop.reason, stop.limit_seconds) == ("", "idle", 60)
    assert me["stopped"][""]["reason"] == "idle"
    assert me["stopped"][""]["stopped_at"].startswith(later.strftime("%Y-%m-%dT%H:%M"))


def test_admin_sees_where_each_gpu_server_was_placed_and_why(hub, new_user, make_pod):
    """The hub's placement reason (the pod's fracnb.io/placement) per running GPU server, as text: a reason is
    written by the hub, but it names nodes and cards, so it is escaped like anything else on the page."""
    admin, placed, plugin = new_user("admin"), new_user("placed"), new_user("plugin")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    reason = (
        "card 3 of dev-<b>1</b>: 1 busy holder of 6, the least busy of 4 cards that fit; nothing waits for whole cards"
    )
    for user in (placed, plugin):
        hub.start_server(user)
    make_pod(placed, fraction="1/8", profile="eighth", annotations={"fracnb.io/placement": reason})
    make_pod(plugin, fraction="1/4", profile="quarter")
    status, _, body = get(hub.service_url, token=user_token(hub, admin, scopes=(ACCESS,)))
    assert status == 200, body
    rows = {row[0]: row for row in parse(body).rows["placement"]}
    assert rows[placed] == [placed, "default server", "eighth", "0.125 GPU", reason]
    assert rows[plugin][4] == "not chosen by the hub (the scheduler's or the device plugin's choice)"
    assert "dev-&lt;b&gt;1&lt;/b&gt;" in body
    assert "<b>1</b>" not in body
