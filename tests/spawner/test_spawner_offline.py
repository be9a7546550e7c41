"""load_user_options -> get_pod_manifest for every profile and choice of the example config."""

from __future__ import annotations

import pytest
from kubespawner import __version__ as kubespawner_version
from traitlets.config import Config

from tests.spawner.examples import EXPECTED, GIB, env_of, options_for


@pytest.mark.parametrize("key", list(EXPECTED))
async def test_every_profile_builds_its_pod(make_spawner, example_config: Config, key: str) -> None:
    limits, selector, scheduler, fraction, budget, isolation = EXPECTED[key]
    spawner = make_spawner(example_config, options_for(key))
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    container = pod.spec.containers[0]
    gpu_limits = {k: v for k, v in (container.resources.limits or {}).items() if k not in ("cpu", "memory")}
    assert gpu_limits == limits
    gpu_requests = {k: v for k, v in (container.resources.requests or {}).items() if k not in ("cpu", "memory")}
    assert gpu_requests == limits
    assert (pod.spec.node_selector or {}) == selector
    assert pod.spec.scheduler_name == scheduler
    env = env_of(pod)
    assert env["FRACNB_GPU_FRACTION"] == fraction
    assert env["FRACNB_GPU_MEMORY_LIMIT"] == str(budget)
    assert env["FRACNB_ISOLATION"] == isolation
    assert env["FRACNB_PROFILE"] == key.partition(":")[0]
    assert pod.metadata.labels["fracnb.io/profile"] == key.partition(":")[0]
    assert pod.metadata.annotations["fracnb.io/gpu-memory-limit"] == str(budget)
    assert ("NVIDIA_VISIBLE_DEVICES" in env) == (key == "cpu")


async def test_a_dra_choice_claims_a_memory_slice_by_a_claim_named_after_the_pod(
    make_spawner, example_config: Config
) -> None:
    config = Config(example_config)
    config.FractionalSpawner.mem_limit = "4G"
    config.FractionalSpawner.cpu_guarantee = 0.5
    spawner = make_spawner(config, {"profile": "dra-quarter"})
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    claim_name = f"{spawner.pod_name}-gpu"
    claims = [(claim.name, claim.resource_claim_name) for claim in pod.spec.resource_claims]
    assert claims == [("gpu", claim_name)]
    resources = pod.spec.containers[0].resources
    assert [claim.name for claim in resources.claims] == ["gpu"]
    # KubeSpawner's cpu and memory limits stay beside the claim.
    assert (resources.limits, resources.requests) == ({"memory": 4 * 2**30}, {"cpu": 0.5})
    (companion,) = spawner.spawn_plan.pod.companions
    assert companion["metadata"]["name"] == claim_name
    request = companion["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}}


async def test_gpu_profiles_cull_idle_kernels(make_spawner, example_config: Config) -> None:
    spawner = make_spawner(example_config, {"profile": "quarter"})
    await spawner.load_user_options()
    assert env_of(await spawner.get_pod_manifest())["FRACNB_KERNEL_CULL_IDLE_TIMEOUT"] == "1200"
    cpu = make_spawner(example_config, {"profile": "cpu"})
    await cpu.load_user_options()
    assert "FRACNB_KERNEL_CULL_IDLE_TIMEOUT" not in env_of(await cpu.get_pod_manifest())


async def test_the_hubs_display_zone_reaches_the_notebook(make_spawner, example_config: Config) -> None:
    """The kernel's times (the widget, %fracnb_restore) use it until a browser tells its own zone."""
    example_config.FracnbQueue.display_timezone = "America/New_York"
    for profile in ("quarter", "cpu"):
        spawner = make_spawner(example_config, {"profile": profile})
        await spawner.load_user_options()
        assert env_of(await spawner.get_pod_manifest())["FRACNB_DISPLAY_TIMEZONE"] == "America/New_York"


async def test_cull_policy_annotations(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {
            "display_name": "GPU",
            "slug": "gpu",
            "gpu": {"fraction": 0.5},
            "cull": {"idle_timeout": "45m", "max_age": "1d"},
        },
        {"display_name": "CPU", "slug": "cpu"},
    ]
    gpu = make_spawner(config, {"profile": "gpu"})
    await gpu.load_user_options()
    annotations = (await gpu.get_pod_manifest()).metadata.annotations
    assert annotations["fracnb.io/idle-timeout"] == "2700"
    assert annotations["fracnb.io/max-age"] == "86400"
    cpu = make_spawner(config, {"profile": "cpu"})
    await cpu.load_user_options()
    assert (await cpu.get_pod_manifest()).metadata.annotations["fracnb.io/idle-timeout"] == str(8 * 3600)


async def test_timeout_under_demand_annotation(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {
            "display_name": "GPU",
            "slug": "gpu",
            "gpu": {"fraction": 0.5},
            "cull": {"idle_timeout": "1h", "idle_timeout_under_demand": "20m"},
        },
        {"display_name": "Plain GPU", "slug": "plain", "gpu": {"fraction": 0.5}},
        {"display_name": "CPU", "slug": "cpu", "cull": {"idle_timeout_under_demand": "20m"}},
    ]
    expected = {"gpu": "1200", "plain": None, "cpu": None}  # a CPU-only server never holds a GPU slot
    for slug, value in expected.items():
        spawner = make_spawner(config, {"profile": slug})
        await spawner.load_user_options()
        annotations = (await spawner.get_pod_manifest()).metadata.annotations
        assert annotations.get("fracnb.io/idle-timeout-under-demand") == value, slug


async def test_reserved_variables_cannot_be_smuggled(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.environment = {"NVIDIA_VISIBLE_DEVICES": "all", "FRACNB_GPU_FRACTION": "1"}
    config.FractionalSpawner.extra_container_config = {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]}
    config.FractionalSpawner.profile_list = [{"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25}}]
    spawner = make_spawner(config, {"profile": "q"})
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    env = env_of(pod)
    assert env["FRACNB_GPU_FRACTION"] == "0.25"
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert "CUDA_VISIBLE_DEVICES" not in env


async def test_no_leak_between_spawns_on_one_object(make_spawner, example_config: Config) -> None:
    spawner = make_spawner(example_config, {"profile": "shared", "size": "half"})
    await spawner.load_user_options()
    assert (await spawner.get_pod_manifest()).spec.scheduler_name == "hami-scheduler"
    spawner.user_options = {"profile": "quarter"}
    await spawner.load_user_options()
    assert "FRACNB_SOFT_CAP_BYTES" in env_of(await spawner.get_pod_manifest())
    spawner.user_options = {"profile": "cpu"}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    assert pod.spec.scheduler_name is None
    assert {k for k in pod.spec.containers[0].resources.limits or {} if "/" in k} == set()
    assert not pod.spec.node_selector
    assert env_of(pod)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "FRACNB_SOFT_CAP_BYTES" not in env_of(pod)
    # fracnb's fields were never written onto KubeSpawner's traits
    assert (spawner.scheduler_name, spawner.extra_resource_limits, spawner.node_selector) == (None, {}, {})


async def test_state_round_trip(make_spawner, example_config: Config) -> None:
    spawner = make_spawner(example_config, {"profile": "shared", "size": "eighth"})
    await spawner.load_user_options()
    state = spawner.get_state()
    assert state["fracnb"] == {
        "profile": "shared", "choice": "size=eighth", "backend": "time-slicing",
        "fraction": "1/8", "memory_bytes": 10 * GIB,
    }  # fmt: skip
    restored = make_spawner(example_config)
    restored.load_state(state)
    assert restored.spawn_plan is not None
    assert restored.spawn_plan.gpu.memory_bytes == 10 * GIB
    restored.clear_state()
    assert restored.spawn_plan is None


async def test_callable_profile_list_is_validated_when_called(make_spawner) -> None:
    config = Config()

    async def profiles(spawner):
        return [{"display_name": "Broken", "slug": "broken", "gpu": {"fraction": 3}}]

    config.FractionalSpawner.profile_list = profiles
    spawner = make_spawner(config, {"profile": "broken"})
    with pytest.raises(Exception, match="profile 'broken'") as caught:
        await spawner.load_user_options()
    assert caught.value.status_code == 500


@pytest.mark.skipif(
    tuple(int(part) for part in kubespawner_version.split(".")[:2]) < (7, 1),
    reason="KubeSpawner 7.1 added the dict form of profile_list",
)
async def test_dict_form_profile_list(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = {
        "b-quarter": {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}},
        "a-cpu": {"display_name": "CPU", "slug": "cpu"},
    }
    spawner = make_spawner(config, {})
    await spawner.load_user_options()
    assert spawner.user_options == {"profile": "cpu"}  # ordered by key: a-cpu is first, so the default
    spawner = make_spawner(config, {"profile": "quarter"})
    await spawner.load_user_options()
    assert (await spawner.get_pod_manifest()).spec.containers[0].resources.limits == {"nvidia.com/gpu.shared": "1"}
