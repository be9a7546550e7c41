"""The configuration traits of ``FractionalSpawner``; each help text is its user doc."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from traitlets import Bool, Dict, Float, Int, TraitError, Unicode, Union, observe, validate
from traitlets.config import Config, Configurable

from fracnb_spawner.borrowing.traits import BorrowingTraits
from fracnb_spawner.common.labels import key_problem, value_problem
from fracnb_spawner.common.units import QuantityError, format_bytes, parse_bytes, parse_duration
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.gpu import mig
from fracnb_spawner.gpu.backends import BackendSettings
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.table import BACKENDS
from fracnb_spawner.placement.decide import DEFAULT_RESERVE_CARDS, check_policy, check_reserve

MIN_GPU_MEMORY = 2**30  # no GPU fracnb can share has less
MIN_ANSWER_SECONDS, MAX_ANSWER_SECONDS = 0.5, 60.0  # hibernate_on_stop_answer_timeout
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def gpu_memory_size(value: object) -> int:
    """Bytes of one GPU's memory from a configured value; ``QuantityError`` says how to fix it."""
    size = parse_bytes(value)
    if size < MIN_GPU_MEMORY:
        raise QuantityError(
            f"{value!r} is less than {format_bytes(MIN_GPU_MEMORY)}; give one GPU's memory, e.g. '80Gi'"
        )
    return size


T = TypeVar("T")
# The traits whose values derived() keeps what it made from (gpu_defaults, cull_defaults, backend_settings,
# and the spawner's plan context).
DERIVED_FROM = (
    "gpu_backend", "gpu_memory", "gpu_memory_by_product", "mig_default_model", "gpu_idle_timeout", "gpu_max_age",
    "cpu_idle_timeout", "cpu_max_age", "time_slicing_resource", "mps_resource", "hami_scheduler_name",
    "hami_gpu_scheduler_policy", "kai_scheduler_name", "kai_queue_label", "kai_queue", "soft_cap_ratio",
    "dra_device_class", "dra_mig_device_class", "dra_driver_name", "node_selector", "fracnb_service_url",
    "gpu_kernel_cull_idle_timeout",
)  # fmt: skip


class FractionalTraits(BorrowingTraits):
    """Mixed into ``FractionalSpawner``; kept apart so the spawner module stays about behaviour."""

    def share_settings(self, shared: dict[str, Any]) -> None:
        """Read what :meth:`derived` keeps (gpu_defaults, cull_defaults, backend_settings, ...) from ``shared``,
        a dict kept for every object made from one hub configuration, until a trait is set on this object."""
        self.__dict__["_fracnb_derived"] = shared

    def derived(self, name: str, make: Callable[[], T]) -> T:
        """``make()``, kept until a trait it may read changes (values read on every spawn and form row)."""
        cache = self.__dict__.setdefault("_fracnb_derived", {})
        if name not in cache:
            cache[name] = make()
        return cache[name]

    @observe(*DERIVED_FROM)
    def _settings_changed(self, change: Any) -> None:
        self.__dict__["_fracnb_derived"] = {}  # this object's own from now on

    def gpu_defaults(self) -> GPUDefaults:
        """What a profile's ``gpu`` entry falls back on, from these traits."""
        return self.derived("gpu_defaults", self._gpu_defaults)

    def _gpu_defaults(self) -> GPUDefaults:
        # The traits' validators have run unless traitlets holds them back while loading
        # config (then profile_list may be checked first): report as they would.
        try:
            gpu_memory = gpu_memory_size(self.gpu_memory)
        except QuantityError as error:
            raise TraitError(f"FractionalSpawner.gpu_memory: {error}") from None
        by_product = {}
        for product, size in self.gpu_memory_by_product.items():
            try:
                by_product[product] = gpu_memory_size(size)
            except QuantityError as error:
                raise TraitError(f"FractionalSpawner.gpu_memory_by_product[{product!r}]: {error}") from None
        return GPUDefaults(self.gpu_backend, gpu_memory, self.mig_default_model, by_product)

    def cull_defaults(self) -> tuple[CullPolicy, CullPolicy]:
        """Idle timeout and maximum age of GPU and of CPU-only servers, in seconds."""
        return self.derived("cull_defaults", self._cull_defaults)

    def _cull_defaults(self) -> tuple[CullPolicy, CullPolicy]:
        gpu = CullPolicy(parse_duration(self.gpu_idle_timeout), parse_duration(self.gpu_max_age))
        cpu = CullPolicy(parse_duration(self.cpu_idle_timeout), parse_duration(self.cpu_max_age))
        return gpu, cpu

    def backend_settings(self) -> BackendSettings:
        """The cluster-specific names the backends need, from these traits."""
        return self.derived("backend_settings", self._backend_settings)

    def _backend_settings(self) -> BackendSettings:
        return BackendSettings(
            time_slicing_resource=self.time_slicing_resource,
            mps_resource=self.mps_resource,
            hami_scheduler=self.hami_scheduler_name,
            hami_gpu_policy=self.hami_gpu_scheduler_policy,
            kai_scheduler=self.kai_scheduler_name,
            kai_queue_label=self.kai_queue_label,
            kai_queue=self.kai_queue,
            soft_cap_ratio=self.soft_cap_ratio,
            dra_device_class=self.dra_device_class,
            dra_mig_device_class=self.dra_mig_device_class,
            dra_driver=self.dra_driver_name,
        )

    gpu_backend = Unicode(
        "time-slicing",
        help="""Sharing mechanism for profiles whose ``gpu`` entry names no ``backend``.

        One of the selectable backends of ``gpu.table.TABLE``: time-slicing, mps, mig, hami,
        kai, dra. Default: time-slicing.
        Example: ``c.FractionalSpawner.gpu_backend = "hami"``
        """,
    ).tag(config=True)

    @validate("gpu_backend")
    def _check_gpu_backend(self, proposal: dict) -> str:
        # A plain Enum would answer in traitlets' words ("expected any of [...], not the str ...").
        value = proposal["value"]
        if value not in BACKENDS:
            close = difflib.get_close_matches(str(value), BACKENDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TraitError(
                f"FractionalSpawner.gpu_backend: {value!r} is not a sharing method;"
                f" use one of {', '.join(BACKENDS)}{hint}"
            )
        return value

    gpu_memory = Union(
        [Int(), Unicode()],
        default_value="80Gi",
        help="""Memory of one physical GPU, used for memory budgets (fraction x memory).

        Bytes or a size such as "80Gi". A profile's ``memory`` key takes precedence, and so
        does ``gpu_memory_by_product`` for a profile that names a listed ``product``.
        fracnb does not read node labels for it. Default: "80Gi".
        Example: ``c.FractionalSpawner.gpu_memory = "40Gi"``
        """,
    ).tag(config=True)

    @validate("gpu_memory")
    def _check_gpu_memory(self, proposal: dict) -> int | str:
        try:
            gpu_memory_size(proposal["value"])
        except QuantityError as error:
            raise TraitError(f"FractionalSpawner.gpu_memory: {error}") from None
        return proposal["value"]

    mig_default_model = Unicode(
        "A100-80GB",
        help="""GPU model whose MIG profiles serve a ``fraction`` on the mig backend without ``product``.

        One of A100-40GB, A100-80GB, A30-24GB, H100-80GB, H100-94GB, H200-141GB, B200.
        Default: "A100-80GB". Example: ``c.FractionalSpawner.mig_default_model = "H100-80GB"``
        """,
    ).tag(config=True)

    @validate("mig_default_model")
    def _check_mig_default_model(self, proposal: dict) -> str:
        try:
            mig.model_by_key(proposal["value"])
        except mig.MigError as error:
            raise TraitError(f"FractionalSpawner.mig_default_model: {error}") from None
        return proposal["value"]

    time_slicing_resource = Unicode(
        "nvidia.com/gpu.shared",
        help="""Extended resource of time-sliced GPUs: ``nvidia.com/gpu.shared`` when the device
        plugin runs with ``renameByDefault: true``, else ``nvidia.com/gpu``.

        Default: "nvidia.com/gpu.shared".
        Example: ``c.FractionalSpawner.time_slicing_resource = "nvidia.com/gpu"``
        """,
    ).tag(config=True)

    mps_resource = Unicode(
        "nvidia.com/gpu.shared",
        help="""Extended resource of MPS-shared GPUs (same naming rule as time-slicing).

        Default: "nvidia.com/gpu.shared". Example: ``c.FractionalSpawner.mps_resource = "nvidia.com/gpu"``
        """,
    ).tag(config=True)

    hami_scheduler_name = Unicode(
        "hami-scheduler",
        help="""Scheduler for HAMi pods. Default: "hami-scheduler".
        Example: ``c.FractionalSpawner.hami_scheduler_name = "hami-scheduler"``
        """,
    ).tag(config=True)

    hami_gpu_scheduler_policy = Unicode(
        "binpack",
        help="""HAMi's card policy for fractional GPU pods, as the pod annotation ``hami.io/gpu-scheduler-policy``:
        ``binpack`` fills the fullest card of a node first, so whole cards stay free for whole-GPU work;
        ``spread`` (HAMi's own default) puts each share on the least used card. An empty string sets no
        annotation, leaving HAMi's chart default (``scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy``).
        Default: "binpack". Example: ``c.FractionalSpawner.hami_gpu_scheduler_policy = "spread"``
        """,
    ).tag(config=True)

    placement = Unicode(
        "adaptive",
        help="""Which card a new GPU share goes to, where the hub can choose (docs/spawner.md, "Placement").

        ``adaptive``: beside the holders least likely to be busy (their users' busy time in the session
        history; a user without history counts as average) while nothing waits for whole cards, and onto
        the fullest card that fits while a whole-card start (or any pod's request for whole GPUs) waits, so
        that whole cards come free as servers end. ``spread``: always the least busy card. ``packed``: always
        the fullest card that fits (fracnb packed before this setting existed; a ``dra`` share then took the
        first card with room). A running notebook is never moved. ``dra`` claims name
        up to 7 preferred cards and then any card, so a preference never keeps a share from starting;
        ``hami`` shares get the per-pod policy (``spread`` or ``binpack``; with ``packed``,
        ``hami_gpu_scheduler_policy``); with time-slicing, MPS and MIG the device plugin picks the card.
        Default: "adaptive". Example: ``c.FractionalSpawner.placement = "packed"``
        """,
    ).tag(config=True)

    @validate("placement")
    def _check_placement(self, proposal: dict) -> str:
        try:
            return check_policy(proposal["value"])
        except ValueError as error:
            raise TraitError(f"FractionalSpawner.placement: {error}") from None

    placement_reserve_cards = Int(
        DEFAULT_RESERVE_CARDS,
        help="""Wholly free cards that spreading leaves alone for whole-card starts, per hub, in cards
        (``dra`` shares; placement ``adaptive`` or ``spread``). A new share goes to a kept card only when no
        other card fits. 0 keeps none: spreading then takes an empty card first, and a whole-GPU server may
        wait for a card to empty. Default: 2. Example: ``c.FractionalSpawner.placement_reserve_cards = 4``
        """,
    ).tag(config=True)

    @validate("placement_reserve_cards")
    def _check_placement_reserve_cards(self, proposal: dict) -> int:
        try:
            return check_reserve(proposal["value"])
        except ValueError as error:
            raise TraitError(f"FractionalSpawner.placement_reserve_cards: {error}") from None

    kai_scheduler_name = Unicode(
        "kai-scheduler",
        help="""Scheduler for KAI pods. Default: "kai-scheduler".
        Example: ``c.FractionalSpawner.kai_scheduler_name = "kai-scheduler"``
        """,
    ).tag(config=True)

    kai_queue = Unicode(
        "default-queue",
        help="""KAI leaf queue notebooks are submitted to. Default: "default-queue".
        Example: ``c.FractionalSpawner.kai_queue = "notebooks"``
        """,
    ).tag(config=True)

    kai_queue_label = Unicode(
        "kai.scheduler/queue",
        help="""Pod label that names the KAI queue. Default: "kai.scheduler/queue".
        Example: ``c.FractionalSpawner.kai_queue_label = "runai/queue"``
        """,
    ).tag(config=True)

    dra_device_class = Unicode(
        "gpu.nvidia.com",
        help="""DeviceClass of whole GPUs for the ``dra`` backend: memory slices and ``count``
        request devices of this class (NVIDIA's DRA driver installs ``gpu.nvidia.com``).

        Default: "gpu.nvidia.com". Example: ``c.FractionalSpawner.dra_device_class = "shared-gpu.example.com"``
        """,
    ).tag(config=True)

    dra_mig_device_class = Unicode(
        "mig.nvidia.com",
        help="""DeviceClass of MIG devices for the ``dra`` backend (``mig_profile``, or ``sharing: mig``).

        Default: "mig.nvidia.com". Example: ``c.FractionalSpawner.dra_mig_device_class = "mig.example.com"``
        """,
    ).tag(config=True)

    dra_driver_name = Unicode(
        "gpu.nvidia.com",
        help="""Name of the DRA driver: the domain of the device attributes the ``dra`` backend's
        selectors read (``productName``, ``profile``) and the driver of its opaque ``GpuConfig``.

        Default: "gpu.nvidia.com". Example: ``c.FractionalSpawner.dra_driver_name = "gpu.nvidia.com"``
        """,
    ).tag(config=True)

    @validate("dra_device_class", "dra_mig_device_class", "dra_driver_name")
    def _check_dns_name(self, proposal: dict) -> str:
        value = proposal["value"]
        if not _DNS_SUBDOMAIN.fullmatch(value) or len(value) > 253:
            raise TraitError(
                f"FractionalSpawner.{proposal['trait'].name}: {value!r} is not a DNS subdomain such as"
                " 'gpu.nvidia.com' (lowercase letters, digits, '-' and '.')"
            )
        return value

    soft_cap_ratio = Float(
        0.95,
        help="""Framework soft caps (PyTorch, JAX, CuPy) as a share of the memory budget, for
        mechanisms that enforce no memory limit (time-slicing, KAI). The margin leaves room
        for the CUDA context, which the caps don't count.

        Above 0, at most 1. Default: 0.95. Example: ``c.FractionalSpawner.soft_cap_ratio = 0.9``
        """,
    ).tag(config=True)

    @validate("soft_cap_ratio")
    def _check_soft_cap_ratio(self, proposal: dict) -> float:
        ratio = proposal["value"]
        if not (math.isfinite(ratio) and 0 < ratio <= 1):
            raise TraitError(
                f"FractionalSpawner.soft_cap_ratio: {ratio!r} is not a share of the memory budget;"
                " use a number above 0 and at most 1, such as 0.95"
            )
        return ratio

    @validate("kai_queue", "kai_queue_label", "time_slicing_resource", "mps_resource")
    def _check_label_syntax(self, proposal: dict) -> str:
        name = proposal["trait"].name
        problem = value_problem(proposal["value"]) if name == "kai_queue" else key_problem(proposal["value"])
        if problem:
            raise TraitError(f"FractionalSpawner.{name}: {problem}")
        return proposal["value"]

    gpu_idle_timeout = Union(
        [Int(), Unicode()],
        default_value="30m",
        help="""Idle time after which the fracnb culler stops a GPU server, unless its profile's
        ``cull`` entry says otherwise. Seconds or "30m"/"8h"; 0 never culls for idleness.
        A non-zero timeout must exceed ``FracnbService.warning_lead`` plus
        ``FracnbService.activity_report_lag``, or the hub refuses to start
        (docs/culling-and-quotas.md, "The timing rule").

        Default: "30m". Example: ``c.FractionalSpawner.gpu_idle_timeout = "1h"``
        """,
    ).tag(config=True)

    cpu_idle_timeout = Union(
        [Int(), Unicode()],
        default_value="8h",
        help="""Idle time after which the fracnb culler stops a CPU-only server; the same timing
        rule as ``gpu_idle_timeout`` applies. Default: "8h".
        Example: ``c.FractionalSpawner.cpu_idle_timeout = "12h"``
        """,
    ).tag(config=True)

    gpu_max_age = Union(
        [Int(), Unicode()],
        default_value=0,
        help="""Maximum lifetime of a GPU server, even when active; 0 for none. Default: 0.
        Example: ``c.FractionalSpawner.gpu_max_age = "24h"``
        """,
    ).tag(config=True)

    cpu_max_age = Union(
        [Int(), Unicode()],
        default_value=0,
        help="""Maximum lifetime of a CPU-only server, even when active; 0 for none. Default: 0.
        Example: ``c.FractionalSpawner.cpu_max_age = "7d"``
        """,
    ).tag(config=True)

    gpu_kernel_cull_idle_timeout = Union(
        [Int(), Unicode()],
        default_value="20m",
        help="""Inside a GPU server, kernels idle this long are shut down by jupyter_server's
        kernel culler, giving their GPU memory back while the server keeps running. Busy kernels
        are never culled. Seconds or "20m"; 0 disables it. Default: "20m".
        Example: ``c.FractionalSpawner.gpu_kernel_cull_idle_timeout = "45m"``
        """,
    ).tag(config=True)

    @validate("gpu_idle_timeout", "cpu_idle_timeout", "gpu_max_age", "cpu_max_age", "gpu_kernel_cull_idle_timeout")
    def _check_duration(self, proposal: dict) -> int | str:
        try:
            parse_duration(proposal["value"])
        except QuantityError as error:
            raise TraitError(f"FractionalSpawner.{proposal['trait'].name}: {error}") from None
        return proposal["value"]

    hibernate_on_stop = Bool(
        True,
        help="""Ask a GPU server to save its idle kernels' variables also when its user (or an admin)
        stops it ("Stop My Server"), as the fracnb service does before it stops an idle one
        (docs/hibernation.md); the hub's pages then say what was saved, or that nothing was.
        The stop waits at most ``FracnbService.hibernation_timeout`` for it (0 there turns both
        off); busy kernels are never interrupted or saved. False stops at once, saving nothing.
        Default: True.
        Example: ``c.FractionalSpawner.hibernate_on_stop = False``
        """,
    ).tag(config=True)

    hibernate_on_stop_answer_timeout = Float(
        5.0,
        help="""Seconds a server has to answer a first short request (its usage document) before the hub
        asks it to save at a stop its user or an admin asked for (``hibernate_on_stop``). A server
        that does not answer in time (hung, or gone) is stopped at once instead of after the whole
        ``FracnbService.hibernation_timeout``, and its stop is recorded as "Variables not saved: the
        server did not answer within 5 s." Between 0.5 and 60. Default: 5.
        Example: ``c.FractionalSpawner.hibernate_on_stop_answer_timeout = 10``
        """,
    ).tag(config=True)

    @validate("hibernate_on_stop_answer_timeout")
    def _check_answer_timeout(self, proposal: dict) -> float:
        value = proposal["value"]
        if not MIN_ANSWER_SECONDS <= value <= MAX_ANSWER_SECONDS:
            raise TraitError(
                f"FractionalSpawner.hibernate_on_stop_answer_timeout: {value:g} s is out of bounds; "
                f"give between {MIN_ANSWER_SECONDS:g} and {MAX_ANSWER_SECONDS:g} seconds, such as 5"
            )
        return value

    show_availability = Bool(
        True,
        help="""Show on the spawn form how many fractions of each choice are free in the cluster,
        from one watch of nodes and pods per hub (not a request per form load). Needs RBAC to
        list and watch nodes and pods cluster-wide (docs/spawner.md). Default: True.
        Example: ``c.FractionalSpawner.show_availability = False``
        """,
    ).tag(config=True)

    refuse_unplaceable_choices = Bool(
        True,
        help="""Grey out on the spawn form, and refuse at once when submitted, a choice that no
        node of the cluster offers (no node with its GPU resource and labels, used or not),
        instead of letting its pod wait for a node until ``start_timeout``. Read from the same
        watch as ``show_availability`` (and only while that is on and the watch can read nodes).
        Turn it off when a node autoscaler adds GPU nodes on demand (node pools that scale from
        zero), where a missing node is not a permanent answer. Default: True.
        Example: ``c.FractionalSpawner.refuse_unplaceable_choices = False``
        """,
    ).tag(config=True)

    gpu_memory_by_product = Dict(
        key_trait=Unicode(),
        value_trait=Union([Int(), Unicode()]),
        help="""Memory of one GPU per product label (``nvidia.com/gpu.product``), for budgets of
        profiles that name a ``product``; other products use ``gpu_memory``. fracnb does not read
        node labels for it: copy the value from the nodes' ``nvidia.com/gpu.memory`` label
        (MiB, set by GPU Feature Discovery), e.g. 40960 -> "40Gi". Default: {}.
        Example: ``c.FractionalSpawner.gpu_memory_by_product = {"NVIDIA-A100-SXM4-40GB": "40Gi"}``
        """,
    ).tag(config=True)

    @validate("gpu_memory_by_product")
    def _check_gpu_memory_by_product(self, proposal: dict) -> dict:
        for product, size in proposal["value"].items():
            try:
                gpu_memory_size(size)
            except QuantityError as error:
                raise TraitError(f"FractionalSpawner.gpu_memory_by_product[{product!r}]: {error}") from None
        return proposal["value"]

    fracnb_service_name = Unicode(
        "",
        help="""Name of the fracnb hub service (quota and culling status). When set, notebooks get
        ``FRACNB_SERVICE_URL`` and their token may call the service. ``fracnb_spawner.setup(c)``
        sets it. Default: "" (no service).
        Example: ``c.FractionalSpawner.fracnb_service_name = "fracnb"``
        """,
    ).tag(config=True)

    fracnb_service_url = Unicode(
        "",
        help="""URL at which notebook pods reach the fracnb service, ending in ``/services/<name>/``:
        the service's own address (its ``url`` in ``JupyterHub.services``) or the proxy's. Given to
        notebooks as ``FRACNB_SERVICE_URL``; ``fracnb_spawner.setup(c)`` sets it. Default: "" (not given).
        Example: ``c.FractionalSpawner.fracnb_service_url = "http://hub:10101/services/fracnb/"``
        """,
    ).tag(config=True)


# FractionalSpawner's own traits, validated as the spawner validates them but without a
# cluster; named so, traitlets' messages name the class the admin configures.
_SpawnerSettings = type("FractionalSpawner", (FractionalTraits, Configurable), {})


def spawner_section(c: Config) -> dict[str, Any]:
    """The settings FractionalSpawner gets from a hub config: ``c.KubeSpawner``, overridden by its own."""
    return {**c.KubeSpawner, **c.FractionalSpawner}


def configured_traits(c: Config) -> FractionalTraits:
    """fracnb's spawner traits as the hub will see them; a value a trait refuses raises its ``TraitError``."""
    names = set(FractionalTraits.class_trait_names())
    mine = {name: value for name, value in spawner_section(c).items() if name in names}
    return _SpawnerSettings(config=Config({"FractionalSpawner": mine}))
