"""The values files of helm-values/ and, for each, the pods its profiles must give: read by the dry-run
tests (test_values.py) and by the tests of the chart's own hub configuration (test_chart_config.py)."""

from __future__ import annotations

SCENARIOS = ["time-slicing", "mps", "mig-mixed", "hami", "kai", "mixed-cluster", "dra"]

TS4 = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
# profile[,option=choice] -> (GPU resources of the notebook container, node selector, scheduler)
EXPECTED = {
    "time-slicing": {
        "cpu": ({}, {}, "(default)"),
        "quarter": ({"nvidia.com/gpu.shared": "1"}, TS4, "(default)"),
        "half": (
            {"nvidia.com/gpu.shared": "1"},
            {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "2"},
            "(default)",
        ),
    },
    "mps": {
        "cpu": ({}, {}, "(default)"),
        "mps-quarter": (
            {"nvidia.com/gpu.shared": "1"},
            {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"},
            "(default)",
        ),
    },
    "mig-mixed": {
        "cpu": ({}, {}, "(default)"),
        "mig-1g": ({"nvidia.com/mig-1g.10gb": "1"}, {"nvidia.com/mig.strategy": "mixed"}, "(default)"),
        "mig-3g": ({"nvidia.com/mig-3g.40gb": "1"}, {"nvidia.com/mig.strategy": "mixed"}, "(default)"),
    },
    "hami": {
        "cpu": ({}, {}, "(default)"),
        **{
            f"shared,size={size}": (
                {"nvidia.com/gpu": "1", "nvidia.com/gpucores": pct, "nvidia.com/gpumem-percentage": pct},
                {},
                "hami-scheduler",
            )
            for size, pct in (("eighth", "12"), ("quarter", "25"), ("half", "50"))
        },
    },
    "kai": {
        "cpu": ({}, {}, "(default)"),
        "kai-quarter": ({}, {}, "kai-scheduler"),
        "kai-half": ({}, {}, "kai-scheduler"),
    },
    # The GPU is a ResourceClaim (checked below), no extended resource, node selector or own scheduler.
    "dra": {key: ({}, {}, "(default)") for key in ("cpu", "slice,size=quarter", "slice,size=half", "mig-1g", "full")},
    "mixed-cluster": {
        "cpu": ({}, {}, "(default)"),
        "ts-quarter": ({"nvidia.com/gpu.shared": "1"}, TS4, "(default)"),
        "mps-quarter": (
            {"nvidia.com/gpu.shared": "1"},
            {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"},
            "(default)",
        ),
        "mig-2g": ({"nvidia.com/mig-2g.20gb": "1"}, {"nvidia.com/mig.strategy": "mixed"}, "(default)"),
        "hami-half": (
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem-percentage": "50"},
            {},
            "hami-scheduler",
        ),
        "kai-quarter": ({}, {}, "kai-scheduler"),
        "full": ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.sharing-strategy": "none"}, "(default)"),
    },
}
