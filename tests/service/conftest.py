"""Fixtures for the fracnb service tests.

- ``hub``: a real JupyterHub (``fracnb_testbed.hubproc``, with configurable-http-proxy from npm) for the
  whole session, spawning real ``jupyterhub-singleuser`` servers with
  ``SimpleLocalProcessSpawner`` and running ``fracnb_spawner.service`` as a managed
  service named ``fracnb``. It yields a :class:`RunningHub` with an admin token and the
  hub's log file. ``user_namespaces_hub``: another, whose config turns on KubeSpawner's
  user namespaces.
- ``make_pod``: the pod FractionalSpawner would make for a server (in the hub's namespace
  unless ``namespace=`` names another).
- ``new_user``: a fresh user name per call (users are never reused between tests).
"""

from __future__ import annotations

import itertools
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fracnb_testbed import hubproc
from fracnb_testbed.hubproc import HubPorts
from fracnb_testbed.procs import free_port, wait_until

# The one user whose quota is None (unlimited) in the hub's config; everyone else has 1 GPU.
UNLIMITED_USER = "quota-free"

# After hubproc.config_head: the loopback ports, the proxy, the files and the dummy authenticator.
HUB_CONFIG = """
import sys
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.Spawner.args = ["--allow-root"]
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.JupyterHub.allow_named_servers = True
c.JupyterHub.services = [
    {{
        "name": "fracnb",
        "url": "http://127.0.0.1:{service_port}",
        "command": [sys.executable, "-m", "fracnb_spawner.service", "--config", __file__],
        "environment": {service_env!r},
        "oauth_no_confirm": True,  # as setup(c) registers it
    }},
    {{"name": "tester", "api_token": {admin_token!r}}},
    # The culling core run inside the tests, with exactly the fracnb service's scopes.
    {{"name": "fracnb-inproc", "api_token": {service_token!r}}},
]
c.JupyterHub.load_roles = [
    {{
        "name": "fracnb",
        "scopes": [
            "list:users", "read:users:activity", "read:servers", "delete:servers", "servers",
            "read:users:groups", "read:groups", "access:servers",
        ],
        "services": ["fracnb", "fracnb-inproc"],
    }},
    {{"name": "admin", "services": ["tester"]}},
    # Server tokens only get scopes their owner holds: users need access to the service.
    {{"name": "user", "scopes": ["self", "access:services!service=fracnb"]}},
]
c.FracnbQuotas.default_user_quota = 1
c.FracnbQuotas.user_quotas = {{{unlimited_user!r}: None}}
c.FracnbQuotas.group_quotas = {{"team-a": 2}}
c.FracnbService.cull_every = 3600
c.FracnbService.default_idle_timeout = 3600
c.FracnbService.warning_lead = 900
# The hub spawns with SimpleLocalProcessSpawner; the service reads this menu for api/advice.
c.FractionalSpawner.gpu_memory = "80Gi"
c.FractionalSpawner.profile_list = [{{
    "display_name": "A100", "slug": "a100",
    "profile_options": {{"size": {{"display_name": "Size", "choices": {{
        "eighth": {{"display_name": "1/8 GPU", "gpu": {{"fraction": "1/8"}}}},
        "half": {{"display_name": "1/2 GPU", "gpu": {{"fraction": 0.5}}, "default": True}},
    }}}}}},
}}]
{extra}
"""


@dataclass
class RunningHub:
    url: str
    admin_token: str
    service_token: str
    service_url: str
    config_file: Path
    log_file: Path

    def http(self, method: str, url: str, body=None, token: str | None = None):
        return http(method, url, body, token)

    @property
    def api_url(self) -> str:
        return f"{self.url}/hub/api"

    def api(self, method: str, path: str, body=None, token: str | None = None):
        """Call the hub REST API; returns (status, parsed JSON or None)."""
        return http(method, f"{self.api_url}/{path}", body, token or self.admin_token)

    def start_server(self, user: str, server: str = "") -> None:
        path = f"users/{user}/servers/{server}" if server else f"users/{user}/server"
        status, _ = self.api("POST", path, {})
        assert status in (201, 202), status
        wait_until(
            lambda: self.api("GET", f"users/{user}")[1]["servers"].get(server, {}).get("ready"),
            what=f"server {server!r} of {user} to be ready",
            timeout=120,
            interval=0.3,
        )

    def server_running(self, user: str, server: str = "") -> bool:
        _, model = self.api("GET", f"users/{user}")
        return server in model["servers"]


def http(method: str, url: str, body=None, token: str | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            payload = response.read()
            if "json" not in response.headers.get("Content-Type", ""):
                return response.status, payload.decode()
            return response.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            return error.code, json.loads(payload)
        except ValueError:
            return error.code, payload.decode(errors="replace")


def answers(url: str, status: int = 200) -> bool:
    """Whether ``url`` answers with ``status`` now."""
    try:
        urllib.request.urlopen(url, timeout=2).close()  # noqa: S310
    except urllib.error.HTTPError as error:
        return error.code == status
    except OSError:
        return False
    return status == 200


@pytest.fixture(scope="session")
def hub_namespace(testbed) -> str:
    """The testbed namespace the hub's singleuser pods live in, for the whole session."""
    return testbed.create_namespace()


@pytest.fixture(scope="session")
def hub_service_env(testbed, hub_namespace) -> dict[str, str]:
    """The managed fracnb service reads pods from the testbed cluster."""
    return {"KUBECONFIG": str(testbed.kubeconfig), "POD_NAMESPACE": hub_namespace}


@pytest.fixture
def make_pod(testbed, hub_namespace):
    """Create the pod KubeSpawner + FractionalSpawner would make for a server (annotations only;
    it is bound to a node that does not exist, so it is stored but never runs)."""

    def create(
        user,
        server="",
        *,
        fraction="1/4",
        profile="quarter",
        idle_timeout=None,
        max_age=None,
        namespace=None,
        memory_bytes=None,
        annotations=None,
    ):
        annotations = {
            **(annotations or {}),
            "hub.jupyter.org/username": user,
            "hub.jupyter.org/servername": server,
            "fracnb.io/gpu-fraction": fraction,
        }
        if memory_bytes is not None:
            annotations["fracnb.io/gpu-memory-limit"] = str(memory_bytes)
        if idle_timeout is not None:
            annotations["fracnb.io/idle-timeout"] = str(idle_timeout)
        if max_age is not None:
            annotations["fracnb.io/max-age"] = str(max_age)
        name = f"jupyter-{user}{'--' + server if server else ''}"
        testbed.create_pod(
            namespace or hub_namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "annotations": annotations,
                    "labels": {"component": "singleuser-server", "fracnb.io/profile": profile},
                },
                "spec": {
                    "nodeName": "fracnb-nowhere",
                    "containers": [{"name": "notebook", "image": "example.invalid/notebook"}],
                },
            },
        )
        return name

    return create


@pytest.fixture
async def pod_source(testbed, hub_namespace):
    """The service's own pod reader, pointed at the hub's namespace in the testbed."""
    from fracnb_spawner.service.pods import KubernetesPods

    pods = KubernetesPods(namespace=hub_namespace, kubeconfig=str(testbed.kubeconfig))
    yield pods
    await pods.close()


@contextmanager
def running_hub(workdir: Path, service_env: dict[str, str], extra: str = "") -> Iterator[RunningHub]:
    """A JupyterHub with the fracnb service, its output in ``workdir/jupyterhub.log``; ``extra`` is more
    config."""
    ports = HubPorts()
    admin_token, service_token = secrets.token_hex(16), secrets.token_hex(16)
    own = HUB_CONFIG.format(
        service_port=free_port(),
        admin_token=admin_token,
        service_token=service_token,
        service_env=service_env,
        unlimited_user=UNLIMITED_USER,
        extra=extra,
    )
    config = "\n".join([*hubproc.config_head(workdir, ports, hubproc.find_proxy()), own])
    # Its servers run in sessions of their own and outlive a hub that is killed: hubproc stops them too.
    log_file = workdir / "jupyterhub.log"
    with hubproc.running(workdir, config, ports.url, log_file=log_file):
        service_url = f"{ports.url}/services/fracnb/"
        # Without a token the service answers 403 once it is up (the proxy says 503 before).
        wait_until(lambda: answers(service_url + "api/me", 403), what="the fracnb service", timeout=60)
        yield RunningHub(ports.url, admin_token, service_token, service_url, hubproc.config_file(workdir), log_file)


@pytest.fixture(scope="session")
def hub(tmp_path_factory, hub_service_env):
    with running_hub(tmp_path_factory.mktemp("hub"), hub_service_env) as running:
        yield running


@pytest.fixture(scope="session")
def user_namespaces_hub(tmp_path_factory, hub_service_env):
    """A second hub whose config turns KubeSpawner's user namespaces on (the service reads it)."""
    extra = "c.KubeSpawner.enable_user_namespaces = True"
    with running_hub(tmp_path_factory.mktemp("userns-hub"), hub_service_env, extra) as running:
        yield running


_names = itertools.count()


@pytest.fixture
def new_user(hub):
    """Create users with unique names: ``new_user()`` -> name."""

    def create(prefix: str = "u") -> str:
        name = f"{prefix}{next(_names)}-{secrets.token_hex(2)}"
        status, _ = hub.api("POST", f"users/{name}")
        assert status == 201, status
        return name

    return create


@pytest.fixture
def unlimited_user(hub):
    """The user the hub's config maps to an unlimited quota (created on first use)."""
    status, _ = hub.api("POST", f"users/{UNLIMITED_USER}")
    assert status in (201, 409), status
    return UNLIMITED_USER
