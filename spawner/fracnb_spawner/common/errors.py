"""HTTP errors for refused spawns: the message is shown to the user as is.

Every refusal is a ``tornado.web.HTTPError``, so JupyterHub answers with its status and
message rather than a traceback. Refusals of a request (``InvalidRequestError``) and of the
hub's own configuration (``HubConfigError``) are also ``ValueError``s: KubeSpawner raises
``ValueError`` from ``load_user_options`` for the requests it refuses, so code written for
KubeSpawner that catches ``ValueError`` catches ours too.
"""

from __future__ import annotations

from tornado import web

try:  # JupyterHub >= 6: a SpawnException is a "failure", not an "error", for the failure limit
    from jupyterhub.spawner import SpawnException as _SpawnException
except ImportError:  # JupyterHub 5.x
    _SpawnException = None

_RefusalBase: type[web.HTTPError] = _SpawnException or web.HTTPError


class RefusedSpawnError(_RefusalBase):  # type: ignore[misc, valid-type]
    """A spawn refused with an HTTP status (4xx, or 503) and a message shown to the user as is.

    ``reason`` is a short label for JupyterHub's spawn metrics (``invalid-options``,
    ``quota``, ``unschedulable``). JupyterHub 6 does not count these refusals toward
    ``consecutive_failure_limit``; JupyterHub 5.x counts every failed spawn (form
    submissions are checked before a spawn starts; see docs/spawner.md).
    """

    def __init__(self, status: int, message: str, *, reason: str) -> None:
        if _SpawnException is not None:
            super().__init__(message, reason=reason, status_code=status)
        else:
            web.HTTPError.__init__(self, status, message)
            self.message = message
        # What JupyterHub shows on the form, the error page and the spawn progress (both versions).
        self.jupyterhub_message = message
        self.fracnb_reason = reason  # JupyterHub 5's HTTPError keeps no reason of its own


class InvalidRequestError(RefusedSpawnError, ValueError):
    """A spawn request fracnb refuses (bad options, over quota): a 4xx, and a ``ValueError``."""


class HubConfigError(web.HTTPError, ValueError):
    """The hub's profile configuration cannot serve this spawn: HTTP 500, counted as a hub error."""

    def __init__(self, message: str) -> None:
        super().__init__(500, message)
        self.message = message
        self.jupyterhub_message = message
