"""The demo's generated jupyterhub_config.py: loadable, pods land on local nodes, profiles valid."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from traitlets.config import PyFileConfigLoader

from fracnb_spawner import dryrun
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_testbed.demo import DemoSettings, hub_config


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    settings = DemoSettings(state_dir=tmp_path, kubeconfig=tmp_path / "kubeconfig", namespace="demo-ns", port=18123)
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(hub_config(settings, "/opt/chp"))
    return path


def test_config_points_the_hub_at_local_nodes_and_the_service(config_file: Path) -> None:
    config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()
    assert config.JupyterHub.spawner_class == "fractional"
    assert config.JupyterHub.port == 18123
    assert config.JupyterHub.hub_connect_ip == "127.0.0.1"
    assert config.KubeSpawner.node_selector == {"fracnb.io/runner": "local"}
    assert config.KubeSpawner.namespace == "demo-ns"
    assert config.Spawner.default_url == "/lab"
    assert config.ConfigurableHTTPProxy.command == ["/opt/chp"]
    (service,) = config.JupyterHub.services
    assert service["command"][-2:] == ["--config", str(config_file)]
    assert config.FracnbService.namespace == "demo-ns"
    assert config.JupyterHub.load_groups["team-a"] == {"users": ["ann", "bob"]}
    policy = FracnbQuotas(config=config).policy()  # the service refuses bad quotas at start
    assert policy.user_limit("ann") == Fraction(1, 2)


def test_demo_profiles_pass_the_dry_run(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dryrun.main([str(config_file), "--json"]) == 0
    rows = {row["profile"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["cpu"]["gpu_resources"] == {}
    assert rows["quarter"]["gpu_resources"] == {"nvidia.com/gpu.shared": "1"}
    # The local A100 node is sliced 4 ways; the quarter must land there.
    assert rows["quarter"]["node_selector"]["nvidia.com/gpu.replicas"] == "4"
    assert rows["quarter"]["node_selector"]["fracnb.io/runner"] == "local"
    assert rows["quarter"]["memory_budget_bytes"] == 20 << 30
