"""``kubespawner_override`` entries: what they may not set, and free text put into them literally.

KubeSpawner formats an unlisted choice's override with the user's text as ``{value}`` and later
expands traits such as ``environment``, ``volumes`` and ``extra_labels`` as templates again
(``{username}``, ...), the user's text included. :func:`fill_unlisted` returns
:class:`FilledText` strings that carry both forms, so the second expansion sees the user's part
escaped and the pod gets it literally.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from string import Formatter
from typing import Any

from fracnb_spawner.common.labels import key_problem, label_problem
from fracnb_spawner.gpu.backends import GPU_REQUEST_ANNOTATIONS, GPU_VISIBILITY_VARIABLES, RESERVED_ENV_PREFIX

# Keys of a profile or choice that KubeSpawner would take for traits if put in the override.
FRACNB_KEYS = ("gpu", "cull", "queue")
RESOURCE_TRAITS = ("extra_resource_limits", "extra_resource_guarantees")
# Traits holding container or pod specs, where "resources" may ask for extended resources.
SPEC_TRAITS = ("extra_container_config", "extra_containers", "init_containers", "extra_pod_config")
LABEL_TRAITS = ("extra_labels", "node_selector")
ANNOTATION_TRAITS = ("extra_annotations",)
GPU_CARRYING_TRAITS = (*RESOURCE_TRAITS, *SPEC_TRAITS, *ANNOTATION_TRAITS)
GPU_KEY_FIX = "GPUs are given only by the 'gpu' key of a profile or choice, which quotas count: move it there"


class OverrideError(ValueError):
    """An override that cannot be allowed; the message names the trait and the fix."""


class FilledText(str):
    """An override string holding a user's text: itself as KubeSpawner's first formatting gives it.

    ``template`` is the same text with the user's part escaped, for KubeSpawner's second
    expansion of traits it treats as templates; the spawner expands that instead.
    """

    template: str

    def __new__(cls, text: str, template: str) -> FilledText:
        filled = super().__new__(cls, text)
        filled.template = template
        return filled

    def __reduce__(self) -> tuple:  # copies keep the template (overrides are deep-copied)
        return (FilledText, (str(self), self.template))


class _IgnoreMissing(dict):
    """KubeSpawner's first pass leaves fields other than ``{value}`` as they are."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill_unlisted(override: object, text: str) -> Any:
    """``override`` with ``{value}`` replaced by ``text``, which no later expansion will touch.

    Raises ``ValueError`` (or ``LookupError``, ``AttributeError``) when the admin's template
    cannot be formatted with this text.
    """
    if isinstance(override, str):
        if "{" not in override and "}" not in override:
            return override
        return FilledText(override.format_map(_IgnoreMissing(value=text)), _escaped_template(override, text))
    if isinstance(override, list):
        return [fill_unlisted(item, text) for item in override]
    if isinstance(override, Mapping):
        # Keys are formatted too (as KubeSpawner does) but never expanded again: plain strings.
        return {_plain(fill_unlisted(key, text)): fill_unlisted(item, text) for key, item in override.items()}
    return override


def _plain(value: object) -> object:
    return str(value) if isinstance(value, FilledText) else value


def _escaped_template(template: str, text: str) -> str:
    """``template`` with ``{value}`` fields filled and escaped, every other field kept for expansion."""
    parts = []
    for literal, field, spec, conversion in Formatter().parse(template):
        parts.append(_escape(literal))
        if field is None:
            continue
        source = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if field.split(".", 1)[0].split("[", 1)[0] == "value":
            parts.append(_escape(source.format_map(_IgnoreMissing(value=text))))
        else:
            parts.append(source)
    return "".join(parts)


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def check_override(override: Mapping, is_gpu_resource: Callable[[str], bool]) -> None:
    """Raise ``OverrideError`` if an override (or a spawner's configuration) sets what fracnb controls.

    That is: the ``gpu``/``cull`` keys (they belong next to ``kubespawner_override``), GPU
    visibility and ``FRACNB_*`` variables, GPU resources or KAI's GPU annotations, and labels
    or node-selector entries the apiserver would refuse. Templated strings (with ``{``) are
    checked once expanded, at spawn.
    """
    misplaced = [key for key in FRACNB_KEYS if key in override]
    if misplaced:
        raise OverrideError(
            f"kubespawner_override sets {misplaced[0]!r}, which is not a KubeSpawner trait;"
            f" put {misplaced[0]!r} next to kubespawner_override, in the profile or choice itself"
        )
    for name in _env_names(override.get("environment")):
        if name in GPU_VISIBILITY_VARIABLES or name.startswith(RESERVED_ENV_PREFIX):
            raise OverrideError(
                f"kubespawner_override sets {name}, which fracnb controls from the 'gpu' key; remove it"
            )
    for where in gpu_requests(override, is_gpu_resource):
        raise OverrideError(f"kubespawner_override asks for GPUs in {where}; {GPU_KEY_FIX}")
    for problem in label_problems(override):
        raise OverrideError(f"kubespawner_override {problem}")


def check_spawner_traits(values: Mapping, is_gpu_resource: Callable[[str], bool]) -> None:
    """Raise ``OverrideError`` if the spawner's own configuration asks for GPUs for every server."""
    misplaced = gpu_requests({name: values[name] for name in GPU_CARRYING_TRAITS if name in values}, is_gpu_resource)
    if misplaced:
        raise OverrideError(f"FractionalSpawner.{misplaced[0]} asks for GPUs for every server; {GPU_KEY_FIX}")


def _env_names(environment: object) -> Iterator[str]:
    if isinstance(environment, Mapping):
        yield from (str(name) for name in environment)
    elif isinstance(environment, list):  # a list of V1EnvVar-like mappings
        yield from (str(item.get("name")) for item in environment if isinstance(item, Mapping))


def gpu_requests(override: Mapping, is_gpu_resource: Callable[[str], bool]) -> list[str]:
    """Where ``override`` asks for GPU resources or GPU-share annotations, e.g. "extra_resource_limits".

    Resources may sit in the extra-resource traits or in any ``limits``/``requests`` mapping
    inside container or pod specs (``extra_container_config``, ``extra_containers``, ...).
    """
    found = []
    for trait in RESOURCE_TRAITS:
        found += [f"{trait} ({name})" for name in _keys(override.get(trait)) if is_gpu_resource(name)]
    for trait in SPEC_TRAITS:
        found += [f"{trait} ({name})" for name in _requested(override.get(trait)) if is_gpu_resource(name)]
    for trait in ANNOTATION_TRAITS:
        found += [f"{trait} ({name})" for name in _keys(override.get(trait)) if name in GPU_REQUEST_ANNOTATIONS]
    return found


def _keys(value: object) -> list[str]:
    """Keys set by a mapping trait value; a None value removes the key (KubeSpawner's merge), asking for nothing."""
    return [str(key) for key, item in value.items() if item is not None] if isinstance(value, Mapping) else []


def _requested(spec: object) -> Iterator[str]:
    """Resource names under every ``limits`` or ``requests`` mapping nested in ``spec``."""
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            if key in ("limits", "requests") and isinstance(value, Mapping):
                yield from (str(name) for name in value)
            else:
                yield from _requested(value)
    elif isinstance(spec, list):
        for item in spec:
            yield from _requested(item)


def label_problems(override: Mapping, *, expanded: bool = False) -> Iterator[str]:
    """Labels, node-selector entries and annotations the apiserver would refuse.

    Templated entries (with ``{``) are skipped unless ``expanded`` says the values are final.
    """
    for trait in (*LABEL_TRAITS, *ANNOTATION_TRAITS):
        check = label_problem if trait in LABEL_TRAITS else annotation_problem
        for key, value in _items(override.get(trait), expanded):
            problem = check(key, value)
            if problem:
                yield f"sets {trait}[{str(key)[:80]!r}]: {problem}"


def annotation_problem(key: object, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{value!r} is not a string; annotation values must be strings"
    return key_problem(key)


def _items(value: object, expanded: bool) -> Iterator[tuple[object, object]]:
    """Entries to check: not None (KubeSpawner's "remove"), and not templated unless ``expanded``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if item is not None and (expanded or not (_templated(key) or _templated(item))):
                yield key, item


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{" in value
