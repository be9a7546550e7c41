"""Each values file through the chart's own jupyterhub_config.py (Zero-to-JupyterHub 4.4.0).

The chart's config reads values through its ``z2jh`` helper module, which in a hub pod reads
mounted files; here a small stand-in serves the merged values the same way. The resulting
traitlets config then builds every profile's pod with FractionalSpawner, offline.
"""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from kubespawner import KubeSpawner
from tornado.httpclient import AsyncHTTPClient
from traitlets.config import Config, PyFileConfigLoader

from fracnb_spawner.config.profiles import UNLISTED, initialize_profiles, iter_combinations
from fracnb_spawner.quota.config import FracnbQuotas
from tests.helm.scenarios import EXPECTED, SCENARIOS

from .conftest import CHART_DIR, merged, values_of

RELEASE = "jhub"


def z2jh_module(values: dict) -> types.ModuleType:
    """The chart's z2jh helpers (get_config & co.) over an in-memory values tree."""

    def get_config(key: str, default: Any = None) -> Any:
        node: Any = values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def set_config_if_not_none(section: Any, trait: str, key: str) -> None:
        value = get_config(key)
        if value is not None:
            setattr(section, trait, value)

    module = types.ModuleType("z2jh")
    module.get_config = get_config
    module.set_config_if_not_none = set_config_if_not_none
    module.get_name = lambda name: f"{RELEASE}-{name}" if name != "hub" else "hub"
    module.get_name_env = lambda name, suffix="": "8081" if suffix.endswith("PORT") else name.upper()
    module.get_secret_value = lambda key, default="secret-value": get_config(key) or default
    return module


def chart_config(values: dict, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setitem(sys.modules, "z2jh", z2jh_module(values))
    monkeypatch.setenv("POD_NAMESPACE", "jhub")
    config_file = CHART_DIR / "jupyterhub_config.py"
    try:
        return PyFileConfigLoader(config_file.name, path=str(CHART_DIR)).load_config()
    finally:
        AsyncHTTPClient.configure(None)  # the chart selects curl for the whole process; undo that


async def pods_of(config: Config) -> dict[str, tuple[dict, dict, str]]:
    from fracnb_spawner.spawner import FractionalSpawner

    FractionalSpawner(_mock=True, config=config)  # the hub refuses bad configuration the same way
    FracnbQuotas(config=config).policy()  # and bad quotas
    config = Config(config)
    config.pop("FracnbQuotas", None)  # admission needs the cluster's pods; the pods are what this checks
    raw = config.FractionalSpawner.get("profile_list", config.KubeSpawner.get("profile_list", []))
    seen = {}
    try:
        for profile in initialize_profiles(raw):
            for chosen, _spec, _cull in iter_combinations(profile):
                if any(choice == UNLISTED for _, choice in chosen):
                    continue
                spawner = FractionalSpawner(_mock=True, config=config)
                spawner.user_options = {"profile": profile["slug"], **dict(chosen)}
                await spawner.load_user_options()
                pod = await spawner.get_pod_manifest()
                limits = pod.spec.containers[0].resources.limits or {}
                key = ",".join([profile["slug"], *(f"{o}={c}" for o, c in chosen)])
                seen[key] = (
                    {k: str(v) for k, v in limits.items() if "/" in k},
                    pod.spec.node_selector or {},
                    pod.spec.scheduler_name,
                )
    finally:
        await KubeSpawner._stop_all_reflectors()
    return seen


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_config_yields_the_expected_pods(
    scenario: str, chart: tuple[dict, dict], monkeypatch: pytest.MonkeyPatch, offline_kubeconfig: Path
) -> None:
    defaults, _schema = chart
    config = chart_config(merged(defaults, values_of(scenario)), monkeypatch)
    assert config.JupyterHub.spawner_class == "fractional"
    assert "fracnb" in {service["name"] for service in config.JupyterHub.services}
    seen = asyncio.run(pods_of(config))
    # The chart sends user pods to its own user-scheduler; HAMi and KAI choices must override it.
    user_scheduler = f"{RELEASE}-user-scheduler"
    expected = {
        key: (resources, selector, user_scheduler if scheduler == "(default)" else scheduler)
        for key, (resources, selector, scheduler) in EXPECTED[scenario].items()
    }
    assert seen == expected
