"""This session's statistics, posted to the hub's fracnb service (``POST {FRACNB_SERVICE_URL}api/sessions``).

The meter posts the whole report (schemas/session-report.schema.json) every
``FracnbMeter.session_report_interval`` seconds and once more when the server stops, with the
server's own token (``JUPYTERHUB_API_TOKEN``): the service stores it under that token's user and
server only. Every post carries everything so far, so a lost post costs nothing but freshness:
a failing service is logged once per outage and tried again at the next interval, and the meter
itself never fails because of it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .activity import isoformat
from .contract import Budget
from .hubcalls import JsonPoster, service_endpoint
from .sessionstats import SessionStats


@dataclass(frozen=True)
class SessionIdentity:
    """What the session ran on: fixed for the server's life (from the pod's FRACNB_* environment)."""

    session_id: str
    server_name: str
    profile: str | None
    choice: str | None
    fraction: float | None
    budget_bytes: int | None
    backend: str | None
    started_at: datetime

    @classmethod
    def for_server(cls, env: Mapping[str, str], budget: Budget, started_at: datetime) -> SessionIdentity:
        return cls(
            session_id=secrets.token_hex(16),
            server_name=env.get("JUPYTERHUB_SERVER_NAME", ""),
            profile=budget.profile,
            choice=env.get("FRACNB_CHOICE", "").strip() or None,
            fraction=budget.fraction,
            budget_bytes=budget.memory_bytes,
            backend=budget.backend,
            started_at=started_at,
        )


def report_document(
    identity: SessionIdentity,
    stats: SessionStats,
    *,
    reported_at: datetime,
    ended_at: datetime | None = None,
    gpu_unused: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of schemas/session-report.schema.json: identity, times, and the statistics so far;
    with ``gpu_unused`` (fracnb_meter.gpuunused.GpuUnused.report), the server's GPU-unused time."""
    extra = {} if gpu_unused is None else {"gpu_unused": dict(gpu_unused)}
    return {
        "session_id": identity.session_id,
        "server_name": identity.server_name,
        "profile": identity.profile,
        "choice": identity.choice,
        "fraction": identity.fraction,
        "budget_bytes": identity.budget_bytes,
        "backend": identity.backend,
        "started_at": isoformat(identity.started_at),
        "ended_at": None if ended_at is None else isoformat(ended_at),
        "reported_at": isoformat(reported_at),
        **stats.summary(),
        **extra,
    }


def sessions_url(service_url: str) -> str:
    """The service's sessions endpoint, or "" when there is no usable service URL."""
    return service_endpoint(service_url, "api/sessions")


class SessionReporter:
    """Posts reports; ``send`` never raises and says whether the service took the report."""

    def __init__(self, service_url: str, token: str, *, request_timeout: float = 5.0) -> None:
        url = sessions_url(service_url) if token else ""
        what = "report this session to the fracnb service"
        self._poster = JsonPoster(url, token, what=what, request_timeout=request_timeout)
        self.sent = 0

    @property
    def enabled(self) -> bool:
        return self._poster.enabled

    async def send(self, document: Mapping[str, Any]) -> bool:
        if not await self._poster.post(document):
            return False
        self.sent += 1
        return True
