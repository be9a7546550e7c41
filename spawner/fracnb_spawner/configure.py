"""``setup(c)``: one call at the end of a jupyterhub_config.py to enable fracnb.

It selects ``FractionalSpawner``, refuses an invalid profile list right away (so the hub
does not start with it), and registers the fracnb service with the roles it needs.
"""

from __future__ import annotations

import sys
from typing import Any

from traitlets import TraitError

from .profiles import ProfileConfigError, initialize_profiles, validate_profiles
from .quota import FracnbQuotas
from .traits import FractionalTraits

SERVICE_SCOPES = [
    "list:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    "read:users:groups",
    "read:groups",
]


def setup(c: Any, *, config_file: str | None = None, service: bool = True, service_name: str = "fracnb",
          service_url: str = "http://127.0.0.1:10101") -> None:  # fmt: skip
    """Enable fracnb on a hub config object ``c``.

    Example, last lines of jupyterhub_config.py::

        from fracnb_spawner import setup
        setup(c, config_file=__file__)
    """
    c.JupyterHub.spawner_class = "fractional"
    spawner = c.FractionalSpawner
    raw = spawner.get("profile_list", c.KubeSpawner.get("profile_list", []))
    if not callable(raw):
        try:
            validate_profiles(initialize_profiles(raw), configured_traits(c).gpu_defaults())
        except ProfileConfigError as error:
            raise SystemExit(f"fracnb: refusing to start, FractionalSpawner.profile_list: {error}") from None
    try:
        FracnbQuotas(config=c).policy()
    except TraitError as error:
        raise SystemExit(f"fracnb: refusing to start, {error}") from None
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
    })  # fmt: skip
    c.JupyterHub.services = services
    roles = [r for r in c.JupyterHub.get("load_roles", []) if r.get("name") not in (service_name, "user")]
    roles.append({"name": service_name, "scopes": SERVICE_SCOPES, "services": [service_name]})
    roles.append({"name": "user", "scopes": ["self", f"access:services!service={service_name}"]})
    c.JupyterHub.load_roles = roles


def configured_traits(c: Any) -> FractionalTraits:
    """fracnb's spawner traits as the hub will see them (``c.FractionalSpawner`` over ``c.KubeSpawner``).

    A value the trait refuses stops the start here, with the trait's own message.
    """
    traits = FractionalTraits()
    for name in traits.trait_names(config=True):
        for section in (c.KubeSpawner, c.FractionalSpawner):
            if name in section:
                try:
                    setattr(traits, name, section[name])
                except TraitError as error:
                    raise SystemExit(f"fracnb: refusing to start, {error}") from None
    return traits
