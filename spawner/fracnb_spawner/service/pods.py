"""Where the service reads singleuser pods from: one LIST, in one namespace or in all of them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from fracnb_spawner.cluster.kube import list_pods, singleuser_selector

SINGLEUSER_SELECTOR = singleuser_selector()
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class PodSource(Protocol):
    async def list_pods(self) -> list[Mapping[str, Any]]:
        """Singleuser pods as plain dicts (camelCase keys, as the Kubernetes API sends them)."""
        ...


class KubernetesPods:
    """Lists pods with kubernetes_asyncio, in ``namespace`` or (``None``) in every namespace.

    ``kubeconfig`` empty: in-cluster service account first, then the default kubeconfig.
    """

    def __init__(self, *, namespace: str | None, kubeconfig: str = "", selector: str = SINGLEUSER_SELECTOR) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.selector = selector
        self._api: Any = None

    async def _core_api(self) -> Any:
        if self._api is None:
            from kubernetes_asyncio import client, config  # noqa: PLC0415 -- hub extra only

            configuration = client.Configuration()
            if self.kubeconfig:
                await config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
            else:
                try:
                    config.load_incluster_config(client_configuration=configuration)
                except config.ConfigException:
                    await config.load_kube_config(client_configuration=configuration)
            self._api = client.CoreV1Api(client.ApiClient(configuration))
        return self._api

    async def list_pods(self) -> list[Mapping[str, Any]]:
        return await list_pods(await self._core_api(), self.namespace, self.selector)

    async def gpu_capacity(self) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        """Nodes, and live pods in every namespace, as plain dicts: one LIST each.

        What the admin page makes GPU kinds of; needs list on nodes and pods cluster-wide
        (helm-values/rbac.yaml), else raises ``ApiException``.
        """
        api = await self._core_api()
        nodes, pods = await asyncio.gather(
            _list_items(api.list_node, "nodes"),
            _list_items(api.list_pod_for_all_namespaces, "pods", field_selector=LIVE_PODS),
        )
        return nodes, pods

    async def close(self) -> None:
        if self._api is not None:
            await self._api.api_client.close()
            self._api = None


async def _list_items(call: Any, what: str, **kwargs: Any) -> list[Mapping[str, Any]]:
    from kubernetes_asyncio.client.exceptions import ApiException  # noqa: PLC0415 -- hub extra only

    response = await call(_preload_content=False, **kwargs)
    async with response:
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=f"listing {what}: {(await response.text())[:200]}")
        data = await response.json()
    return data.get("items") or []
