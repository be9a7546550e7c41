"""``FracnbService``: the traitlets shell that binds configuration into the plain core."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import HubAuth, HubOAuth
from traitlets import TraitError, default
from traitlets.config import Application

from fracnb_spawner.cluster.kube import DEFAULT_COMPONENT, singleuser_selector
from fracnb_spawner.common.logsafe import EscapeControlCharacters
from fracnb_spawner.config.traits import configured_traits
from fracnb_spawner.culling import CullPolicy, CullTiming, CullTimingError, HibernatingDemand, check_timing
from fracnb_spawner.gpu.backends import is_gpu_resource
from fracnb_spawner.hibernation.culled import Hibernator
from fracnb_spawner.hibernation.settings import (
    HibernationSettings,
    timeout_problem,
)
from fracnb_spawner.history.db import HistoryDatabaseError, open_database
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.engines import engine_of
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.reclaim.config import FracnbReclaim
from fracnb_spawner.service import cullpass, loops
from fracnb_spawner.service.advicemenu import menu_from_config
from fracnb_spawner.service.api.base import load_checker
from fracnb_spawner.service.api.routes import make_app
from fracnb_spawner.service.choices import hub_choices
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.keptreports import PendingReports
from fracnb_spawner.service.keptstops import kept_stops_file, read_kept_stops
from fracnb_spawner.service.pods import KubernetesPods
from fracnb_spawner.service.state import ServiceState
from fracnb_spawner.service.traits import ServiceTraits, spawner_setting
from fracnb_spawner.service.web import PageSources

log = logging.getLogger("fracnb.service")


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


HIBERNATING_TRAITS = ("idle_timeout_under_demand_hibernating", "warning_lead_hibernating")


class FracnbService(Application, ServiceTraits):
    """Culls idle GPU servers (with a warning first) and reports quotas to notebooks."""

    name = "fracnb-service"
    description = __doc__
    classes = [FracnbQuotas, FracnbReclaim]  # noqa: RUF012 -- traitlets reads this class attribute
    aliases = {  # noqa: RUF012
        "config": "FracnbService.config_file",
        "cull-every": "FracnbService.cull_every",
        "namespace": "FracnbService.namespace",
        "kubeconfig": "FracnbService.kubeconfig",
        "log-level": "Application.log_level",
    }

    @default("log_level")
    def _default_log_level(self) -> int:
        # Each cull and hibernation is an INFO line (traitlets' default, WARN, would drop them from the hub log).
        return logging.INFO

    @default("log_format")
    def _default_log_format(self) -> str:
        # The hub's own format (its time, level and logger), so that the service's lines in the hub log have times.
        return "[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s %(module)s:%(lineno)d] %(message)s"

    @default("log_datefmt")
    def _default_log_datefmt(self) -> str:
        return "%Y-%m-%d %H:%M:%S"

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
            self.check_hibernating_timing()
        except CullTimingError as error:
            self.log.critical("fracnb service: refusing to start, %s", error)
            self.exit(1)
        try:
            self.reclaim = FracnbReclaim(parent=self)
        except TraitError as error:
            self.log.critical("fracnb service: refusing to start, %s", error)
            self.exit(1)
        problem = timeout_problem(self.hibernation_timeout)
        if problem:
            self.log.critical("fracnb service: refusing to start, %s", problem)
            self.exit(1)

    def timing(self) -> CullTiming:
        return CullTiming(warning_lead=self.warning_lead, activity_report_lag=self.activity_report_lag)

    def check_hibernating_timing(self) -> None:
        """:class:`CullTimingError` where the hibernating timeout under demand or its warning, as set, would warn or
        stop a server in use (as :func:`.culling.check_timing` for the usual ones). Their defaults, where they do
        not fit the configured activity_report_lag (images without the meter: 330 s), are turned off instead."""
        try:
            self._check_hibernating_timing()
        except CullTimingError as error:
            if any(name in self.config.FracnbService for name in HIBERNATING_TRAITS):
                raise
            self.log.warning("fracnb service: no shorter timeout under demand for hibernating servers: %s", error)
            self.idle_timeout_under_demand_hibernating = self.warning_lead_hibernating = 0

    def _check_hibernating_timing(self) -> None:
        lag, timeout = self.activity_report_lag, self.idle_timeout_under_demand_hibernating
        if 0 < self.warning_lead_hibernating <= lag:
            raise CullTimingError(
                f"FracnbService.warning_lead_hibernating ({self.warning_lead_hibernating:g} s) is not more than "
                f"FracnbService.activity_report_lag ({lag:g} s); make it more than {lag:g} s, or 0 for warning_lead"
            )
        lead = HibernatingDemand(warning_lead=self.warning_lead_hibernating).lead(self.warning_lead)
        if 0 < timeout <= lead + lag:
            raise CullTimingError(
                f"FracnbService.idle_timeout_under_demand_hibernating ({timeout:g} s) is not more than its warning "
                f"({lead:g} s) plus FracnbService.activity_report_lag ({lag:g} s): servers in use would be warned; "
                f"make it more than {lead + lag:g} s or shorten FracnbService.warning_lead_hibernating"
            )

    def hibernation(self) -> HibernationSettings:
        return HibernationSettings(self.hibernation_timeout, self.hibernation_max_bytes, self.hibernate_at_max_age)

    def hibernating_demand(self) -> HibernatingDemand | None:
        """The shorter timeout under demand and warning of GPU servers whose stop under demand hibernates first;
        None while hibernation is off."""
        if not self.hibernation().applies("demand"):
            return None
        return HibernatingDemand(self.idle_timeout_under_demand_hibernating, self.warning_lead_hibernating)

    def settings(self) -> cullpass.CullSettings:
        return cullpass.CullSettings(
            default_policy=CullPolicy(self.default_idle_timeout, self.default_max_age),
            warning_lead=self.warning_lead,
            concurrency=self.concurrency,
            page_size=self.api_page_size,
            hibernating=self.hibernating_demand(),
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
                kueue=engine_of(FracnbQueue(config=self.config)).kueue_objects,
            ),
            quotas=FracnbQuotas(parent=self),
            settings=self.settings(),
            hub_auth=hub_auth,
            hibernator=Hibernator(self.hibernation(), hub_auth.api_token) if self.hibernation().enabled else None,
            report_interval=self.session_report_interval,
        )
        state.pending_reports = PendingReports(path=Path(self.kept_reports_file) if self.kept_reports_file else None)
        state.kept_stops_file = kept_stops_file(self.kept_reports_file)
        state.unwritten_stops = read_kept_stops(state.kept_stops_file)
        state.advice_menu = menu_from_config(self.config)
        state.named_servers = bool(self.config.JupyterHub.get("allow_named_servers", False))
        state.choices = hub_choices(self.config)
        queue = FracnbQueue(config=self.config)
        state.zone = queue.zone
        state.kueue_local_queue = engine_of(queue).local_queue_template(queue)
        return state

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
        self._resuming = asyncio.ensure_future(loops.resume_forever(state, self.resume_every))
        await self.open_history(state)
        self._purging = asyncio.ensure_future(loops.purge_forever(state, self.session_retention_days))
        self._storing = asyncio.ensure_future(loops.store_kept_reports_forever(state))
        self._reclaiming = await loops.start_reclaiming(self.reclaim, state.pods, state.choices, state.metrics.registry)
        self._sweeping = asyncio.ensure_future(
            loops.sweep_claims_forever(
                state.pods.api_client, None if self.all_namespaces else self.namespace,
                self.claim_sweep_every, self.claim_sweep_grace, state.clock,
            )
        )  # fmt: skip
        await loops.cull_forever(state, self.cull_every)

    def start(self) -> None:
        # The hub stops its managed services with SIGINT. A hub started with SIGINT ignored (under nohup, or as
        # a shell's background job) hands that on to the service, which would then run on until the hub's
        # SIGTERM, its interrupt timeout later; asyncio handles SIGINT only where Python's own handler is set.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            asyncio.run(self.serve())
        except KeyboardInterrupt:  # the hub stops its managed services with SIGINT
            self.log.info("fracnb service stopped")


def main(argv: list[str] | None = None) -> None:
    FracnbService.launch_instance(argv)
