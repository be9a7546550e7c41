"""The widget's restore offer: "Restore variables from 14:05 EST (3.2 GiB)" as a button, in the kernel.

A click restores in this very kernel (kernelside.restore); a state saved with other versions
asks for a second click first, and so do names the kernel already holds ("Keep mine" or "Take the
saved"). "Discard" deletes the saved state only after a second, explicit "Delete them" (saved work
cannot come back). Nothing shows while this notebook has no saved state, or once it was restored or
discarded. Times are in the user's zone (fracnb_meter.displayzone).
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import ipywidgets as widgets

from ..displayzone import display_zone
from ..wording import restore_offer, restore_summary, saved_variables
from . import kernelside
from .namespace import as_shown, made_by_user

Offer = Callable[[], dict[str, Any] | None]
Restore = Callable[[bool, str | None], dict[str, Any]]
Discard = Callable[[], bool]


def _default_restore(force: bool, on_conflict: str | None) -> dict[str, Any]:
    return kernelside.restore(force=force, on_conflict=on_conflict)


def _default_discard() -> bool:
    return kernelside.discard()


def discard_question(manifest: dict[str, Any], now: datetime, zone: Any = None) -> str:
    """'Delete the 4 variables saved at 19:37 EST (7.6 MiB)? They cannot be restored afterwards.'"""
    return f"Delete {saved_variables(as_shown(manifest), now, zone)}? They cannot be restored afterwards."


class RestoreOffer:
    """A button and a line of text; ``widget`` is hidden while there is nothing to offer."""

    def __init__(
        self,
        offer: Offer = kernelside.unrestored_state,
        restore: Restore = _default_restore,
        discard: Discard = _default_discard,
    ) -> None:
        self._offer, self._restore, self._discard = offer, restore, discard
        self._force = False
        self._on_conflict: str | None = None
        self._manifest: dict[str, Any] | None = None
        self.button = widgets.Button(icon="history", layout=widgets.Layout(width="auto"))
        self.take = widgets.Button(description="Take the saved", layout=widgets.Layout(width="auto", display="none"))
        self.discard_button = widgets.Button(description="Discard", icon="trash", layout=widgets.Layout(width="auto"))
        self.confirm_button = widgets.Button(description="Delete them", button_style="danger")
        self.keep_button = widgets.Button(description="Keep them")
        self.question = widgets.HTML()
        self.confirmation = widgets.HBox([self.question, self.confirm_button, self.keep_button])
        self.result = widgets.HTML()
        self.widget = widgets.VBox(
            [widgets.HBox([self.button, self.take, self.discard_button, self.result]), self.confirmation]
        )
        self.button.on_click(lambda _button: self.click())
        self.take.on_click(lambda _button: self.click("take"))
        self.discard_button.on_click(lambda _button: self.ask_discard())
        self.confirm_button.on_click(lambda _button: self.confirm_discard())
        self.keep_button.on_click(lambda _button: self.keep())
        self.confirmation.layout.display = "none"
        self.refresh()

    def refresh(self) -> None:
        manifest = self._manifest = self._offer()
        if manifest is None:
            self.widget.layout.display = "none"
            return
        saved_at = datetime.fromisoformat(manifest["saved_at"])
        zone = display_zone(os.environ)
        self.button.description = restore_offer(saved_at, manifest["bytes"]["total"], datetime.now(timezone.utc), zone)
        self.button.tooltip = ", ".join(variable["name"] for variable in made_by_user(manifest["variables"]))
        self.widget.layout.display = ""

    def click(self, on_conflict: str | None = None) -> dict[str, Any]:
        self.keep()
        report = self._restore(self._force, on_conflict or self._on_conflict)
        self.result.value = "<br>".join(html.escape(line) for line in restore_summary(report))
        if report["status"] == "confirm":
            self._force = True
            self.button.description = "Restore anyway"
        elif report["status"] == "conflict":
            self._on_conflict = "keep"
            self.button.description = "Keep mine"
            self.take.layout.display = ""
        elif report["restored"] or report["status"] == "restored":
            self.button.layout.display = "none"
            self.take.layout.display = "none"
            self.discard_button.layout.display = "none"
        return report

    def ask_discard(self) -> None:
        """The first click on Discard only asks: what would be deleted, with Delete them / Keep them."""
        if self._manifest is None:
            return
        now = datetime.now(timezone.utc)
        self.question.value = html.escape(discard_question(self._manifest, now, display_zone(os.environ)))
        self.confirmation.layout.display = ""

    def confirm_discard(self) -> bool:
        removed = self._discard()
        self.confirmation.layout.display = "none"
        self.button.layout.display = "none"
        self.take.layout.display = "none"
        self.discard_button.layout.display = "none"
        self.result.value = html.escape(
            "The saved variables were discarded." if removed else "There was no saved state any more."
        )
        return removed

    def keep(self) -> None:
        self.confirmation.layout.display = "none"
