"""The shape of a profile list: mappings where mappings belong, strings where strings belong.

Checked before anything reads the list, so a list in place of a mapping is refused with a
message naming the profile and key rather than failing later with an ``AttributeError``.
"""

from __future__ import annotations

from collections.abc import Mapping

_EXAMPLES = {
    "kubespawner_override": "{'image': 'example/image:1'}",
    "profile_options": "{'size': {'display_name': 'Size', 'choices': {...}}}",
    "choices": "{'small': {'display_name': 'Small', 'gpu': {'fraction': 0.25}}}",
    "unlisted_choice": "{'enabled': True, 'display_name': 'Image', 'kubespawner_override': {'image': '{value}'}}",
    "cull": "{'idle_timeout': '1h'}",
    "queue": "{'max_wait': '1h'}",
}
_TEXT_KEYS = ("display_name", "description", "display_name_in_choices", "validation_regex", "validation_message")


class ShapeError(ValueError):
    """A profile-list entry of the wrong type; the message names the key and shows the right shape."""


def check_profile_shape(profile: object) -> None:
    """Raise ``ShapeError`` if a profile, its options, choices or overrides have the wrong types."""
    if not isinstance(profile, Mapping):
        raise ShapeError(f"must be a mapping such as {{'display_name': 'CPU', 'slug': 'cpu'}}, not {_kind(profile)}")
    if "display_name" not in profile:
        raise ShapeError("has no display_name; every profile needs one")
    _check_entry(profile, "")
    if "slug" in profile and (not isinstance(profile["slug"], str) or not profile["slug"]):
        raise ShapeError(f"slug must be a non-empty string, not {profile['slug']!r}")
    options = profile.get("profile_options")
    if options is None:
        return
    _need_mapping(options, "profile_options")
    for name, option in options.items():
        where = f"profile_options[{name!r}]"
        if not isinstance(name, str):
            raise ShapeError(f"{where}: option names must be strings")
        _need_mapping(option, where, "{'display_name': 'Size', 'choices': {...}}")
        _check_entry(option, where + ".")
        choices = option.get("choices")
        if choices is not None:
            _need_mapping(choices, where + ".choices", _EXAMPLES["choices"])
            for key, choice in choices.items():
                choice_where = f"{where}.choices[{key!r}]"
                if not isinstance(key, str):
                    raise ShapeError(f"{choice_where}: choice keys must be strings")
                _need_mapping(choice, choice_where, "{'display_name': 'Small', 'gpu': {'fraction': 0.25}}")
                _check_entry(choice, choice_where + ".")
        unlisted = option.get("unlisted_choice")
        if unlisted is not None:
            _need_mapping(unlisted, where + ".unlisted_choice", _EXAMPLES["unlisted_choice"])
            _check_entry(unlisted, where + ".unlisted_choice.")


def _check_entry(entry: Mapping, prefix: str) -> None:
    for key in _TEXT_KEYS:
        if key in entry and entry[key] is not None and not isinstance(entry[key], str):
            raise ShapeError(f"{prefix}{key} must be a string, not {_kind(entry[key])}")
    for key in ("kubespawner_override", "cull", "queue"):
        if entry.get(key) is not None:
            _need_mapping(entry[key], prefix + key, _EXAMPLES[key])


def _need_mapping(value: object, where: str, example: str | None = None) -> None:
    if not isinstance(value, Mapping):
        shape = example or _EXAMPLES.get(where.rsplit(".", 1)[-1], "{...}")
        raise ShapeError(f"{where} must be a mapping such as {shape}, not {_kind(value)}")


def _kind(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
