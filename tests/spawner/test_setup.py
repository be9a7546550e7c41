"""setup(c): selects the spawner, refuses a bad profile list at hub start, registers the service."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_spawner.configure import setup


def test_setup_registers_spawner_service_and_roles() -> None:
    c = Config()
    c.FractionalSpawner.profile_list = [{"display_name": "Q", "slug": "q", "gpu": {"fraction": 0.25}}]
    setup(c, config_file="/etc/jupyterhub/jupyterhub_config.py")
    assert c.JupyterHub.spawner_class == "fractional"
    (service,) = c.JupyterHub.services
    assert service["name"] == "fracnb"
    assert service["command"][-2:] == ["--config", "/etc/jupyterhub/jupyterhub_config.py"]
    # Its page logs users in through the hub's OAuth, without an "authorize" prompt, and gets no scopes.
    assert service["oauth_no_confirm"] is True
    assert service["oauth_client_allowed_scopes"] == []
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "delete:servers" in roles["fracnb"]["scopes"]
    assert "access:services!service=fracnb" in roles["user"]["scopes"]
    assert c.FractionalSpawner.fracnb_service_name == "fracnb"
    assert c.FractionalSpawner.fracnb_service_url == "http://127.0.0.1:10101/services/fracnb/"


def test_setup_refuses_bad_profiles_naming_them() -> None:
    c = Config()
    c.KubeSpawner.profile_list = [{"display_name": "Too much", "slug": "big", "gpu": {"fraction": 2}}]
    with pytest.raises(SystemExit, match=r"profile 'big' \('Too much'\): fraction 2 is outside"):
        setup(c, service=False)


def test_setup_refuses_bad_quotas_naming_the_key() -> None:
    c = Config()
    c.FracnbQuotas.group_quotas = {"team-a": "6 gpus"}
    with pytest.raises(SystemExit, match=r"group_quotas\['team-a'\]: '6 gpus' is not a number of GPUs"):
        setup(c, service=False)
