"""``GET api/advice?profile=<slug>&choice=<choices>``: the caller's advice for their next session.

A notebook's meter asks, with its server's own token, for the advice on its server's choice
(``FRACNB_PROFILE``, ``FRACNB_CHOICE``), and shows it in the panel and the widget beside this
session's peak. The advice is the spawn form's (:func:`fracnb_spawner.history.advice.advise`, over the
same rows :func:`fracnb_spawner.form.rows.describe` gives the form), read from the caller's own
sessions only; the menu is the hub's ``profile_list`` from the config file the service loads.
Without availability, the advice does not say whether the choice is free: that is for the form
to say at the next spawn. A ``profile_list`` computed per user (a callable) cannot be known
here: the answer is then always ``{"state": "none"}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tornado import web
from traitlets.config import Config, Configurable

from fracnb_spawner.config.profiles import initialize_profiles
from fracnb_spawner.config.traits import configured_traits, spawner_section
from fracnb_spawner.form import rows as form
from fracnb_spawner.form.advice import AdviceTraits, offers_from_rows, past_sessions, row_key
from fracnb_spawner.history.advice import advise, sessions_on, waiting_text
from fracnb_spawner.history.reading import HISTORY_LIMIT
from fracnb_spawner.history.store import sessions_of
from fracnb_spawner.service.base import ServiceHandler
from fracnb_spawner.service.sessions import in_history

NO_ADVICE: dict[str, Any] = {"state": "none"}

# The spawner's advice settings, read from the hub's config as the spawner reads them.
_AdviceSettings = type("FractionalSpawner", (AdviceTraits, Configurable), {})


@dataclass(frozen=True)
class Menu:
    """The form's rows for every profile and choice, and the spawner's advice settings."""

    profiles: Sequence[Mapping[str, Any]]
    rows: Mapping[form.RowKey, form.ChoiceRow]
    headroom: float
    min_sessions: int


def menu_from_config(config: Config) -> Menu | None:
    """The menu the hub's config gives every user; None when it cannot be known or advice is off."""
    section = spawner_section(config)
    raw = section.get("profile_list", [])
    names = set(AdviceTraits.class_trait_names())
    settings = _AdviceSettings(config=Config({"FractionalSpawner": {k: v for k, v in section.items() if k in names}}))
    if callable(raw) or not raw or not settings.right_sizing_advice:
        return None
    profiles = initialize_profiles(raw)
    rows = form.describe(profiles, configured_traits(config).gpu_defaults())
    return Menu(profiles, rows, settings.right_sizing_headroom, settings.right_sizing_min_sessions)


def advice_document(
    menu: Menu | None, records: Sequence[Mapping[str, Any]], profile: str, choice: str
) -> dict[str, Any]:
    """The answer (schemas/service-advice.schema.json) for a server on ``profile``/``choice``, from ``records``."""
    if menu is None:
        return dict(NO_ADVICE)
    key = row_key(profile, choice, menu.rows)
    offers = offers_from_rows(menu.profiles, menu.rows)
    if key is None or all(offer.choice != key for offer in offers):  # not offered (any more), or no GPU
        return dict(NO_ADVICE)
    history = past_sessions(records, menu.rows)
    advice = advise(history, offers, current=key, headroom=menu.headroom, min_sessions=menu.min_sessions)
    if advice is not None:
        return {
            "state": "advice",
            "text": advice.text,
            "larger": advice.larger,
            "sessions": advice.sessions,
            "p95_bytes": advice.p95_bytes,
        }
    waiting = waiting_text(len(sessions_on(history, key)), menu.min_sessions)
    return dict(NO_ADVICE) if waiting is None else {"state": "waiting", "text": waiting}


class AdviceHandler(ServiceHandler):
    """``GET api/advice?profile=<slug>&choice=<option=choice,...>``: for the caller, from their own sessions."""

    @web.authenticated
    async def get(self) -> None:
        user = self.caller()
        profile = self.get_query_argument("profile", "")
        if not profile:
            raise web.HTTPError(400, "give the server's profile: api/advice?profile=<slug>&choice=<option=choice,...>")
        choice = self.get_query_argument("choice", "")
        menu = getattr(self.state, "advice_menu", None)
        records = [] if menu is None else await in_history(self.state, "advice", sessions_of, user, limit=HISTORY_LIMIT)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(advice_document(menu, records, profile, choice))
