"""A hub whose ServiceAccount has only the rights a test grants (the testbed's apiserver authorizes with RBAC)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

RBAC = "/apis/rbac.authorization.k8s.io/v1"


@contextlib.asynccontextmanager
async def hub_with_rules(testbed, namespace: str, rules: list[dict], cluster_rules: list[dict] = ()) -> AsyncIterator:
    """A CoreV1Api as the namespace's ``default`` ServiceAccount, bound to a Role of ``rules`` only, and (if
    given) to a ClusterRole of ``cluster_rules`` (for cluster-scoped objects; removed again at exit)."""
    from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

    subject = {"kind": "ServiceAccount", "name": "default", "namespace": namespace}
    cluster_name = f"hub-{namespace}"
    rest = testbed.rest()
    try:
        _bind(rest, f"{RBAC}/namespaces/{namespace}", "Role", "hub", rules=rules, subject=subject)
        if cluster_rules:
            _bind(rest, RBAC, "ClusterRole", cluster_name, rules=list(cluster_rules), subject=subject)
        token = rest.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
    finally:
        rest.close()
    configuration = Configuration(host=testbed.server)
    configuration.ssl_ca_cert = str(testbed.state.pki.ca_cert)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    try:
        async with ApiClient(configuration) as api_client:
            yield CoreV1Api(api_client)
    finally:
        if cluster_rules:
            rest = testbed.rest()
            try:
                rest.request("DELETE", f"{RBAC}/clusterrolebindings/{cluster_name}")
                rest.request("DELETE", f"{RBAC}/clusterroles/{cluster_name}")
            finally:
                rest.close()


def _bind(rest, prefix: str, kind: str, name: str, *, rules: list[dict], subject: dict) -> None:
    """A Role (or ClusterRole) of ``rules`` and its binding to ``subject``, both called ``name``."""
    rest.create(
        f"{prefix}/{kind.lower()}s",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "rules": rules},
    )
    rest.create(
        f"{prefix}/{kind.lower()}bindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": f"{kind}Binding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [subject],
        },
    )
