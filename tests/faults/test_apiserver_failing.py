"""The apiserver failing or slow, injected by a proxy in front of it (:mod:`fracnb_testbed.faultproxy`):
spawns fail with plain words, and nothing leaks: no pod, no ResourceClaimTemplate, no ResourceClaim,
no quota reservation. FractionalSpawner runs in this process as the hub runs it (a failed start is
followed by the hub's stop: ``poll()``, then ``stop()`` if something runs), against the real apiserver,
scheduler and kube-controller-manager of the ``faults`` cluster (a DRA GPU on a KWOK node)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from traitlets.config import Config

from fracnb_spawner.cluster.kube import close_shared_clients, kubeconfig_at
from fracnb_spawner.common.errors import RefusedSpawnError
from fracnb_spawner.hubstate import HubState
from fracnb_testbed.faultproxy import FaultProxy
from fracnb_testbed.handle import Testbed

PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "DRA quarter", "slug": "dra", "gpu": {"fraction": 0.25, "backend": "dra"}},
]


@pytest.fixture
def namespace(faults_testbed: Testbed) -> Iterator[str]:
    name = faults_testbed.create_namespace()
    try:
        yield name
    finally:
        faults_testbed.delete_namespace(name)


@pytest.fixture
def proxy(faults_testbed: Testbed) -> Iterator[FaultProxy]:
    with FaultProxy(faults_testbed.state) as running:
        yield running


@asynccontextmanager
async def spawners_through(proxy: FaultProxy, namespace: str) -> AsyncIterator[Callable]:
    """FractionalSpawners whose Kubernetes client goes through the fault proxy, in this event loop.

    The tests run their own loop (``asyncio.run``): the Playwright tests of this tier leave a loop marked
    running in the process, which pytest-asyncio's tests after them would trip over."""
    from fracnb_spawner.spawner import FractionalSpawner

    with kubeconfig_at(proxy.kubeconfig):

        def make(user: str) -> FractionalSpawner:
            config = Config()
            config.FractionalSpawner.namespace = namespace
            config.FractionalSpawner.profile_list = PROFILES
            config.FractionalSpawner.start_timeout = 30
            config.FractionalSpawner.k8s_api_request_timeout = 2
            config.FractionalSpawner.k8s_api_request_retry_timeout = 8
            config.FractionalSpawner.delete_grace_period = 0
            config.FracnbQuotas.default_user_quota = 1
            spawner = FractionalSpawner(_mock=True, config=config)
            spawner.user.name = user
            spawner.user.groups = []
            spawner.pod_name = f"jupyter-{user}"
            spawner.user_options = {"profile": "dra"}
            return spawner

        try:
            yield make
        finally:
            await HubState.discard()
            await close_shared_clients()


async def failed_start(spawner) -> RefusedSpawnError:
    """Start, expect a refusal, then do what the hub does after a failed start."""
    with pytest.raises(RefusedSpawnError) as refused:
        await spawner.start()
    if await spawner.poll() is None:
        await spawner.stop(now=True)
    spawner.clear_state()
    return refused.value


def leaks(testbed: Testbed, namespace: str, spawner) -> list[str]:
    found = [f"pod {p['metadata']['name']}" for p in testbed.list_pods(namespace)]
    for kind in ("resourceclaimtemplates", "resourceclaims"):
        items = testbed.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/{kind}")["items"]
        found += [f"{kind} {item['metadata']['name']}" for item in items]
    if HubState.current().ledger.reserved(spawner.user.name, spawner.name) is not None:
        found.append("a quota reservation")
    return found


async def no_leaks(testbed: Testbed, namespace: str, spawner, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while found := leaks(testbed, namespace, spawner):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"left behind: {found}")
        await asyncio.sleep(0.5)


def test_pod_creation_refused_with_500(proxy, faults_testbed, namespace) -> None:
    async def scenario() -> None:
        async with spawners_through(proxy, namespace) as make:
            spawner = make("ada")
            proxy.fail("POST", r"/namespaces/[^/]+/pods$", status=500)
            refused = await failed_start(spawner)
            assert refused.jupyterhub_message.startswith("The cluster's API server answered 500")
            assert "nothing was started" in refused.jupyterhub_message
            await no_leaks(faults_testbed, namespace, spawner)

    asyncio.run(scenario())
    # The claim is sent with the pod; the failed start deleted it (no_leaks above).
    assert [seen for seen in proxy.seen if seen[0] == "POST" and "/resourceclaim" in seen[1]] != []


def test_claim_refused_with_503(proxy, faults_testbed, namespace) -> None:
    """The pod was created with it; without its claim it would wait forever, so it goes."""

    async def scenario() -> None:
        async with spawners_through(proxy, namespace) as make:
            spawner = make("ben")
            proxy.fail("POST", r"/resourceclaims$", status=503)
            with pytest.raises(Exception, match="could not create ResourceClaim ") as refused:
                await spawner.start()
            assert "503" in str(refused.value)
            if await spawner.poll() is None:
                await spawner.stop(now=True)
            spawner.clear_state()
            await no_leaks(faults_testbed, namespace, spawner)

    asyncio.run(scenario())


def test_pod_creation_unanswered(proxy, faults_testbed, namespace) -> None:
    """The apiserver creates the pod but its answer comes too late, every time: KubeSpawner retries, finds its
    own pod (409), replaces it, and gives up; the hub's stop then removes the last one."""

    async def scenario() -> None:
        async with spawners_through(proxy, namespace) as make:
            spawner = make("cyd")
            proxy.stall("POST", r"/namespaces/[^/]+/pods$", seconds=4)
            refused = await failed_start(spawner)
            assert refused.jupyterhub_message.startswith("The cluster's API server did not answer in time")
            await no_leaks(faults_testbed, namespace, spawner)

    asyncio.run(scenario())


def test_a_start_after_the_failures_works(proxy, faults_testbed, namespace) -> None:
    async def scenario() -> None:
        async with spawners_through(proxy, namespace) as make:
            spawner = make("dot")
            proxy.fail("POST", r"/namespaces/[^/]+/pods$", status=503, times=1)
            await failed_start(spawner)
            await asyncio.wait_for(spawner.start(), 60)
            assert HubState.current().ledger.reserved("dot", "") is not None
            await spawner.stop()
            await no_leaks(faults_testbed, namespace, spawner)

    asyncio.run(scenario())
