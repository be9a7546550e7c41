"""A hub whose ServiceAccount has only the rights a test grants (the testbed's apiserver authorizes with RBAC)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def hub_with_rules(testbed, namespace: str, rules: list[dict]) -> AsyncIterator:
    """A CoreV1Api as the namespace's ``default`` ServiceAccount, bound to a Role of ``rules`` only."""
    from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

    rest = testbed.rest()
    try:
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "hub"}}
        rest.create(f"{rbac}/roles", {**role, "rules": rules})
        rest.create(
            f"{rbac}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "hub"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
            },
        )
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
    async with ApiClient(configuration) as api_client:
        yield CoreV1Api(api_client)
