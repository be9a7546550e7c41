"""``FracnbService``: the traitlets shell that binds configuration into the plain core."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
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
from fracnb_spawner.history.db import HistoryDatabaseError, default_db_url, open_database
from fracnb_spawner.history.metrics import HistoryMetrics
from fracnb_spawner.history.stops import StopNotice, newest_stop, purge_stops, record_stop
from fracnb_spawner.history.store import purge
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service import core
from fracnb_spawner.service.choices import HubChoices, hub_choices
from fracnb_spawner.service.handlers import make_app
from fracnb_spawner.service.hub import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.nextadvice import Menu, menu_from_config
from fracnb_spawner.service.page import CullRecord
from fracnb_spawner.service.pods import KubernetesPods, PodSource
from fracnb_spawner.service.sessions import load_checker
from fracnb_spawner.service.web import PageSources, recent_culls


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
    ) -> None:
        self.hub, self.pods, self.settings, self.hub_auth = hub, pods, settings, hub_auth
        self.quota_policy = quotas.policy()
        self.metrics = CullMetrics()
        self.clock = clock
        self.recent_culls = recent_culls()
        self.history: Any = None  # the session history's session factory, once opened
        self.history_metrics = HistoryMetrics(self.metrics.registry)
        self.advice_menu: Menu | None = None  # the hub's profile menu, for the users' advice (api/advice)
        self.named_servers = False  # the hub's JupyterHub.allow_named_servers (its default: one server a user)
        self.choices = HubChoices()  # the hub's profile list: display names and slot kinds
        self.zone: ZoneInfo | None = None  # of the times the page shows: the hub's FracnbQueue.display_timezone

    async def user_report(self, name: str) -> dict[str, Any]:
        return await core.user_report(self.hub, self.pods, self.quota_policy, self.settings, name, clock=self.clock)

    async def cull_pass(self) -> core.PassReport:
        report = await core.cull_pass(
            self.hub, self.pods, self.settings, self.metrics, clock=self.clock, before_stop=self.record_stop
        )
        when = self.clock()
        self.recent_culls.extend(CullRecord(when, user, server, reason) for user, server, reason in report.culled)
        return report

    async def record_stop(self, verdict: core.ServerVerdict, reason: str) -> None:
        """Keep why a server is stopped, for its user's next page (history/stops.py), before the hub stops it."""
        if self.history is None:
            return
        notice = StopNotice(verdict.user, verdict.server, self.clock(), reason, verdict.limit_seconds)
        await asyncio.to_thread(record_stop, self.history, notice)

    async def newest_stop(self, user: str) -> StopNotice | None:
        """The user's newest stop, for the page; None without a history or when it cannot be read."""
        if self.history is None:
            return None
        try:
            return await asyncio.to_thread(newest_stop, self.history, user, now=self.clock())
        except Exception as error:
            logging.getLogger("fracnb.service").warning("Could not read the stops of %r: %s", user, error)
            return None


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

    def timing(self) -> CullTiming:
        return CullTiming(warning_lead=self.warning_lead, activity_report_lag=self.activity_report_lag)

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
                self.log.exception("Deleting old session records failed; trying again in an hour")
            await asyncio.sleep(3600)

    async def serve(self) -> None:
        state = self.build_state()
        service_url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/fracnb/")
        backend = configured_traits(self.config).backend_settings()
        pages = PageSources(state, HubOAuth(parent=self), partial(is_gpu_resource, settings=backend))
        app = make_app(state, prefix, pages)
        app.listen(service_url.port or 80, self.ip or bind_address(service_url.hostname))
        self.log.info("fracnb service on %s%s", service_url.geturl(), prefix)
        await self.open_history(state)
        self._purging = asyncio.ensure_future(self.purge_forever(state))
        await self.cull_forever(state)

    def start(self) -> None:
        try:
            asyncio.run(self.serve())
        except KeyboardInterrupt:  # the hub stops its managed services with SIGINT
            self.log.info("fracnb service stopped")


def main(argv: list[str] | None = None) -> None:
    FracnbService.launch_instance(argv)
