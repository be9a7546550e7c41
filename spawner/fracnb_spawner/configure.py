"""``setup(c)``: one call at the end of a jupyterhub_config.py to enable fracnb.

It selects ``FractionalSpawner``, refuses an invalid profile list right away (so the hub
does not start with it), and registers the fracnb service with the roles it needs.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.common.units import parse_duration
from fracnb_spawner.config.overrides import OverrideError, check_spawner_traits
from fracnb_spawner.config.profiles import (
    ProfileConfigError,
    check_kueue_backends,
    initialize_profiles,
    iter_combinations,
    profile_name,
    validate_profiles,
)
from fracnb_spawner.config.traits import FractionalTraits, configured_traits, spawner_section
from fracnb_spawner.culling import CullTimingError, check_gpu_unused_timing, check_timing
from fracnb_spawner.form import stopnotice
from fracnb_spawner.gpu.backends import is_gpu_resource
from fracnb_spawner.hibernation.settings import timeout_problem
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.engines import engine_of
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.reclaim.config import FracnbReclaim
from fracnb_spawner.service.app import FracnbService

HUB_TEMPLATES = Path(__file__).parent / "form" / "templates" / "hub"  # pages of JupyterHub's that fracnb extends
SERVICE_SCOPES = [
    "list:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    # Start again the queued spawns a restarted hub forgot (docs/queue.md); JupyterHub 5 has no start:servers.
    "servers",
    "read:users:groups",
    "read:groups",
    # Hibernation: the service asks a GPU server it culls to save its kernels' variables first, at
    # the server's own endpoint (docs/hibernation.md, "Who asks, and why").
    "access:servers",
]


def setup(c: Any, *, config_file: str | None = None, service: bool = True, service_name: str = "fracnb",
          service_url: str = "http://127.0.0.1:10101") -> None:  # fmt: skip
    """Enable fracnb on a hub config object ``c``.

    Example, last lines of jupyterhub_config.py::

        from fracnb_spawner import setup
        setup(c, config_file=__file__)
    """
    c.JupyterHub.spawner_class = "fractional"
    try:
        check_config(c)
    except (TraitError, ProfileConfigError, OverrideError, CullTimingError) as error:
        raise SystemExit(f"fracnb: refusing to start, {error}") from None
    # Why the fracnb service stopped a user's server, at the top of the hub's pages (form/stopnotice.py).
    c.JupyterHub.template_vars = stopnotice.install(c.JupyterHub.get("template_vars", {}))
    spawner = c.FractionalSpawner
    if not service:
        return
    if config_file is None:
        raise ValueError("setup(c, config_file=__file__) needs the config file for the fracnb service")
    spawner.fracnb_service_name = service_name
    spawner.fracnb_service_url = f"{service_url.rstrip('/')}/services/{service_name}/"
    services = [s for s in c.JupyterHub.get("services", []) if s.get("name") != service_name]
    services.append({
        "name": service_name,
        "url": service_url,
        "command": [sys.executable, "-m", "fracnb_spawner.service", "--config", config_file],
        # Its page (Services > fracnb) logs users in through the hub's OAuth; part of the hub, so no
        # "authorize access" prompt. Its OAuth tokens only identify the user (no scopes of their own).
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": [],
    })  # fmt: skip
    c.JupyterHub.services = services
    roles = [r for r in c.JupyterHub.get("load_roles", []) if r.get("name") not in (service_name, "user")]
    roles.append({"name": service_name, "scopes": SERVICE_SCOPES, "services": [service_name]})
    roles.append({"name": "user", "scopes": ["self", f"access:services!service={service_name}"]})
    c.JupyterHub.load_roles = roles
    # The progress page reconnects by itself after a hub restart, once the service resumed the spawn.
    templates = str(HUB_TEMPLATES)
    c.JupyterHub.template_paths = [templates, *(p for p in c.JupyterHub.get("template_paths", []) if p != templates)]


def check_config(c: Config) -> None:
    """Refuse what FractionalSpawner would refuse, offline: ``TraitError``, ``ProfileConfigError``,
    ``OverrideError``, ``CullTimingError``.

    Its traits (types and bounds), GPUs asked for outside the ``gpu`` key, the profile list,
    ``c.FracnbQuotas``, ``c.FracnbQueue``, ``c.FracnbReclaim``, and idle timeouts the fracnb service could not honour.
    """
    section = spawner_section(c)
    settings = configured_traits(c)
    backend = settings.backend_settings()
    check_spawner_traits(section, partial(is_gpu_resource, settings=backend))
    raw = section.get("profile_list", [])
    if not callable(raw):
        try:
            validate_profiles(initialize_profiles(raw), settings.gpu_defaults(), backend, settings.cull_defaults())
        except ProfileConfigError as error:
            raise ProfileConfigError(f"FractionalSpawner.profile_list: {error}") from None
    FracnbQuotas(config=c).policy()
    engine = engine_of(FracnbQueue(config=c))
    if engine.counts_resource_requests and not callable(raw):
        check_kueue_backends(initialize_profiles(raw), settings.gpu_defaults())
    if settings.borrowable_node_selector and engine.name != "builtin":
        raise TraitError(
            f"FractionalSpawner.borrowable_node_selector: borrowing needs fracnb's own queue, not "
            f"c.FracnbQueue.engine = {engine.name!r}; under Kueue, let a cohort borrow quota instead (docs/lending.md)"
        )
    FracnbReclaim(config=c)
    check_cull_timing(c, settings, [] if callable(raw) else initialize_profiles(raw))


def profile_timeouts(profiles: list[dict], keys: tuple[str, ...]) -> list[tuple[str, float]]:
    """Every ``cull.<key>`` the profiles and their choices set, with where it is set."""
    found = []
    for profile in profiles:
        for choices, _spec, cull in iter_combinations(profile):
            where = ",".join(f"{o}={k}" for o, k in choices)
            name = f"FractionalSpawner.profile_list: {profile_name(profile)}" + (f", choice {where}" if where else "")
            found += [(f"{name}: cull.{key}", parse_duration(cull[key])) for key in keys if key in cull]
    return found


def idle_timeouts(settings: FractionalTraits, profiles: list[dict]) -> list[tuple[str, float]]:
    """Every idle timeout the config sets for the spawner's servers (those under demand too), with where it is set."""
    gpu, cpu = settings.cull_defaults()
    return [
        ("FractionalSpawner.gpu_idle_timeout", gpu.idle_timeout),
        ("FractionalSpawner.cpu_idle_timeout", cpu.idle_timeout),
        *profile_timeouts(profiles, ("idle_timeout", "idle_timeout_under_demand")),
    ]


def check_cull_timing(c: Config, settings: FractionalTraits, profiles: list[dict]) -> None:
    """Refuse idle and GPU-unused timeouts and a warning lead that would warn or stop servers in use
    (``CullTimingError``), and a hibernation timeout out of bounds (``TraitError``)."""
    service = FracnbService(config=c)
    timeouts = [
        *idle_timeouts(settings, profiles),
        ("FracnbService.default_idle_timeout", service.default_idle_timeout),
    ]
    check_timing(timeouts, service.timing())
    service.check_hibernating_timing()
    gpu_unused = profile_timeouts(profiles, ("gpu_unused_timeout", "gpu_unused_busy_timeout"))
    check_gpu_unused_timing(gpu_unused, service.warning_lead, service.session_report_interval)
    problem = timeout_problem(service.hibernation_timeout)
    if problem:
        raise TraitError(problem)
