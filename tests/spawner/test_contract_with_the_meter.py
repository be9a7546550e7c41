"""The hub side of docs/contract.md, checked against the schema the notebook side reads.

The spawner and the meter never import each other at run time; this test imports both, so
every backend and isolation level the spawner can put into a pod is one the meter knows, and
every pod environment the example profiles produce is one the meter reads without error.
"""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_meter.contract import read_budget
from fracnb_meter.schema import POD_ENVIRONMENT, enum, problems
from fracnb_spawner import gpu

from .test_spawner_offline import EXPECTED, env_of, options_for


def test_every_backend_the_spawner_can_plan_is_in_the_schema() -> None:
    # Every GPUPlan.backend has an isolation level: the configurable backends, whole and none.
    plannable = set(gpu.ISOLATION)
    assert set(gpu.BACKENDS) <= plannable
    assert plannable == set(enum(POD_ENVIRONMENT, "backend"))
    assert set(gpu.ISOLATION.values()) == set(enum(POD_ENVIRONMENT, "isolation"))


@pytest.mark.parametrize("key", list(EXPECTED))
async def test_every_pod_environment_fits_the_schema_and_the_meter_reads_it(
    make_spawner, example_config: Config, key: str
) -> None:
    spawner = make_spawner(example_config, options_for(key))
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    environment = {name: value for name, value in env_of(pod).items() if name.startswith("FRACNB_")}
    assert problems(POD_ENVIRONMENT, environment) == []
    budget = read_budget(environment)
    assert (budget.backend, budget.isolation) == (
        environment["FRACNB_GPU_BACKEND"],
        environment["FRACNB_ISOLATION"],
    )
    assert budget.memory_bytes == int(environment["FRACNB_GPU_MEMORY_LIMIT"])
    # The meter shows the profile by the name the form gave it, and the real soft cap.
    shown = {profile["slug"]: profile["display_name"] for profile in await spawner.resolve_profiles()}
    assert budget.profile_display_name == shown[environment["FRACNB_PROFILE"]]
    if "FRACNB_SOFT_CAP_BYTES" in environment:
        assert budget.soft_cap_bytes == int(environment["FRACNB_SOFT_CAP_BYTES"])


async def test_the_example_profiles_use_every_backend(make_spawner, example_config: Config) -> None:
    """So the test above reads real pods of every backend the schema lists."""
    seen = set()
    for key in EXPECTED:
        spawner = make_spawner(example_config, options_for(key))
        await spawner.load_user_options()
        seen.add(env_of(await spawner.get_pod_manifest())["FRACNB_GPU_BACKEND"])
    assert seen == set(enum(POD_ENVIRONMENT, "backend"))
