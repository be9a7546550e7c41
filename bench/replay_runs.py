"""The two setups the replay compares, each one :class:`RunSetup`: the seam where policies plug in.

- **baseline**: stock KubeSpawner, one whole GPU per notebook, jupyterhub-idle-culler at its
  Zero-to-JupyterHub 4.4.0 defaults (``cull.timeout`` 3600 s, ``cull.every`` 600 s,
  ``cull.maxAge`` 0; values.yaml), activity reaching the hub as jupyterhub-singleuser reports
  it (every 300 s, ``JUPYTERHUB_ACTIVITY_INTERVAL``), a busy kernel in a silent cell not counted.
- **fracnb**: FractionalSpawner with 1/8-GPU slots on the development servers and whole GPUs
  (for researchers who need more than 4 GB) on the training servers, group quotas, per-profile
  idle timeouts, and the fracnb service's culling code (``judge_page`` over hub user models and
  the real pods), fed as the fracnb meter feeds the hub: every 30 s, busy kernels counted.

Culling decisions come from the real code of each culler; the driver gives them the hub's
view of each server (``started``, ``last_activity``) at the virtual time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Protocol

from traitlets.config import Config

from fracnb_spawner.culling import CullPolicy, isoformat

Z2JH_START_TIMEOUT = 300  # singleuser.startTimeout, z2jh 4.4.0 values.yaml
Z2JH_CULL_TIMEOUT = 3600  # cull.timeout
Z2JH_CULL_EVERY = 600  # cull.every
SINGLEUSER_ACTIVITY_INTERVAL = 300  # jupyterhub-singleuser's JUPYTERHUB_ACTIVITY_INTERVAL default
METER_ACTIVITY_INTERVAL = 30  # c.FracnbMeter.activity_interval default
FRACNB_CULL_EVERY = 60  # c.FracnbService.cull_every default
FRACNB_WARNING_LEAD = 900  # c.FracnbService.warning_lead default
FRACNB_DEFAULT_POLICY = CullPolicy(
    idle_timeout=3600
)  # c.FracnbService.default_idle_timeout, for pods without annotations
DEV_POOL = {"node-pool": "development"}
TRAINING_POOL = {"node-pool": "training"}


@dataclass(frozen=True)
class HubServer:
    """What the hub knows of one running server, as its REST API shows it."""

    user: str
    started: datetime
    last_activity: datetime


def user_models(servers: Sequence[HubServer]) -> list[dict[str, Any]]:
    """``GET /hub/api/users?state=ready`` for these servers (default servers only)."""
    return [
        {
            "name": s.user,
            "servers": {
                "": {
                    "name": "",
                    "ready": True,
                    "pending": None,
                    "url": f"/user/{s.user}/",
                    "started": isoformat(s.started),
                    "last_activity": isoformat(s.last_activity),
                }
            },
        }
        for s in servers
    ]


class Culler(Protocol):
    every: int

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> list[str]:
        """The users whose server this pass stops."""
        ...


@dataclass(frozen=True)
class IdleCuller:
    """jupyterhub-idle-culler's decision: its own ``default_cull_arbiter`` on the inactive time it computes."""

    every: int = Z2JH_CULL_EVERY
    timeout: int = Z2JH_CULL_TIMEOUT

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> list[str]:
        from jupyterhub_idle_culler import default_cull_arbiter

        return [
            s.user
            for s in servers
            if default_cull_arbiter(inactive=now - s.last_activity, inactive_limit=self.timeout, server={})
        ]


@dataclass(frozen=True)
class FracnbCuller:
    """The fracnb service's pass: its pod index and ``judge_page`` (per-pod policy from annotations)."""

    every: int = FRACNB_CULL_EVERY
    warning_lead: int = FRACNB_WARNING_LEAD
    default_policy: CullPolicy = FRACNB_DEFAULT_POLICY

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> list[str]:
        from fracnb_spawner.culling import Action
        from fracnb_spawner.service.core import CullSettings, index_pods, judge_for, judge_page

        settings = CullSettings(self.default_policy, warning_lead=self.warning_lead)
        # All of the namespace's pods, gated ones included: a waiting pod is demand for its slot kind.
        verdicts = judge_page(user_models(servers), index_pods(pods), judge_for(settings, pods, now))
        return [v.user for v in verdicts if v.decision.action is Action.CULL]


@dataclass(frozen=True)
class ActivityFeed:
    """How a server's activity reaches the hub's ``last_activity``."""

    report_every: int
    busy_kernel_counts: bool


@dataclass(frozen=True)
class RunSetup:
    """Everything that differs between the runs. The queue and demand-aware culling of issue 11 plug
    in here: a queued spawn is one whose pod waits gated (``start_timeout`` then becomes the
    profile's ``queue.max_wait``), and demand-aware culling is another :class:`Culler`."""

    name: str
    cluster: str
    spawner: str  # "KubeSpawner" or "FractionalSpawner"
    config: Callable[[str, Mapping[str, int]], Config]  # (namespace, group quotas) -> hub config
    profile_for: Callable[[Fraction], str]
    culler: Culler
    activity: ActivityFeed
    start_timeout: int = Z2JH_START_TIMEOUT


def _common(config: Config, section: Any, namespace: str) -> None:
    section.namespace = namespace
    section.delete_grace_period = 0
    # The virtual clock times starts out (RunSetup.start_timeout); the real one must never do it first.
    section.start_timeout = 100_000


def baseline_config(namespace: str, quotas: Mapping[str, int]) -> Config:
    config = Config()
    override = {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "node_selector": dict(DEV_POOL)}
    config.KubeSpawner.profile_list = [{"display_name": "1 GPU", "slug": "gpu", "kubespawner_override": override}]
    _common(config, config.KubeSpawner, namespace)
    return config


FRACNB_PROFILES = [
    {
        "display_name": "1/8 GPU (4 GB)",
        "slug": "eighth",
        "gpu": {"fraction": "1/8"},
        "kubespawner_override": {"node_selector": dict(DEV_POOL)},
        "cull": {"idle_timeout": 3600, "idle_timeout_under_demand": 1800},
        "queue": {"max_wait": 3600},
    },
    {
        "display_name": "1 GPU",
        "slug": "whole",
        "gpu": {"count": 1},
        "kubespawner_override": {"node_selector": dict(TRAINING_POOL)},
        "cull": {"idle_timeout": 1800, "idle_timeout_under_demand": 1200},
        "queue": {"max_wait": 3600},
    },
]


def fracnb_config(namespace: str, quotas: Mapping[str, int]) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = FRACNB_PROFILES
    config.FracnbQuotas.group_quotas = dict(quotas)
    _common(config, config.FractionalSpawner, namespace)
    return config


def fracnb_profile(need: Fraction) -> str:
    # 8 x 4 GB slices per card: a need above 1/8 gets a whole card (no 1/2 slot on this cluster).
    return "eighth" if need <= Fraction(1, 8) else "whole"


BASELINE = RunSetup(
    name="baseline",
    cluster="reference-whole",
    spawner="KubeSpawner",
    config=baseline_config,
    profile_for=lambda need: "gpu",
    culler=IdleCuller(),
    activity=ActivityFeed(report_every=SINGLEUSER_ACTIVITY_INTERVAL, busy_kernel_counts=False),
)
FRACNB = RunSetup(
    name="fracnb",
    cluster="reference",
    spawner="FractionalSpawner",
    config=fracnb_config,
    profile_for=fracnb_profile,
    culler=FracnbCuller(),
    activity=ActivityFeed(report_every=METER_ACTIVITY_INTERVAL, busy_kernel_counts=True),
    # A start with no free slot waits in the queue (its pod gated) for up to the profiles'
    # queue.max_wait; the queue's own timer runs in real seconds, so the virtual clock times it.
    start_timeout=3600,
)
RUNS = (BASELINE, FRACNB)

DAY_ORIGIN = datetime(2026, 3, 2, 7, 0, tzinfo=timezone.utc)  # a Monday, 07:00; the day's start
