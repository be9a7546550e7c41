"""The fracnb service's hibernation before it stops a culled GPU server.

The service, not FractionalSpawner's stop, asks here: it knows why the server is stopped (only
idle servers hibernate, and max-age ones where the admin says so), it keeps the outcome with its
cull record for the user's pages and its metrics, and the hub's stop request stays short. It calls
the server directly at its pod's address, as the hub does, with its own token (``access:servers``,
which setup(c) gives the service's role).
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

from tornado.httpclient import AsyncHTTPClient

from fracnb_spawner.common.logsafe import server_shown
from fracnb_spawner.hibernation.client import Hibernation, ask_to_hibernate
from fracnb_spawner.hibernation.settings import HibernationSettings
from fracnb_spawner.hibernation.words import outcome

log = logging.getLogger("fracnb.service")


def metric_outcome(hibernation: Hibernation) -> str | None:
    """What ``fracnb_hibernations_total`` counts: the report's outcome, "failed" when no report came
    (no answer, an error), nothing when hibernation is off on that server or there was nothing to save."""
    if hibernation.report is not None:
        return outcome(hibernation.kernels)
    return None if hibernation.turned_off else "failed"


def hibernation_json(hibernation: Hibernation) -> dict[str, Any]:
    """What a hibernation came to, as a stop's record keeps it (service-me.schema.json's ``hibernation``
    without its ``summary``): the service's culls and the hub's stops on request alike."""
    return {
        "outcome": metric_outcome(hibernation),
        "problem": hibernation.problem,
        "saved_bytes": hibernation.report["saved_bytes"] if hibernation.report else 0,
        "kernels": [dict(kernel) for kernel in hibernation.kernels],
    }


def outcome_text(hibernation: Hibernation) -> str:
    """What a hibernation came to, for a log line: "saved", "failed: the server gave no answer within 135 s"."""
    outcome = metric_outcome(hibernation)
    if hibernation.problem:
        return f"{outcome}: {hibernation.problem}" if outcome else hibernation.problem
    return outcome or "nothing to save"


def spares_server(reason: str, hibernation: Hibernation | None) -> bool:
    """A server stopped because its GPU was unused while its kernels were idle, whose hibernation found a
    kernel busy: the kernel started a cell since the last report. It is not stopped (its next report says
    busy, and it is only warned); a busy kernel is never interrupted."""
    return reason == "gpu-unused" and hibernation is not None and hibernation.any_busy()


class Hibernator:
    """Asks servers to hibernate with the service's token, as ``settings`` say."""

    def __init__(self, settings: HibernationSettings, token: str, *, http: AsyncHTTPClient | None = None) -> None:
        self.settings, self.token = settings, token
        self.http = http or AsyncHTTPClient(force_instance=True, max_clients=64)

    def close(self) -> None:
        self.http.close()

    async def before_stop(
        self, *, user: str, server: str, reason: str, fraction: Fraction, url: str | None
    ) -> Hibernation | None:
        """The hibernation of a GPU server about to be stopped for ``reason``; None when none is asked."""
        if fraction <= 0 or not self.settings.applies(reason):
            return None
        if url is None:
            return Hibernation(None, "the service could not find the server's address", 0.0)
        hibernation = await ask_to_hibernate(url, self.token, self.settings, stop=reason, http=self.http)
        log.log(
            logging.WARNING if metric_outcome(hibernation) == "failed" else logging.INFO,
            "Hibernation of %s before its stop (%s): %s in %.1fs",
            server_shown(user, server),
            reason,
            outcome_text(hibernation),
            hibernation.seconds,
        )
        return hibernation
