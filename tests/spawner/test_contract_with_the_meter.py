"""The hub side of docs/contract.md, checked against the schema the notebook side reads.

The spawner and the meter never import each other at run time; this test imports both, so
every backend and isolation level the spawner can put into a pod is one the meter knows, and
every pod environment the example profiles produce is one the meter reads without error.
"""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_meter.contract import read_budget
from fracnb_meter.hibernation.notice import STOP_REASONS
from fracnb_schemas import POD_ENVIRONMENT, enum, load, problems
from fracnb_spawner.gpu.table import BACKENDS, ISOLATION_LEVELS, TABLE
from fracnb_spawner.history.stopnotices import SERVICE_REASONS, USER_STOP
from tests.spawner.examples import EXPECTED, env_of, options_for


def test_the_schema_lists_exactly_the_backends_of_the_table() -> None:
    """The meter reads its backends from the schema; the schema must follow the spawner's table.

    Adding a record to ``gpu.table.TABLE`` without adding its name to the schema's enum fails
    here, instead of every notebook of the new backend reading "budget unknown".
    """
    plannable = [backend.name for backend in TABLE]  # the selectable ones, whole and none
    assert set(BACKENDS) <= set(plannable)
    assert enum(POD_ENVIRONMENT, "backend") == tuple(plannable)
    assert set(enum(POD_ENVIRONMENT, "isolation")) == set(ISOLATION_LEVELS)


def test_the_schema_describes_every_backend() -> None:
    described = load(POD_ENVIRONMENT)["$defs"]["backend"]["description"]
    assert [backend.name for backend in TABLE if backend.name not in described] == []


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


def test_the_meter_takes_every_stop_reason_the_hub_tells_it():
    """The hub tells a server why it is about to be stopped (``?stop=`` of the hibernation request): a stop on
    request, or one of the service's cull reasons; the meter accepts exactly those (usage.schema.json)."""
    assert set(STOP_REASONS) == SERVICE_REASONS | {USER_STOP}
