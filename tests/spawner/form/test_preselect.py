"""Which choice the spawn form preselects: the pure rule (form/preselect.py) against literal options, and the real
form of a spawner whose user's GPU server was stopped with its variables saved (a real SQLite session history)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from fracnb_spawner.form.preselect import SavedChoice, preselection
from fracnb_spawner.history import db
from fracnb_spawner.history.stopnotices import StopNotice, record_stop
from tests.spawner.form.test_advice import USER, config

GPU = {"profile": "a100", "size": "quarter"}
SAVED = SavedChoice("gpu", GPU, datetime(2026, 12, 6, 19, 5, tzinfo=timezone.utc))


def valid(options) -> bool:
    return options.get("profile") in ("cpu", "a100")


def test_the_choice_whose_variables_wait_is_preselected_and_said() -> None:
    chosen = preselection({}, SAVED, {}, None, valid=valid, zone=ZoneInfo("America/New_York"))
    assert chosen.options == GPU
    assert chosen.why == (
        "Preselected: the choice of your server 'gpu', whose variables were saved when it stopped at 14:05 EST. "
        "Start on it to restore them."
    )
    assert chosen.moments == [SAVED.stopped_at]
    # It wins over this server's own last choice and over the advice.
    assert preselection({}, SAVED, {"profile": "cpu"}, {"profile": "cpu"}, valid=valid).options == GPU


def test_an_explicit_choice_still_wins_and_the_default_stays_the_default() -> None:
    submitted = {"profile": "cpu"}  # shown again after a refusal: the user's own word
    assert preselection(submitted, SAVED, {}, None, valid=valid).options == submitted
    assert preselection(submitted, SAVED, {}, None, valid=valid).why is None
    # Nothing saved: the server's last choice, the advice where the admin preselects it, else the admin's default.
    assert preselection({}, None, {"profile": "cpu"}, GPU, valid=valid).options == {"profile": "cpu"}
    assert preselection({}, None, {}, GPU, valid=valid).options == GPU
    assert preselection({}, None, {}, None, valid=valid).options == {}


def test_a_saved_choice_the_form_no_longer_offers_is_passed_over() -> None:
    gone = SavedChoice("", {"profile": "v100"}, SAVED.stopped_at)
    chosen = preselection({}, gone, {}, None, valid=valid)
    assert (chosen.options, chosen.why) == ({}, None)
    # A server that had no choice recorded (started before profiles existed) says nothing either.
    assert preselection({}, SavedChoice("", {}, SAVED.stopped_at), {}, None, valid=valid).why is None


def _stopped_server(user_options: dict) -> SimpleNamespace:
    """The hub's record of the user's stopped server (a JupyterHub Spawner's attributes the form reads)."""
    return SimpleNamespace(
        active=False, ready=False, pending=None, orm_spawner=SimpleNamespace(user_options=user_options, started=None)
    )


async def test_the_real_form_preselects_the_hibernated_gpu_choice(make_spawner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    stopped_at = datetime.now(timezone.utc) - timedelta(minutes=5)
    kernel = {"notebook": "train.ipynb", "status": "saved", "variables": 3, "bytes": 1 << 20}
    details = {"hibernation": {"outcome": "saved", "problem": None, "saved_bytes": 1 << 20, "kernels": [kernel]}}
    record_stop(history, StopNotice(USER, "gpu", stopped_at, "idle", 900, details))
    db.close(history)
    spawner = make_spawner(config(url))  # the admin's default is the A100's 1/2 GPU; CPU is the other profile
    spawner.user.spawners = {"gpu": _stopped_server(GPU)}
    html = await spawner.render_options_form()
    assert re.search(r'<option value="quarter"\s+selected', html), "the saved server's 1/4 GPU, not the default 1/2"
    line = re.search(r'<p class="fracnb-preselected"[^>]*>(.*?)</p>', html, re.S)
    assert line is not None
    assert "the choice of your server &#39;gpu&#39;, whose variables were saved" in line.group(1)
    # Once that server runs again its variables are no longer waiting: the default, with no line.
    spawner.user.spawners = {"gpu": SimpleNamespace(**{**vars(_stopped_server(GPU)), "active": True})}
    html = await spawner.render_options_form()
    assert "data-fracnb-preselected" not in html
    assert re.search(r'<option value="half"\s+selected', html)
