"""With user namespaces the service reads singleuser pods in every namespace, not only its own."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from fracnb_spawner.service.app import FracnbService, spawner_setting

ACCESS = "access:services!service=fracnb"


def service_with(tmp_path: Path, hub_config: str, *argv: str) -> FracnbService:
    config_file = tmp_path / "jupyterhub_config.py"
    config_file.write_text(hub_config)
    app = FracnbService()
    app.initialize(["--config", str(config_file), *argv])
    return app


@pytest.mark.parametrize(
    ("hub_config", "expected"),
    [
        ("", False),
        ("c.KubeSpawner.enable_user_namespaces = True", True),
        ("c.FractionalSpawner.enable_user_namespaces = True", True),
        ("c.KubeSpawner.enable_user_namespaces = True\nc.FractionalSpawner.enable_user_namespaces = False", False),
    ],
)
def test_all_namespaces_follows_the_hubs_user_namespaces(tmp_path, hub_config, expected) -> None:
    assert service_with(tmp_path, hub_config).all_namespaces is expected


def test_all_namespaces_can_be_set_and_the_component_label_is_the_hubs(tmp_path) -> None:
    app = service_with(tmp_path, "c.KubeSpawner.component_label = 'notebook'", "--FracnbService.all_namespaces=True")
    assert app.all_namespaces is True
    assert spawner_setting(app.config, "component_label", default="singleuser-server") == "notebook"


@pytest.fixture
def user_namespace(testbed):
    created = []

    def create() -> str:
        created.append(testbed.create_namespace())
        return created[-1]

    yield create
    for namespace in created:
        testbed.delete_namespace(namespace)


def test_api_me_counts_servers_in_every_users_namespace(user_namespaces_hub, make_pod, user_namespace) -> None:
    hub = user_namespaces_hub
    ann, bob = (f"{name}-{secrets.token_hex(3)}" for name in ("ann", "bob"))
    for name in (ann, bob):
        assert hub.api("POST", f"users/{name}")[0] == 201
    assert hub.api("POST", "groups/team-a", {"users": [ann, bob]})[0] == 201
    hub.start_server(ann)
    make_pod(ann, fraction="1/8", profile="eighth", idle_timeout=1800, namespace=user_namespace())
    make_pod(bob, fraction="3/2", profile="one-and-a-half", namespace=user_namespace())
    status, token = hub.api("POST", f"users/{ann}/tokens", {"scopes": [ACCESS]})
    assert status == 201
    status, body = hub.http("GET", hub.service_url + "api/me", token=token["token"])
    assert status == 200, body
    assert body["servers"] == [{"server": "", "profile": "eighth", "fraction": {"gpus": 0.125, "exact": "1/8"}}]
    # bob's pod is in a namespace of his own: the group's use still counts it.
    assert body["groups"][0]["used"] == {"gpus": 1.625, "exact": "13/8"}
    # The culler reads the annotations of ann's pod in her namespace.
    assert body["culling"][""]["idle_timeout_seconds"] == 1800
