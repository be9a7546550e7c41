"""Talking to the testbed's apiserver: a small synchronous REST client and client factories."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import Configuration

from fracnb_testbed.errors import TestbedError
from fracnb_testbed.pki import Pki

CLUSTER_NAME = "fracnb-testbed"


def client_ssl_context(pki: Pki) -> ssl.SSLContext:
    """TLS context trusting the testbed CA and presenting the admin certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return context


def write_kubeconfig(path: Path, server: str, pki: Pki) -> Path:
    """A kubeconfig with one cluster, the admin (system:masters) user and a current context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki.admin_cert),
                    "client-key": str(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": "admin"}}],
        "current-context": CLUSTER_NAME,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


class KubeRest:
    """Blocking JSON calls on one keep-alive HTTPS connection (used by ``up``, not in loops)."""

    def __init__(self, host: str, port: int, pki: Pki, timeout: float = 30.0) -> None:
        self._host, self._port, self._timeout = host, port, timeout
        self._context = client_ssl_context(pki)
        self._connection: http.client.HTTPSConnection | None = None

    def _connect(self) -> http.client.HTTPSConnection:
        if self._connection is None:
            self._connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._context
            )
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; returns (status, decoded JSON or text). Retries once on a dropped link."""
        payload = json.dumps(body).encode() if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in (1, 2):
            connection = self._connect()
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                raw = response.read()
                break
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        text = raw.decode(errors="replace")
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def ready(self) -> bool:
        """True when /readyz answers 200."""
        try:
            status, _ = self.request("GET", "/readyz")
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def create(self, path: str, body: dict, *, exist_ok: bool = False) -> Any:
        """POST ``body`` to ``path``; a 409 is fine when ``exist_ok``."""
        status, answer = self.request("POST", path, body)
        if status == 409 and exist_ok:
            return answer
        if status >= 300:
            name = body.get("metadata", {}).get("name")
            raise TestbedError(f"creating {body.get('kind')} {name!r} failed ({status}): {answer}")
        return answer


def ensure_namespace(rest: KubeRest, name: str) -> None:
    """Create a namespace and its ``default`` ServiceAccount (no controller-manager here)."""
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        exist_ok=True,
    )
    rest.create(
        f"/api/v1/namespaces/{name}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        exist_ok=True,
    )


def async_configuration(server: str, pki: Pki):
    """A kubernetes_asyncio Configuration for the admin user."""
    configuration = Configuration(host=server)
    configuration.ssl_ca_cert = str(pki.ca_cert)
    configuration.cert_file = str(pki.admin_cert)
    configuration.key_file = str(pki.admin_key)
    return configuration
