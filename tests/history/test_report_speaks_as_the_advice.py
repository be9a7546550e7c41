"""The admins' report and the users' advice are one rule over the hub's choices: the sessions that get
a user "Small GPU memory would have fit" make the report say its users are advised it (across
profiles, by display name); an OOM rate counts out-of-memory errors, and reaching the budget is
a figure of its own."""

from __future__ import annotations

from datetime import datetime, timedelta

from traitlets.config import Config

from fracnb_spawner.form.advice import offers_from_rows, past_sessions, report_menu
from fracnb_spawner.history import store
from fracnb_spawner.history.advice import advise
from fracnb_spawner.history.report import as_text, load_report
from fracnb_spawner.service.advicemenu import menu_from_config
from fracnb_spawner.service.reportcli import main
from fracnb_testbed.demo import PROFILES
from tests.history.records import GIB, row

START = datetime(2026, 11, 2, 9)


def demo_menu():
    """The demo's profile list as the hub and the service read it: 0.25 GPU (20 GiB), Small GPU memory
    (10 GiB, another profile), 1/2 GPU (40 GiB)."""
    config = Config()
    config.FractionalSpawner.gpu_backend = "time-slicing"
    config.FractionalSpawner.gpu_memory = "80Gi"
    config.FractionalSpawner.profile_list = PROFILES
    menu = menu_from_config(config)
    assert menu is not None
    return menu


def quarter(user: str, number: int, **figures) -> dict:
    return row(user, number, START + timedelta(hours=number), profile="quarter", choice="", fraction=0.25,
               budget_bytes=20 * GIB, **figures)  # fmt: skip


def test_the_report_advises_what_the_users_are_advised(history) -> None:
    # Ann: five sessions on 0.25 GPU that used no GPU memory, one that peaked at 1.5 GiB.
    sessions = [quarter("ann", n, peak_bytes=0) for n in range(5)] + [quarter("ann", 5, peak_bytes=3 * GIB // 2)]
    store.insert_many(history, sessions)
    menu = demo_menu()
    newest_first = sorted(store.sessions_of(history, "ann"), key=lambda r: r["started_at"], reverse=True)
    advice = advise(past_sessions(newest_first, menu.rows), offers_from_rows(menu.profiles, menu.rows))
    assert advice is not None
    assert advice.text.startswith("Your last 6 sessions on 0.25 GPU peaked at 1.5 GiB or less. Small GPU memory")
    report = load_report(history, menu=report_menu(menu.profiles, menu.rows, menu.headroom))
    (line,) = report.rows
    assert (line.label, line.advised, line.advised_larger) == ("0.25 GPU", "Small GPU memory", False)
    assert report.advice == [
        "0.25 GPU: 95 % of 6 sessions peaked at 1.5 GiB or less; users are advised Small GPU memory (10 GiB), "
        "which 100 % of them fit."
    ]
    assert "No change" not in as_text(report)


def test_touching_the_budget_is_not_running_out_of_memory(history) -> None:
    # Four sessions that stayed at 99 % of the budget for a while (the meter counts an event each), no error.
    store.insert_many(
        history, [quarter("bob", n, peak_bytes=int(19.9 * GIB), oom_events=1, seconds_above_95=120.0) for n in range(4)]
    )
    report = load_report(history, menu=report_menu(*demo_rows()))
    (line,) = report.rows
    assert line.oom_rate == 0.0
    assert line.reached_budget_rate == 1.0
    assert (line.advised, line.advised_larger) == ("1/2 GPU", True)  # as bob's form advises him
    assert report.advice == [
        "0.25 GPU: 4 of 4 sessions reached the budget of 20 GiB; users are advised 1/2 GPU (40 GiB), "
        "which gives more room."
    ]
    store.insert_many(history, [quarter("bob", 9, peak_bytes=20 * GIB, oom_events=1, oom_errors=2)])
    assert load_report(history).rows[0].oom_rate == 0.2


def demo_rows():
    menu = demo_menu()
    return menu.profiles, menu.rows, menu.headroom


def test_the_command_advises_over_the_hubs_choices_with_config(history, db_url, tmp_path, capsys) -> None:
    store.insert_many(history, [quarter("ann", n, peak_bytes=GIB // 2) for n in range(3)])
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        f"c.FracnbService.db_url = {db_url!r}\n"
        "c.FractionalSpawner.gpu_backend = 'time-slicing'\nc.FractionalSpawner.gpu_memory = '80Gi'\n"
        f"c.FractionalSpawner.profile_list = {PROFILES!r}\n"
    )
    assert main(["--config", str(config)]) == 0
    out = capsys.readouterr().out
    # 512 MiB, as the upper edge of its 0.1 % bucket of 20 GiB: the report never claims less than a peak.
    assert "- 0.25 GPU: 95 % of 3 sessions peaked at 532.5 MiB or less; users are advised Small GPU memory" in out
    assert main(["--db-url", db_url]) == 0  # without the hub's choices: only those in the data
    assert "What users are advised: nothing" in capsys.readouterr().out


def test_the_report_advises_from_as_many_sessions_as_a_user_needs(history) -> None:
    """Two sessions that used no GPU memory: neither the user's panel nor the report advises yet (one rule), and
    with a third both do. The report says that it pools every user's sessions."""
    store.insert_many(history, [quarter("cy", n, peak_bytes=0) for n in range(2)])
    profiles, rows, headroom = demo_rows()
    newest_first = sorted(store.sessions_of(history, "cy"), key=lambda r: r["started_at"], reverse=True)
    assert advise(past_sessions(newest_first, rows), offers_from_rows(profiles, rows)) is None
    report = load_report(history, menu=report_menu(profiles, rows, headroom))
    assert (report.rows[0].advised, report.advice) == (None, [])
    assert "over every user's sessions of the choice together" in as_text(report)
    assert "nothing before a choice has 3 sessions, as for each user" in as_text(report)
    fewer = load_report(history, menu=report_menu(profiles, rows, headroom, min_sessions=2))
    assert fewer.rows[0].advised == "Small GPU memory"  # c.FractionalSpawner.right_sizing_min_sessions = 2
    store.insert_many(history, [quarter("dan", 2, peak_bytes=0)])  # another user's: the report pools them
    assert load_report(history, menu=report_menu(profiles, rows, headroom)).rows[0].advised == "Small GPU memory"
