"""``FracnbService``: the traitlets shell that binds configuration into the plain core."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlparse
from zoneinfo import ZoneInfo

from jupyterhub.services.auth import HubAuth, HubOAuth
from traitlets import Bool, Float, Integer, Unicode, default
from traitlets.config import Application, Config

from fracnb_spawner.cluster.kube import DEFAULT_COMPONENT, singleuser_selector
from fracnb_spawner.common.logsafe import EscapeControlCharacters
from fracnb_spawner.config.traits import configured_traits
from fracnb_spawner.culling import CullPolicy, CullTiming, CullTimingError, check_timing
from fracnb_spawner.gpu.backends import is_gpu_resource
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import Hibernator
from fracnb_spawner.hibernation.settings import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    HibernationSettings,
    timeout_problem,
)
from fracnb_spawner.history.db import HistoryDatabaseError, default_db_url, open_database
from fracnb_spawner.history.metrics import HistoryMetrics
from fracnb_spawner.history.stops import StopNotice, latest_stops, purge_stops, record_stop
from fracnb_spawner.history.store import purge
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service import core
from fracnb_spawner.service.choices import HubChoices, hub_choices
from fracnb_spawner.service.gpuunits import gpu_kinds
from fracnb_spawner.service.handlers import make_app
from fracnb_spawner.service.hub import HubAPI
from fracnb_spawner.service.meterfacts import MeterFacts
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.nextadvice import Menu, menu_from_config
from fracnb_spawner.service.pending import PendingReports
from fracnb_spawner.service.pods import KubernetesPods, PodSource
from fracnb_spawner.service.resume import ResumeReport, resume_pass
from fracnb_spawner.service.sessions import load_checker, store_and_count
from fracnb_spawner.service.stops import hibernation_json, stopped_servers
from fracnb_spawner.service.web import PageSources, recent_culls

log = logging.getLogger("fracnb.service")

KEPT_REPORTS_RETRY_SECONDS = 5.0  # how often reports kept while the session database was away are stored


def bind_address(host: str | None) -> str:
    """Listen where the service URL points if that is this machine, else on all interfaces.

    On z2jh the URL names the hub's Kubernetes Service (``http://hub:10101``), an address
    the process cannot bind; the pod's own interfaces are where that traffic arrives.
    """
    if not host or host == "localhost":
        return "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return ""
    return host


def spawner_setting(config: Config, name: str, *, default: Any) -> Any:
    """A spawner trait as the hub's config sets it (FractionalSpawner's section wins over KubeSpawner's)."""
    for section in ("FractionalSpawner", "KubeSpawner"):
        if section in config and name in config[section]:
            return config[section][name]
    return default


class ServiceState:
    """What the handlers and the culling loop share."""

    def __init__(
        self,
        *,
        hub: HubAPI,
        pods: PodSource,
        quotas: FracnbQuotas,
        settings: core.CullSettings,
        hub_auth: HubAuth,
        clock: core.Clock = core.utcnow,
        hibernator: Hibernator | None = None,
        report_interval: float = 60.0,
    ) -> None:
        self.hub, self.pods, self.settings, self.hub_auth = hub, pods, settings, hub_auth
        self.hibernator = hibernator  # None: culled servers are stopped without a hibernation
        self.quota_policy = quotas.policy()
        self.metrics = CullMetrics()
        self.facts = MeterFacts(report_interval, self.metrics)  # what the notebooks report: use, GPU-unused time
        self.metrics.observe_quotas(self.quota_policy)
        # Which extended resources are GPUs (the backends' settings), for the GPU unit gauges; None: not measured.
        self.is_gpu: Callable[[str], bool] | None = None
        self._capacity_refused = False
        self.clock = clock
        self.recent_culls = recent_culls()  # the stops since the service started, for the admin page
        self._stopping: dict[tuple[str, str], StopNotice] = {}  # recorded, until the pass says it stopped
        self.history: Any = None  # the session history's session factory, once opened
        self.history_metrics = HistoryMetrics(self.metrics.registry)
        self.advice_menu: Menu | None = None  # the hub's profile menu, for the users' advice (api/advice)
        self.named_servers = False  # the hub's JupyterHub.allow_named_servers (its default: one server a user)
        self.pending_reports = PendingReports()  # session reports kept while the database is away
        self.choices = HubChoices()  # the hub's profile list: display names and slot kinds
        self.zone: ZoneInfo | None = None  # of the times the page shows: the hub's FracnbQueue.display_timezone

    async def user_report(self, name: str) -> dict[str, Any]:
        report = await core.user_report(
            self.hub, self.pods, self.quota_policy, self.settings, name, clock=self.clock, facts=self.facts
        )
        stopped = stopped_servers(await self.latest_stops(name), running=report["culling"])
        if stopped:  # only while there is one: a meter of an older version refuses fields it does not know
            report["stopped"] = stopped
        return report

    async def resume_pass(self) -> ResumeReport:
        report = await resume_pass(self.hub, await self.pods.list_pods(), self.clock())
        self.metrics.resumed.inc(len(report.resumed))
        return report

    async def cull_pass(self) -> core.PassReport:
        report = await core.cull_pass(
            self.hub, self.pods, self.settings, self.metrics, clock=self.clock, hibernator=self.hibernator,
            facts=self.facts, before_stop=self.record_stop,
        )  # fmt: skip
        for user, server, reason in report.culled:
            recorded = self._stopping.get((user, server))
            self.recent_culls.append(recorded or StopNotice(user, server, self.clock(), reason))
        self._stopping.clear()
        await self.observe_gpu_kinds()
        return report

    async def observe_gpu_kinds(self) -> None:
        """The GPU unit gauges, from one LIST of nodes and of live pods cluster-wide (as the admin
        page reads them). Without the RBAC for that the gauges stay empty, said once in the log."""
        if self.is_gpu is None:
            return
        try:
            nodes, pods = await self.pods.gpu_capacity()
        except Exception as error:
            if not self._capacity_refused:
                log.warning(
                    "No GPU unit metrics: cannot list nodes and pods cluster-wide (see helm-values/rbac.yaml): %s",
                    error,
                )
            self._capacity_refused = True
            return
        self._capacity_refused = False
        self.metrics.observe_gpu_kinds(gpu_kinds(nodes, pods, self.is_gpu))

    async def record_stop(self, verdict: core.ServerVerdict, reason: str, hibernation: Hibernation | None) -> None:
        """Keep why a server is stopped and what its hibernation saved, for its user's next page
        (history/stops.py), before the hub stops it."""
        details = {"hibernation": hibernation_json(hibernation)} if hibernation is not None else {}
        notice = StopNotice(verdict.user, verdict.server, self.clock(), reason, verdict.limit_seconds, details)
        self._stopping[(verdict.user, verdict.server)] = notice
        if self.history is not None:
            await asyncio.to_thread(record_stop, self.history, notice)

    async def latest_stops(self, user: str) -> list[StopNotice]:
        """The last stop of each of the user's servers, newest first; [] without a history or when it
        cannot be read."""
        if self.history is None:
            return []
        try:
            return await asyncio.to_thread(latest_stops, self.history, user, now=self.clock())
        except Exception as error:
            log.warning("Could not read the stops of %r: %s", user, error)
            return []


class FracnbService(Application):
    """Culls idle GPU servers (with a warning first) and reports quotas to notebooks."""

    name = "fracnb-service"
    description = __doc__
    classes = [FracnbQuotas]  # noqa: RUF012 -- traitlets reads this class attribute
    aliases = {  # noqa: RUF012
        "config": "FracnbService.config_file",
        "cull-every": "FracnbService.cull_every",
        "namespace": "FracnbService.namespace",
        "kubeconfig": "FracnbService.kubeconfig",
        "log-level": "Application.log_level",
    }

    api_page_size = Integer(
        200,
        help="""
        Users per page when listing the hub's users (the hub caps it at
        JupyterHub.api_page_max_limit, 200 by default). Default: 200.

        Example: c.FracnbService.api_page_size = 200
        """,
    ).tag(config=True)

    concurrency = Integer(
        10,
        help="""
        How many stop requests the culler sends to the hub at once. Default: 10.

        Example: c.FracnbService.concurrency = 10
        """,
    ).tag(config=True)

    config_file = Unicode(
        "",
        help="""
        A config file to load, usually the hub's own jupyterhub_config.py, so that
        c.FracnbQuotas and c.FracnbService are set in one place. It must only set c.*
        values the service can import. Default: "" (none).

        Example: python -m fracnb_spawner.service --config /etc/jupyterhub/jupyterhub_config.py
        """,
    ).tag(config=True)

    cull_every = Float(
        60,
        help="""
        Seconds between culling passes. A server is stopped at the first pass after its
        deadline, so this is the most it can outlive it. Default: 60.

        Example: c.FracnbService.cull_every = 60
        """,
    ).tag(config=True)

    resume_every = Float(
        10,
        help="""
        Seconds between looks for queued spawns that a restarted hub forgot (their pods wait
        in the GPU queue, the hub lists no server for them); the service asks the hub to start
        each again with its stored options, and the new spawn takes over the pod's place
        (docs/queue.md). The first look is right after the service starts. Each look is one
        LIST of the singleuser pods. 0 turns this off: users then start the same choice again
        to rejoin. Default: 10.

        Example: c.FracnbService.resume_every = 10
        """,
    ).tag(config=True)

    default_idle_timeout = Float(
        3600,
        help="""
        Idle timeout in seconds for servers whose pod has no fracnb.io/idle-timeout
        annotation (CPU-only or non-fracnb servers); 0 never culls them for idleness.
        It must be more than warning_lead plus activity_report_lag (the service refuses to
        start otherwise), and for servers without the fracnb meter more than JupyterHub's
        300 s activity reports. Default: 3600.

        Example: c.FracnbService.default_idle_timeout = 3600
        """,
    ).tag(config=True)

    activity_report_lag = Float(
        45,
        help="""
        The longest time, in seconds, from a server's activity (a request, a kernel message,
        a busy kernel) to the hub recording it as the server's last activity. The fracnb
        meter in the notebook posts activity every FracnbMeter.activity_interval (30 s) plus
        a request; servers without it are heard only through JupyterHub's own reports
        (JUPYTERHUB_ACTIVITY_INTERVAL, 300 s): set about 330 for such images. Idle timeouts
        must be more than warning_lead plus this, and warning_lead more than this: the hub
        and the service refuse to start otherwise. Default: 45.

        Example: c.FracnbService.activity_report_lag = 45
        """,
    ).tag(config=True)

    default_max_age = Float(
        0,
        help="""
        Maximum age in seconds for servers whose pod has no fracnb.io/max-age annotation;
        0 means no limit. Default: 0.

        Example: c.FracnbService.default_max_age = 86400
        """,
    ).tag(config=True)

    ip = Unicode(
        "",
        help="""
        Address the HTTP API listens on. Empty: the host of $JUPYTERHUB_SERVICE_URL when it
        is an IP address or localhost, else all interfaces (as on z2jh, where the URL names
        the hub's Kubernetes Service). Default: "".

        Example: c.FracnbService.ip = "0.0.0.0"
        """,
    ).tag(config=True)

    kubeconfig = Unicode(
        "",
        help="""
        Kubeconfig file for reading pods. Empty: the in-cluster service account, else the
        default kubeconfig ($KUBECONFIG or ~/.kube/config). Default: "".

        Example: c.FracnbService.kubeconfig = "/etc/jupyterhub/kubeconfig"
        """,
    ).tag(config=True)

    namespace = Unicode(
        help="""
        Namespace of the singleuser pods (the service only lists pods there, unless
        `all_namespaces` is on). Default: $POD_NAMESPACE, else "default".

        Example: c.FracnbService.namespace = "jhub"
        """,
    ).tag(config=True)

    all_namespaces = Bool(
        help="""
        List singleuser pods in every namespace (selected by their component label) rather
        than in `namespace` only: for hubs whose spawner puts each user's pods in a namespace
        of their own (KubeSpawner.enable_user_namespaces), or whose profiles move pods to
        other namespaces (a `namespace` in kubespawner_override). Needs list on pods
        cluster-wide (helm-values/rbac.yaml). Default: the hub's enable_user_namespaces, read
        from the config file given with --config (c.FractionalSpawner or c.KubeSpawner),
        else False.

        Example: c.FracnbService.all_namespaces = True
        """,
    ).tag(config=True)

    warning_lead = Float(
        900,
        help="""
        Seconds before a cull deadline at which a server enters the warning state that
        notebooks show; 0 for no warning. It must be more than activity_report_lag, so that
        work resumed after the warning reaches the hub before the deadline, and less than
        every idle timeout minus activity_report_lag, so that a server in use is never warned.
        Default: 900.

        Example: c.FracnbService.warning_lead = 900
        """,
    ).tag(config=True)

    hibernation_timeout = Float(
        DEFAULT_TIMEOUT_SECONDS,
        help=f"""
        Seconds a GPU server stopped for idleness (idle timeout, idle timeout under demand,
        GPU-unused timeout) may take to save its idle kernels' variables before the service
        stops it anyway (docs/hibernation.md). Busy kernels are never interrupted or saved.
        Between 0 and {MAX_TIMEOUT_SECONDS}; 0 stops servers without asking them to save.
        FractionalSpawner.hibernate_on_stop uses the same bound. Default: {DEFAULT_TIMEOUT_SECONDS}.

        Example: c.FracnbService.hibernation_timeout = 300
        """,
    ).tag(config=True)

    hibernation_max_bytes = Integer(
        0,
        help="""
        The most one hibernation may write to the user's home, all kernels of the server
        together, in bytes; it can only lower the notebook's own limit
        (FracnbMeter.hibernation_max_bytes, 4 GiB by default). 0 leaves that limit. Default: 0.

        Example: c.FracnbService.hibernation_max_bytes = 2 << 30
        """,
    ).tag(config=True)

    hibernate_at_max_age = Bool(
        False,
        help="""
        Also hibernate GPU servers stopped at their maximum age (their idle kernels' variables
        are saved first, within hibernation_timeout). Default: False.

        Example: c.FracnbService.hibernate_at_max_age = True
        """,
    ).tag(config=True)

    session_report_interval = Float(
        60,
        help="""
        How often, in seconds, the notebooks post their session reports, which carry the
        servers' GPU-unused time (FracnbMeter.session_report_interval in the notebook image):
        a report older than twice this is unknown, never unused, and a GPU-unused timeout must
        exceed warning_lead plus this plus one 30 s window (the hub refuses to start
        otherwise). Default: 60.

        Example: c.FracnbService.session_report_interval = 60
        """,
    ).tag(config=True)

    db_url = Unicode(
        help="""
        SQLAlchemy URL of the database that keeps the GPU statistics notebooks report for each
        server session (peaks, time near the budget, out-of-memory events). Its schema is
        created and upgraded with Alembic when the service starts. The default is an SQLite
        file, fracnb-service.sqlite, in the directory of the hub's own SQLite database
        (c.JupyterHub.db_url; its default is relative to the hub's working directory, where the
        service runs too), so that the hub's advice and fracnb-report --config find it; with a
        hub database that is not SQLite, "sqlite:///fracnb-service.sqlite" in the working
        directory. Use PostgreSQL in production (the psycopg driver is in fracnb's hub extra).
        Default: beside the hub's database.

        Example: c.FracnbService.db_url = "postgresql+psycopg://fracnb:secret@db:5432/fracnb"
        """,
    ).tag(config=True)

    session_retention_days = Float(
        90,
        help="""
        Days a session record is kept after its last report; older ones are deleted when the
        service starts and every hour. 0 keeps them forever. Default: 90.

        Example: c.FracnbService.session_retention_days = 30
        """,
    ).tag(config=True)

    @default("db_url")
    def _default_db_url(self) -> str:
        return default_db_url(self.config)

    @default("namespace")
    def _default_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE", "default")

    @default("all_namespaces")
    def _default_all_namespaces(self) -> bool:
        return bool(spawner_setting(self.config, "enable_user_namespaces", default=False))

    def get_default_logging_config(self) -> dict[str, Any]:
        """The app's stderr handler for tornado's and fracnb's loggers too, escaping control characters.

        Request paths and user names reach these lines; escaped, they cannot start a forged one
        (see :mod:`fracnb_spawner.common.logsafe`). Successful requests are logged at the DEBUG level only:
        every notebook asks for its status every few minutes.
        """
        config = super().get_default_logging_config()
        if "handlers" not in config:  # pythonw: traitlets logs nowhere
            return config
        config.setdefault("filters", {})["escape_controls"] = {"()": EscapeControlCharacters}
        for handler in config["handlers"].values():
            handler.setdefault("filters", []).append("escape_controls")
        level = logging.getLevelName(self.log_level)
        access = "DEBUG" if self.log_level <= logging.DEBUG else "WARNING"
        for name, logger_level in (("tornado", level), ("tornado.access", access), ("fracnb", level)):
            config["loggers"][name] = {"level": logger_level, "handlers": ["console"], "propagate": False}
        return config

    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
            # Command-line settings win over the file.
            if self.cli_config:
                self.update_config(self.cli_config)
        try:
            check_timing([("FracnbService.default_idle_timeout", self.default_idle_timeout)], self.timing())
        except CullTimingError as error:
            self.log.critical("fracnb service: refusing to start, %s", error)
            self.exit(1)
        problem = timeout_problem(self.hibernation_timeout)
        if problem:
            self.log.critical("fracnb service: refusing to start, %s", problem)
            self.exit(1)

    def timing(self) -> CullTiming:
        return CullTiming(warning_lead=self.warning_lead, activity_report_lag=self.activity_report_lag)

    def hibernation(self) -> HibernationSettings:
        return HibernationSettings(self.hibernation_timeout, self.hibernation_max_bytes, self.hibernate_at_max_age)

    def settings(self) -> core.CullSettings:
        return core.CullSettings(
            default_policy=CullPolicy(self.default_idle_timeout, self.default_max_age),
            warning_lead=self.warning_lead,
            concurrency=self.concurrency,
            page_size=self.api_page_size,
        )

    def build_state(self) -> ServiceState:
        hub_auth = HubAuth(parent=self)
        component = spawner_setting(self.config, "component_label", default=DEFAULT_COMPONENT)
        state = ServiceState(
            hub=HubAPI(hub_auth.api_url, hub_auth.api_token),
            pods=KubernetesPods(
                namespace=None if self.all_namespaces else self.namespace,
                kubeconfig=self.kubeconfig,
                selector=singleuser_selector(component),
            ),
            quotas=FracnbQuotas(parent=self),
            settings=self.settings(),
            hub_auth=hub_auth,
            hibernator=Hibernator(self.hibernation(), hub_auth.api_token) if self.hibernation().enabled else None,
            report_interval=self.session_report_interval,
        )
        state.advice_menu = menu_from_config(self.config)
        state.named_servers = bool(self.config.JupyterHub.get("allow_named_servers", False))
        state.choices = hub_choices(self.config)
        state.zone = FracnbQueue(config=self.config).zone
        return state

    async def cull_forever(self, state: ServiceState) -> None:
        while True:
            try:
                report = await state.cull_pass()
                self.log.info(
                    "Culling pass: %d servers, %d warned, %d culled in %.2fs",
                    report.servers,
                    report.warned,
                    len(report.culled),
                    report.duration,
                )
            except Exception:
                self.log.exception("Culling pass failed; trying again in %ss", self.cull_every)
            await asyncio.sleep(self.cull_every)

    async def resume_forever(self, state: ServiceState) -> None:
        while self.resume_every > 0:
            try:
                report = await state.resume_pass()
                if report.resumed or report.deferred or report.failed:
                    self.log.info(
                        "Queued spawns a restarted hub forgot: %d resumed, %d to try again, %d failed",
                        len(report.resumed),
                        len(report.deferred),
                        report.failed,
                    )
            except Exception:
                self.log.exception("Looking for queued spawns to resume failed; trying again in %ss", self.resume_every)
            await asyncio.sleep(self.resume_every)

    async def open_history(self, state: ServiceState) -> None:
        """Open (and migrate) the session history database; stop the service when that fails.

        It runs once the service listens (its endpoints answer 503 until then): the hub gives a
        managed service only about ten seconds to answer, and a migration may take longer.
        """
        await asyncio.to_thread(load_checker)
        try:
            state.history = await asyncio.to_thread(open_database, self.db_url)
        except HistoryDatabaseError as error:
            self.log.critical("fracnb service: stopping, %s (c.FracnbService.db_url)", error)
            self.exit(1)

    async def store_kept_reports_forever(self, state: ServiceState) -> None:
        """Store the session reports kept while the database was away, once it answers (:mod:`.pending`)."""
        while True:
            await asyncio.sleep(KEPT_REPORTS_RETRY_SECONDS)
            if not state.pending_reports or state.history is None:
                continue
            stored = await state.pending_reports.flush(lambda user, report: store_and_count(state, user, report))
            if stored:
                self.log.info("Stored %d session reports kept while the database was away", stored)

    async def purge_forever(self, state: ServiceState) -> None:
        while self.session_retention_days > 0:
            try:
                gone = await asyncio.to_thread(
                    purge, state.history, now=state.clock().replace(tzinfo=None), keep_days=self.session_retention_days
                )
                await asyncio.to_thread(
                    purge_stops, state.history, now=state.clock(), keep_days=self.session_retention_days
                )
                if gone:
                    self.log.info("Deleted %d session records older than %s days", gone, self.session_retention_days)
            except Exception:
                state.history_metrics.database_errors.labels(operation="purge").inc()
                self.log.exception("Deleting old session records failed; trying again in an hour")
            await asyncio.sleep(3600)

    async def serve(self) -> None:
        state = self.build_state()
        service_url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/fracnb/")
        backend = configured_traits(self.config).backend_settings()
        state.is_gpu = partial(is_gpu_resource, settings=backend)
        pages = PageSources(state, HubOAuth(parent=self), state.is_gpu)
        app = make_app(state, prefix, pages)
        app.listen(service_url.port or 80, self.ip or bind_address(service_url.hostname))
        self.log.info("fracnb service on %s%s", service_url.geturl(), prefix)
        self._resuming = asyncio.ensure_future(self.resume_forever(state))
        await self.open_history(state)
        self._purging = asyncio.ensure_future(self.purge_forever(state))
        self._storing = asyncio.ensure_future(self.store_kept_reports_forever(state))
        await self.cull_forever(state)

    def start(self) -> None:
        try:
            asyncio.run(self.serve())
        except KeyboardInterrupt:  # the hub stops its managed services with SIGINT
            self.log.info("fracnb service stopped")


def main(argv: list[str] | None = None) -> None:
    FracnbService.launch_instance(argv)
