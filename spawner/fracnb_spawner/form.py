"""The spawn form: for every profile and choice, the GPU share, memory budget, isolation and availability.

Field names are KubeSpawner's (``profile``, ``profile-option-<slug>--<option>`` and its
``--unlisted-choice`` text field), so its form parsing keeps working. Everything the admin
or the cluster supplies is HTML-escaped; a ``validation_regex`` becomes a ``pattern``
attribute only in the syntax browsers use (``jspattern``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from jinja2 import Environment, PackageLoader, select_autoescape

from .gpu import GPUConfigError, GPUDefaults, GPUPlan, plan_gpu
from .jspattern import html_pattern
from .logsafe import escape_controls
from .profiles import UNLISTED, UNLISTED_LABEL, iter_combinations
from .progress import plan_summary
from .quota import QuotaDecision, gpus_text, use_text

RowKey = tuple[str, str | None, str | None]  # (profile slug, option, choice); option None = the profile

_environment = Environment(
    loader=PackageLoader("fracnb_spawner", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
)
_environment.filters["html_pattern"] = html_pattern


@dataclass(frozen=True)
class ChoiceRow:
    """What the form says about one profile or choice."""

    plan: GPUPlan
    summary: str
    free: int | None = None
    allowed: bool = True
    reason: str | None = None
    queue: str | None = None  # "queue: 2 waiting, about 10 min" when a spawn of it would wait

    def with_availability(self, free: int | None, queue: str | None = None) -> ChoiceRow:
        return replace(self, free=free, queue=queue)

    def refused(self, reason: str) -> ChoiceRow:
        return replace(self, allowed=False, reason=reason)


def describe(profiles: list[dict], defaults: GPUDefaults) -> dict[RowKey, ChoiceRow]:
    """A row per profile (its default combination) and per listed choice."""
    rows: dict[RowKey, ChoiceRow] = {}
    for profile in profiles:
        combos = list(iter_combinations(profile))
        default_choices = _default_choices(profile)
        for chosen, spec, _cull in combos:
            try:
                plan = plan_gpu(spec, defaults)
            except GPUConfigError:
                continue  # validate_profiles has refused such configuration already
            row = ChoiceRow(plan, plan_summary(plan))
            if dict(chosen) == default_choices:
                rows[(profile["slug"], None, None)] = row
            for option, choice in chosen:
                others = {o: c for o, c in chosen if o != option}
                if others == {o: c for o, c in default_choices.items() if o != option} and choice != UNLISTED:
                    rows[(profile["slug"], option, choice)] = row
    return rows


def _default_choices(profile: Mapping) -> dict[str, str]:
    defaults = {}
    for name, option in profile.get("profile_options", {}).items():
        choices = option.get("choices") or {}
        defaults[name] = next((k for k, c in choices.items() if c.get("default")), UNLISTED)
    return defaults


def render(
    profiles: list[dict], rows: Mapping[RowKey, ChoiceRow], user_options: Mapping, quota: str | None = None
) -> str:
    """The form, with the choice in ``user_options`` (the last one submitted, even if refused) selected."""
    selected = user_options.get("profile") if isinstance(user_options.get("profile"), str) else None
    if selected not in {p["slug"] for p in profiles}:
        selected = next(p["slug"] for p in profiles if p.get("default"))
    template = _environment.get_template("form.html")
    return template.render(
        profiles=profiles,
        rows=rows,
        selected=selected,
        chosen=_chosen_choices(profiles, selected, user_options),
        quota=quota,
        unlisted=UNLISTED,
        unlisted_label=UNLISTED_LABEL,
    )


def _chosen_choices(profiles: list[dict], selected: str, user_options: Mapping) -> dict[str, dict[str, str]]:
    """Profile slug -> option name -> choice key to show selected: the user's where valid, else the default."""
    chosen = {  # a choice marked default (else the browser shows the first)
        profile["slug"]: {name: key for name, key in _default_choices(profile).items() if key != UNLISTED}
        for profile in profiles
    }
    profile = next(p for p in profiles if p["slug"] == selected)
    for name, option in (profile.get("profile_options") or {}).items():
        value = user_options.get(name)
        if isinstance(value, str) and (value in (option.get("choices") or {}) or value == UNLISTED):
            chosen[selected][name] = value
    return chosen


# ---- quotas in plain words ------------------------------------------------------------------


def quota_line(decision: QuotaDecision) -> str | None:
    """ "Your GPU quota: 0 of 0.5 GPU in use · team-a (your team, together): 0.25 of 2 GPUs in use".

    ``decision`` is :func:`.quota.check_request` for a request of 0 GPUs (what is in use now).
    None when no limit applies to the user.
    """
    parts = []
    if decision.user_limit is not None:
        parts.append(f"Your GPU quota: {_use(decision.user_used, decision.user_limit)}")
    for group in decision.groups:
        parts.append(f"{escape_controls(group.name)} (your team, together): {_use(group.used, group.limit)}")
    return " · ".join(parts) or None


def _use(used: Fraction, limit: Fraction) -> str:
    return f"{use_text(used, limit)} in use"


def headroom(decision: QuotaDecision) -> Fraction | None:
    """The largest share that still fits every limit of the user (None: no limit)."""
    rooms = [group.limit - group.used for group in decision.groups]
    if decision.user_limit is not None:
        rooms.append(decision.user_limit - decision.user_used)
    return max(min(rooms), Fraction(0)) if rooms else None


def quota_refusal(decision: QuotaDecision) -> str:
    """The refusal of a request over quota: what is in use, and what the user can do about it."""
    room = headroom(decision)
    smaller = f"Choose a share of at most {gpus_text(room)}, or " if room else ""
    own_limit = decision.user_limit is not None and decision.user_used + decision.requested > decision.user_limit
    if own_limit:
        advice = f"{smaller}stop one of your other servers first."
    else:
        group = escape_controls(next(g for g in decision.groups if g.used + decision.requested > g.limit).name)
        wait = "wait" if smaller else "Wait"
        advice = f"{smaller}{wait} until a server of {group} stops, or ask a teammate in {group} to stop one."
    return f"Over GPU quota: {decision.message}. {advice}"
