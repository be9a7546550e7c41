"""Right-sizing advice on the spawn form, from the user's own session history.

The fracnb service stores what each session used (``c.FracnbService.db_url``); the hub reads the
user's newest sessions from the same database (read-only: the service migrates it) and turns them
into one sentence above the form (:func:`fracnb_spawner.history.advice.advise`). Only the user's own
records are read. Anything going wrong there (no database yet, an unreachable server) means no
advice, never a broken form.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import escape
from prometheus_client import Counter
from traitlets import Bool, Float, HasTraits, Int, Unicode, default

from fracnb_spawner.form.rows import ChoiceRow, RowKey
from fracnb_spawner.history.advice import DEFAULT_MIN_SESSIONS, Advice, Offer, PastSession, advise
from fracnb_spawner.history.db import default_db_url
from fracnb_spawner.history.reading import HistoryReader
from fracnb_spawner.history.report import ReportMenu

log = logging.getLogger("fracnb.advice")

# In the hub's registry (/hub/metrics); the service counts its own failures under the same name.
DATABASE_ERRORS = Counter(
    "fracnb_session_database_errors",
    "Reads of the session history database for the spawn form's advice that failed",
    ["operation"],
)
DATABASE_ERRORS.labels(operation="form-advice")


def _display_name(profiles: Sequence[Mapping[str, Any]], key: RowKey) -> str:
    slug, option, choice = key
    profile = next(p for p in profiles if p["slug"] == slug)
    if option is None:
        return str(profile.get("display_name") or slug)
    entry = profile["profile_options"][option]["choices"][choice]
    return str(entry.get("display_name") or choice)


def offers_from_rows(profiles: Sequence[Mapping[str, Any]], rows: Mapping[RowKey, ChoiceRow]) -> list[Offer]:
    """The form's GPU choices as offers: a profile without options, or each listed choice of one."""
    offers = []
    for key, row in rows.items():
        slug, option, _choice = key
        profile = next((p for p in profiles if p["slug"] == slug), None)
        if profile is None or not row.allowed or row.plan.memory_bytes <= 0:
            continue
        if option is None and profile.get("profile_options"):
            continue  # the profile's default combination is listed again as its choices
        free = None if row.free is None else row.free > 0
        label = _display_name(profiles, key)
        offers.append(Offer(key, label, row.plan.memory_bytes, mig=row.plan.backend == "mig", free=free))
    return offers


def row_key(profile: str | None, choice: str | None, rows: Mapping[RowKey, ChoiceRow]) -> RowKey | None:
    """The form row of a stored session (FRACNB_PROFILE, FRACNB_CHOICE "size=half,memory=x")."""
    if not profile:
        return None
    pairs = [part.partition("=") for part in (choice or "").split(",") if part]
    for option, _, value in pairs:
        if (profile, option, value) in rows:
            return (profile, option, value)
    return (profile, None, None) if (profile, None, None) in rows else None


def report_menu(
    profiles: Sequence[Mapping[str, Any]], rows: Mapping[RowKey, ChoiceRow], headroom: float,
    min_sessions: int = DEFAULT_MIN_SESSIONS,
) -> ReportMenu:  # fmt: skip
    """The form's choices for the admins' report, located as the advice locates a stored session, advised on
    from as many sessions as each user's advice needs."""
    offers = offers_from_rows(profiles, rows)
    return ReportMenu(offers, lambda profile, choice: row_key(profile, choice, rows), headroom, min_sessions)


def past_sessions(records: Sequence[Mapping[str, Any]], rows: Mapping[RowKey, ChoiceRow]) -> list[PastSession]:
    return [
        PastSession(
            choice=row_key(r["profile"], r["choice"], rows),
            budget_bytes=r["budget_bytes"],
            peak_bytes=r["peak_bytes"],
            oom_events=r["oom_events"],
            seconds_above_95=r["seconds_above_95"],
        )
        for r in records
    ]


def advice_html(advice: Advice) -> str:
    # The hub's Bootstrap colour variables (light and dark themes), with fallbacks for hubs without them.
    style = (
        "background:var(--bs-warning-bg-subtle,#fff8c5);color:var(--bs-warning-text-emphasis,inherit);"
        "border-left:4px solid var(--bs-warning-border-subtle,#bf8700);padding:6px 10px;margin:0 0 12px"
    )
    return f'<p class="fracnb-advice" data-fracnb-advice style="{style}">{escape(advice.text)}</p>'


def preselection(advice: Advice) -> dict[str, str]:
    """user_options that select the suggested choice on the form."""
    slug, option, choice = advice.suggested
    return {"profile": slug} if option is None else {"profile": slug, option: choice}


@dataclass(frozen=True)
class FormAdvice:
    html: str = ""
    preselect: Mapping[str, str] | None = None


class AdviceTraits(HasTraits):
    """Mixed into ``FractionalSpawner``: the spawn form's right-sizing advice."""

    right_sizing_advice = Bool(
        True,
        help="""Show advice on the spawn form from the user's own past sessions: "Your last 6
        sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit: it's free
        now." The notebook's GPU panel and widget show the same advice for the next session
        (from the fracnb service, which reads this setting from the hub's config). Needs the
        fracnb service's session history (c.FracnbService.db_url). Default: True.
        Example: c.FractionalSpawner.right_sizing_advice = False""",
    ).tag(config=True)

    right_sizing_preselect = Bool(
        False,
        help="""Select the advised choice on the spawn form (the user can still change it), unless
        the user's last choice is being shown again. Default: False.
        Example: c.FractionalSpawner.right_sizing_preselect = True""",
    ).tag(config=True)

    right_sizing_headroom = Float(
        0.20,
        help="""Headroom over the 95th-percentile peak that a smaller choice must leave, as a share
        (0.20 = 20 %). Default: 0.20. Example: c.FractionalSpawner.right_sizing_headroom = 0.3""",
    ).tag(config=True)

    right_sizing_min_sessions = Int(
        3,
        help="""How many of the user's sessions on a choice are needed before advice is given.
        Default: 3. Example: c.FractionalSpawner.right_sizing_min_sessions = 5""",
    ).tag(config=True)

    right_sizing_db_url = Unicode(
        help="""The session history database the advice and the placement (users' busy time) read
        (read-only). Default:
        c.FracnbService.db_url from the same configuration, else the service's default,
        fracnb-service.sqlite beside the hub's own SQLite database (c.JupyterHub.db_url).
        Example: c.FractionalSpawner.right_sizing_db_url = "postgresql+psycopg://fracnb@db/fracnb" """,
    ).tag(config=True)

    @default("right_sizing_db_url")
    def _default_right_sizing_db_url(self) -> str:
        return default_db_url(getattr(self, "config", None))

    async def form_advice(
        self,
        user: str,
        profiles: Sequence[Mapping[str, Any]],
        rows: Mapping[RowKey, ChoiceRow],
        history: HistoryReader,
    ) -> FormAdvice:
        if not self.right_sizing_advice:
            return FormAdvice()
        try:
            records = await asyncio.to_thread(history.sessions, self.right_sizing_db_url, user)
        except Exception as error:  # no table yet (before the service's first start), a server down: no advice
            DATABASE_ERRORS.labels(operation="form-advice").inc()
            log.warning("fracnb: no right-sizing advice for the form, the session history is unreadable: %s", error)
            return FormAdvice()
        advice = advise(
            past_sessions(records, rows),
            offers_from_rows(profiles, rows),
            headroom=self.right_sizing_headroom,
            min_sessions=self.right_sizing_min_sessions,
        )
        if advice is None:
            return FormAdvice()
        return FormAdvice(advice_html(advice), preselection(advice) if self.right_sizing_preselect else None)
