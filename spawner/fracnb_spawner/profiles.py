"""The profile list: validating the admin's configuration and the user's choice.

``validate_profiles`` refuses configuration that cannot work, naming the profile.
``select`` turns hostile ``user_options`` (from the form or straight from the REST API)
into a ``Selection`` or an ``InvalidUserOptionsError`` whose message is safe to show.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from slugify import slugify

from .backends import GPU_VISIBILITY_VARIABLES, RESERVED_ENV_PREFIX
from .culling import CullPolicy
from .gpu import GPUConfigError, GPUDefaults, GPUSpec, parse_gpu_spec, plan_gpu
from .units import QuantityError, parse_duration

UNLISTED = "unlisted-choice"
UNLISTED_SUFFIX = "--unlisted-choice"
CULL_KEYS = ("idle_timeout", "max_age")
MAX_OPTION_LENGTH = 1024


class ProfileConfigError(ValueError):
    """The profile list cannot work as configured."""


class InvalidUserOptionsError(ValueError):
    """A spawn request whose options don't match the profile list; the message is shown to the user."""


@dataclass(frozen=True)
class Selection:
    """A validated choice: a profile and one listed (or valid unlisted) choice per option."""

    profile: Mapping[str, Any]
    choices: tuple[tuple[str, str], ...]
    user_options: dict[str, str]
    gpu: GPUSpec | None
    cull: dict[str, int] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return self.profile["slug"]

    @property
    def choice_text(self) -> str:
        return ",".join(f"{option}={choice}" for option, choice in self.choices)


def initialize_profiles(raw: object) -> list[dict]:
    """A deep copy with KubeSpawner's defaults filled in: slugs, default choices, default profile."""
    if isinstance(raw, Mapping):  # KubeSpawner 7.1's dict form, ordered by key
        raw = [raw[key] for key in sorted(raw)]
    if not isinstance(raw, list):
        raise ProfileConfigError(f"profile_list must be a list of profiles, not {type(raw).__name__}")
    profiles = copy.deepcopy(raw)
    for index, profile in enumerate(profiles):
        if not isinstance(profile, dict) or "display_name" not in profile:
            raise ProfileConfigError(f"profile #{index + 1} must be a mapping with a display_name")
        profile.setdefault("slug", slugify(str(profile["display_name"])))
        for option in profile.get("profile_options", {}).values():
            choices = option.get("choices") or {}
            if choices and not any(c.get("default") for c in choices.values()):
                next(iter(choices.values()))["default"] = True
            option.setdefault("unlisted_choice", {}).setdefault("enabled", False)
    if profiles and not any(p.get("default") for p in profiles):
        profiles[0]["default"] = True
    return profiles


def profile_name(profile: Mapping) -> str:
    return f"profile {profile.get('slug')!r} ({profile.get('display_name')!r})"


def iter_combinations(profile: Mapping) -> Iterator[tuple[tuple[tuple[str, str], ...], GPUSpec | None, dict]]:
    """Every listed combination of choices of a profile, with its merged gpu spec and cull policy."""
    combos: list[tuple[tuple[tuple[str, str], ...], GPUSpec | None, dict]] = [
        ((), _spec_of(profile), dict(profile.get("cull") or {}))
    ]
    for option_name, option in profile.get("profile_options", {}).items():
        extended = []
        for chosen, spec, cull in combos:
            for key, choice in (option.get("choices") or {}).items():
                choice_spec = _spec_of(choice)
                merged = spec.merged(choice_spec) if spec and choice_spec else (choice_spec or spec)
                extended.append(((*chosen, (option_name, key)), merged, {**cull, **(choice.get("cull") or {})}))
            if option["unlisted_choice"].get("enabled"):
                extended.append(((*chosen, (option_name, UNLISTED)), spec, cull))
        combos = extended or combos
    return iter(combos)


def _spec_of(entry: Mapping) -> GPUSpec | None:
    return parse_gpu_spec(entry["gpu"]) if "gpu" in entry else None


def validate_profiles(profiles: list[dict], defaults: GPUDefaults) -> None:
    """Raise ``ProfileConfigError`` naming the first profile (and choice) that cannot work."""
    slugs = [p["slug"] for p in profiles]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise ProfileConfigError(f"profile slug(s) {duplicates} appear more than once; slugs must be unique")
    for profile in profiles:
        try:
            _validate_profile(profile, defaults)
        except (GPUConfigError, QuantityError, ProfileConfigError) as error:
            raise ProfileConfigError(f"{profile_name(profile)}: {error}") from None


def _validate_profile(profile: Mapping, defaults: GPUDefaults) -> None:
    _check_override(profile.get("kubespawner_override") or {})
    for option_name, option in profile.get("profile_options", {}).items():
        if not option.get("choices") and not option["unlisted_choice"].get("enabled"):
            raise ProfileConfigError(f"option {option_name!r} has neither choices nor an unlisted choice")
        for key, choice in (option.get("choices") or {}).items():
            try:
                _check_override(choice.get("kubespawner_override") or {})
                _spec_of(choice)
            except (ProfileConfigError, GPUConfigError) as error:
                raise ProfileConfigError(f"choice {option_name}={key}: {error}") from None
        unlisted = option["unlisted_choice"]
        if unlisted.get("enabled"):
            if "gpu" in unlisted:
                raise ProfileConfigError(f"option {option_name!r}: an unlisted choice cannot carry 'gpu'")
            _check_override(unlisted.get("kubespawner_override") or {})
            try:
                re.compile(unlisted.get("validation_regex") or "")
            except re.error as error:
                raise ProfileConfigError(f"option {option_name!r}: bad validation_regex: {error}") from None
    for choices, spec, cull in iter_combinations(profile):
        try:
            plan_gpu(spec, defaults)
            cull_policy(spec, cull, CullPolicy(0, 0), CullPolicy(0, 0))
        except (GPUConfigError, QuantityError, ProfileConfigError) as error:
            where = ",".join(f"{o}={c}" for o, c in choices)
            raise ProfileConfigError(f"choice {where}: {error}" if where else str(error)) from None


def _check_override(override: Mapping) -> None:
    environment = override.get("environment") or {}
    if not isinstance(environment, Mapping):
        return
    for name in environment:
        if name in GPU_VISIBILITY_VARIABLES or str(name).startswith(RESERVED_ENV_PREFIX):
            raise ProfileConfigError(
                f"kubespawner_override sets {name}, which fracnb controls from the 'gpu' key; remove it"
            )


def cull_policy(spec: GPUSpec | None, cull: Mapping, gpu_default: CullPolicy, cpu_default: CullPolicy) -> CullPolicy:
    unknown = sorted(str(k) for k in cull if k not in CULL_KEYS)
    if unknown:
        raise ProfileConfigError(f"unknown cull key(s) {unknown}; valid keys: {', '.join(CULL_KEYS)}")
    default = gpu_default if spec is not None and spec.requests_gpu else cpu_default
    return CullPolicy(
        idle_timeout=parse_duration(cull["idle_timeout"]) if "idle_timeout" in cull else default.idle_timeout,
        max_age=parse_duration(cull["max_age"]) if "max_age" in cull else default.max_age,
    )


def select(profiles: list[dict], user_options: object) -> Selection:
    """Validate ``user_options`` against the initialized profile list.

    Odd payloads this refuses (the REST API passes any JSON object through):
    ``{"profile": "nope"}``, ``{"profile": ["gpu"]}``, ``{"profile": "gpu", "size": "forged"}``,
    ``{"size": ["eighth"]}``, ``{"size--unlisted-choice": "x"}`` where no unlisted choice is
    enabled or the value doesn't fully match the regex (also without ``profile``), and
    options of other profiles or unknown keys.
    """
    if not profiles:
        raise InvalidUserOptionsError("no profiles are configured")
    options = user_options or {}
    if not isinstance(options, Mapping):
        raise InvalidUserOptionsError('user_options must be a JSON object such as {"profile": "<slug>"}')
    slug = options.get("profile")
    default = next(p for p in profiles if p.get("default"))
    profile = default if slug in (None, "") else _profile_by_slug(profiles, slug)
    profile_options = profile.get("profile_options", {})
    allowed_keys = {"profile"} | set(profile_options) | {n + UNLISTED_SUFFIX for n in profile_options}
    unknown = sorted(str(k)[:64] for k in options if k not in allowed_keys)
    if unknown:
        valid = ", ".join(sorted(profile_options)) or "none"
        raise InvalidUserOptionsError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for profile {profile['slug']!r}; "
            f"its options are: {valid}"
        )
    choices: list[tuple[str, str]] = []
    normalized: dict[str, str] = {"profile": profile["slug"]}
    spec = _spec_of(profile)
    cull = dict(profile.get("cull") or {})
    for option_name, option in profile_options.items():
        key, unlisted_value = _choose(option_name, option, options)
        choices.append((option_name, key))
        if unlisted_value is not None:
            normalized[option_name] = UNLISTED
            normalized[option_name + UNLISTED_SUFFIX] = unlisted_value
            continue
        normalized[option_name] = key
        choice = option["choices"][key]
        choice_spec = _spec_of(choice)
        spec = spec.merged(choice_spec) if spec and choice_spec else (choice_spec or spec)
        cull.update(choice.get("cull") or {})
    return Selection(profile, tuple(choices), normalized, spec, cull)


def _profile_by_slug(profiles: list[dict], slug: object) -> dict:
    if isinstance(slug, str):
        for profile in profiles:
            if profile["slug"] == slug:
                return profile
    shown = repr(slug)[:64]
    valid = ", ".join(p["slug"] for p in profiles)
    raise InvalidUserOptionsError(f"no such profile {shown}; choose one of: {valid}")


def _choose(option_name: str, option: Mapping, options: Mapping) -> tuple[str, str | None]:
    """The choice key for one option, and the unlisted value when that is what was chosen."""
    choices = option.get("choices") or {}
    unlisted = option["unlisted_choice"]
    value = options.get(option_name)
    free_text = options.get(option_name + UNLISTED_SUFFIX)
    if free_text not in (None, "") or (value == UNLISTED and UNLISTED not in choices):
        return UNLISTED, _check_unlisted(option_name, unlisted, free_text)
    if value is None:
        return next(k for k, c in choices.items() if c.get("default")), None
    if not isinstance(value, str) or value not in choices:
        valid = ", ".join(map(repr, choices))
        raise InvalidUserOptionsError(f"{repr(value)[:64]} is not a choice for {option_name!r}; choose one of: {valid}")
    return value, None


def _check_unlisted(option_name: str, unlisted: Mapping, free_text: object) -> str:
    if not unlisted.get("enabled"):
        raise InvalidUserOptionsError(f"option {option_name!r} accepts only its listed choices")
    if not isinstance(free_text, str) or not free_text:
        raise InvalidUserOptionsError(f"option {option_name!r}: the 'Other' choice needs a value")
    if len(free_text) > MAX_OPTION_LENGTH:
        raise InvalidUserOptionsError(f"option {option_name!r}: the value is over {MAX_OPTION_LENGTH} characters")
    pattern = unlisted.get("validation_regex")
    if pattern and re.fullmatch(pattern, free_text) is None:
        hint = unlisted.get("validation_message") or f"it must match {pattern}"
        raise InvalidUserOptionsError(f"option {option_name!r}: {free_text[:64]!r} is not allowed; {hint}")
    return free_text
