"""Fixtures for offline spawner tests.

- ``kubeconfig``: a dummy kubeconfig in KUBECONFIG (nothing connects to it), so
  KubeSpawner can be constructed without a cluster.
- ``make_spawner``: async factory building a ``FractionalSpawner`` from a traitlets
  Config inside the running event loop; reflectors are stopped afterwards.
- ``example_config``: the README example profiles as a traitlets Config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from traitlets.config import Config

from fracnb_spawner.dryrun import OFFLINE_KUBECONFIG
from tests.spawner.examples import EXAMPLE_CONFIG, load_config_file


@pytest.fixture(autouse=True)
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(OFFLINE_KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    # kubernetes_asyncio reads KUBECONFIG once, at import; other test modules may import it first.
    from kubernetes_asyncio.config import kube_config
    from kubespawner import clients

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))

    clients.load_config.cache_clear()
    return path


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
