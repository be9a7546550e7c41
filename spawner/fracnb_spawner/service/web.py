"""The service's web page (``/services/fracnb/``), logged in through the hub's OAuth.

Anyone with ``access:services!service=fracnb`` (every user, through setup(c)'s ``user`` role)
sees their own servers and quota; hub admins also see the whole cluster. A browser without a
session is sent to the hub's login; a request carrying a token the hub does not accept, or one
for a user without access to the service, is refused with 403.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web

from fracnb_spawner.common.clock import duration_text, moment_text
from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.common.timehtml import moment_html
from fracnb_spawner.history.stopnotices import (
    hibernation_lines_html,
    notice_summary,
    notice_summary_html,
    stops_heading,
)
from fracnb_spawner.queue.demand import queue_entries
from fracnb_spawner.queue.kueue import quota as kueuequota
from fracnb_spawner.queue.kueue.quota import TeamQuota, team_quotas
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods
from fracnb_spawner.service import page
from fracnb_spawner.service.choices import SlotKindUse, shares_text, slot_kind_uses
from fracnb_spawner.service.cullpass import index_pods, judge_for
from fracnb_spawner.service.pods import kueue_queues, queue_demand, team_of

log = logging.getLogger("fracnb.service")

TEMPLATES = Path(__file__).parent / "templates"
ERROR_HEADLINES = {403: "Not for your account", 404: "No such page", 503: "Not ready yet"}


@dataclass(frozen=True)
class PageSources:
    """What the page reads: the service's shared state (hub API, pods, quotas, cull settings)."""

    state: Any
    hub_oauth: HubOAuth
    is_gpu: Callable[[str], bool]


async def _team_of(state: Any, name: str) -> TeamQuota | None:
    """With the kueue engine, the user's team quota: the ClusterQueue of their LocalQueue (None: not read)."""
    return await team_of(state.pods, state.kueue_local_queue, name)


async def _teams(state: Any) -> list[TeamQuota] | None:
    """With the kueue engine, every ClusterQueue's GPU quota; None without it or when Kueue cannot be read."""
    queues = await kueue_queues(state.pods) if state.kueue_local_queue is not None else None
    return team_quotas(queues[1]) if queues is not None else None


async def user_view(state: Any, name: str, now: datetime) -> page.UserView:
    user, pods, stops, demand, team = await asyncio.gather(
        state.hub.user(name), state.pods.list_pods(), state.latest_stops(name), queue_demand(state.pods),
        _team_of(state, name),
    )  # fmt: skip
    groups = await state.hub.members_of(user.get("groups") or [])
    names = state.choices.profile_name
    judge = judge_for(state.settings, pods, now, state.facts, demand)
    busy, saves = partial(state.facts.busy, now=now), state.hibernates
    rows = page.server_rows([user], index_pods(pods), judge, names, state.zone, busy=busy, saves=saves)
    kueue = state.kueue_local_queue is not None
    view = page.user_view(
        name, rows, allocations_from_pods(pods), state.quota_policy, groups, named_servers=state.named_servers,
        kueue=kueue, team=team,
    )  # fmt: skip
    view.stops = [stop for stop in stops if not page.started_since(user, stop)]
    view.zone = state.zone
    return view


async def _active_users(hub: Any, page_size: int) -> list[Mapping[str, Any]]:
    users: list[Mapping[str, Any]] = []
    async for items in hub.iter_users(state="active", page_size=page_size):
        users.extend(items)
    return users


async def _kinds(sources: PageSources) -> tuple[list[SlotKindUse] | None, str]:
    try:
        nodes, pods = await sources.state.pods.gpu_capacity()
    except Exception as error:
        log.warning("The admin page could not list nodes and pods: %s", error)
        return None, "the service may not list nodes and pods cluster-wide (see helm-values/rbac.yaml)"
    return slot_kind_uses(sources.state.choices, list(nodes), list(pods)), ""


async def admin_view(sources: PageSources, now: datetime) -> page.AdminView:
    state = sources.state
    users, pods, (kinds, kinds_error), culls, demand, teams = await asyncio.gather(
        _active_users(state.hub, state.settings.page_size),
        state.pods.list_pods(),
        _kinds(sources),
        state.recent_culls(),
        queue_demand(state.pods),
        _teams(state),
    )
    kueue = state.kueue_local_queue is not None
    policy: QuotaPolicy = state.quota_policy
    group_names = set(policy.groups) | {g for user in users for g in user.get("groups") or []}
    members = await state.hub.members_of(group_names)
    allocations = allocations_from_pods(pods)
    groups, holders = page.use_rows(allocations, policy, members, kueue=kueue)
    judge = judge_for(state.settings, pods, now, state.facts, demand)
    busy = partial(state.facts.busy, now=now)
    names, saves = state.choices.profile_name, state.hibernates
    rows = page.server_rows(users, index_pods(pods), judge, names, state.zone, busy=busy, saves=saves)
    return page.AdminView(
        kinds=kinds,
        kinds_error=kinds_error,
        groups=groups,
        users=holders,
        warnings=[row for row in rows if row.warning],
        placed=[row for row in rows if row.holds_gpu],
        culls=culls,
        queue=queue_entries(pods),
        kueue=kueue,
        teams=teams,
    )


def page_arguments(
    state: Any, me: page.UserView, admin: page.AdminView | None, now: datetime, hub_home: str
) -> dict[str, Any]:
    """What ``templates/page.html`` is rendered with, besides tornado's own names and ``local_times_script``."""
    return {
        "me": me,
        "admin": admin,
        "now": now,
        "hub_home": hub_home,
        "settings": state.settings,
        "duration_text": duration_text,
        "waiting_html": partial(page.waiting_html, zone=state.zone),
        "moment_text": partial(moment_text, zone=state.zone),
        "moment_html": partial(moment_html, zone=state.zone),
        "stop_reason_text": page.stop_reason_text,
        "notice_summary": notice_summary,
        "notice_summary_html": notice_summary_html,
        "hibernation_lines_html": hibernation_lines_html,
        "stops_heading": stops_heading,
        "zone": state.zone,
        "choices": state.choices,
        "shares_text": shares_text,
        "server_name": page.server_name,
        "team_quota_text": kueuequota.quota_text,
        "team_use_text": kueuequota.use_text,
        "team_borrowing_text": kueuequota.borrowing_text,
    }


class PageHandler(HubOAuthenticated, web.RequestHandler):
    """``GET /services/fracnb/``: the user's view, and for hub admins the cluster's too."""

    def initialize(self, sources: PageSources) -> None:
        self.sources = sources
        self.hub_auth = sources.hub_oauth

    def get_login_url(self) -> str:
        # A request that brought a token is an API client, not a browser to send to a login page.
        if self.hub_auth.get_token(self, in_cookie=False):
            raise web.HTTPError(403, "the token is not valid for the fracnb service")
        return super().get_login_url()

    def _request_summary(self) -> str:
        return f"{shown(self.request.method)} {shown(self.request.uri, 500)} ({self.request.remote_ip})"

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The page's own look, with a sentence saying what happened and where to go instead."""
        error = kwargs.get("exc_info", (None, None))[1]
        message = self._reason
        if isinstance(error, web.HTTPError) and error.log_message:
            message = error.log_message % error.args
        sentence = message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.render(
            "error.html",
            status=status_code,
            headline=ERROR_HEADLINES.get(status_code, self._reason),
            sentence=sentence,
            hub_home=self.hub_home(),
            page_url=self.hub_auth.base_url,
        )

    def hub_home(self) -> str:
        return self.hub_auth.hub_host + self.hub_auth.hub_prefix + "home"

    @web.authenticated
    async def get(self) -> None:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "only users have GPU servers and quotas")
        state = self.sources.state
        now = state.clock()
        admin = bool(model.get("admin"))
        mine, everything = await asyncio.gather(
            user_view(state, model["name"], now),
            admin_view(self.sources, now) if admin else asyncio.sleep(0, None),
        )
        self.set_header("Cache-Control", "no-store")
        self.render("page.html", **page_arguments(state, mine, everything, now, self.hub_home()))


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    """The hub's OAuth callback, with the service's own HubOAuth (not a second instance)."""

    def initialize(self, hub_oauth: HubOAuth) -> None:
        self.hub_auth = hub_oauth


def page_routes(prefix: str, sources: PageSources) -> list[Any]:
    return [
        (prefix, PageHandler, {"sources": sources}),
        (rf"{prefix}oauth_callback", OAuthCallbackHandler, {"hub_oauth": sources.hub_oauth}),
    ]
