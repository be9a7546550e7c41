"""The widget's restore offer: "Restore variables from 14:05 (3.2 GiB)" as a button, in the kernel.

A click restores in this very kernel (kernelside.restore); a state saved with other versions
asks for a second click first. Nothing shows while this notebook has no saved state, or once it
was restored.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import ipywidgets as widgets

from ..wording import restore_offer, restore_summary
from . import kernelside

Offer = Callable[[], dict[str, Any] | None]
Restore = Callable[[bool], dict[str, Any]]


def _default_restore(force: bool) -> dict[str, Any]:
    return kernelside.restore(force=force)


class RestoreOffer:
    """A button and a line of text; ``widget`` is hidden while there is nothing to offer."""

    def __init__(self, offer: Offer = kernelside.unrestored_state, restore: Restore = _default_restore) -> None:
        self._offer, self._restore = offer, restore
        self._force = False
        self.button = widgets.Button(icon="history", layout=widgets.Layout(width="auto"))
        self.result = widgets.HTML()
        self.widget = widgets.HBox([self.button, self.result])
        self.button.on_click(lambda _button: self.click())
        self.refresh()

    def refresh(self) -> None:
        manifest = self._offer()
        if manifest is None:
            self.widget.layout.display = "none"
            return
        saved_at = datetime.fromisoformat(manifest["saved_at"])
        self.button.description = restore_offer(saved_at, manifest["bytes"]["total"], datetime.now(timezone.utc))
        self.button.tooltip = ", ".join(variable["name"] for variable in manifest["variables"])
        self.widget.layout.display = ""

    def click(self) -> dict[str, Any]:
        report = self._restore(self._force)
        self.result.value = "<br>".join(html.escape(line) for line in restore_summary(report))
        if report["status"] == "confirm":
            self._force = True
            self.button.description = "Restore anyway"
        elif report["restored"]:
            self.button.layout.display = "none"
        return report
