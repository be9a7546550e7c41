"""Right-sizing advice on the real spawn form, from a real (SQLite) session history."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from traitlets.config import Config

from fracnb_spawner.form import rows as form
from fracnb_spawner.form.advice import offers_from_rows, row_key
from fracnb_spawner.history import db, store
from tests.history.records import GIB, row

USER = "mock@name"  # the user of a spawner built with _mock=True
PROFILES = [
    {"display_name": "CPU", "slug": "cpu"},
    {
        "display_name": "A100",
        "slug": "a100",
        "default": True,
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "half": {"display_name": "1/2 GPU", "default": True, "gpu": {"fraction": "1/2"}},
                    "quarter": {"display_name": "1/4 GPU", "gpu": {"fraction": "1/4"}},
                    "eighth": {"display_name": "1/8 GPU", "gpu": {"fraction": "1/8"}},
                },
            }
        },
    },
]


def config(url: str, **traits) -> Config:
    c = Config()
    c.FractionalSpawner.profile_list = PROFILES
    c.FractionalSpawner.show_availability = False
    c.FractionalSpawner.right_sizing_db_url = url
    for name, value in traits.items():
        setattr(c.FractionalSpawner, name, value)
    return c


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    history = db.open_database(url)
    start = datetime(2026, 11, 1)
    peaks = [5.0, 6.1, 4.0, 3.2, 5.5, 6.0]
    rows = [row(USER, n, start + timedelta(days=n), peak_bytes=int(p * GIB)) for n, p in enumerate(peaks)]
    rows.append(row("someone-else", 99, start + timedelta(days=9), peak_bytes=39 * GIB, oom_events=3))
    store.insert_many(history, rows)
    db.close(history)
    return url


async def test_the_form_advises_a_smaller_choice_from_the_users_own_sessions(make_spawner, history_url) -> None:
    html = await make_spawner(config(history_url)).render_options_form()
    advice = re.search(r"<p class=\"fracnb-advice\"[^>]*>([^<]*)</p>", html)
    assert advice is not None
    # 1/2 GPU of the default 80 GiB is 40 GiB; 6.1 GiB x 1.2 fits 1/8 (10 GiB). Another user's OOMs do not count.
    assert (
        advice.group(1) == "Your last 6 sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit."
    )
    assert re.search(r'<option value="half"\s+selected', html)  # not pre-selected unless the admin says so


async def test_the_admin_can_have_the_advice_preselected(make_spawner, history_url) -> None:
    html = await make_spawner(config(history_url, right_sizing_preselect=True)).render_options_form()
    assert re.search(r'<option value="eighth"\s+selected', html)
    # The user's own last choice (shown again after a refusal) wins over the advice.
    spawner = make_spawner(
        config(history_url, right_sizing_preselect=True), user_options={"profile": "a100", "size": "quarter"}
    )
    assert re.search(r'<option value="quarter"\s+selected', await spawner.render_options_form())


async def test_no_advice_without_history_or_when_turned_off(make_spawner, history_url, tmp_path) -> None:
    missing = f"sqlite:///{tmp_path / 'nothing-here.sqlite'}"
    for spawner in (make_spawner(config(missing)), make_spawner(config(history_url, right_sizing_advice=False))):
        assert "fracnb-advice" not in await spawner.render_options_form()
    assert not (tmp_path / "nothing-here.sqlite").exists()  # reading never creates a database
    few = make_spawner(config(history_url, right_sizing_min_sessions=7))
    assert "fracnb-advice" not in await few.render_options_form()


async def test_the_database_url_defaults_to_the_services(make_spawner) -> None:
    c = Config()
    c.FracnbService.db_url = "postgresql+psycopg://fracnb@db/fracnb"
    assert make_spawner(c).right_sizing_db_url == "postgresql+psycopg://fracnb@db/fracnb"
    assert make_spawner().right_sizing_db_url == "sqlite:///fracnb-service.sqlite"


async def test_stored_choices_map_to_form_rows(make_spawner) -> None:
    spawner = make_spawner(config("sqlite://"))
    profiles = await spawner.resolve_profiles()
    rows = form.describe(profiles, spawner.gpu_defaults())
    assert row_key("a100", "size=eighth", rows) == ("a100", "size", "eighth")
    assert row_key("cpu", None, rows) == ("cpu", None, None)
    assert row_key("gone", "size=half", rows) is None
    offers = {offer.choice: (offer.label, offer.memory_bytes) for offer in offers_from_rows(profiles, rows)}
    assert offers == {
        ("a100", "size", "half"): ("1/2 GPU", 40 * GIB),
        ("a100", "size", "quarter"): ("1/4 GPU", 20 * GIB),
        ("a100", "size", "eighth"): ("1/8 GPU", 10 * GIB),
    }
