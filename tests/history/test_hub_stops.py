"""What the hub's pages say after a server stopped: its newest stop, whoever made it. A cull's "your
variables were saved" never outlives a newer stop the user asked for, which says what it saved or that
nothing was; a stop on request is kept in the session history, so a hub restart does not bring the
older notice back."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from fracnb_spawner.form.stopnotice import StoppedNotice
from fracnb_spawner.hibernation.client import Hibernation, checked_report
from fracnb_spawner.hibernation.culled import hibernation_json
from fracnb_spawner.hibernation.userstop import ON_REQUEST
from fracnb_spawner.history import db
from fracnb_spawner.history.hubstopnotices import LEFT_QUEUE_SECONDS, HubStops, record_user_stop
from fracnb_spawner.history.stopnotices import (
    CONSEQUENCES,
    HUB_SHUTDOWN,
    LEFT_QUEUE,
    NOTHING_HELD_CONSEQUENCES,
    SAVED_CONSEQUENCES,
    USER_STOP,
    StopNotice,
    newest_stop,
    notice_html,
    notice_sentences,
    record_stop,
    stops_heading,
)
from fracnb_spawner.hubstate import HubState
from tests.shared_cases import shared_cases

SAVED = shared_cases("hibernation-notices.json")["cases"][0]


def saved() -> dict[str, Any]:
    return hibernation_json(Hibernation(checked_report({"kernels": SAVED["kernels"], "saved_bytes": 1}), None, 9.8))


def fake_user(name: str, url: str, started: datetime | None = None) -> Any:
    """The parts of a JupyterHub user and its default spawner that the notice and the record read."""
    spawner = SimpleNamespace(
        hub_state=HubState.current(),
        right_sizing_db_url=url,
        hub=SimpleNamespace(base_url="/hub/"),
        orm_spawner=SimpleNamespace(started=started),
        active=False,
        ready=False,
        pending=None,
        user=SimpleNamespace(name=name),
        name="",
        log=logging.getLogger("fracnb-test-hub"),
        _log_name=name,
    )
    return SimpleNamespace(name=name, escaped_name=name, spawner=spawner, spawners={"": spawner})


def ago(minutes: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(minutes=minutes)


def test_her_own_stop_replaces_the_older_culls_notice_and_says_nothing_was_saved(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    HubState.current().stops = HubStops()  # no stop of an earlier test's "ann" in this process's hub state
    try:
        record_stop(history, StopNotice("ann", "", ago(30), "idle", 900, {"hibernation": saved()}))
        user = fake_user("ann", url)
        culled = str(StoppedNotice()(user))
        assert "for being idle for 15 min" in culled
        assert SAVED_CONSEQUENCES in culled

        # She restored, worked, and stopped her server herself (hibernation off): the hub records it.
        user.spawner.orm_spawner.started = ago(20)
        asyncio.run(record_user_stop(user.spawner, None))
        user.spawner.orm_spawner.started = None  # as JupyterHub leaves a stopped server
        HubState.current().stops = HubStops()  # the hub restarted: only the history remembers
        shown = str(StoppedNotice()(user))
        assert "Your server was stopped on request by you or an admin (at " in shown
        assert CONSEQUENCES in shown  # her variables are lost, and the notice says so
        assert "saved at" not in shown
        assert "for being idle" not in shown
        assert newest_stop(history, "ann", now=datetime.now(timezone.utc)).reason == USER_STOP
    finally:
        db.close(history)


def test_a_stop_on_request_that_saved_says_what(tmp_path) -> None:
    user = fake_user("bea", f"sqlite:///{tmp_path / 'none-yet.sqlite'}", started=ago(10))
    HubState.current().stops = HubStops()
    hibernation = Hibernation(checked_report({"kernels": SAVED["kernels"], "saved_bytes": 1}), None, 2.0)
    asyncio.run(record_user_stop(user.spawner, hibernation))  # no history yet: this hub process keeps it
    user.spawner.orm_spawner.started = None
    shown = str(StoppedNotice()(user))
    assert "Your server was stopped on request by you or an admin (at " in shown
    assert SAVED_CONSEQUENCES in shown
    assert "Variables of train.ipynb saved at " in shown


def test_a_cull_is_not_recorded_again_as_a_stop_on_request(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    try:
        user = fake_user("cy", url, started=ago(60))
        record_stop(history, StopNotice("cy", "", ago(0.1), "idle", 900, {"hibernation": saved()}))
        HubState.current().stops = HubStops()
        asyncio.run(record_user_stop(user.spawner, None))  # the hub's stop that follows the service's request
        assert newest_stop(history, "cy", now=datetime.now(timezone.utc)).reason == "idle"
        user.spawner._spawn_pending = True  # a spawn that failed is not a stop on request either
        asyncio.run(record_user_stop(user.spawner, None))
        assert newest_stop(history, "cy", now=datetime.now(timezone.utc)).reason == "idle"
    finally:
        db.close(history)


def test_a_cull_is_not_hidden_by_a_later_cull_of_another_of_her_servers(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    try:
        user = fake_user("eve", url, started=ago(60))
        user.spawner.name = "a"
        # One pass of the service culls her servers "a" and then "b"; the hub stops "a" after both are recorded.
        record_stop(history, StopNotice("eve", "a", ago(0.2), "idle", 900, {"hibernation": saved()}))
        record_stop(history, StopNotice("eve", "b", ago(0.1), "idle", 900, {"hibernation": saved()}))
        HubState.current().stops = HubStops()
        asyncio.run(record_user_stop(user.spawner, None))
        assert newest_stop(history, "eve", now=datetime.now(timezone.utc), server="a").reason == "idle"
    finally:
        db.close(history)


def test_leaving_the_queue_is_news_for_an_hour(tmp_path) -> None:
    user = fake_user("dan", f"sqlite:///{tmp_path / 'none.sqlite'}")
    stops = HubState.current().stops = HubStops()
    text = "You left the queue for a 0.25 GPU (time-slicing): your place in line is given up."
    stops.note(StopNotice("dan", "", ago(5), LEFT_QUEUE, details={"text": text}))
    assert '<span class="fracnb-left-queue">You left the queue' in str(StoppedNotice()(user))
    stops.note(StopNotice("dan", "", ago(LEFT_QUEUE_SECONDS / 60 + 1), LEFT_QUEUE, details={"text": text}))
    assert StoppedNotice()(user) == ""


def test_names_in_backticks_are_code_on_the_hub_pages() -> None:
    notice = StopNotice("eve", "", ago(1), "idle", 900, {"hibernation": saved()})
    html = str(notice_html(notice, "/hub/spawn"))
    assert "`" not in html
    assert "<code>" in html
    tricky = StopNotice(
        "eve", "", ago(1), "idle", 900, {"hibernation": {"problem": "`<b>` and ` alone", "kernels": []}}
    )
    assert "<b>" not in str(notice_html(tricky, "/hub/spawn"))


def test_a_stop_that_found_nothing_to_save_does_not_contradict_itself() -> None:
    empty = hibernation_json(Hibernation(checked_report({"kernels": [], "saved_bytes": 0}), None, 0.3))
    notice = StopNotice("fay", "", datetime(2026, 11, 25, 0, 52, tzinfo=timezone.utc), USER_STOP, details={
        "hibernation": empty
    })  # fmt: skip
    assert notice_sentences(notice) == [
        f"Your server was stopped on request by you or an admin (at 00:52 UTC). {NOTHING_HELD_CONSEQUENCES}"
    ]
    assert "shut down" not in NOTHING_HELD_CONSEQUENCES


def test_a_queued_spawn_is_said_on_every_hub_page(tmp_path) -> None:
    user = fake_user("gil", f"sqlite:///{tmp_path / 'none.sqlite'}")
    HubState.current().stops = HubStops()
    headline = "Queued for a 0.25 GPU (time-slicing): 2nd in line. Stop the server to leave the queue."
    user.spawner.queue = SimpleNamespace(status_html=lambda: headline)
    user.spawner.pending = "spawn"
    shown = str(StoppedNotice()(user))
    assert f"Your server is waiting in the GPU queue. {headline}" in shown
    assert 'href="/hub/spawn-pending/gil"' in shown
    user.spawner.pending = None  # started: no longer news
    assert StoppedNotice()(user) == ""


def test_the_stop_after_a_lost_node_keeps_the_nodes_notice(tmp_path) -> None:
    user = fake_user("hal", f"sqlite:///{tmp_path / 'none.sqlite'}", started=ago(30))
    stops = HubState.current().stops = HubStops()
    text = "Your last server stopped at 14:05 UTC: the node it ran on (gpu-0) left the cluster."
    stops.note(StopNotice("hal", "", ago(0.1), "node-lost", details={"text": text}))
    asyncio.run(record_user_stop(user.spawner, None))  # the hub's stop of the server its poll found gone
    user.spawner.orm_spawner.started = None
    assert stops.of_server("hal", "").details["text"] == text  # what the server's spawn form says
    assert "request" not in str(StoppedNotice()(user))


def test_on_a_tie_the_stored_notice_wins_over_the_hubs_own():
    """Kueue's stop: the hub's poll noted it without a count; the service stored it, at the same time, with one."""
    at = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
    stops = HubStops()
    stops.note(StopNotice("ann", "", at, "kueue", details={"text": "preempted; its idle notebooks were saving"}))
    stored = StopNotice("ann", "", at, "kueue", details={"text": "preempted; 41 variables saved"})
    assert stops.newest("ann", stored, at + timedelta(minutes=1)) is stored
    later = StopNotice("ann", "", at + timedelta(seconds=1), USER_STOP)
    stops.note(later)
    assert stops.newest("ann", stored, at + timedelta(minutes=1)) is later


def test_the_meter_is_told_a_stop_on_request_as_the_stop_records_it():
    assert ON_REQUEST == USER_STOP


class HubApp:
    """The part of JupyterHub's application its shutdown goes through: ``cleanup`` stops every server."""

    def __init__(self, stop_all: Any) -> None:
        self.stop_all = stop_all

    async def cleanup(self) -> None:
        await self.stop_all()


def test_the_hubs_own_shutdown_is_not_told_as_someones_request(tmp_path) -> None:
    """Ctrl-C on the demo (SIGTERM to JupyterHub) stops every server in the hub's cleanup: each notice says the
    hub shut down, not "on request", and the service page's heading does not say fracnb stopped it."""
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    try:
        user = fake_user("dee", url, started=ago(10))
        state = user.spawner.hub_state
        state.stops = HubStops()
        app = HubApp(lambda: record_user_stop(user.spawner, None))
        state.stops.watch_hub_shutdown(app)
        state.stops.watch_hub_shutdown(app)  # every spawner asks: the cleanup is wrapped once
        asyncio.run(app.cleanup())
        user.spawner.orm_spawner.started = None
        stored = newest_stop(history, "dee", now=datetime.now(timezone.utc))
        assert stored.reason == HUB_SHUTDOWN
        shown = str(StoppedNotice()(user))
        assert "Your server was stopped as JupyterHub shut down (at " in shown
        assert "request" not in shown
        assert stops_heading([stored]) == "Your server was stopped"
    finally:
        db.close(history)


def test_only_the_services_own_stops_are_headed_as_fracnbs() -> None:
    cull = StopNotice("ann", "", ago(30), "idle", 900)
    own = StopNotice("ann", "gpu", ago(20), USER_STOP)
    assert stops_heading([cull]) == "Stopped by fracnb"
    assert stops_heading([own]) == "Your server was stopped"
    assert stops_heading([own, cull]) == "Your servers were stopped"
