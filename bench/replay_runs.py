"""The setups the replay compares, each one :class:`RunSetup`: the seam where policies plug in.

All runs schedule notebooks as a stock Zero-to-JupyterHub 4.4.0 deployment does: with its
user-scheduler (``c.KubeSpawner.scheduler_name``, a kube-scheduler profile scoring nodes
``MostAllocated``; testbed/fracnb_testbed/z2jh-user-scheduler.yaml) and its 1G memory guarantee
(``singleuser.memory.guarantee``). Training jobs are the same batch queue in every run: plain pods
of a PriorityClass below notebooks, so kube-scheduler preempts them for a notebook.

- **baseline**: stock KubeSpawner, one whole GPU per notebook on the development servers,
  jupyterhub-idle-culler at its z2jh 4.4.0 defaults (``cull.timeout`` 3600 s, ``cull.every``
  600 s), activity reaching the hub as jupyterhub-singleuser reports it (every 300 s,
  ``JUPYTERHUB_ACTIVITY_INTERVAL``), a busy kernel in a silent cell not counted.
- **fracnb**: FractionalSpawner with 1/8-GPU time-sliced slots on the development servers (the
  device plugin packing replicas, the cluster's ``sharedDevicesAllocationPolicy``) and whole GPUs
  on the training servers for researchers who need more than 4 GB, group quotas, the GPU queue,
  per-profile idle timeouts with shorter ones under demand, and the fracnb service's culling code
  (``judge_page`` over hub user models and the real pods), fed as the fracnb meter feeds the hub:
  every 30 s, busy kernels counted.
- **fracnb-dra**: the same with fracnb's ``dra`` backend on ``reference-dra``: 4, 16 and 32 GiB
  shares of the development cards for needs of 1/8, 1/2 and a whole card; jobs claim whole
  training cards. kube-scheduler allocates every claim; the replay reads the cards from the claims.

- **fracnb-dra-lend**: the DRA run with lending: free development cards are lent to waiting training
  jobs, and taken back (the jobs deleted) when a notebook start waits (bench/replay_lending.py).
- ``*-saturating``: the baseline and the lending run on a saturating training backlog
  (bench/replay_model.py ``saturating_backlog``) instead of the calibrated one.
- **fracnb-dra-adaptive** (and ``-lend-saturating``): the DRA run placing each new share adaptively
  (bench/replay_placement.py: spread to the card whose holders are expected least busy, pack while a
  whole-card start or a lent job waits), with the timeouts under demand that hibernation allows
  (``HIBERNATING_UNDER_DEMAND``, ``HIBERNATING_WARNING_LEAD``).
- **fracnb-dra-adaptive-borrow**: the adaptive run whose starts that wait for the development pool
  borrow training cards (bench/replay_day_borrowing.py), through profiles on the training pool.

Each run names its contention rule (bench/replay_contention.py): time-slicing for the device
plugin's replicas and for DRA shares (NVIDIA's DRA driver refuses MPS with consumable shares, so a
shared card is time-sliced), summed demand where kernels would run side by side (``--mps``: DRA with
MPS, what it would buy). Whole cards hold one notebook each: either rule gives 1.

Hibernation is on in the fracnb runs, as the product ships (``c.FracnbService.hibernation_timeout``
120 s): the cull of an idle server saves its kernel state instead of losing it (modelled: the save
itself is not run); the idle timeouts are the profiles' own. ``hibernation=False`` turns it off.

Culling decisions come from the real code of each culler; the driver gives them the hub's
view of each server (``started``, ``last_activity``) at the virtual time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Protocol

from traitlets.config import Config

from bench.replay_contention import SUMMED_DEMAND, TIME_SLICING
from fracnb_spawner.culling import CullPolicy, isoformat

Z2JH_START_TIMEOUT = 300  # singleuser.startTimeout, z2jh 4.4.0 values.yaml
Z2JH_CULL_TIMEOUT = 3600  # cull.timeout
Z2JH_CULL_EVERY = 600  # cull.every
SINGLEUSER_ACTIVITY_INTERVAL = 300  # jupyterhub-singleuser's JUPYTERHUB_ACTIVITY_INTERVAL default
METER_ACTIVITY_INTERVAL = 30  # c.FracnbMeter.activity_interval default
FRACNB_CULL_EVERY = 60  # c.FracnbService.cull_every default
FRACNB_WARNING_LEAD = 900  # c.FracnbService.warning_lead default
# With hibernation on, a cull under demand loses nothing but the restore's wait when the researcher
# comes back: the adaptive runs stop an idle server after 5 minutes while someone waits for its kind of
# slot, warned 2 minutes ahead (docs/evidence.md: the trade).
HIBERNATING_UNDER_DEMAND = 300
HIBERNATING_WARNING_LEAD = 120
FRACNB_DEFAULT_POLICY = CullPolicy(
    idle_timeout=3600
)  # c.FracnbService.default_idle_timeout, for pods without annotations
USER_SCHEDULER = "user-scheduler"  # z2jh: c.KubeSpawner.scheduler_name, the default fullnameOverride ""
MEMORY_GUARANTEE = "1G"  # z2jh: singleuser.memory.guarantee
DEV_POOL = {"node-pool": "development"}
TRAINING_POOL = {"node-pool": "training"}
CARD_MEMORY_GIB = 32
CALIBRATED, SATURATING = "calibrated", "saturating"  # the training backlogs (bench/replay_model.py)


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

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, str]:
        """The users whose server this pass stops, with the reason ("idle", "demand", ...)."""
        ...


@dataclass(frozen=True)
class IdleCuller:
    """jupyterhub-idle-culler's decision: its own ``default_cull_arbiter`` on the inactive time it computes."""

    every: int = Z2JH_CULL_EVERY
    timeout: int = Z2JH_CULL_TIMEOUT

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, str]:
        from jupyterhub_idle_culler import default_cull_arbiter

        return {
            s.user: "idle"
            for s in servers
            if default_cull_arbiter(inactive=now - s.last_activity, inactive_limit=self.timeout, server={})
        }


@dataclass(frozen=True)
class FracnbCuller:
    """The fracnb service's pass: its pod index and ``judge_page`` (per-pod policy from annotations)."""

    every: int = FRACNB_CULL_EVERY
    warning_lead: int = FRACNB_WARNING_LEAD
    default_policy: CullPolicy = FRACNB_DEFAULT_POLICY

    def to_cull(self, servers: Sequence[HubServer], pods: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, str]:
        from fracnb_spawner.culling import Action
        from fracnb_spawner.service.cullpass import CullSettings, index_pods, judge_for, judge_page

        settings = CullSettings(self.default_policy, warning_lead=self.warning_lead)
        # All of the namespace's pods, gated ones included: a waiting pod is demand for its slot kind.
        verdicts = judge_page(user_models(servers), index_pods(pods), judge_for(settings, pods, now))
        return {
            v.user: v.decision.reason.value if v.decision.reason else "idle"
            for v in verdicts
            if v.decision.action is Action.CULL
        }


@dataclass(frozen=True)
class ActivityFeed:
    """How a server's activity reaches the hub's ``last_activity``."""

    report_every: int
    busy_kernel_counts: bool


@dataclass(frozen=True)
class RunSetup:
    """Everything that differs between the runs. A queued spawn is one whose pod waits gated
    (``start_timeout`` then becomes the profiles' ``queue.max_wait``)."""

    name: str
    label: str  # the table's column
    cluster: str
    spawner: str  # "KubeSpawner" or "FractionalSpawner"
    config: Callable[[str, Mapping[str, int]], Config]  # (namespace, group quotas) -> hub config
    profile_for: Callable[[Fraction], str]
    culler: Culler
    activity: ActivityFeed
    start_timeout: int = Z2JH_START_TIMEOUT
    cards_from_claims: bool = False  # DRA: the scheduler's allocations say which card; else the device plugin model
    hibernation: bool = False  # culls of idle servers save kernel state (modelled)
    scheduler: str = USER_SCHEDULER  # the notebooks' scheduler profile
    lending: bool = False  # free development cards are lent to training jobs and reclaimed for notebooks
    backlog: str = CALIBRATED  # the training backlog: CALIBRATED or SATURATING
    contention: str = TIME_SLICING  # how busy holders of one card slow each other (bench/replay_contention.py)
    adaptive: bool = False  # the replay places each new share by the adaptive rule (bench/replay_placement.py)
    borrowing: bool = False  # starts waiting for the development pool borrow training cards (replay_day_borrowing.py)


def _common(config: Config, section: Any, namespace: str, scheduler: str = USER_SCHEDULER) -> None:
    section.namespace = namespace
    section.delete_grace_period = 0
    section.scheduler_name = scheduler
    section.mem_guarantee = MEMORY_GUARANTEE
    # The virtual clock times starts out (RunSetup.start_timeout); the real one must never do it first.
    section.start_timeout = 100_000


def baseline_config(namespace: str, quotas: Mapping[str, int]) -> Config:
    config = Config()
    override = {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "node_selector": dict(DEV_POOL)}
    config.KubeSpawner.profile_list = [{"display_name": "1 GPU", "slug": "gpu", "kubespawner_override": override}]
    _common(config, config.KubeSpawner, namespace)
    return config


def _cull(idle: int, under_demand: int) -> dict[str, int]:
    return {"idle_timeout": idle, "idle_timeout_under_demand": under_demand}


def _profile(display: str, slug: str, gpu: dict[str, Any], pool: dict[str, str], cull: dict[str, int]) -> dict:
    return {
        "display_name": display,
        "slug": slug,
        "gpu": gpu,
        "kubespawner_override": {"node_selector": dict(pool)},
        "cull": cull,
        "queue": {"max_wait": 3600},
    }


def fracnb_profiles() -> list[dict[str, Any]]:
    return [
        _profile("1/8 GPU (4 GB)", "eighth", {"fraction": "1/8"}, DEV_POOL, _cull(3600, 1800)),
        _profile("1 GPU", "whole", {"count": 1}, TRAINING_POOL, _cull(1800, 1200)),
    ]


def dra_profiles(under_demand: int | None = None, borrow: bool = False) -> list[dict[str, Any]]:
    """The DRA profiles; ``under_demand`` replaces every idle timeout under demand (hibernation on); ``borrow``
    adds each one's twin on the training pool (``<slug>-borrow``), for starts that borrow a training card."""
    share = {"backend": "dra"}
    kinds = (
        ("4 GiB", "eighth", "1/8", 3600, 1800),
        ("16 GiB", "half", "1/2", 1800, 1200),
        ("32 GiB", "whole", 1, 1800, 1200),
    )
    profiles = [
        _profile(name, slug, {**share, "fraction": fraction}, DEV_POOL, _cull(idle, under_demand or demand))
        for name, slug, fraction, idle, demand in kinds
    ]
    if borrow:
        profiles += [
            _profile(f"{name} on a training card", f"{slug}-borrow", {**share, "fraction": fraction}, TRAINING_POOL,
                     _cull(idle, under_demand or demand))
            for name, slug, fraction, idle, demand in kinds
        ]  # fmt: skip
    return profiles


# The product's own card choice (c.FractionalSpawner.placement) stays "packed" in every run: the runs without
# adaptive placement show fracnb as it packed before, and the adaptive runs decide the card in the replay
# (bench/replay_day_placement.py), which the product's packing preference then leaves as it is.
PRODUCT_PLACEMENT = "packed"


def fracnb_config(
    profiles: list[dict[str, Any]], scheduler: str, **traits: Any
) -> Callable[[str, Mapping[str, int]], Config]:
    def make(namespace: str, quotas: Mapping[str, int]) -> Config:
        config = Config()
        config.FractionalSpawner.profile_list = profiles
        config.FractionalSpawner.placement = PRODUCT_PLACEMENT
        for name, value in traits.items():
            setattr(config.FractionalSpawner, name, value)
        config.FracnbQuotas.group_quotas = dict(quotas)
        _common(config, config.FractionalSpawner, namespace, scheduler)
        return config

    return make


def fracnb_profile(need: Fraction) -> str:
    # 8 x 4 GB slices per card: a need above 1/8 gets a whole card (no 1/2 slot on this cluster).
    return "eighth" if need <= Fraction(1, 8) else "whole"


def dra_profile(need: Fraction) -> str:
    return "eighth" if need <= Fraction(1, 8) else "half" if need <= Fraction(1, 2) else "whole"


BASELINE = RunSetup(
    name="baseline",
    label="baseline (z2jh)",
    cluster="reference-whole",
    spawner="KubeSpawner",
    config=baseline_config,
    profile_for=lambda need: "gpu",
    culler=IdleCuller(),
    activity=ActivityFeed(report_every=SINGLEUSER_ACTIVITY_INTERVAL, busy_kernel_counts=False),
)


def fracnb_runs(hibernation: bool = True, scheduler: str = USER_SCHEDULER) -> tuple[RunSetup, RunSetup]:
    """fracnb time-sliced and on DRA; ``hibernation`` models the hibernating policy; ``scheduler``: the notebooks'
    scheduler profile (z2jh's user-scheduler, or the testbed's copy of it that scores GPUs too)."""
    common = {
        "spawner": "FractionalSpawner",
        "culler": FracnbCuller(),
        "activity": ActivityFeed(report_every=METER_ACTIVITY_INTERVAL, busy_kernel_counts=True),
        # A start with no free slot waits in the queue (its pod gated) for up to the profiles'
        # queue.max_wait; the queue's own timer runs in real seconds, so the virtual clock times it.
        "start_timeout": 3600,
        "hibernation": hibernation,
        "scheduler": scheduler,
    }
    time_slicing = RunSetup(
        name="fracnb",
        label="fracnb (time-slicing)",
        cluster="reference",
        config=fracnb_config(fracnb_profiles(), scheduler),
        profile_for=fracnb_profile,
        **common,
    )
    dra = RunSetup(
        name="fracnb-dra",
        label="fracnb (DRA)",
        cluster="reference-dra",
        config=fracnb_config(dra_profiles(), scheduler, gpu_backend="dra", gpu_memory=f"{CARD_MEMORY_GIB}Gi"),
        profile_for=dra_profile,
        cards_from_claims=True,
        **common,
    )
    return time_slicing, dra


def adaptive_run(dra: RunSetup, hibernation: bool, scheduler: str, borrow: bool = False) -> RunSetup:
    """The DRA run placing shares adaptively; with hibernation on, the shorter timeouts under demand; ``borrow``:
    starts waiting for the development pool borrow training cards."""
    under_demand, lead = (HIBERNATING_UNDER_DEMAND, HIBERNATING_WARNING_LEAD) if hibernation else (None, None)
    traits = {"gpu_backend": "dra", "gpu_memory": f"{CARD_MEMORY_GIB}Gi"}
    return replace(
        dra,
        name="fracnb-dra-adaptive-borrow" if borrow else "fracnb-dra-adaptive",
        label="fracnb (DRA, adaptive, borrow)" if borrow else "fracnb (DRA, adaptive)",
        config=fracnb_config(dra_profiles(under_demand, borrow), scheduler, **traits),
        culler=FracnbCuller(warning_lead=lead or FRACNB_WARNING_LEAD),
        adaptive=True,
        borrowing=borrow,
    )


def runs(hibernation: bool = True, scheduler: str = USER_SCHEDULER, mps: bool = False) -> tuple[RunSetup, ...]:
    """Every run of a day: on the calibrated backlog the baseline, fracnb time-sliced, on DRA, on DRA
    lending free development cards to the training jobs, and on DRA placing adaptively; on the saturating
    backlog the baseline, the lending run and the adaptive run with lending. ``mps``: DRA shares run
    kernels side by side (the summed-demand rule) instead of time-sliced."""
    time_slicing, dra = fracnb_runs(hibernation, scheduler)
    if mps:
        dra = replace(dra, contention=SUMMED_DEMAND)
    lend = replace(dra, name="fracnb-dra-lend", label="fracnb (DRA, lend)", lending=True)
    adaptive = adaptive_run(dra, hibernation, scheduler)
    adaptive_lend = replace(
        adaptive, name="fracnb-dra-adaptive-lend", label="fracnb (DRA, adaptive, lend)", lending=True
    )
    saturating = tuple(
        replace(setup, name=f"{setup.name}-saturating", label=f"{setup.label}, saturating", backlog=SATURATING)
        for setup in (BASELINE, lend, adaptive_lend)
    )
    borrow = adaptive_run(dra, hibernation, scheduler, borrow=True)
    return (BASELINE, time_slicing, dra, lend, adaptive, *saturating, borrow)


DAY_ORIGIN = datetime(2026, 3, 2, 7, 0, tzinfo=timezone.utc)  # a Monday, 07:00; the day's start
