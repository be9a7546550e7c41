"""The spawn plan and the pod merged from it, against literal dicts (as KubeSpawner tests make_pod)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from fractions import Fraction

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.models import (
    V1Container,
    V1EnvVar,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from fracnb_spawner.config.profiles import initialize_profiles, select
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.gpu.backends import BackendSettings, PodFields
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.resolve import plan_gpu
from fracnb_spawner.spawnplan import SpawnContext, for_pod, merged_node_selector, plan_spawn, pod_with_plan

GIB = 2**30
SETTINGS = BackendSettings("nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "hami", "kai", "q", "default", 0.95)
CONTEXT = SpawnContext(SETTINGS, CullPolicy(1800, 0), CullPolicy(28800, 0), {"pool": "gpu"}, "http://svc/", 1200)


def kubespawner_pod() -> V1Pod:
    """A pod as KubeSpawner's make_pod builds it, cut down to what the merge touches."""
    return V1Pod(
        metadata=V1ObjectMeta(name="jupyter-ann", labels={"component": "singleuser-server"}, annotations={"a": "1"}),
        spec=V1PodSpec(
            node_selector={"pool": "gpu"},
            containers=[
                V1Container(
                    name="notebook",
                    image="jupyter/base",
                    env=[
                        V1EnvVar(name="JUPYTERHUB_USER", value="ann"),
                        V1EnvVar(name="CUDA_VISIBLE_DEVICES", value="0,1"),  # set by an admin: fracnb's own
                        {"name": "FRACNB_PROFILE", "value": "forged"},  # extra_container_config's plain dicts
                    ],
                    resources=V1ResourceRequirements(limits={"memory": "4G"}, requests={"cpu": "0.5"}),
                )
            ],
        ),
    )


@pytest.fixture
async def as_dict() -> AsyncIterator[Callable[[V1Pod], dict]]:
    """The pod as the API client sends it."""
    async with ApiClient() as client:
        yield client.sanitize_for_serialization


async def test_the_plan_is_merged_into_kubespawners_pod(as_dict) -> None:
    plan = PodFields(
        resources={"nvidia.com/gpu.shared": "1"},
        node_selector={"nvidia.com/gpu.replicas": "4"},
        scheduler_name="kai-scheduler",
        labels={"fracnb.io/profile": "quarter"},
        annotations={"fracnb.io/gpu-fraction": "1/4"},
        environment={"FRACNB_PROFILE": "quarter"},
        pod_claims=[{"name": "gpu", "resourceClaimName": "jupyter-ann-gpu"}],
        container_claims=[{"name": "gpu"}],
    )
    pod = kubespawner_pod()
    before = as_dict(pod)
    merged = as_dict(pod_with_plan(pod, plan))
    assert merged == {
        "metadata": {
            "name": "jupyter-ann",
            "labels": {"component": "singleuser-server", "fracnb.io/profile": "quarter"},
            "annotations": {"a": "1", "fracnb.io/gpu-fraction": "1/4"},
        },
        "spec": {
            "nodeSelector": {"pool": "gpu", "nvidia.com/gpu.replicas": "4"},
            "schedulerName": "kai-scheduler",
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "jupyter-ann-gpu"}],
            "containers": [
                {
                    "name": "notebook",
                    "image": "jupyter/base",
                    "env": [
                        {"name": "JUPYTERHUB_USER", "value": "ann"},
                        {"name": "FRACNB_PROFILE", "value": "quarter"},
                    ],
                    "resources": {
                        "limits": {"memory": "4G", "nvidia.com/gpu.shared": "1"},
                        "requests": {"cpu": "0.5", "nvidia.com/gpu.shared": "1"},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
        },
    }
    assert as_dict(pod) == before, "KubeSpawner's pod is left as it was"


async def test_an_empty_plan_only_takes_the_reserved_variables_away(as_dict) -> None:
    merged = as_dict(pod_with_plan(kubespawner_pod(), PodFields()))
    expected = as_dict(kubespawner_pod())
    expected["spec"]["containers"][0]["env"] = [{"name": "JUPYTERHUB_USER", "value": "ann"}]
    assert merged == expected


PROFILES = initialize_profiles(
    [
        {
            "display_name": "Quarter",
            "slug": "quarter",
            "gpu": {"fraction": "1/4"},
            "kubespawner_override": {"node_selector": {"zone": "b"}},
        },
        {"display_name": "DRA", "slug": "dra", "gpu": {"fraction": "1/4", "backend": "dra"}, "queue": {"max_wait": 0}},
    ]
)
DEFAULTS = GPUDefaults("time-slicing", 80 * GIB, "A100-80GB")


def planned(slug: str):
    selection = select(PROFILES, {"profile": slug})
    return plan_spawn(selection, plan_gpu(selection.gpu, DEFAULTS), CONTEXT, lambda name: name.startswith("nvidia"))


def test_a_plan_holds_everything_the_spawn_needs() -> None:
    plan = planned("quarter")
    assert (plan.profile, plan.choice, plan.fraction, plan.gpu.memory_bytes) == (
        "quarter",
        "",
        Fraction(1, 4),
        20 * GIB,
    )
    assert plan.gpu.isolation == "none"
    assert plan.cull == CullPolicy(1800, 0)
    assert plan.overrides == ({"node_selector": {"zone": "b"}},)
    assert plan.ask is not None
    assert plan.ask.kind == "nvidia.com-gpu.shared.4.time-slicing.gpu.b"  # the selector's values in key order
    assert plan.max_wait == 3600
    assert plan.pod.resources == {"nvidia.com/gpu.shared": "1"}
    assert plan.pod.labels["fracnb.io/slot-kind"] == plan.ask.kind
    env = plan.pod.environment
    assert (env["FRACNB_SERVICE_URL"], env["FRACNB_KERNEL_CULL_IDLE_TIMEOUT"]) == ("http://svc/", "1200")
    assert env["FRACNB_GPU_FRACTION"] == "0.25"
    assert "FRACNB_SOFT_CAP_BYTES" in env  # time-slicing enforces nothing
    assert plan.state() == {
        "profile": "quarter", "choice": "", "backend": "time-slicing", "fraction": "1/4", "memory_bytes": 20 * GIB,
    }  # fmt: skip


def test_objects_beside_the_pod_get_its_name_per_spawn() -> None:
    plan = planned("dra")
    assert plan.max_wait == 0, "queue.max_wait 0: it never queues"
    (claim,) = plan.pod.companions
    named = for_pod(plan, "jupyter-ann")
    assert named.pod.companions[0]["metadata"]["name"] == f"jupyter-ann-{claim['metadata']['name']}"
    assert named.pod.companions[0]["metadata"]["labels"] == plan.pod.labels, "labelled as its pod"
    assert named.pod.pod_claims[0]["resourceClaimName"] == named.pod.companions[0]["metadata"]["name"]
    assert plan.pod.companions == [claim], "the plan itself serves every pod"
    assert for_pod(planned("quarter"), "jupyter-ann") == planned("quarter")


def test_the_node_selector_merges_as_kubespawner_merges_overrides() -> None:
    configured = {"pool": "cpu", "zone": "a"}
    overrides = ({"node_selector": {"pool": "gpu", "zone": None}}, {"image": "x"}, {"node_selector": {"rack": 3}})
    assert merged_node_selector(configured, overrides) == {"pool": "gpu", "rack": "3"}
    assert merged_node_selector(configured, ({"node_selector": lambda spawner: {}},)) is None
    assert configured == {"pool": "cpu", "zone": "a"}
    assert copy.deepcopy(overrides) == overrides
