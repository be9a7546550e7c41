"""Real fracnb service reports (``GET api/me``) for the notebook-side tests, and a server for them.

A report is made by the service's own code, ``fracnb_spawner.service.cullpass.user_report``,
with the quota configuration read by ``FracnbQuotas``, from a JupyterHub user model and
singleuser pods written here: only the hub's REST API and the Kubernetes API are replaced by
those literals, and the clock is fixed so that deadlines are exact. The service itself,
against a real hub and apiserver, is tested in tests/service.

    service = ReportServer.start()          # http://127.0.0.1:<port>/services/fracnb/
    service.scenario = IDLE_WARNING         # what api/me answers from now on (None: 503)
    service.sessions                        # the session reports POSTed to api/sessions, schema-checked
    service.uses                            # the use reports POSTed to api/activity, schema-checked
    service.stop_saves                      # what a server saved at its stop, POSTed to api/stop-saves, checked
    service.hub_activity                    # what the meter posted to the hub's activity API (hub_environment())
    service.accept_sessions = False         # api/sessions answers 503 from now on
    service.earlier_sessions = [...]        # the user's stored sessions before these (api/advice reads them)
    ... FRACNB_SERVICE_URL=service.url, JUPYTERHUB_API_TOKEN=service.token ...
    service.stop()
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from traitlets.config import Config

from fracnb_schemas import SESSION_REPORT, STOP_SAVE, STOP_SAVE_ANSWER, USE_REPORT, problems
from fracnb_spawner.common.podkeys import (
    FRACTION_ANNOTATION,
    IDLE_TIMEOUT_ANNOTATION,
    IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION,
    MAX_AGE_ANNOTATION,
    PROFILE_LABEL,
    QUEUE_GATE,
    QUEUED_AT_ANNOTATION,
    SLOT_KIND_LABEL,
)
from fracnb_spawner.culling import CullPolicy, isoformat
from fracnb_spawner.hibernation.settings import HibernationSettings
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service.advicemenu import advice_document, menu_from_config
from fracnb_spawner.service.cullpass import CullSettings, user_report

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
USER = "ann"
SERVICE_PREFIX = "/services/fracnb/"
HUB_ACTIVITY_PATH = f"/hub/api/users/{USER}/activity"


def pod(
    user: str,
    fraction: str,
    *,
    idle_timeout: int = 1800,
    max_age: int = 0,
    profile: str = "quarter",
    under_demand: int = 0,
    slot_kind: str = "nvidia.com-gpu.shared",
) -> dict[str, Any]:
    """A singleuser pod with the labels and annotations FractionalSpawner writes (docs/contract.md)."""
    annotations = {
        "hub.jupyter.org/username": user,
        "hub.jupyter.org/servername": "",
        FRACTION_ANNOTATION: fraction,
        IDLE_TIMEOUT_ANNOTATION: str(idle_timeout),
        MAX_AGE_ANNOTATION: str(max_age),
    }
    if under_demand:
        annotations[IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION] = str(under_demand)
    return {
        "metadata": {
            "name": f"jupyter-{user}",
            "labels": {"component": "singleuser-server", PROFILE_LABEL: profile, SLOT_KIND_LABEL: slot_kind},
            "annotations": annotations,
        },
        "status": {"phase": "Running"},
    }


def waiting_pod(
    user: str, fraction: str, *, since: datetime, slot_kind: str = "nvidia.com-gpu.shared"
) -> dict[str, Any]:
    """A spawn waiting in the hub's queue: its pod carries the queue's scheduling gate."""
    queued = pod(user, fraction, slot_kind=slot_kind)
    queued["metadata"]["annotations"][QUEUED_AT_ANNOTATION] = isoformat(since)
    queued["spec"] = {"schedulingGates": [{"name": QUEUE_GATE}]}
    queued["status"] = {"phase": "Pending"}
    return queued


@dataclass(frozen=True)
class Scenario:
    """USER's situation at NOW: quota configuration, groups, pods and their default server's age."""

    quotas: Mapping[str, Any] = field(default_factory=dict)  # c.FracnbQuotas.<key> = value
    groups: Mapping[str, list[str]] = field(default_factory=dict)
    pods: tuple[dict[str, Any], ...] = ()
    started_ago: timedelta = timedelta(hours=1)
    idle_for: timedelta = timedelta(minutes=10)
    hibernation: bool = False  # the service's hibernation on (its default settings): idle GPU servers save first

    def user_model(self) -> dict[str, Any]:
        server = {
            "name": "",
            "started": isoformat(NOW - self.started_ago),
            "last_activity": isoformat(NOW - self.idle_for),
            "pending": None,
            "ready": True,
        }
        return {"name": USER, "kind": "user", "groups": list(self.groups), "servers": {"": server}}


class _Hub:
    """The two hub API calls user_report makes, answered from a scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    async def user(self, name: str) -> dict[str, Any]:
        assert name == USER, name
        return self.scenario.user_model()

    async def group_members(self, name: str) -> list[str]:
        return list(self.scenario.groups[name])


class _Pods:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    async def list_pods(self) -> list[Mapping[str, Any]]:
        return list(self.scenario.pods)


SETTINGS = CullSettings(default_policy=CullPolicy(idle_timeout=3600), warning_lead=900)


async def report(scenario: Scenario) -> dict[str, Any]:
    """What the fracnb service answers USER at NOW in this scenario."""
    policy = FracnbQuotas(**scenario.quotas).policy()
    hibernates = HibernationSettings().applies if scenario.hibernation else lambda _: False
    return await user_report(
        _Hub(scenario), _Pods(scenario), policy, SETTINGS, USER, clock=lambda: NOW, hibernates=hibernates
    )


def report_blocking(scenario: Scenario) -> dict[str, Any]:
    """:func:`report` for callers inside a running event loop (Playwright's sync API)."""
    with ThreadPoolExecutor(1) as executor:
        return executor.submit(asyncio.run, report(scenario)).result()


TEAM = {"team-a": [USER, "bob"]}
TEAM_PODS = (pod(USER, "1/4"), pod("bob", "11/2", profile="big"))

# A 1-GPU user quota and a 6-GPU group quota; idle for 26 of 30 minutes: the warning is on.
IDLE_WARNING = Scenario(
    quotas={"default_user_quota": 1, "group_quotas": {"team-a": 6}},
    groups=TEAM,
    pods=TEAM_PODS,
    idle_for=timedelta(minutes=26),
)
# Nobody configured a quota; idle for 10 of 30 minutes.
NO_QUOTA = Scenario(pods=(pod(USER, "1/4"),))
# The admin is mapped to None (everyone else has 1 GPU); no idle timeout, no maximum age.
UNLIMITED_NEVER_CULLED = Scenario(
    quotas={"default_user_quota": 1, "user_quotas": {USER: None}},
    pods=(pod(USER, "1/4", idle_timeout=0, max_age=0),),
)
# 8 hours at most, 4 minutes to go, used a minute ago: using the server does not help.
MAX_AGE_WARNING = Scenario(
    quotas={"default_user_quota": 1},
    pods=(pod(USER, "1/4", idle_timeout=3600, max_age=8 * 3600),),
    started_ago=timedelta(hours=8, minutes=-4),
    idle_for=timedelta(minutes=1),
)
# Idle for 16 minutes, 20 minutes allowed while someone waits for a quarter GPU (for an hour now).
DEMAND_WARNING = Scenario(
    quotas={"default_user_quota": 1},
    pods=(
        pod(USER, "1/4", idle_timeout=3600, under_demand=1200),
        waiting_pod("bob", "1/4", since=NOW - timedelta(hours=1)),
    ),
    idle_for=timedelta(minutes=16),
)
# The same, with hibernation on: the warning says the variables will be saved.
IDLE_WARNING_SAVING = replace(IDLE_WARNING, hibernation=True)
SCENARIOS = {
    "idle-warning": IDLE_WARNING,
    "idle-warning-saving": IDLE_WARNING_SAVING,
    "no-quota": NO_QUOTA,
    "unlimited-never-culled": UNLIMITED_NEVER_CULLED,
    "max-age-warning": MAX_AGE_WARNING,
    "demand-warning": DEMAND_WARNING,
}


# The hub's menu api/advice reads (the demo's GPU profiles: tests/browser's servers run "quarter").
MENU = Config({
    "FractionalSpawner": {
        "gpu_memory": "80Gi",
        "profile_list": [
            {"display_name": "0.25 GPU", "slug": "quarter", "gpu": {"fraction": 0.25}},
            {"display_name": "1/8 GPU", "slug": "eighth", "gpu": {"fraction": "1/8"}},
        ],
    }
})  # fmt: skip


def past_session(profile: str = "quarter", peak_bytes: int = 4 << 30, budget_bytes: int = 20 << 30) -> dict[str, Any]:
    """A stored session of USER's, as api/advice reads it."""
    return {"profile": profile, "choice": "", "budget_bytes": budget_bytes, "peak_bytes": peak_bytes,
            "oom_events": 0, "seconds_above_95": 0.0}  # fmt: skip


class ReportServer:
    """``GET {url}api/me`` for ``token``: the scenario's report, 503 without one, or ``raw`` bytes."""

    def __init__(self, server: ThreadingHTTPServer, token: str) -> None:
        self._server = server
        self.token = token
        self.url = f"http://127.0.0.1:{server.server_address[1]}{SERVICE_PREFIX}"
        self.scenario: Scenario | None = None
        self.raw: bytes | None = None  # an answer that is not a report, e.g. from another version
        self.sessions: list[dict[str, Any]] = []
        self.uses: list[dict[str, Any]] = []
        self.stop_saves: list[dict[str, Any]] = []
        self.stop_notice: str | None = None  # api/stop-saves' answer: the notice of a stop Kueue made, or none
        self.hub_activity: list[dict[str, Any]] = []
        self.accept_sessions = True
        self.refused_sessions = 0
        self.earlier_sessions: list[dict[str, Any]] = []

    @classmethod
    def start(cls) -> ReportServer:
        token = secrets.token_hex(16)
        holder: dict[str, ReportServer] = {}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                holder["service"].answer(self)

            def do_POST(self) -> None:
                holder["service"].take_session(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        service = holder["service"] = cls(server, token)
        threading.Thread(target=server.serve_forever, daemon=True, name="fracnb-service-reports").start()
        return service

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        if url.path == f"{SERVICE_PREFIX}api/advice" and request.headers.get("Authorization") == f"token {self.token}":
            self._send(request, 200, json.dumps(self.advice(parse_qs(url.query))).encode())
        elif request.path != f"{SERVICE_PREFIX}api/me":
            self._send(request, 404, b'{"message": "not found"}')
        elif request.headers.get("Authorization") != f"token {self.token}":
            self._send(request, 403, b'{"message": "no token"}')
        elif self.raw is not None:
            self._send(request, 200, self.raw)
        elif self.scenario is None:
            self._send(request, 503, b'{"message": "no scenario"}')
        else:
            self._send(request, 200, json.dumps(asyncio.run(report(self.scenario))).encode())

    def advice(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """``GET api/advice``: the service's own answer over the sessions reported here and the earlier ones."""
        latest = {report["session_id"]: report for report in self.sessions}  # each session's last report
        records = [*reversed(latest.values()), *self.earlier_sessions]
        profile, choice = query.get("profile", [""])[0], query.get("choice", [""])[0]
        return advice_document(menu_from_config(MENU), records, profile, choice)

    def take_session(self, request: BaseHTTPRequestHandler) -> None:
        """``POST api/sessions``: keep a report that fits session-report.schema.json (400 otherwise);
        ``POST api/activity`` and ``api/stop-saves``: keep a document that fits its schema; the hub's activity API."""
        body = request.rfile.read(int(request.headers.get("Content-Length", "0")))
        if request.path == HUB_ACTIVITY_PATH and request.headers.get("Authorization") == f"token {self.token}":
            self.hub_activity.append(json.loads(body))
            request.send_response(200)
            request.end_headers()
        elif request.path in self._kept_posts() and request.headers.get("Authorization") == f"token {self.token}":
            schema, kept = self._kept_posts()[request.path]
            document = json.loads(body)
            found = problems(schema, document, check_formats=True)
            if found:
                self._send(request, 400, json.dumps({"message": found}).encode())
                return
            kept.append(document)
            if request.path == f"{SERVICE_PREFIX}api/stop-saves":
                answer = {"notice": self.stop_notice}
                assert not problems(STOP_SAVE_ANSWER, answer), answer
                self._send(request, 200, json.dumps(answer).encode())
                return
            request.send_response(204)
            request.end_headers()
        elif request.path != f"{SERVICE_PREFIX}api/sessions":
            self._send(request, 404, b'{"message": "not found"}')
        elif request.headers.get("Authorization") != f"token {self.token}":
            self._send(request, 403, b'{"message": "no token"}')
        elif not self.accept_sessions:
            self.refused_sessions += 1
            self._send(request, 503, b'{"message": "unavailable"}')
        else:
            document = json.loads(body)
            found = problems(SESSION_REPORT, document, check_formats=True)
            if found:
                self._send(request, 400, json.dumps({"message": found}).encode())
                return
            self.sessions.append(document)
            request.send_response(204)
            request.end_headers()

    def _kept_posts(self) -> dict[str, tuple[str, list[dict[str, Any]]]]:
        """The service's paths whose documents are kept as they come (schema-checked): the schema, the list."""
        return {
            f"{SERVICE_PREFIX}api/activity": (USE_REPORT, self.uses),
            f"{SERVICE_PREFIX}api/stop-saves": (STOP_SAVE, self.stop_saves),
        }

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def environment(self) -> dict[str, str]:
        """What the spawner gives a notebook server to reach the service."""
        return {"FRACNB_SERVICE_URL": self.url, "JUPYTERHUB_API_TOKEN": self.token, "JUPYTERHUB_SERVER_NAME": ""}

    def hub_environment(self) -> dict[str, str]:
        """:meth:`environment`, and the hub's activity API here too (``hub_activity``)."""
        url = f"http://127.0.0.1:{self._server.server_address[1]}{HUB_ACTIVITY_PATH}"
        return {**self.environment(), "JUPYTERHUB_ACTIVITY_URL": url}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
