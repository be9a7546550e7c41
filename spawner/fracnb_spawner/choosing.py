"""A user's choice, checked and planned: the profile list, the plan of the options, whether any node
could take it, and the quota. ``FractionalSpawner.choosing`` serves the spawn form (it is the form's
:class:`~.form.spawnform.FormHost`) and the spawn itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Protocol

import aiohttp
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client.exceptions import ApiException
from markupsafe import Markup

from fracnb_spawner.borrowing.decide import Borrow, BorrowSettings
from fracnb_spawner.cluster.kube import list_pods_in, pod_namespaces, singleuser_selector
from fracnb_spawner.cluster.slots import Ask, Cluster
from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError, RefusedSpawnError
from fracnb_spawner.common.timehtml import with_times
from fracnb_spawner.common.units import parse_duration
from fracnb_spawner.config.applied import SpawnValues, copy_plain
from fracnb_spawner.config.profiles import (
    InvalidUserOptionsError,
    ProfileConfigError,
    Selection,
    check_kueue_backends,
    initialize_profiles,
    select,
    validate_profiles,
)
from fracnb_spawner.config.queuekey import queue_max_wait
from fracnb_spawner.form.advice import FormAdvice
from fracnb_spawner.form.preselect import preselection
from fracnb_spawner.form.progress import scheduler_saw_slots, unschedulable_message
from fracnb_spawner.form.rows import ChoiceRow
from fracnb_spawner.form.stopnotice import saved_choice
from fracnb_spawner.gpu.backends import BackendSettings
from fracnb_spawner.gpu.plan import GPUConfigError, GPUDefaults, GPUPlan
from fracnb_spawner.gpu.resolve import plan_gpu
from fracnb_spawner.gpu.words import no_node_reason
from fracnb_spawner.history.stopnotices import NODE_LOST, StopNotice
from fracnb_spawner.hubstate import HubState
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.engines import engine_of
from fracnb_spawner.queue.spawning import SpawnQueue
from fracnb_spawner.queue.text import node_lost_message
from fracnb_spawner.quota import admission
from fracnb_spawner.quota.policy import Allocation, QuotaDecision, QuotaPolicy, allocations_from_pods
from fracnb_spawner.spawnplan import SpawnContext, SpawnPlan, for_pod, plan_spawn

MAX_KEPT_PLANS = 1024  # choices (with their free text) planned once per hub configuration


class ChoiceHost(Protocol):
    """What a choice is checked against: the spawner's configuration, its user and its cluster client."""

    profile_list: Any
    config: Any
    log: Any
    user: Any
    name: str
    pod_name: str
    api: Any
    user_options: Any
    enable_user_namespaces: bool
    component_label: str
    show_availability: bool
    refuse_unplaceable_choices: bool
    fracnb_service_url: str
    gpu_kernel_cull_idle_timeout: Any
    values: SpawnValues
    queue: SpawnQueue
    hub_state: HubState
    _form_choice: dict
    _log_name: str

    def gpu_defaults(self) -> GPUDefaults: ...
    def backend_settings(self) -> BackendSettings: ...
    def borrow_settings(self) -> BorrowSettings: ...
    def cull_defaults(self) -> Any: ...
    def quota_policy(self) -> QuotaPolicy: ...
    def queue_settings(self) -> FracnbQueue: ...
    def is_gpu_resource(self, name: str) -> bool: ...
    def derived(self, name: str, make: Any) -> Any: ...
    async def _start_watching_pods(self) -> Any: ...
    async def form_advice(self, user: str, profiles: Any, rows: Any, history: Any) -> FormAdvice: ...


@dataclass(frozen=True)
class CheckedProfiles:
    """A configured profile list, initialized and validated against the spawner's settings."""

    config: Any
    raw: Any  # a copy of the list as configured
    settings: tuple[Any, ...]
    profiles: list[dict]  # shared by the hub's spawners: read, never changed
    longest_queue_wait: float

    def matches(self, raw: Any, settings: tuple[Any, ...]) -> bool:
        return self.settings == settings and self.raw == raw


class Choosing:
    """The spawner's decisions about a choice, before anything is applied."""

    def __init__(self, host: ChoiceHost) -> None:
        self.host = host
        self.longest_queue_wait: float = 0  # of the profile list last read: the hub's start timeout grows by it

    # ---- the configuration ------------------------------------------------------------------------

    def gpu_defaults(self) -> GPUDefaults:
        return self.host.gpu_defaults()

    def quota_policy(self) -> QuotaPolicy:
        return self.host.quota_policy()

    @property
    def show_availability(self) -> bool:
        return self.host.show_availability

    @property
    def refuse_unplaceable_choices(self) -> bool:
        return self.host.refuse_unplaceable_choices

    async def resolve_profiles(self) -> list[dict]:
        """The initialized, validated profile list (a callable one is called now).

        A configured (not callable) list is initialized and validated once per hub configuration and
        shared by the hub's spawners, read-only.
        """
        host, state = self.host, self.host.hub_state
        settings = (host.gpu_defaults(), host.backend_settings(), host.cull_defaults())
        known = state.checked_profiles
        fixed = not callable(host.profile_list)
        if fixed and known is not None and known.config is host.config and known.matches(host.profile_list, settings):
            self.longest_queue_wait = known.longest_queue_wait
            return known.profiles
        try:
            raw = await maybe_future(host.profile_list(host)) if not fixed else host.profile_list
            profiles = initialize_profiles(raw)
            validate_profiles(profiles, *settings)
            if not fixed and engine_of(host.queue_settings()).counts_resource_requests:  # a fixed list: at start
                check_kueue_backends(profiles, host.gpu_defaults())
            self.longest_queue_wait = max((queue_max_wait(p.get("queue")) for p in profiles), default=0)
        except ProfileConfigError as error:
            host.log.error("fracnb: invalid profile_list: %s", error)
            raise HubConfigError(f"The hub's profile configuration is invalid: {error}") from None
        except Exception as error:  # a callable list may raise or return anything: never a traceback
            host.log.exception("fracnb: could not read profile_list")
            message = f"The hub's profile configuration could not be read ({type(error).__name__}); see the hub log"
            raise HubConfigError(message) from error
        if fixed:
            state.checked_profiles = CheckedProfiles(
                host.config, copy_plain(raw), settings, profiles, self.longest_queue_wait
            )
            state.plans = {}
        return profiles

    # ---- the plan --------------------------------------------------------------------------------

    def plan_for(self, profiles: list[dict], options: object) -> SpawnPlan:
        """The plan of ``options``; ``InvalidRequestError`` (400) saying what is wrong, or ``HubConfigError``.

        A plan depends only on the configuration and the options, so the plans of a configured (not
        callable) profile list are kept for the hub process (:attr:`.hubstate.HubState.plans`) and each
        choice is validated and planned once; the pod's own name is given to it per spawn.
        """
        key = self._plan_key(options)
        plans = self.host.hub_state.plans
        plan = plans.get(key) if key is not None else None
        if plan is None:
            plan = self._plan(profiles, options)
            if key is not None:
                if len(plans) >= MAX_KEPT_PLANS:
                    plans.clear()
                plans[key] = plan
        return for_pod(plan, self.host.pod_name)

    def _plan_key(self, options: object) -> tuple | None:
        """What a plan of ``options`` depends on besides the checked profile list; None: plan it anew."""
        host = self.host
        if callable(host.profile_list) or not isinstance(options, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
            return None
        return (tuple(sorted(options.items())), self._plan_context())

    def _plan_context(self) -> tuple:
        """The spawner's settings a plan depends on besides the profile list (while no override is applied:
        read once per hub configuration)."""
        host = self.host

        def context() -> tuple:
            selector = host.values.configured(host, "node_selector")
            borrow = host.borrow_settings()
            return (
                tuple(sorted(selector.items())), host.fracnb_service_url, str(host.gpu_kernel_cull_idle_timeout),
                tuple(sorted(borrow.node_selector.items())), repr(borrow.tolerations),
            )  # fmt: skip

        return context() if host.values.overridden() else host.derived("plan context", context)

    def _plan(self, profiles: list[dict], options: object) -> SpawnPlan:
        try:
            selection = select(profiles, options)
            return self.plan_of(selection, plan_gpu(selection.gpu, self.host.gpu_defaults()))
        except InvalidUserOptionsError as error:
            raise InvalidRequestError(400, f"Invalid server options: {error}", reason="invalid-options") from None
        except GPUConfigError as error:
            raise HubConfigError(f"The hub's profile configuration is invalid: {error}") from None
        except Exception as error:  # hostile input gets a 400, never a traceback
            self.host.log.exception("fracnb: could not validate user_options for %s", self.host._log_name)
            raise InvalidRequestError(
                400, "Invalid server options: they could not be read; choose again on the spawn form",
                reason="invalid-options",
            ) from error  # fmt: skip

    async def checked_plan(self, profiles: list[dict], options: object) -> SpawnPlan:
        """:meth:`plan_for`, except that a profile the list does not have is refused naming the profiles that
        can start, as the form shows them: '"0.25 GPU" (quarter)' (the slug is what the REST API takes)."""
        slug = options.get("profile") if isinstance(options, Mapping) else None
        if isinstance(slug, str) and slug not in {p["slug"] for p in profiles}:
            startable = [p for p in profiles if await self._could_start(profiles, p["slug"])]
            names = ", ".join(f'"{p.get("display_name") or p["slug"]}" ({p["slug"]})' for p in startable)
            raise InvalidRequestError(
                400, f"Invalid server options: no such profile {slug[:64]!r}; choose one of: {names}",
                reason="invalid-options",
            )  # fmt: skip
        return self.plan_for(profiles, options)

    async def _could_start(self, profiles: list[dict], slug: str) -> bool:
        try:
            plan = self.plan_for(profiles, {"profile": slug})
        except Exception:  # a profile that needs a choice of free text: offer it
            return True
        return await self.slots_exist(plan.ask) is not False

    def plan_of(self, selection: Selection, gpu: GPUPlan) -> SpawnPlan:
        host = self.host
        gpu_cull, cpu_cull = host.cull_defaults()
        context = SpawnContext(
            host.backend_settings(), gpu_cull, cpu_cull, host.values.configured(host, "node_selector"),
            host.fracnb_service_url, parse_duration(host.gpu_kernel_cull_idle_timeout),
            host.queue_settings().display_timezone, host.borrow_settings(),
        )  # fmt: skip
        return plan_spawn(selection, gpu, context, host.is_gpu_resource)

    # ---- admission -------------------------------------------------------------------------------

    async def admit(self, plan: SpawnPlan, *, reserve: bool) -> None:
        """Refuse a choice no node offers (503) or over quota (403); with ``reserve``, hold its share."""
        await self.check_placeable(plan)
        if plan.fraction == 0 or not self.quota_policy().has_limits:
            return
        request = Allocation(self.host.user.name, self.host.name, plan.fraction, plan.profile)
        ledger = self.host.hub_state.ledger
        await admission.admit(
            self.quota_policy(), ledger, self._listed_allocations, self._applicant(), request, reserve=reserve
        )

    async def check_placeable(self, plan: SpawnPlan) -> None:
        """Refuse at once (503) a choice no node of the cluster offers, rather than wait for a timeout.

        Only with ``refuse_unplaceable_choices`` and ``show_availability`` and while the hub-wide
        view is readable; otherwise the scheduler decides.
        """
        if self.refuse_unplaceable_choices and await self.slots_exist(plan.ask) is False:
            message = no_node_reason(plan.gpu)
            raise RefusedSpawnError(503, message[0].upper() + message[1:], reason="unschedulable")

    async def slots_exist(self, ask: Ask | None) -> bool | None:
        """Whether some node or DRA device could hold a server of ``ask`` (used or not); None when the hub
        cannot tell (no ask, ``show_availability`` off, the cluster unreadable)."""
        if ask is None or not self.show_availability:
            return None
        cluster = await self.read_cluster(ask, wait=True)
        return None if cluster is None else ask.could_ever_fit(cluster)

    async def read_cluster(self, ask: Ask | None, *, wait: bool) -> Cluster | None:
        """What the hub-wide watches show of the cluster, as ``ask`` reads it; None while unreadable."""
        devices = ask is not None and ask.needs_devices
        state = self.host.hub_state
        watches = state.watches or state.cluster(self.host.api, self.host.log)
        return await watches.read(devices=devices, wait=wait)

    async def no_node_refusal(self, plan: SpawnPlan | None, events: list[dict], waited: float) -> Exception:
        """The refusal when no node took the pod before the hub's timeout (without a scheduler's refusal
        among the spawn's events: the timeout itself)."""
        refusals = [event for event in events or [] if event.get("reason") == "FailedScheduling"]
        if not refusals:
            return asyncio.TimeoutError()
        reason = str(refusals[-1].get("message"))
        # The scheduler's text is in the spawn's event log and here in the hub log, not in the headline.
        self.host.log.warning("fracnb: no node took %s in %s s: %s", self.host._log_name, waited, reason)
        gpu = plan.gpu if plan else None
        slots = await self.slots_exist(plan.ask if plan else None)
        slots = scheduler_saw_slots(reason, gpu) if slots is None else slots
        return RefusedSpawnError(503, unschedulable_message(gpu, waited, slots_exist=slots), reason="unschedulable")

    def _applicant(self) -> admission.Applicant:
        user = self.host.user
        groups = {group.name: [member.name for member in group.users] for group in user.groups}
        return admission.Applicant(user.name, self.host.name, groups)

    async def _listed_allocations(self) -> list[Allocation]:
        """GPUs held by singleuser pods in every namespace they may live in, from one LIST now."""
        host = self.host
        configured = host.values.configured(host, "namespace")
        namespaces = pod_namespaces(
            await self.resolve_profiles(), configured, user_namespaces=host.enable_user_namespaces
        )
        try:
            pods = await list_pods_in(host.api, namespaces, singleuser_selector(host.component_label))
        except (ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
            host.log.error("fracnb: cannot list singleuser pods to count GPU quotas: %r", error)
            message = "GPU quotas cannot be checked now: the hub could not read the cluster's pods; try again later"
            raise RefusedSpawnError(503, message, reason="cluster-unreadable") from None
        return allocations_from_pods(pods)

    # ---- what the spawn form reads (form/spawnform.py) -----------------------------------------------

    async def quota_decision_now(self, row: ChoiceRow | None) -> QuotaDecision:
        """The quota decision for a row's share (None: for what is in use), from KubeSpawner's shared pod
        reflector (no request per form load; the spawn itself counts exactly)."""
        try:
            reflector = await self.host._start_watching_pods()
            held = allocations_from_pods(list(reflector.pods.values()))
        except Exception as error:  # the form then shows no refusals
            self.host.log.warning("fracnb: no pod reflector for the spawn form's quota check: %r", error)
            held = []
        fraction = row.plan.fraction if row is not None else Fraction(0)
        return admission.decision(self.quota_policy(), self.host.hub_state.ledger, held, self._applicant(), fraction)

    def choice_ask(self, selection: Selection, row: ChoiceRow) -> tuple[Ask | None, float, Borrow | None]:
        """What a server of a form row competes for, how long it may queue, and where it may borrow a card."""
        try:
            plan = self.plan_of(selection, row.plan)
        except InvalidUserOptionsError:
            return None, 0, None
        return plan.ask, plan.max_wait, plan.borrow

    async def form_advice_for(self, profiles: list[dict], rows: Any) -> FormAdvice:
        host = self.host
        return await host.form_advice(host.user.name, profiles, rows, host.hub_state.history)

    async def queue_text(
        self, ask: Ask | None, max_wait: float, fraction: Fraction, borrow: Borrow | None = None
    ) -> str | None:
        return await self.host.queue.form_text(ask, max_wait, fraction, borrow)

    def kept_place_text(self) -> Markup | None:
        """The form's notice: that the last server's node left the cluster (``HubState.stops``; on the form of
        that server, whoever looks at it), else a place kept in the queue; its time shown in the reader's zone."""
        stop = self.host.hub_state.stops.of_server(self.host.user.name, self.host.name)
        if stop is not None and stop.reason == NODE_LOST and stop.details.get("text"):
            return with_times(str(stop.details["text"]), [stop.stopped_at], self.host.queue_settings().zone)
        return self.host.queue.kept_place_text()

    async def lost_node(self, pod: Mapping[str, Any] | None) -> bool:
        """Whether ``pod`` is bound to a node the hub-wide view of nodes no longer has (False when the pod is
        not bound or the view cannot tell: not listed yet, the cluster unreadable). If so, the next spawn
        form says why the server stopped (``HubState.stops``)."""
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        cluster = await self.read_cluster(None, wait=False) if node else None
        if cluster is None or not cluster.nodes or any(n["metadata"]["name"] == node for n in cluster.nodes):
            return False
        host = self.host
        now = datetime.now(timezone.utc)
        text = node_lost_message(node, now, host.queue_settings().zone)
        host.hub_state.stops.note(StopNotice(host.user.name, host.name, now, NODE_LOST, details={"text": text}))
        host.log.warning("fracnb: %s ran on node %s, which left the cluster; deleting it", host._log_name, node)
        return True

    async def preselection(self, profiles: list[dict], advised: Mapping[str, str] | None) -> tuple[dict, Markup | None]:
        """The choice to show selected (form/preselect.py: the last one submitted, even if refused; a server's whose
        saved variables wait; this server's own; the advice), and the form's line saying why, if any."""
        host = self.host
        saved = await asyncio.to_thread(saved_choice, host)  # the session history's newest stop: a database read

        def selects(options: Mapping[str, Any]) -> bool:
            try:
                select(profiles, dict(options))
            except InvalidUserOptionsError:
                return False
            return True

        zone = host.queue_settings().zone
        chosen = preselection(host._form_choice, saved, host.user_options or {}, advised, valid=selects, zone=zone)
        return dict(chosen.options), with_times(chosen.why, chosen.moments, zone) if chosen.why else None
