"""Exact reads of singleuser pods: one LIST, in one namespace or in all of them; and where the
Kubernetes client looks for its kubeconfig.

With KubeSpawner's ``enable_user_namespaces`` each user's pods live in a namespace of their own,
so everything that counts GPUs across users (the quota admission, the fracnb service) must list
every namespace, selecting pods by label as KubeSpawner's own pod reflector does. Listing needs
``list`` on pods in that scope (a ClusterRole for all namespaces; helm-values/rbac.yaml).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import kube_config

DEFAULT_COMPONENT = "singleuser-server"
# A cluster nobody listens at: KubeSpawner reads a kubeconfig when a spawner is built, and the dry
# run, the offline tests and the benchmarks build spawners without connecting anywhere.
OFFLINE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: offline, user: {token: offline}}]
contexts: [{name: offline, context: {cluster: offline, user: offline, namespace: jupyterhub}}]
current-context: offline
"""


def singleuser_selector(component_label: str = DEFAULT_COMPONENT) -> str:
    """The label selector of KubeSpawner's singleuser pods (``KubeSpawner.component_label``)."""
    return f"component={component_label}"


def _override_entries(profile: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The profile and every choice and unlisted choice of it: all that may carry kubespawner_override."""
    yield profile
    for option in (profile.get("profile_options") or {}).values():
        yield from (option.get("choices") or {}).values()
        yield option.get("unlisted_choice") or {}


def pod_namespaces(
    profiles: Iterable[Mapping[str, Any]], configured: str, *, user_namespaces: bool
) -> list[str] | None:
    """The namespaces singleuser pods may live in; ``None`` for any namespace.

    Any namespace with user namespaces, or when a ``kubespawner_override`` sets ``namespace`` to
    something other than a literal name (``"{value}"`` from free text, a callable). Otherwise the
    configured namespace and those that profiles and choices name.
    """
    if user_namespaces:
        return None
    found = {configured}
    for profile in profiles:
        for entry in _override_entries(profile):
            override = entry.get("kubespawner_override") or {}
            if "namespace" in override:
                value = override["namespace"]
                if not isinstance(value, str) or "{" in value:
                    return None
                found.add(value)
    return sorted(found)


async def list_pods_in(api: Any, namespaces: list[str] | None, label_selector: str) -> list[Mapping[str, Any]]:
    """:func:`list_pods` over several namespaces (``None``: all of them, in one LIST)."""
    if namespaces is None:
        return await list_pods(api, None, label_selector)
    listed = await asyncio.gather(*(list_pods(api, namespace, label_selector) for namespace in namespaces))
    return [pod for pods in listed for pod in pods]


async def list_pods(api: Any, namespace: str | None, label_selector: str) -> list[Mapping[str, Any]]:
    """Pods as plain dicts (camelCase keys, as the API sends them); ``namespace=None``: all namespaces.

    ``api`` is a kubernetes_asyncio ``CoreV1Api``. Raw JSON skips building thousands of model
    objects of which only a few maps are read.
    """
    if namespace is None:
        response = await api.list_pod_for_all_namespaces(label_selector=label_selector, _preload_content=False)
    else:
        response = await api.list_namespaced_pod(namespace, label_selector=label_selector, _preload_content=False)
    async with response:
        if not 200 <= response.status <= 299:
            # Unread, a refusal (403 without RBAC) would look like an empty list: no pods, no GPUs used.
            raise ApiException(status=response.status, reason=f"listing pods: {(await response.text())[:200]}")
        data = await response.json()
    return data.get("items") or []


async def close_shared_clients() -> None:
    """Stop KubeSpawner's reflectors and close the API clients it shares in this event loop. JupyterHub does
    that only when it cancels their tasks at shutdown: tests and benchmarks that make spawners in an event
    loop of their own call this before the loop ends (after ``HubState.discard()``)."""
    from kubespawner import KubeSpawner, clients  # noqa: PLC0415 - KubeSpawner only where spawners are built

    await KubeSpawner._stop_all_reflectors()
    loop = asyncio.get_running_loop()
    for key, shared in list(clients._client_cache.items()):
        if key[0] is loop:
            await shared.api_client.close()
            clients._client_cache.pop(key, None)


@contextlib.contextmanager
def kubeconfig_at(path: Path | str) -> Iterator[Path]:
    """Within the block, KubeSpawner and kubernetes_asyncio read the kubeconfig at ``path``; after it,
    what they read before.

    Setting ``KUBECONFIG`` is not enough: kubernetes_asyncio reads it once, when it is imported,
    into ``KUBE_CONFIG_DEFAULT_LOCATION``; and KubeSpawner loads the configuration once per process
    (``clients.load_config`` is cached).
    """
    from kubespawner import clients  # noqa: PLC0415 - KubeSpawner only where spawners are built

    path = Path(path)
    before = os.environ.get("KUBECONFIG"), kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    os.environ["KUBECONFIG"] = kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(path)
    clients.load_config.cache_clear()
    try:
        yield path
    finally:
        environment, kube_config.KUBE_CONFIG_DEFAULT_LOCATION = before
        if environment is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = environment
        clients.load_config.cache_clear()


@contextlib.contextmanager
def offline_kubeconfig() -> Iterator[Path]:
    """:data:`OFFLINE_KUBECONFIG` written to a scratch file and read (:func:`kubeconfig_at`) within the
    block: spawners can be built and pods planned on a machine with no cluster and no ``~/.kube``."""
    with tempfile.TemporaryDirectory(prefix="fracnb-offline-") as scratch:
        path = Path(scratch) / "kubeconfig"
        path.write_text(OFFLINE_KUBECONFIG)
        with kubeconfig_at(path):
            yield path
