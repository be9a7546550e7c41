"""The fracnb page under the kueue engine says what Kueue holds: each team's quota is its ClusterQueue's (quota,
use, borrowing), not "no limit"; what a user may start is what Kueue would admit; and the slots table says that
a free slot is not enough. Rendered from literal ClusterQueues as Kueue v0.17 writes them (the demo's: team-a
and team-b hold 0.25 GPU each in the cohort university; ann and carol hold them, bob waits)."""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction
from types import SimpleNamespace

from tornado.template import Loader

from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT
from fracnb_spawner.queue.kueue.quota import team_quotas, user_team_quota
from fracnb_spawner.quota.policy import Allocation, QuotaPolicy
from fracnb_spawner.service import page
from fracnb_spawner.service.choices import HubChoices
from fracnb_spawner.service.web import TEMPLATES, page_arguments
from tests.service.test_service_page import Tables, parse
from tests.spawner.queue.test_kueue_quota import cluster_queue, local

NOW = datetime(2026, 12, 5, 23, 40, tzinfo=timezone.utc)
STATE = SimpleNamespace(settings=SimpleNamespace(warning_lead=900, hibernating=None), zone=None, choices=HubChoices())
GROUPS = {"team-a": ["ann", "bob"], "team-b": ["carol"]}  # hub groups, without a quota of fracnb's
ALLOCATIONS = [
    Allocation("ann", "", Fraction(1, 4), "quarter"),
    Allocation("carol", "", Fraction(1, 4), "quarter"),
    Allocation("bob", "", Fraction(1, 4), "quarter", waiting=True),
]
CLUSTER_QUEUES = [cluster_queue("team-a", "250", "250", pending=1), cluster_queue("team-b", "250", "250")]
LOCAL_QUEUES = [local("jhub", f"fracnb-{user}", team) for user, team in (("ann", "team-a"), ("bob", "team-a"),
                                                                          ("carol", "team-b"))]  # fmt: skip


def rendered(me: page.UserView, admin: page.AdminView | None = None) -> Tables:
    template = Loader(str(TEMPLATES)).load("page.html")
    html = template.generate(**page_arguments(STATE, me, admin, NOW, "/hub/home"),
                             local_times_script=lambda: LOCAL_TIMES_SCRIPT)  # fmt: skip
    return parse(html.decode())


def user_view(user: str, *, kueue: bool = True) -> page.UserView:
    team = user_team_quota(LOCAL_QUEUES, CLUSTER_QUEUES, f"fracnb-{user}", "jhub") if kueue else None
    groups = {name: members for name, members in GROUPS.items() if user in members}
    return page.user_view(user, [], ALLOCATIONS, QuotaPolicy(), groups, kueue=kueue, team=team)


def text(tables: Tables, section: str) -> str:
    return " ".join(tables.text[section].split())


def test_a_users_page_gives_the_team_quota_of_their_cluster_queue_and_what_kueue_would_admit():
    tables = rendered(user_view("bob"))
    quota = text(tables, "quota")
    assert "no limit" not in quota
    assert "No quota limits what you can start." not in quota
    assert (
        "Kueue admits each GPU server on team-a's quota, and 1 is waiting for it already: a new one would wait its "
        "turn." in quota
    )
    assert tables.rows["quota"] == [["team-a", "0.25 GPU", "0.25 GPU; 1 waiting", "nothing to borrow now, from "
                                     "cohort university"]]  # fmt: skip
    # The builtin engine's page is as it was.
    builtin = rendered(user_view("bob", kueue=False))
    assert ["team-a", "0.25 GPU + 0.25 GPU (waiting)", "no limit"] in builtin.rows["quota"]
    assert "No quota limits what you can start." in text(builtin, "quota")


def test_a_user_whose_team_may_borrow_is_told_how_much():
    queues = [cluster_queue("team-a", "250", "500"), cluster_queue("team-b", "1000", "0")]  # team-a borrows 0.25
    team = user_team_quota(LOCAL_QUEUES, queues, "fracnb-ann", "jhub")
    view = page.user_view("ann", [], ALLOCATIONS, QuotaPolicy(default_user=Fraction(1, 2)), {}, kueue=True, team=team)
    quota = text(rendered(view), "quota")
    assert "A server could take up to 0.25 GPU." in quota  # fracnb's own cap of 0.5 per user, beside Kueue's
    assert "a new one could take up to 0.75 GPU now (0.75 GPU to borrow from its cohort)." in quota
    assert (
        rendered(view).rows["quota"][-1][3] == "0.25 GPU borrowed; 0.75 GPU more to borrow now, from cohort university"
    )
    unread = page.user_view("ann", [], ALLOCATIONS, QuotaPolicy(), {}, kueue=True, team=None)
    assert "Kueue admits each GPU server on its team's quota, which could not be read now." in unread.headroom_text


def test_the_admin_page_lists_each_cluster_queue_and_says_that_kueue_admits_gpu_servers():
    groups, users = page.use_rows(ALLOCATIONS, QuotaPolicy(), GROUPS, kueue=True)
    admin = page.AdminView([], "", groups, users, [], [], kueue=True, teams=team_quotas(CLUSTER_QUEUES))
    tables = rendered(user_view("ann"), admin)
    assert tables.rows["teams"] == [
        ["team-a", "0.25 GPU", "0.25 GPU; 1 waiting", "nothing to borrow now, from cohort university"],
        ["team-b", "0.25 GPU", "0.25 GPU", "nothing to borrow now, from cohort university"],
    ]
    assert "Kueue admits a GPU server only within its team's quota" in text(tables, "kinds")
    assert ["team-a", "0.25 GPU + 0.25 GPU (waiting)", "none here; Kueue's team quotas apply"] in tables.rows["groups"]
    assert "no limit" not in text(tables, "groups")
    unread = page.AdminView([], "", groups, users, [], [], kueue=True, teams=None)
    assert "Kueue's queues could not be read" in text(rendered(user_view("ann"), unread), "teams")
    # Without Kueue: no such section and no such line.
    plain = rendered(user_view("ann", kueue=False), page.AdminView([], "", groups, users, [], []))
    assert "teams" not in plain.rows
    assert "Kueue" not in text(plain, "kinds")


def running_quarter(user: str) -> page.ServerRow:
    return page.ServerRow(user, "", "quarter", Fraction(1, 4), None, 900, None, None, None, False)


def test_a_server_on_quota_its_team_borrows_says_kueue_can_preempt_it():
    queues = [cluster_queue("team-a", "250", "500"), cluster_queue("team-b", "1000", "0")]  # team-a borrows 0.25
    team = user_team_quota(LOCAL_QUEUES, queues, "fracnb-ann", "jhub")
    view = page.user_view("ann", [running_quarter("ann")], ALLOCATIONS, QuotaPolicy(), {}, kueue=True, team=team)
    servers = text(rendered(view), "mine")
    assert (
        "Borrowing: team-a uses 0.25 GPU more than its own quota of 0.25 GPU, lent by other teams of cohort "
        "university. A GPU server of team-a (yours too) may run on that lent quota, so Kueue can preempt it when a "
        "lending team takes its quota back: the server stops, and its notice says why and what was saved." in servers
    )
    # Within its own quota, or with no GPU server running, nothing to say.
    own = user_team_quota(LOCAL_QUEUES, CLUSTER_QUEUES, "fracnb-ann", "jhub")
    within = page.user_view("ann", [running_quarter("ann")], ALLOCATIONS, QuotaPolicy(), {}, kueue=True, team=own)
    assert "Borrowing" not in text(rendered(within), "mine")
    idle = page.user_view("ann", [], ALLOCATIONS, QuotaPolicy(), {}, kueue=True, team=team)
    assert idle.borrowing_text is None
