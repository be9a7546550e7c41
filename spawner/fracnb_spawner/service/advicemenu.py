"""The advice for a user's next session (``GET api/advice``, service/api/advice.py), over the hub's profile list.

The advice is the spawn form's (:func:`fracnb_spawner.history.advice.advise`, over the same rows
:func:`fracnb_spawner.form.rows.describe` gives the form), read from the caller's own sessions only; the menu
is the hub's ``profile_list`` from the config file the service loads. A ``profile_list`` computed per user
(a callable) cannot be known here: the answer is then always ``{"state": "none"}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traitlets.config import Config, Configurable

from fracnb_spawner.config.profiles import initialize_profiles
from fracnb_spawner.config.traits import configured_traits, spawner_section
from fracnb_spawner.form import rows as form
from fracnb_spawner.form.advice import AdviceTraits, offers_from_rows, past_sessions, row_key
from fracnb_spawner.history.advice import advise, sessions_on, waiting_text

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
