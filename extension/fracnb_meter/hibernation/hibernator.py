"""The server's one path for hibernation: the save (one at a time, within the byte limit, then the notice for
open pages and the pruning of old states) and the restore (which saved state, checked, then the call into the
kernel). ``FracnbMeter`` builds it from its traits; the endpoints (:mod:`.handlers`) and the save at a stop
(:mod:`.atstop`) call it, and nothing else reaches :mod:`.kernelcall` for hibernation.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import serverside
from .kernelcall import KernelCallError, call_in_kernel
from .notice import KUEUE_STOP, NOTICE_WAIT_S, LastHibernation, stop_follows
from .retention import prune


class RestoreRefusedError(Exception):
    """A restore that cannot be carried out: ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class HibernationLimits:
    """FracnbMeter's hibernation traits (their help says what each means)."""

    max_bytes: int
    keep_days: float
    restore_timeout: float


@dataclass(frozen=True)
class RestoreRequest:
    """A checked restore-request body."""

    kernel_id: str
    key: str
    saved_at: str | None = None
    force: bool = False
    on_conflict: str | None = None


class Hibernator:
    """Saves and restores this server's kernels.

    ``server`` gives what jupyter_server holds (``kernel_manager``, ``kernel_spec_manager``, ``root_dir``),
    ``kernels`` lists the kernels with their sessions, ``emit`` sends the hibernated event to open pages, and
    ``on_notice`` lets the meter drop a usage document cached before the notice.
    """

    def __init__(
        self,
        limits: HibernationLimits,
        *,
        server: Callable[[], Mapping[str, Any]],
        kernels: Callable[[], Awaitable[list[Any]]],
        emit: Callable[[dict[str, Any]], None],
        on_notice: Callable[[], None],
        log: logging.Logger | logging.LoggerAdapter[logging.Logger],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits, self._server, self._kernels = limits, server, kernels
        self._emit, self._on_notice, self.log, self.clock = emit, on_notice, log, clock
        self.notice = LastHibernation()
        self._saving: asyncio.Future[dict[str, Any]] | None = None  # the save under way

    async def save(
        self, timeout_s: float, max_bytes: int | None, *, at_stop: bool = False, stop: str | None = None
    ) -> dict[str, Any]:
        """Save every idle kernel's variables (hibernation-report.schema.json). A request while one is under way
        joins it and answers its report: two saves of one kernel at once would only queue behind each other in
        the kernel. ``at_stop``: the server is stopping (atstop.py); ``stop``: why the hub is about to stop it,
        for the open pages' notice."""
        if self._saving is None or self._saving.done():
            self._saving = asyncio.ensure_future(self._save(timeout_s, max_bytes, at_stop=at_stop, stop=stop))
        return await asyncio.shield(self._saving)

    async def _save(
        self, timeout_s: float, max_bytes: int | None, *, at_stop: bool, stop: str | None
    ) -> dict[str, Any]:
        server = self._server()
        manager = server["kernel_manager"]
        limit = self.limits.max_bytes if max_bytes is None else min(max_bytes, self.limits.max_bytes)

        async def call(kernel_id: str, function: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
            return await call_in_kernel(manager.get_kernel(kernel_id), function, arguments, timeout)

        started = self.clock()
        views = serverside.kernel_views(
            await self._kernels(), manager, server.get("kernel_spec_manager"), server["root_dir"]
        )
        report = await serverside.hibernate(views, call, limit_bytes=limit, timeout_s=timeout_s, if_changed=at_stop)
        if at_stop or not stop_follows(report, stop):
            return report  # no page can read it (the server stopped answering requests), or no stop follows
        self.prune()
        # The stop follows the answer: a page that polls the usage document reads the outcome first.
        self.notice.keep(report, stop)
        self._on_notice()
        self._emit({"report": report, "stop": stop})
        await self.notice.wait_for_page(min(NOTICE_WAIT_S, timeout_s - (self.clock() - started)))
        return report

    def tell_stop(self, report: dict[str, Any], notice: str) -> None:
        """The fracnb service's notice of a stop Kueue made, with the save at it (atstop.py), for the open pages:
        their event socket, open before, carries it while the server stops answering new requests."""
        self.notice.keep(report, KUEUE_STOP, notice)
        self._on_notice()
        self._emit({"report": report, "stop": KUEUE_STOP, "notice": notice})

    def prune(self) -> None:
        """Remove saved states older than the days kept (retention.py)."""
        for entry in prune(os.environ, self.limits.keep_days, time.time()):
            self.log.info("fracnb: removed the saved state %s (older than %g days)", entry, self.limits.keep_days)

    def saved_state(self, request: RestoreRequest) -> dict[str, Any]:
        """The state a restore request names, as the states listing gives it; refused when it is missing,
        damaged (its problem is the reason) or saved again since the offer the request answers."""
        states = {state["key"]: state for state in serverside.list_states(os.environ)["states"]}
        state = states.get(request.key)
        if state is None:
            raise RestoreRefusedError(404, f"there is no saved state {request.key}")
        if state["problem"]:
            raise RestoreRefusedError(409, state["problem"])
        if request.saved_at not in (None, state["saved_at"]):
            newer = f"{state['path']} was saved again since this offer: its newer state is offered"
            raise RestoreRefusedError(409, newer)
        return state

    async def restore(self, request: RestoreRequest) -> dict[str, Any]:
        """Restore a saved state into one of this server's kernels (restore-report.schema.json); the restore
        runs in that kernel."""
        manager = self._server()["kernel_manager"]
        if request.kernel_id not in manager:
            raise RestoreRefusedError(404, f"there is no kernel {request.kernel_id} on this server")
        state = self.saved_state(request)
        arguments = {"notebook_file": state["notebook_file"], "force": request.force}
        arguments["on_conflict"] = request.on_conflict
        try:
            kernel = manager.get_kernel(request.kernel_id)
            report = await call_in_kernel(kernel, "restore_json", arguments, self.limits.restore_timeout)
        except KernelCallError as error:
            raise RestoreRefusedError(502, f"the kernel did not restore: {error}") from None
        if report.get("status") == "refused":
            raise RestoreRefusedError(409, str(report.get("reason")))
        return report
