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
from functools import partial
from typing import Any

from slugify import slugify
from traitlets import TraitError

from fracnb_spawner.common.units import QuantityError, parse_duration
from fracnb_spawner.config.overrides import OverrideError, check_override, fill_unlisted, gpu_requests
from fracnb_spawner.config.queuekey import QueueConfigError, queue_max_wait
from fracnb_spawner.config.shapes import ShapeError, check_profile_shape
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.gpu.backends import BackendSettings, is_gpu_resource
from fracnb_spawner.gpu.plan import GPUConfigError, GPUDefaults, GPUSpec
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu
from fracnb_spawner.queue.kueue.model import KueueConfigError, check_backend

UNLISTED = "unlisted-choice"
UNLISTED_SUFFIX = "--unlisted-choice"
UNLISTED_LABEL = "Other..."  # KubeSpawner's default display_name_in_choices
CULL_KEYS = ("idle_timeout", "max_age", "idle_timeout_under_demand", "gpu_unused_timeout", "gpu_unused_busy_timeout")
NO_CULL_DEFAULTS = (CullPolicy(0, 0), CullPolicy(0, 0))
MAX_OPTION_LENGTH = 1024
_SAMPLE_TEXT = "sample"  # formats unlisted-choice templates at start, to find broken ones


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
    for index, profile in enumerate(raw):
        try:
            check_profile_shape(profile)
        except ShapeError as error:
            raise ProfileConfigError(f"{_raw_profile_name(profile, index)}: {error}") from None
    profiles = [_plain_copy(profile) for profile in raw]
    for profile in profiles:
        if "slug" not in profile:
            profile["slug"] = slugify(profile["display_name"])
        for option in (profile.get("profile_options") or {}).values():
            choices = option.get("choices") or {}
            if choices and not any(c.get("default") for c in choices.values()):
                next(iter(choices.values()))["default"] = True
            unlisted = option.get("unlisted_choice") or {}
            option["unlisted_choice"] = unlisted
            unlisted.setdefault("enabled", False)
            if unlisted["enabled"]:
                unlisted.setdefault("display_name_in_choices", UNLISTED_LABEL)
    if profiles and not any(p.get("default") for p in profiles):
        profiles[0]["default"] = True
    return profiles


def _plain_copy(value: Any) -> Any:
    """A deep copy in which every mapping is a dict (a traitlets Config or other Mapping included)."""
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    return copy.deepcopy(value)


def _raw_profile_name(profile: object, index: int) -> str:
    """Names a profile not yet initialized as ``profile_name`` does, or by its position."""
    if isinstance(profile, Mapping) and isinstance(profile.get("display_name"), str):
        slug = profile.get("slug")
        return profile_name({**profile, "slug": slug if isinstance(slug, str) else slugify(profile["display_name"])})
    return f"profile #{index + 1}"


def profile_name(profile: Mapping) -> str:
    return f"profile {profile.get('slug')!r} ({profile.get('display_name')!r})"


def iter_combinations(profile: Mapping) -> Iterator[tuple[tuple[tuple[str, str], ...], GPUSpec | None, dict]]:
    """Every listed combination of choices of a profile, with its merged gpu spec and cull policy."""
    combos: list[tuple[tuple[tuple[str, str], ...], GPUSpec | None, dict]] = [
        ((), _spec_of(profile), dict(profile.get("cull") or {}))
    ]
    for option_name, option in (profile.get("profile_options") or {}).items():
        extended = []
        for chosen, spec, cull in combos:
            for key, choice in (option.get("choices") or {}).items():
                try:
                    merged = _merge(spec, _spec_of(choice))
                except GPUConfigError as error:
                    raise GPUConfigError(f"choice {option_name}={key}: {error}") from None
                extended.append(((*chosen, (option_name, key)), merged, {**cull, **(choice.get("cull") or {})}))
            if option["unlisted_choice"].get("enabled"):
                extended.append(((*chosen, (option_name, UNLISTED)), spec, cull))
        combos = extended or combos
    return iter(combos)


def _spec_of(entry: Mapping) -> GPUSpec | None:
    return parse_gpu_spec(entry["gpu"]) if "gpu" in entry else None


def _merge(spec: GPUSpec | None, choice_spec: GPUSpec | None) -> GPUSpec | None:
    return spec.merged(choice_spec) if spec and choice_spec else (choice_spec or spec)


def checked_profile_list(value: Any, defaults: GPUDefaults, settings: BackendSettings) -> Any:
    """``FractionalSpawner.profile_list`` as configured, or a ``TraitError`` naming the profile that cannot
    work (a callable list is checked when it is called)."""
    if not callable(value):
        try:
            validate_profiles(initialize_profiles(value), defaults, settings)
        except ProfileConfigError as error:
            raise TraitError(f"FractionalSpawner.profile_list: {error}") from None
    return value


def validate_profiles(
    profiles: list[dict],
    defaults: GPUDefaults,
    settings: BackendSettings,
    cull_defaults: tuple[CullPolicy, CullPolicy] = NO_CULL_DEFAULTS,
) -> None:
    """Raise ``ProfileConfigError`` naming the first profile (and choice) that cannot work.

    ``settings`` names the cluster's GPU resources, which only ``gpu`` keys may ask for.
    ``cull_defaults`` are the (GPU, CPU-only) policies of servers whose profile sets none: a
    timeout under demand must be shorter than the idle timeout it shortens.
    """
    slugs = [p["slug"] for p in profiles]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise ProfileConfigError(f"profile slug(s) {duplicates} appear more than once; slugs must be unique")
    gpu_resource = partial(is_gpu_resource, settings=settings)
    for profile in profiles:
        try:
            _validate_profile(profile, defaults, gpu_resource, cull_defaults)
        except (GPUConfigError, QuantityError, ProfileConfigError, OverrideError) as error:
            raise ProfileConfigError(f"{profile_name(profile)}: {error}") from None


def _validate_profile(
    profile: Mapping, defaults: GPUDefaults, gpu_resource: Any, cull_defaults: tuple[CullPolicy, CullPolicy]
) -> None:
    check_override(profile.get("kubespawner_override") or {}, gpu_resource)
    try:
        queue_max_wait(profile.get("queue"))
    except QueueConfigError as error:
        raise ProfileConfigError(str(error)) from None
    for option_name, option in (profile.get("profile_options") or {}).items():
        if not option.get("choices") and not option["unlisted_choice"].get("enabled"):
            raise ProfileConfigError(f"option {option_name!r} has neither choices nor an unlisted choice")
        for key, choice in (option.get("choices") or {}).items():
            if "queue" in choice:
                raise ProfileConfigError(
                    f"choice {option_name}={key}: 'queue' belongs on the profile, not on a choice; move it up"
                )
            try:
                check_override(choice.get("kubespawner_override") or {}, gpu_resource)
                _spec_of(choice)
            except (OverrideError, GPUConfigError) as error:
                raise ProfileConfigError(f"choice {option_name}={key}: {error}") from None
        if option["unlisted_choice"].get("enabled"):
            try:
                _validate_unlisted(option["unlisted_choice"], gpu_resource)
            except (OverrideError, ProfileConfigError) as error:
                raise ProfileConfigError(f"option {option_name!r}, unlisted choice: {error}") from None
    for choices, spec, cull in iter_combinations(profile):
        try:
            plan_gpu(spec, defaults)
            cull_policy(spec, cull, *cull_defaults)
        except (GPUConfigError, QuantityError, ProfileConfigError) as error:
            where = ",".join(f"{o}={c}" for o, c in choices)
            raise ProfileConfigError(f"choice {where}: {error}" if where else str(error)) from None


def _validate_unlisted(unlisted: Mapping, gpu_resource: Any) -> None:
    if "gpu" in unlisted:
        raise ProfileConfigError("it cannot carry 'gpu' (free text cannot set an amount of GPU)")
    override = unlisted.get("kubespawner_override") or {}
    check_override(override, gpu_resource)
    try:
        fill_unlisted(override, _SAMPLE_TEXT)
    except (ValueError, LookupError, AttributeError, TypeError) as error:
        raise ProfileConfigError(
            f"its kubespawner_override cannot be formatted ({type(error).__name__}: {error}); it may use"
            " {value} for the user's text, KubeSpawner's fields such as {username}, and {{ }} for literal braces"
        ) from None
    try:
        re.compile(unlisted.get("validation_regex") or "")
    except re.error as error:
        raise ProfileConfigError(f"bad validation_regex: {error}") from None


def cull_policy(spec: GPUSpec | None, cull: Mapping, gpu_default: CullPolicy, cpu_default: CullPolicy) -> CullPolicy:
    unknown = sorted(str(k) for k in cull if k not in CULL_KEYS)
    if unknown:
        raise ProfileConfigError(f"unknown cull key(s) {unknown}; valid keys: {', '.join(CULL_KEYS)}")
    default = gpu_default if spec is not None and spec.requests_gpu else cpu_default
    policy = CullPolicy(
        idle_timeout=parse_duration(cull["idle_timeout"]) if "idle_timeout" in cull else default.idle_timeout,
        max_age=parse_duration(cull["max_age"]) if "max_age" in cull else default.max_age,
        idle_timeout_under_demand=_cull_seconds(cull, "idle_timeout_under_demand"),
        gpu_unused_timeout=_cull_seconds(cull, "gpu_unused_timeout"),
        gpu_unused_busy_timeout=_cull_seconds(cull, "gpu_unused_busy_timeout"),
    )
    idle_source = "cull.idle_timeout" if "idle_timeout" in cull else "the default idle timeout"
    problem = under_demand_problem(policy, idle_source) or gpu_unused_problem(
        policy, requests_gpu=spec is not None and spec.requests_gpu
    )
    if problem:
        raise ProfileConfigError(problem)
    return policy


def _cull_seconds(cull: Mapping, key: str) -> int:
    if key not in cull:
        return 0
    try:
        return parse_duration(cull[key])
    except QuantityError as error:
        raise ProfileConfigError(f"cull.{key}: {error}") from None


def under_demand_problem(policy: CullPolicy, idle_source: str) -> str | None:
    """Why ``idle_timeout_under_demand`` cannot shorten ``policy``'s idle timeout, or None.

    0 turns it off; with no idle timeout (0) any shorter timeout under demand shortens "never".
    """
    shorter, usual = policy.idle_timeout_under_demand, policy.idle_timeout
    if shorter > 0 and usual > 0 and shorter >= usual:
        return (
            f"cull.idle_timeout_under_demand ({shorter:g} s) must be less than the idle timeout it shortens"
            f" ({usual:g} s, {idle_source}); give a shorter one, or 0 for none"
        )
    return None


def gpu_unused_problem(policy: CullPolicy, *, requests_gpu: bool) -> str | None:
    """Why the GPU-unused timeouts cannot work as set, or None (0 turns either off)."""
    unused, busy = policy.gpu_unused_timeout, policy.gpu_unused_busy_timeout
    if (unused or busy) and not requests_gpu:
        key = "gpu_unused_timeout" if unused else "gpu_unused_busy_timeout"
        return f"cull.{key} applies only to GPU servers, and this choice asks for no GPU; remove it here"
    if busy and not unused:
        return (
            f"cull.gpu_unused_busy_timeout ({busy:g} s) needs cull.gpu_unused_timeout, which it extends for"
            " servers busy on the CPU; set that too (shorter), or remove gpu_unused_busy_timeout"
        )
    if busy and busy <= unused:
        return (
            f"cull.gpu_unused_busy_timeout ({busy:g} s) must be longer than cull.gpu_unused_timeout"
            f" ({unused:g} s): a server busy on the CPU is warned at gpu_unused_timeout and stopped only later"
        )
    return None


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
    profile_options = profile.get("profile_options") or {}
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
        spec = _merge(spec, _spec_of(choice))
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
        default = next((k for k, c in choices.items() if c.get("default")), None)
        if default is None:  # free text only, and none given
            hint = unlisted.get("display_name") or option.get("display_name") or option_name
            raise InvalidUserOptionsError(f"option {option_name!r} needs a value: enter one in the {hint!r} field")
        return default, None
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


def selection_overrides(selection: Selection, gpu_resource: Any) -> list[Mapping]:
    """The ``kubespawner_override`` entries to apply, in KubeSpawner's order: profile, then each option.

    An unlisted choice's override gets the user's text for ``{value}``, as text no later
    expansion touches. Raises ``InvalidUserOptionsError`` if that text would ask for GPU
    resources (through a templated resource name) or cannot be put in the template.
    """
    overrides = [selection.profile.get("kubespawner_override") or {}]
    options = selection.profile.get("profile_options") or {}
    for option_name, key in selection.choices:
        option = options[option_name]
        text = selection.user_options.get(option_name + UNLISTED_SUFFIX)
        if text is None:
            overrides.append(option["choices"][key].get("kubespawner_override") or {})
            continue
        try:
            filled = fill_unlisted(option["unlisted_choice"].get("kubespawner_override") or {}, text)
        except (ValueError, LookupError, AttributeError, TypeError):
            raise InvalidUserOptionsError(f"option {option_name!r}: {text[:64]!r} cannot be used here") from None
        requests = gpu_requests(filled, gpu_resource)
        if requests:
            raise InvalidUserOptionsError(
                f"option {option_name!r}: {text[:64]!r} would ask for GPUs in {requests[0]};"
                " GPUs come only from the profiles' listed GPU shares"
            )
        overrides.append(filled)
    return overrides


def check_kueue_backends(profiles: list[dict], defaults: GPUDefaults) -> None:
    """With ``c.FracnbQueue.engine = "kueue"``: refuse choices whose GPUs Kueue cannot count (DRA, KAI),
    naming the profile and choice (``ProfileConfigError``)."""
    for profile in profiles:
        for choices, spec, _cull in iter_combinations(profile):
            if spec is None or not spec.requests_gpu:
                continue
            where = ",".join(f"{o}={c}" for o, c in choices)
            name = f"FractionalSpawner.profile_list: {profile_name(profile)}" + (f", choice {where}" if where else "")
            try:
                check_backend(plan_gpu(spec, defaults).backend, name)
            except KueueConfigError as error:
                raise ProfileConfigError(str(error)) from None
