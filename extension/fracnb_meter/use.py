"""When this server was last *used*, for the hub's idle timeouts: ``POST {FRACNB_SERVICE_URL}api/activity``.

JupyterHub counts as activity every request to the server, through its proxy and the server's own
reports: an untouched JupyterLab tab polls the server every few seconds, so an idle server with an
open tab never looked idle. The fracnb service counts use instead, as the meter reports it here:

- a cell run, or any kernel message a user's action causes (jupyter_server's kernel activity, which
  leaves out kernel_info and comm_info), and a kernel computing (the meter's busy-kernel activity);
- typing, in any page of the server (the front end's ``POST fracnb/api/use``, at most every 10 s);
- a request that changes something (any method but GET, HEAD and OPTIONS): a save, a new file, a
  kernel started or restarted; but not JupyterLab saving its own layout (the workspace), which an
  open page does every few seconds;
- a terminal's input and output.

A page polling (a GET), and the hub's fracnb service asking for a hibernation, are not use; nor
are the requests pages make on a kernel's control channel (:data:`CONTROL_REQUESTS`), which also
would make a kernel in a long cell look idle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .activity import isoformat
from .hubcalls import JsonPoster, service_endpoint

READING_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Changes a page makes on its own: JupyterLab saves its layout (the workspace) every few seconds.
AUTOMATIC_PATHS = ("/lab/api/workspaces",)
KEEPALIVE_SECONDS = 240.0  # posted at least this often, so a restarted service learns it again soon
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def _aware(moment: datetime | None) -> datetime:
    if moment is None:
        return _EPOCH
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def is_use(handler: Any) -> bool:
    """Whether a finished request was someone using the server: an authenticated, successful change."""
    if handler.request.method in READING_METHODS or handler.get_status() >= 400:
        return False
    if any(path in handler.request.path for path in AUTOMATIC_PATHS):
        return False
    if getattr(handler, "_track_activity", True) is False:
        return False  # e.g. the hub's service asking for a hibernation
    return getattr(handler, "_jupyter_current_user", None) is not None


class UseClock:
    """The newest use this server has seen, from its own settings and what it noted."""

    def __init__(self, started: datetime, now: Callable[[], datetime]) -> None:
        self._noted = _aware(started)
        self._now = now

    def note(self) -> None:
        self._noted = max(self._noted, self._now())

    def note_request(self, handler: Any) -> None:
        if is_use(handler):
            self.note()

    def last_use(self, settings: Mapping[str, Any]) -> datetime:
        kernels = settings["kernel_manager"]
        return max(
            self._noted,
            _aware(getattr(kernels, "last_kernel_activity", None)),
            _aware(settings.get("terminal_last_activity")),
            _aware(settings.get("fracnb_last_activity")),
        )


# Requests on a kernel's control channel that pages send on their own: the GPU and memory panels'
# usage polls (jupyter-resource-usage), the debugger's state on connect, kernel subshells. The kernel
# answers them at once, even while a cell runs, and publishes "busy" then "idle" for each: counted,
# these would make a kernel in a long cell look idle (and its server stoppable) and a polled one active.
CONTROL_REQUESTS = (
    "usage_request", "usage_reply", "debug_request", "debug_reply",
    "create_subshell_request", "create_subshell_reply", "list_subshell_request", "list_subshell_reply",
    "delete_subshell_request", "delete_subshell_reply",
)  # fmt: skip


def ignore_control_requests(kernel_manager: Any) -> None:
    """Have jupyter_server neither count these requests as kernel activity nor take a kernel's
    execution state from their replies (its ``untracked_message_types``, extended)."""
    untracked = list(kernel_manager.untracked_message_types)
    kernel_manager.untracked_message_types = untracked + [t for t in CONTROL_REQUESTS if t not in untracked]


def hook_requests(settings: dict[str, Any], clock: UseClock) -> None:
    """Note every finished request in ``clock`` (through the server's log function, which sees them all)."""
    original = settings.get("log_function")

    def log_function(handler: Any) -> None:
        clock.note_request(handler)
        if original is not None:
            original(handler)

    settings["log_function"] = log_function


class ServiceUse:
    """Posts the last use to the hub's fracnb service: when it is newer, and at least every KEEPALIVE_SECONDS."""

    def __init__(self, service_url: str, token: str, server_name: str, monotonic: Callable[[], float]) -> None:
        url = service_endpoint(service_url, "api/activity") if token else ""
        self._poster = JsonPoster(url, token, what="report use to the fracnb service")
        self._server_name = server_name
        self._monotonic = monotonic
        self._sent: tuple[datetime, float] | None = None

    @property
    def enabled(self) -> bool:
        return self._poster.enabled

    async def report(self, last_use: datetime) -> bool:
        if not self.enabled:
            return False
        if self._sent is not None:
            sent_use, sent_at = self._sent
            if last_use <= sent_use and self._monotonic() - sent_at < KEEPALIVE_SECONDS:
                return False
        if not await self._poster.post({"server_name": self._server_name, "last_use": isoformat(last_use)}):
            return False
        self._sent = (last_use, self._monotonic())
        return True


class UseHandler(APIHandler):
    """``POST fracnb/api/use``: the front end saw the user type (a 204; the request itself is the note)."""

    auth_resource = "kernels"

    @web.authenticated
    @authorized(action="read")
    async def post(self) -> None:
        self.settings["fracnb_meter"].use.note()
        self.set_status(204)
        self.finish()
