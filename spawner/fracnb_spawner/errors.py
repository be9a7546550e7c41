"""HTTP errors for refused spawns, counted by JupyterHub as rejections rather than hub errors."""

from __future__ import annotations

from tornado import web

try:  # JupyterHub >= 6: a SpawnException is a "failure", not an "error", for the failure limit
    from jupyterhub.spawner import SpawnException as _SpawnException
except ImportError:  # JupyterHub 5.x
    _SpawnException = None


def rejection(status: int, message: str, *, reason: str) -> web.HTTPError:
    """An HTTP 4xx error whose message is shown to the user as is.

    ``reason`` is a short label for JupyterHub's spawn metrics (``invalid-options``,
    ``quota``). JupyterHub 5.x counts every failed spawn toward
    ``consecutive_failure_limit``; form submissions are validated before a spawn
    starts, so only REST requests are affected there (see docs/spawner.md).
    """
    if _SpawnException is not None:
        return _SpawnException(message, reason=reason, status_code=status)
    error = web.HTTPError(status, message)
    error.message = message
    error.jupyterhub_message = message
    return error
