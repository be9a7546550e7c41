"""With user namespaces the service reads singleuser pods in every namespace, not only its own."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.traits import spawner_setting
from tests.service.calls import ACCESS


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


@pytest.fixture
def unprivileged_kubeconfig(testbed, tmp_path) -> Path:
    """A kubeconfig for a ServiceAccount with no RBAC at all (a hub without helm-values/rbac.yaml)."""
    import yaml

    namespace = testbed.create_namespace()
    rest = testbed.rest()
    try:
        token = rest.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
    finally:
        rest.close()
    path = tmp_path / "kubeconfig"
    cluster = {"server": testbed.server, "certificate-authority": str(testbed.state.pki.ca_cert)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    yield path
    testbed.delete_namespace(namespace)


async def test_a_refused_pod_list_is_an_error_not_an_empty_cluster(unprivileged_kubeconfig) -> None:
    """Read as "no pods", a 403 would report no GPUs used and cull by default policies only."""
    from kubernetes_asyncio.client.exceptions import ApiException

    from fracnb_spawner.service.pods import KubernetesPods

    for namespace in (None, "default"):
        pods = KubernetesPods(namespace=namespace, kubeconfig=str(unprivileged_kubeconfig))
        try:
            with pytest.raises(ApiException) as refused:
                await pods.list_pods()
        finally:
            await pods.close()
        assert refused.value.status == 403
