"""Where the service reads singleuser pods from: one LIST, in one namespace or in all of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from fracnb_spawner.kube import list_pods, singleuser_selector

SINGLEUSER_SELECTOR = singleuser_selector()


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

    async def close(self) -> None:
        if self._api is not None:
            await self._api.api_client.close()
            self._api = None
