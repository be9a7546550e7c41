"""The fracnb page's row of a server says what is true now: a stopping server is not "not started yet", and
a server held by a running cell has no idle deadline that keeps moving."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from fracnb_spawner.culling import Action, CullDecision, CullPolicy, Reason
from fracnb_spawner.service.page import server_rows, waiting_html

NOW = datetime(2026, 11, 25, 14, 0, tzinfo=timezone.utc)


def judge(model: Any, pod: Any, who: Any) -> tuple[CullPolicy, CullDecision]:
    """As the service judges an idle server with a 15 min timeout, last active 13 min ago."""
    return CullPolicy(900), CullDecision(Action.KEEP, Reason.IDLE, NOW + timedelta(minutes=2), 120)


def rows(model: dict, *, busy: bool = False, pod: Any = None) -> Any:
    users = [{"name": "ann", "servers": {"": model}}]
    (row,) = server_rows(users, {("ann", ""): pod} if pod else {}, judge, busy=lambda who: busy)
    return row


def test_a_stopping_server_says_so() -> None:
    row = rows({"pending": "stop", "user_options": {"profile": "quarter"}})
    assert (row.share_text, row.deadline_text) == ("being freed", "stopping now")


def test_a_running_cell_holds_the_server_without_a_moving_deadline() -> None:
    pod = SimpleNamespace(profile="quarter", fraction=1, annotations={}, queued=False)
    idle = rows({"pending": None}, pod=pod)
    assert idle.deadline_text == "in 2 min (idle, at 14:02 UTC)"
    busy = rows({"pending": None}, busy=True, pod=pod)
    assert busy.deadline_text == "not while a cell runs; 15 min after the last one ends"


def test_the_warning_says_the_variables_are_saved_first() -> None:
    def warned(model: Any, pod: Any, who: Any) -> tuple[CullPolicy, CullDecision]:
        return CullPolicy(900), CullDecision(Action.WARN, Reason.IDLE, NOW + timedelta(minutes=2), 120)

    pod = SimpleNamespace(profile="quarter", fraction=1, annotations={}, queued=False)
    users = [{"name": "ann", "servers": {"": {"pending": None}}}]
    (row,) = server_rows(users, {("ann", ""): pod}, warned, saves=lambda reason: reason == "idle")
    assert row.deadline_text == "in 2 min (idle, at 14:02 UTC); its idle kernels' variables are saved first"
    (unsaved,) = server_rows(users, {("ann", ""): pod}, warned)
    assert unsaved.deadline_text == "in 2 min (idle, at 14:02 UTC)"


def test_a_waiting_spawns_time_is_shown_in_the_readers_zone() -> None:
    """The admin's "Waiting for a GPU" table says since when as the page's other times do: a <time> that the
    page's script rewrites in the browser's zone (the hub's zone without JavaScript), not a fixed UTC."""
    html = str(waiting_html(NOW - timedelta(minutes=25), NOW, ZoneInfo("Europe/Berlin")))
    assert html == '25 min (since <time datetime="2026-11-25T13:35:00Z" data-fracnb-time="clock">14:35 CET</time>)'
    assert str(waiting_html(None, NOW)) == "—"


def test_a_gpu_servers_row_says_where_the_hub_placed_it_and_why() -> None:
    """The pod's ``fracnb.io/placement`` (the hub's choice in words) is the admin's placement column; a GPU server
    without one says the card was not the hub's choice, and a server waiting in the queue holds no card yet."""
    reason = "card 3 of dev-1: 1 busy holder of 6, the least busy of 4 cards that fit; nothing waits for whole cards"
    annotations = {"fracnb.io/placement": reason}
    placed = SimpleNamespace(profile="eighth", fraction=Fraction(1, 8), annotations=annotations, queued=False)
    row = rows({"pending": None}, pod=placed)
    assert (row.holds_gpu, row.placement_text) == (True, reason)
    plugin = rows({"pending": None}, pod=SimpleNamespace(**{**vars(placed), "annotations": {}}))
    assert plugin.placement_text == "not chosen by the hub (the scheduler's or the device plugin's choice)"
    assert not rows({"pending": None}, pod=SimpleNamespace(**{**vars(placed), "queued": True})).holds_gpu
    assert not rows({"pending": "stop"}, pod=placed).holds_gpu
    assert not rows({"pending": None}, pod=SimpleNamespace(**{**vars(placed), "fraction": Fraction(0)})).holds_gpu
