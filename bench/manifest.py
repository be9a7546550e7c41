"""Pod-manifest building: FractionalSpawner per profile vs stock KubeSpawner with a whole-GPU profile.

Both build in the same process, alternating, from the same base configuration; each
sample is the time of load_user_options() + get_pod_manifest() on a fresh spawner.
Prints medians and the ratio ours / stock (target <= 1.05).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from traitlets.config import Config

from fracnb_spawner.cluster.kube import offline_kubeconfig

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "300"))


FRACTIONAL_PROFILES = {
    "time-slicing 1/4": {"fraction": 0.25},
    "mps 1/2": {"fraction": 0.5, "backend": "mps"},
    "mig 1g.10gb": {"backend": "mig", "mig_profile": "1g.10gb"},
    "hami 1/2": {"fraction": 0.5, "backend": "hami"},
    "kai 1/4": {"fraction": 0.25, "backend": "kai"},
}


def stock_config() -> Config:
    config = Config()
    config.KubeSpawner.profile_list = [
        {
            "display_name": "1 GPU",
            "slug": "gpu",
            "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
        }
    ]
    return config


def fractional_config(gpu: dict) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [{"display_name": "GPU", "slug": "gpu", "gpu": gpu}]
    return config


async def build_once(spawner_class: type, config: Config) -> float:
    spawner = spawner_class(_mock=True, config=config)
    spawner.user_options = {"profile": "gpu"}
    started = time.perf_counter()
    await spawner.load_user_options()
    await spawner.get_pod_manifest()
    return time.perf_counter() - started


async def run() -> None:
    from kubespawner import KubeSpawner

    from fracnb_spawner.spawner import FractionalSpawner

    stock = stock_config()
    print(f"{'profile':<20} {'ours (ms)':>10} {'stock (ms)':>11} {'ratio':>7}")
    for name, gpu in FRACTIONAL_PROFILES.items():
        ours_config = fractional_config(gpu)
        ours, theirs = [], []
        for _ in range(ROUNDS):
            ours.append(await build_once(FractionalSpawner, ours_config))
            theirs.append(await build_once(KubeSpawner, stock))
        ours_ms, theirs_ms = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        print(f"{name:<20} {ours_ms:>10.3f} {theirs_ms:>11.3f} {ours_ms / theirs_ms:>7.3f}")
    await KubeSpawner._stop_all_reflectors()


def main() -> None:
    with offline_kubeconfig():
        asyncio.run(run())


if __name__ == "__main__":
    main()
