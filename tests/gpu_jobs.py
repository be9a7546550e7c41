"""GPU jobs the hub did not start (batch jobs, fillers), for the tests that take a node's GPU shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fracnb_testbed.clusters import RUNNER_LABEL

SHARED = "nvidia.com/gpu.shared"
LOCAL_NODE = {RUNNER_LABEL: "local"}  # the testbed's local node: its pods run as real processes


def gpu_job(name: str, *, shares: int = 1, node_selector: Mapping[str, str] = LOCAL_NODE) -> dict[str, Any]:
    """A pod holding ``shares`` time-sliced GPU shares on a node matching ``node_selector``: a sleeping
    process that a delete ends at once (grace period 1 s)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": dict(node_selector),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "job",
                    "image": "example.invalid/job",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {SHARED: str(shares)}},
                }
            ],
        },
    }
