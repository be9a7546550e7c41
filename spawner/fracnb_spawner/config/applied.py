"""A choice's ``kubespawner_override`` applied to the spawner, and undone before the next spawn.

KubeSpawner applies a profile's overrides by setting its traits (merging dicts); it never undoes
them, so a second spawn of the same server would start from the first one's values. fracnb keeps
KubeSpawner's semantics for each spawn and remembers the configured value of every trait an
override touched, to put it back before the next one. The same holds for ``start_timeout``, which
a queued spawn extends by its wait in the queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tornado import web
from traitlets import TraitError

from fracnb_spawner.common.errors import InvalidRequestError
from fracnb_spawner.config.overrides import label_problems
from fracnb_spawner.config.profiles import UNLISTED_SUFFIX, Selection


class SpawnValues:
    """The configured values of the traits this spawn changed."""

    def __init__(self) -> None:
        self._configured: dict[str, Any] = {}
        self._start_timeout: float | None = None

    def remember(self, spawner: Any, names: Iterable[str]) -> None:
        """Keep the configured value of traits about to be overridden."""
        for name in names:
            if name not in self._configured:
                self._configured[name] = copy_plain(getattr(spawner, name))

    def overridden(self) -> bool:
        """Whether an override of this spawn changed a trait (until the next restore)."""
        return bool(self._configured)

    def configured(self, spawner: Any, name: str) -> Any:
        """A trait's value before this spawn's overrides."""
        return self._configured[name] if name in self._configured else getattr(spawner, name)

    def restore(self, spawner: Any) -> None:
        """Undo the overrides of an earlier spawn before applying a new choice."""
        for name, value in self._configured.items():
            setattr(spawner, name, copy_plain(value))
        self._configured = {}

    def extend_start_timeout(self, spawner: Any, seconds: float) -> None:
        if seconds and self._start_timeout is None:
            self._start_timeout = spawner.start_timeout
            spawner.start_timeout = spawner.start_timeout + seconds

    def restore_start_timeout(self, spawner: Any) -> None:
        if self._start_timeout is not None:
            spawner.start_timeout, self._start_timeout = self._start_timeout, None


def apply_choice(
    spawner: Any, overrides: Iterable[Mapping[str, Any]], selection: Selection | None, profile: str
) -> None:
    """:func:`apply_overrides`, any failure a refusal: applying overrides may expand the user's free text,
    so a failure is a 400 (that input cannot count toward the hub's consecutive failure limit), and its
    traceback goes to the hub log."""
    try:
        apply_overrides(spawner, overrides, selection)
    except web.HTTPError:
        raise
    except Exception as error:
        spawner.log.exception("fracnb: could not apply profile %r for %s", profile, spawner._log_name)
        raise InvalidRequestError(
            400, f"Invalid server options: the hub could not apply them to profile {profile!r}; see the hub log",
            reason="invalid-options",
        ) from error  # fmt: skip


def apply_overrides(spawner: Any, overrides: Iterable[Mapping[str, Any]], selection: Selection | None) -> None:
    """KubeSpawner's profile loading (its ``_apply_overrides``, in its order), with the user's free text put
    in literally and checked: what the apiserver would refuse is a 400 naming the option, and is undone."""
    free_text = [] if selection is None else _free_text_options(selection)
    try:
        for override in overrides:
            # A copy: KubeSpawner puts lists and values of an override into the traits as they are, and a
            # plan (with its overrides) serves every spawn of its choice.
            spawner._apply_overrides(copy_plain(override))
        problems = _label_problems(spawner) if free_text else []
    except (TraitError, ValueError, TypeError) as error:
        if not free_text:
            raise
        spawner.values.restore(spawner)
        message = f"option {free_text[0]!r}: the value cannot be used here ({error})"[:300]
        raise InvalidRequestError(400, f"Invalid server options: {message}", reason="invalid-options") from None
    if problems:
        spawner.values.restore(spawner)
        raise InvalidRequestError(
            400, f"Invalid server options: option {free_text[0]!r}: {problems[0]}", reason="invalid-options"
        )


def _free_text_options(selection: Selection) -> list[str]:
    return [name for name, _key in selection.choices if name + UNLISTED_SUFFIX in selection.user_options]


def _label_problems(spawner: Any) -> list[str]:
    """Labels, node-selector entries and annotation keys of the pod that the apiserver would refuse."""
    expanded = {
        "extra_labels": spawner._expand_all(spawner.extra_labels),
        "node_selector": spawner.node_selector,
        "extra_annotations": spawner._expand_all(spawner.extra_annotations),
    }
    return list(label_problems(expanded, expanded=True))


def copy_plain(value: Any) -> Any:
    """Copy nested dicts and lists (what overrides mutate in place); share everything else."""
    if isinstance(value, dict):
        return {key: copy_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_plain(item) for item in value]
    return value
