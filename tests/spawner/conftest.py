"""Fixtures for offline spawner tests.

- ``kubeconfig``: the root ``offline_kubeconfig`` for every test here, so KubeSpawner can be
  constructed without a cluster.
- ``make_spawner``: async factory building a ``FractionalSpawner`` from a traitlets
  Config inside the running event loop; reflectors are stopped afterwards.
- ``example_config``: the README example profiles as a traitlets Config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from traitlets.config import Config

from tests.spawner.examples import EXAMPLE_CONFIG, load_config_file


@pytest.fixture(autouse=True)
def kubeconfig(offline_kubeconfig: Path) -> Path:
    return offline_kubeconfig


@pytest.fixture
def example_config() -> Config:
    return load_config_file(EXAMPLE_CONFIG)


@pytest.fixture
async def make_spawner() -> AsyncIterator[Callable]:
    from kubespawner import KubeSpawner

    from fracnb_spawner.spawner import FractionalSpawner

    def factory(config: Config | None = None, user_options: dict | None = None) -> FractionalSpawner:
        spawner = FractionalSpawner(_mock=True, config=config or Config())
        spawner.user_options = user_options if user_options is not None else {}
        return spawner

    yield factory
    await KubeSpawner._stop_all_reflectors()
