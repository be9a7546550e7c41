"""The Jupyter server extension: ``GET {base_url}fracnb/api/usage`` and ``.../session``
(fracnb_meter.routes), busy-kernel activity reported to the hub (fracnb_meter.activity), GPU-unused
time per kernel (fracnb_meter.gpuunused), and hibernation (fracnb_meter.hibernation).

Configuration (``jupyter_server_config.py``): ``c.FracnbMeter.<trait> = ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Float, Int, TraitError, validate

from .activity import HubActivity, isoformat
from .contract import Budget, ContractError, gpu_withheld, read_budget
from .gpuunused import MAX_READING_GAP_SECONDS, WINDOW_SECONDS, GpuUnused, sharing_blocks, work_of
from .hibernation import handlers as hibernation_handlers
from .hibernation.atstop import SaveAtStop
from .hibernation.hibernator import HibernationLimits, Hibernator
from .hibernation.notice import HIBERNATED_EVENT, HIBERNATED_SCHEMA, STOPPING_EVENT, STOPPING_SCHEMA
from .hubservice import ServiceReports
from .kernelwatch import SYNC_SECONDS, KernelWatch
from .memoryhistory import MemoryHistory, record_usage
from .nextadvice import ServiceAdvice, advice_request
from .nvml import GpuReading, unavailable
from .processes import looks_like_container, parents_for_one_reading
from .routes import ROUTES
from .sampler import Sampler
from .sessionreport import SessionIdentity, SessionReporter, report_document
from .sessionstats import SessionStats, reading_from_usage
from .usage import KernelInfo, build_usage
from .use import ServiceUse, UseClock, UseHandler, hook_requests, ignore_control_requests


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def reading_interval(
    history_interval: float, session_sample_interval: float, record_sessions: bool, gpu_unused_interval: float = 0.0
) -> float:
    """Seconds between the timer's GPU readings: the shortest of what the charts' history, the session's
    statistics and GPU-unused time ask for (a reading serves all); 0 when none asks for one."""
    wanted = [history_interval, session_sample_interval if record_sessions else 0.0, gpu_unused_interval]
    return min((seconds for seconds in wanted if seconds > 0), default=0.0)


class FracnbMeter(ExtensionApp):
    """GPU memory meter for the kernels of this Jupyter server."""

    name = "fracnb_meter"
    load_other_extensions = True

    sample_interval_floor = Float(
        1.0,
        help="""Shortest time between two NVML readings, in seconds (default 1.0).
        Requests arriving faster get the previous reading, so many clients polling the
        usage endpoint cannot load the GPU driver. Example:
        c.FracnbMeter.sample_interval_floor = 2.0""",
    ).tag(config=True)

    activity_interval = Float(
        30.0,
        help="""How often, in seconds, busy kernels are counted as server activity and
        any activity newer than the last report is posted to the hub (default 30), and the
        server's last use (a cell run, typing, a save, a kernel computing; not a page
        polling) to the hub's fracnb service, which times idle servers by it. A notebook
        computing for hours without output thus counts as active, and the hub hears of it
        (and of a user resuming work) within about this interval plus a request, rather
        than after JupyterHub's own 300 s report. The fracnb service assumes at most
        FracnbService.activity_report_lag (45 s) for this path: raise that when raising
        this. 0 turns all of it off. Example: c.FracnbMeter.activity_interval = 15""",
    ).tag(config=True)

    in_container = Bool(
        None,
        allow_none=True,
        help="""Whether this server runs in a container (default None: detect it from
        KUBERNETES_SERVICE_HOST, /.dockerenv and /run/.containerenv). In a container,
        NVIDIA drivers before 565 give no per-process GPU memory, so per-kernel figures
        are reported as unknown. Example: c.FracnbMeter.in_container = True""",
    ).tag(config=True)

    service_interval = Float(
        15.0,
        help="""Shortest time between two questions to the hub's fracnb service (quota and
        idle-culling status; the advice for next time), in seconds (default 15). Example:
        c.FracnbMeter.service_interval = 30""",
    ).tag(config=True)

    history_interval = Float(
        10.0,
        help="""How often, in seconds, the meter reads GPU memory for the panel's charts when no
        page polls the usage endpoint (default 10), so the charts cover the whole session. Polls
        count as readings too. One timer serves the charts and the session's statistics, at the
        shorter of this and session_sample_interval. 0 records only what polls read (and what
        session_sample_interval asks for). Example: c.FracnbMeter.history_interval = 30""",
    ).tag(config=True)

    record_sessions = Bool(
        True,
        help="""Keep this session's GPU statistics (peaks, time near the budget, out-of-memory
        events, busy share) and report them to the hub's fracnb service (default True). The
        out-of-memory events include GPU out-of-memory errors in the kernels' output, which the
        meter reads from each kernel's IOPub. False turns off all of it. Example:
        c.FracnbMeter.record_sessions = False""",
    ).tag(config=True)

    session_sample_interval = Float(
        5.0,
        help="""How often, in seconds, the meter reads GPU memory for this session's statistics
        (peaks, time near the budget, out-of-memory events) when no client polls the usage
        endpoint (default 5). Client polls count as readings too. One timer serves the
        statistics and the charts, at the shorter of this and history_interval. 0 records only
        what polls read (and what history_interval asks for). Example:
        c.FracnbMeter.session_sample_interval = 10""",
    ).tag(config=True)

    session_report_interval = Float(
        60.0,
        help="""How often, in seconds, this session's statistics are posted to the hub's fracnb
        service (default 60); they are posted once more when the server stops. A failed post is
        retried at the next interval. 0 posts only at the stop. Example:
        c.FracnbMeter.session_report_interval = 300""",
    ).tag(config=True)

    hibernation_enabled = Bool(
        True,
        help="""Whether this server saves its idle kernels' variables when asked before a stop
        (POST fracnb/api/hibernate, docs/hibernation.md) and offers to restore them (default True).
        Turn it off where home folders are shared or group-writable: a saved state is loaded only
        from the user's own files. Example: c.FracnbMeter.hibernation_enabled = False""",
    ).tag(config=True)

    hibernation_max_bytes = Int(
        4 << 30,
        help="""The most one hibernation may write, all kernels of this server together, in bytes
        (default 4 GiB, well below Zero-to-JupyterHub's 10 GiB home). A request may ask for less.
        The kernels are saved the most recently used first; one that would not fit is skipped and
        keeps its previous saved state. Example: c.FracnbMeter.hibernation_max_bytes = 8 << 30""",
    ).tag(config=True)

    hibernation_keep_days = Float(
        30.0,
        help="""How long a saved state is kept, in days after its save (default 30; 0 keeps states
        until they are restored and discarded, or replaced). Each notebook has at most one saved
        state: the newest save replaces the last. Older states are removed, in every server folder
        of the user's home (~/.local/state/fracnb/hibernation/<server>/), when the server starts and
        after each hibernation. Example: c.FracnbMeter.hibernation_keep_days = 7""",
    ).tag(config=True)

    restore_timeout = Float(
        600.0,
        help="""The most a restore requested from the notebook's front end may take, in seconds
        (default 600): reading the saved state back from the home volume. Example:
        c.FracnbMeter.restore_timeout = 1200""",
    ).tag(config=True)

    gpu_unused_interval = Float(
        5.0,
        help="""How often, in seconds, the meter reads NVML's per-process utilisation samples to count
        how long each kernel has done no GPU work (default 5; at most 8, since the driver keeps only
        about 10 s of samples). The panel shows it per kernel; the session's reports to the hub's
        fracnb service carry the server's. Client polls count as readings too. 0 turns it off.
        Example: c.FracnbMeter.gpu_unused_interval = 2""",
    ).tag(config=True)

    gpu_unused_window = Int(
        WINDOW_SECONDS,
        help="""Length, in whole seconds, of the windows GPU-unused time is counted in (default 30, as
        Run:ai counts its GPU idle time): a window with any GPU work resets the count, a window
        without it and with data for all of it adds its length. Shorter windows are for tests and
        demos. Example: c.FracnbMeter.gpu_unused_window = 60""",
    ).tag(config=True)

    @validate("hibernation_keep_days")
    def _check_keep_days(self, proposal: Any) -> float:
        if proposal["value"] < 0:
            raise TraitError(f"FracnbMeter.hibernation_keep_days = {proposal['value']} must be 0 (keep) or more days")
        return float(proposal["value"])

    @validate("gpu_unused_window")
    def _check_gpu_unused_window(self, proposal: Any) -> int:
        if proposal["value"] < 1:
            raise TraitError(f"FracnbMeter.gpu_unused_window = {proposal['value']} must be at least 1 second")
        return int(proposal["value"])

    @validate("gpu_unused_interval")
    def _check_gpu_unused_interval(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not 0 <= value <= MAX_READING_GAP_SECONDS:
            raise TraitError(
                f"FracnbMeter.gpu_unused_interval = {value:g} is not between 0 (off) and "
                f"{MAX_READING_GAP_SECONDS:g} seconds: NVIDIA's driver keeps only about 10 s of utilisation samples"
            )
        return value

    def initialize_settings(self) -> None:
        counting = self.gpu_unused_interval > 0
        self.sampler = Sampler(self.sample_interval_floor, utilization=self.record_sessions or counting)
        self.clock: Callable[[], float] = time.monotonic
        self.wall_clock: Callable[[], datetime] = utcnow
        self.budget, self.budget_error = self._read_budget()
        self.no_gpu_reason = gpu_withheld(self.budget, os.environ)
        self.gpu_unused = GpuUnused(self.gpu_unused_window) if counting and self.no_gpu_reason is None else None
        self.gpu_sharing_blocks = sharing_blocks(self.budget.backend, self.budget.isolation, os.environ)
        self._cached: tuple[float, str, bool] | None = None  # when, the document, whether it has the hibernation
        self.serverapp.event_logger.register_event_schema(HIBERNATED_SCHEMA)
        self.serverapp.event_logger.register_event_schema(STOPPING_SCHEMA)
        self.hibernation = Hibernator(
            HibernationLimits(self.hibernation_max_bytes, self.hibernation_keep_days, self.restore_timeout),
            server=lambda: {**self._web_settings, "root_dir": self.serverapp.root_dir},
            kernels=self._kernels,
            emit=lambda data: self.serverapp.event_logger.emit(schema_id=HIBERNATED_EVENT, data=data),
            on_notice=self._forget_cached_document,
            log=self.log,
        )
        self._sampling = asyncio.Lock()
        self._activity: PeriodicCallback | None = None
        self.memory_history, self._history_origin = MemoryHistory(self.wall_clock()), self.clock()
        self._reading_timer: PeriodicCallback | None = None
        self.hub_activity = HubActivity.from_environment(os.environ)
        self.use = UseClock(self.wall_clock(), self.wall_clock)
        self.service_use = ServiceUse(
            os.environ.get("FRACNB_SERVICE_URL", ""),
            os.environ.get("JUPYTERHUB_API_TOKEN", ""),
            os.environ.get("JUPYTERHUB_SERVER_NAME", ""),
            time.monotonic,
        )
        self.service = ServiceReports(
            os.environ.get("FRACNB_SERVICE_URL", ""),
            os.environ.get("JUPYTERHUB_API_TOKEN", ""),
            os.environ.get("JUPYTERHUB_SERVER_NAME", ""),
            self.service_interval,
        )
        self.session = SessionIdentity.for_server(os.environ, self.budget, self.wall_clock())
        self.session_stats = SessionStats(self.budget.memory_bytes)
        recorded = self.record_sessions and self.no_gpu_reason is None
        reporter_url = os.environ.get("FRACNB_SERVICE_URL", "") if recorded else ""
        self.session_reporter = SessionReporter(reporter_url, os.environ.get("JUPYTERHUB_API_TOKEN", ""))
        advice = advice_request(reporter_url, os.environ.get("JUPYTERHUB_API_TOKEN", ""), self.session.profile,
                                self.session.choice)  # fmt: skip
        self.advice = ServiceAdvice(advice, self.service_interval)
        self._session_timers: list[PeriodicCallback] = []
        self.kernel_watch: KernelWatch | None = None
        self.save_at_stop = SaveAtStop.from_environment(os.environ)

    def initialize_handlers(self) -> None:
        self.handlers.extend(ROUTES)
        self.handlers.extend(hibernation_handlers.handlers())
        self.handlers.append((r"/fracnb/api/use", UseHandler))

    def _read_budget(self) -> tuple[Budget, str | None]:
        try:
            return read_budget(os.environ), None
        except ContractError as error:
            self.log.error("fracnb_meter: %s; the budget is reported as unknown", error)
            return Budget(), str(error)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        if self.hibernation_enabled:
            self.hibernation.prune()
        self._enable_kernel_culling(serverapp.kernel_manager)
        hook_requests(serverapp.web_app.settings, self.use)
        ignore_control_requests(serverapp.kernel_manager)
        if self.activity_interval > 0:
            self._activity = PeriodicCallback(self.report_activity, self.activity_interval * 1000, jitter=0.1)
            self._activity.start()
        counting = self.gpu_unused_interval if self.gpu_unused is not None else 0.0
        interval = reading_interval(self.history_interval, self.session_sample_interval, self.record_sessions, counting)
        if interval > 0 and self.no_gpu_reason is None:
            # A reading, not a poll: the timer asks the hub's service nothing.
            self._reading_timer = PeriodicCallback(self.record_reading, interval * 1000, jitter=0.1)
            self._reading_timer.start()
        if self.record_sessions and self.no_gpu_reason is None:
            self._start_session_timers()
            self._watch_kernel_output(serverapp)

    def _watch_kernel_output(self, serverapp: Any) -> None:
        """Count GPU out-of-memory errors in the kernels' output (fracnb_meter.kernelwatch)."""
        self.kernel_watch = KernelWatch(serverapp.kernel_manager, self.session_stats.record_oom_error)
        self.kernel_watch.sync()
        self._session_timers.append(PeriodicCallback(self.kernel_watch.sync, SYNC_SECONDS * 1000))
        self._session_timers[-1].start()

    def _start_session_timers(self) -> None:
        interval = self.session_report_interval
        if self.session_reporter.enabled and interval > 0:
            self._session_timers.append(PeriodicCallback(self.report_session, interval * 1000, jitter=0.1))
            self._session_timers[-1].start()

    def session_report(self, *, ended: bool = False) -> dict[str, Any]:
        """This session's report so far (schemas/session-report.schema.json)."""
        now = self.wall_clock()
        gpu_unused = None if self.gpu_unused is None else self.gpu_unused.report()
        return report_document(
            self.session, self.session_stats, reported_at=now, ended_at=now if ended else None, gpu_unused=gpu_unused
        )

    def session_json(self) -> str:
        watched: list[str] = []
        if self.kernel_watch is not None:
            self.kernel_watch.sync()  # a kernel started since the last periodic check is read from now on
            watched = self.kernel_watch.watched
        document = {"report": self.session_report(), "kernels": self.session_stats.kernels()}
        return json.dumps({**document, "output_watched": watched})

    async def report_session(self, *, ended: bool = False) -> bool:
        """Post the session's report to the hub's fracnb service; never raises."""
        if not self.session_reporter.enabled:
            return False
        try:
            if ended:
                await self.record_reading()  # the last reading, so a peak just before the stop counts
            return await self.session_reporter.send(self.session_report(ended=ended))
        except Exception:
            self.log.exception("fracnb_meter: could not report this session")
            return False

    def _enable_kernel_culling(self, manager: Any) -> None:
        """Cull idle kernels after FRACNB_KERNEL_CULL_IDLE_TIMEOUT seconds, unless configured already."""
        raw = os.environ.get("FRACNB_KERNEL_CULL_IDLE_TIMEOUT", "")
        if not raw.isdigit() or int(raw) == 0 or manager.cull_idle_timeout:
            return
        timeout = int(raw)
        manager.cull_idle_timeout = timeout
        manager.cull_interval = max(10, min(300, timeout // 4))
        manager.cull_busy = False  # a busy kernel is computing, not idle
        manager.initialize_culler()
        self.log.info("fracnb_meter: idle kernels are shut down after %d s", timeout)

    async def stop_extension(self) -> None:
        if self._activity is not None:
            self._activity.stop()
        if self._reading_timer is not None:
            self._reading_timer.stop()
        for timer in self._session_timers:
            timer.stop()
        if self.kernel_watch is not None:
            self.kernel_watch.stop()
        if self.hibernation_enabled:  # jupyter_server stops its extensions before its kernels: they answer here
            if self.save_at_stop.timeout > 0:
                stopping = {"saving_seconds": self.save_at_stop.timeout}
                self.serverapp.event_logger.emit(schema_id=STOPPING_EVENT, data=stopping)
            await self.save_at_stop.run(
                lambda timeout: self.hibernation.save(timeout, None, at_stop=True), self.hibernation.tell_stop, self.log
            )
        await self.report_session(ended=True)
        self.sampler.close()

    @property
    def _web_settings(self) -> dict[str, Any]:
        return self.serverapp.web_app.settings

    def busy_kernel_ids(self) -> list[str]:
        manager = self._web_settings["kernel_manager"]
        return [
            kernel_id
            for kernel_id in manager.list_kernel_ids()
            if getattr(manager.get_kernel(kernel_id), "execution_state", None) == "busy"
        ]

    def mark_busy_activity(self) -> None:
        """Report activity while any kernel is busy (jupyter_server sums *_last_activity)."""
        if self.busy_kernel_ids():
            self._web_settings["fracnb_last_activity"] = self.wall_clock()

    async def report_activity(self) -> None:
        """Count busy kernels as activity, then tell the hub if anything happened since the last report, and
        the fracnb service when the server was last used (fracnb_meter.use)."""
        self.mark_busy_activity()
        await self.hub_activity.report(self.serverapp.web_app.last_activity())
        await self.service_use.report(self.use.last_use(self._web_settings))

    def current_activity(self) -> list[str] | None:
        return self.busy_kernel_ids() or None

    async def usage_json(self, *, page: bool = True) -> str:
        """The usage document, re-sampled at most once per sample_interval_floor (``page``: read by a page, whose
        reading of a kept hibernation a hibernation's answer waits for)."""
        async with self._sampling:
            now = self.clock()
            if not (self._cached and now - self._cached[0] < self.sample_interval_floor):
                document = await self.sample()
                self._cached = (now, json.dumps(document), document["hibernation"] is not None)
            if page:
                self.hibernation.notice.served(with_report=self._cached[2])
            return self._cached[1]

    async def record_reading(self) -> None:
        """Read GPU memory for the charts' history and the session's statistics (a timer: asks the hub nothing)."""
        async with self._sampling:
            await self.measure()

    async def sample(self) -> dict[str, Any]:
        document = await self.measure()
        (document["quota"], document["cull"]), document["advice"] = await asyncio.gather(
            self.service.latest(), self.advice.latest()
        )
        document["hibernation"] = self.hibernation.notice.report
        document["hibernation_stop"] = self.hibernation.notice.stop
        document["stop_notice"] = self.hibernation.notice.stop_notice
        return document

    async def measure(self) -> dict[str, Any]:
        """The usage document without quota and cull status, taken in by the charts and the session's statistics."""
        kernels = await self._kernels()
        if any(k.execution_state == "busy" for k in kernels):
            self._web_settings["fracnb_last_activity"] = self.wall_clock()
        in_container = self.in_container
        if in_container is None:
            in_container = looks_like_container(os.environ, os.path.exists)
        reading, sampled_at, parent_of = self.read_gpus(), self.wall_clock(), parents_for_one_reading()
        work = work_of(reading, {k.id: k.pid for k in kernels}, os.getpid(), parent_of,
                       in_container=in_container, blocked=self.gpu_sharing_blocks)  # fmt: skip
        counted = self.gpu_unused is not None and self.gpu_unused.observe(self.sampler.reads, self.clock(), work)
        document = build_usage(
            reading=reading,
            kernels=kernels,
            server_pid=os.getpid(),
            parent_of=parent_of,
            budget=self.budget,
            budget_error=self.budget_error,
            in_container=in_container,
            sampled_at=sampled_at,
            gpu_unused=self.gpu_unused,
        )
        if counted and self.gpu_unused is not None:
            busy = sum(k.execution_state == "busy" for k in kernels)
            held = document["server"]["gpu_memory_bytes"]
            self.gpu_unused.note(measured_at=isoformat(sampled_at), gpu_memory_bytes=held, busy_kernels=busy)
        document["history"] = record_usage(self.memory_history, document, self.clock() - self._history_origin)
        if self.record_sessions:
            self.session_stats.observe(reading_from_usage(document, self.clock(), work.server.worked))
        return document

    def read_gpus(self) -> GpuReading:
        """NVML's reading, except on a server without a GPU, which never opens NVML."""
        if self.no_gpu_reason is not None:
            return unavailable(self.no_gpu_reason)
        return self.sampler.read()

    def _forget_cached_document(self) -> None:
        """A hibernation's notice is news: the next usage request reads a fresh document with it."""
        self._cached = None

    async def _kernels(self) -> list[KernelInfo]:
        manager = self._web_settings["kernel_manager"]
        sessions: dict[str, dict[str, Any]] = {}
        session_manager = self._web_settings.get("session_manager")
        if session_manager is not None:
            for session in await session_manager.list_sessions():
                kernel = session.get("kernel") or {}
                sessions[kernel.get("id", "")] = session
        kernels = []
        for kernel_id in manager.list_kernel_ids():
            kernel = manager.get_kernel(kernel_id)
            session = sessions.get(kernel_id, {})
            kernels.append(
                KernelInfo(
                    id=kernel_id,
                    name=kernel.kernel_name,
                    session_name=session.get("name") or None,
                    path=session.get("path") or None,
                    execution_state=getattr(kernel, "execution_state", None),
                    pid=getattr(getattr(kernel, "provisioner", None), "pid", None),
                )
            )
        return kernels
