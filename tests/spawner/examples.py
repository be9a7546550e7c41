"""The example hub configuration (examples/jupyterhub_config.py) and what each of its choices puts
into a pod: read by the offline spawner tests, the dry run's tests and the contract with the meter."""

from __future__ import annotations

from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "examples" / "jupyterhub_config.py"


def load_config_file(path: Path) -> Config:
    loader = PyFileConfigLoader(path.name, path=str(path.parent))
    return loader.load_config()


GIB = 2**30

EXPECTED = {
    # user_options: (limits, node selector, scheduler, FRACNB_GPU_FRACTION, budget, isolation)
    "cpu": ({}, {}, None, "0", 0, "none"),
    "quarter": (
        {"nvidia.com/gpu.shared": "1"},
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
        None, "0.25", 20 * GIB, "none",
    ),
    "shared:eighth": (
        {"nvidia.com/gpu.shared": "1"},
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "8"},
        None, "0.125", 10 * GIB, "none",
    ),
    "shared:half": (
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem-percentage": "50"},
        {}, "hami-scheduler", "0.5", 40 * GIB, "enforced",
    ),
    "mig-small": ({"nvidia.com/mig-1g.10gb": "1"}, {"nvidia.com/mig.strategy": "mixed"}, None, "0.125", 10 * GIB, "hard"),
    "mps-half": (
        {"nvidia.com/gpu.shared": "1"},
        {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"},
        None, "0.5", 40 * GIB, "per-process",
    ),
    "kai-quarter": ({}, {}, "kai-scheduler", "0.25", 20 * GIB, "none"),
    "dra-quarter": ({}, {}, None, "0.25", 20 * GIB, "none"),
    "full": ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.sharing-strategy": "none"}, None, "1", 80 * GIB, "hard"),
}  # fmt: skip


def options_for(key: str) -> dict:
    profile, _, choice = key.partition(":")
    return {"profile": profile, "size": choice} if choice else {"profile": profile}


def env_of(pod) -> dict:
    return {
        var["name"] if isinstance(var, dict) else var.name: var["value"] if isinstance(var, dict) else var.value
        for var in pod.spec.containers[0].env
    }
