"""The fracnb service's configuration: ``c.FracnbService.*``, whose help texts are their docs.

Mixed into ``FracnbService`` (service/app.py), kept apart so that the app module stays about what the
service does with them.
"""

from __future__ import annotations

import os
from typing import Any

from traitlets import Bool, Float, HasTraits, Integer, Unicode, default
from traitlets.config import Config

from fracnb_spawner.hibernation.settings import DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS
from fracnb_spawner.history.db import default_db_url, sqlite_file


def spawner_setting(config: Config, name: str, *, default: Any) -> Any:
    """A spawner trait as the hub's config sets it (FractionalSpawner's section wins over KubeSpawner's)."""
    for section in ("FractionalSpawner", "KubeSpawner"):
        if section in config and name in config[section]:
            return config[section][name]
    return default


class ServiceTraits(HasTraits):
    """Mixed into ``FracnbService``: every setting of the fracnb service."""

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

    claim_sweep_every = Float(
        60,
        help="""
        Seconds between sweeps of the DRA ResourceClaims a hub created for a server and never
        made its pod the owner of (the hub died between creating the claim and patching the
        pod in, docs/spawner.md "The dra backend"): each sweep lists fracnb's claims once
        (list on resourceclaims; the service's namespace, or every namespace with
        all_namespaces), gives such a claim its pod as owner if the pod exists, else deletes
        it (patch, delete on resourceclaims; get on pods: helm-values/rbac.yaml). Without a
        DRA choice it finds nothing. 0 turns it off. Default: 60.

        Example: c.FracnbService.claim_sweep_every = 60
        """,
    ).tag(config=True)

    claim_sweep_grace = Float(
        300,
        help="""
        Seconds a ResourceClaim without owner is left alone after its creation before the
        sweep (claim_sweep_every) settles it: a live hub patches the pod in within seconds,
        and may wait for a leftover pod of the same name to go before it creates the new
        one. Default: 300.

        Example: c.FracnbService.claim_sweep_grace = 300
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

    idle_timeout_under_demand_hibernating = Float(
        300,
        help="""
        Idle timeout under demand, in seconds, of a GPU server whose stop saves its idle kernels'
        variables first (hibernation on: hibernation_timeout above 0): while someone waits for
        the kind of GPU it holds, it is stopped after this long idle, instead of its profile's
        cull.idle_timeout_under_demand where that is longer or unset. A profile's shorter one
        stays; 0 leaves every profile's own. The trade: such a stop loses no variables, only
        what a restart loses (running processes, open files' state, the GPU memory until the
        restore) and the restore's wait when its user comes back, so a start waiting for an
        idle holder's card waits about this plus warning_lead_hibernating instead of the
        profile's timeout plus warning_lead (docs/culling-and-quotas.md). It must be more than
        warning_lead_hibernating plus activity_report_lag (the service refuses to start
        otherwise). Default: 300 (the replay's adaptive runs, docs/evidence.md).

        Example: c.FracnbService.idle_timeout_under_demand_hibernating = 600
        """,
    ).tag(config=True)

    warning_lead_hibernating = Float(
        120,
        help="""
        Seconds before a stop under demand that hibernates first (idle_timeout_under_demand_hibernating)
        at which the server enters the warning state, instead of warning_lead where that is
        longer; 0 leaves warning_lead. It must be more than activity_report_lag. Other
        deadlines (the idle timeout, the maximum age) keep warning_lead. Default: 120.

        Example: c.FracnbService.warning_lead_hibernating = 300
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

    kept_reports_file = Unicode(
        help="""
        File where the session reports that notebooks post while the session database is away are
        kept until it answers again (one JSON line each, readable by the service's user only), so
        that a restart of the service during the outage loses none; it is removed once all are
        stored. The notices of the stops the service makes meanwhile are kept the same way, in a
        file beside it (fracnb-kept-reports.jsonl -> fracnb-kept-reports.stops.jsonl). "" keeps
        both in memory only. Default: fracnb-kept-reports.jsonl beside an SQLite
        db_url's file; with another database, "" (set a path on a volume that outlives the hub
        pod, as the hub's own database's does on Zero-to-JupyterHub).

        Example: c.FracnbService.kept_reports_file = "/srv/jupyterhub/fracnb-kept-reports.jsonl"
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

    @default("kept_reports_file")
    def _default_kept_reports_file(self) -> str:
        database = sqlite_file(self.db_url)
        return str(database.parent / "fracnb-kept-reports.jsonl") if database is not None else ""

    @default("namespace")
    def _default_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE", "default")

    @default("all_namespaces")
    def _default_all_namespaces(self) -> bool:
        return bool(spawner_setting(self.config, "enable_user_namespaces", default=False))
