"""Where the service reads singleuser pods from: one LIST, in one namespace or in all of them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from fracnb_spawner.cluster.kube import list_pods, singleuser_selector
from fracnb_spawner.queue.kueue.model import GROUP as KUEUE_GROUP
from fracnb_spawner.queue.kueue.model import VERSION as KUEUE_VERSION
from fracnb_spawner.queue.kueue.quota import TeamQuota, local_queue_demand, user_team_quota
from fracnb_spawner.queue.localqueues import local_queue_name

SINGLEUSER_SELECTOR = singleuser_selector()
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
log = logging.getLogger("fracnb.service")


class KueueUnreadableError(Exception):
    """Kueue's objects could not be listed (no RBAC, Kueue's CRDs missing, the apiserver away)."""


class PodSource(Protocol):
    async def list_pods(self) -> list[Mapping[str, Any]]:
        """Singleuser pods as plain dicts (camelCase keys, as the Kubernetes API sends them)."""
        ...


class KubernetesPods:
    """Lists pods with kubernetes_asyncio, in ``namespace`` or (``None``) in every namespace; with ``kueue``
    (``c.FracnbQueue.engine = "kueue"``), Kueue's demand too (:meth:`kueue_demand`).

    ``kubeconfig`` empty: in-cluster service account first, then the default kubeconfig.
    """

    def __init__(
        self,
        *,
        namespace: str | None,
        kubeconfig: str = "",
        selector: str = SINGLEUSER_SELECTOR,
        kueue: bool = False,
        core_api: Any = None,
    ) -> None:
        """``core_api``: a kubernetes_asyncio ``CoreV1Api`` to use instead of one from the kubeconfig."""
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.selector = selector
        self.kueue = kueue
        self._api: Any = core_api
        self._kueue_refused = False

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

    async def api_client(self) -> Any:
        """The kubernetes_asyncio ``ApiClient`` the pods are listed with, for the service's other calls."""
        return (await self._core_api()).api_client

    async def gpu_capacity(self) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        """Nodes, and live pods in every namespace, as plain dicts: one LIST each.

        What the admin page makes GPU kinds of; needs list on nodes and pods cluster-wide
        (helm-values/rbac.yaml), else raises ``ApiException``.
        """
        api = await self._core_api()
        nodes, pods = await asyncio.gather(
            list_items(api.list_node, "nodes"),
            list_items(api.list_pod_for_all_namespaces, "pods", field_selector=LIVE_PODS),
        )
        return nodes, pods

    async def kueue_demand(self) -> Mapping[str, datetime] | None:
        """Kueue's LocalQueues whose servers' quota a waiting Workload could use, and since when
        (:func:`fracnb_spawner.queue.kueue.quota.local_queue_demand`): one LIST each of Workloads, LocalQueues
        and ClusterQueues. Empty without ``kueue``; None when Kueue cannot be read (said once in the log)."""
        if not self.kueue:
            return {}
        try:
            lists = await self._kueue_lists("workloads", "localqueues", "clusterqueues")
        except KueueUnreadableError as error:
            if not self._kueue_refused:
                log.warning("No demand from Kueue for the idle timeouts: cannot list its queues (%s)", error)
            self._kueue_refused = True
            return None
        self._kueue_refused = False
        return local_queue_demand(*lists)

    async def kueue_queues(self) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]] | None:
        """Kueue's LocalQueues and ClusterQueues, one LIST each, for the page's team quotas; None without
        ``kueue`` or when Kueue cannot be read."""
        if not self.kueue:
            return None
        try:
            local, cluster = await self._kueue_lists("localqueues", "clusterqueues")
        except KueueUnreadableError as error:
            log.info("No team quotas from Kueue on the page: cannot list its queues (%s)", error)
            return None
        return local, cluster

    async def _kueue_lists(self, *plurals: str) -> list[list[Mapping[str, Any]]]:
        """The items of one cluster-wide LIST of each of Kueue's ``plurals``."""
        from kubernetes_asyncio import client  # noqa: PLC0415 -- hub extra only
        from kubernetes_asyncio.client.exceptions import ApiException  # noqa: PLC0415

        objects = client.CustomObjectsApi((await self._core_api()).api_client)
        try:
            answers = await asyncio.gather(*(
                objects.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural) for plural in plurals
            ))  # fmt: skip
        except (ApiException, OSError) as error:
            raise KueueUnreadableError(str(error)) from error
        return [answer.get("items") or [] for answer in answers]

    async def close(self) -> None:
        if self._api is not None:
            await self._api.api_client.close()
            self._api = None


async def list_items(call: Any, what: str, **kwargs: Any) -> list[Mapping[str, Any]]:
    from kubernetes_asyncio.client.exceptions import ApiException  # noqa: PLC0415 -- hub extra only

    response = await call(_preload_content=False, **kwargs)
    async with response:
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=f"listing {what}: {(await response.text())[:200]}")
        data = await response.json()
    return data.get("items") or []


async def queue_demand(pods: PodSource) -> Mapping[str, datetime] | None:
    """The demand Kueue holds for the idle timeouts, where ``pods`` reads it (:meth:`KubernetesPods.kueue_demand`);
    None where it could not be read."""
    reader = getattr(pods, "kueue_demand", None)
    return await reader() if reader is not None else {}


async def kueue_queues(pods: PodSource) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]] | None:
    """Kueue's LocalQueues and ClusterQueues, where ``pods`` reads them (:meth:`KubernetesPods.kueue_queues`);
    None where it does not or could not."""
    reader = getattr(pods, "kueue_queues", None)
    return await reader() if reader is not None else None


async def team_of(pods: PodSource, local_queue_template: str | None, name: str) -> TeamQuota | None:
    """With the kueue engine (``local_queue_template``: FracnbQueue.kueue_local_queue), the user's team quota: the
    ClusterQueue of their LocalQueue; None without the engine, or when it cannot be read."""
    queues = await kueue_queues(pods) if local_queue_template is not None else None
    if queues is None or local_queue_template is None:
        return None
    local_queue = local_queue_name(local_queue_template, name)
    return user_team_quota(*queues, local_queue, getattr(pods, "namespace", None))
