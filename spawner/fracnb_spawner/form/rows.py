"""The spawn form: for every profile and choice, the GPU share, memory budget, isolation and availability.

Field names are KubeSpawner's (``profile``, ``profile-option-<slug>--<option>`` and its
``--unlisted-choice`` text field), so its form parsing keeps working. Everything the admin
or the cluster supplies is HTML-escaped; a ``validation_regex`` becomes a ``pattern``
attribute only in the syntax browsers use (``jspattern``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT
from fracnb_spawner.config.profiles import UNLISTED, UNLISTED_LABEL, iter_combinations
from fracnb_spawner.form.jspattern import html_pattern
from fracnb_spawner.gpu.plan import GPUConfigError, GPUDefaults, GPUPlan
from fracnb_spawner.gpu.resolve import plan_gpu
from fracnb_spawner.gpu.words import plan_summary

RowKey = tuple[str, str | None, str | None]  # (profile slug, option, choice); option None = the profile

_environment = Environment(
    loader=PackageLoader("fracnb_spawner.form", "templates"),
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
    profiles: list[dict],
    rows: Mapping[RowKey, ChoiceRow],
    user_options: Mapping,
    quota: str | None = None,
    kept_place: Markup | str | None = None,
    *,
    preselected: Markup | str | None = None,
) -> str:
    """The form, with the choice in ``user_options`` (the last one submitted, even if refused) selected.

    ``quota``: the user's quota line; ``kept_place``: the notice of a place kept in the GPU queue (or of a
    lost node); ``preselected``: the line saying why the choice is selected (form/preselect.py). The form's
    ``LOCAL_TIMES_SCRIPT`` shows the <time> elements of both in the reader's zone."""
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
        kept_place=kept_place,
        preselected=preselected,
        local_times=LOCAL_TIMES_SCRIPT,
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
