"""``FractionalSpawner``: KubeSpawner with GPU-fraction profiles.

The spawner gathers traits and user choices, hands them to the pure functions in
``profiles``, ``gpu`` and ``backends``, and writes their results onto itself before
KubeSpawner builds the pod.
"""

from __future__ import annotations

import asyncio
import html
import json
from fractions import Fraction
from typing import Any

import aiohttp
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.models import V1EnvVar
from kubespawner import KubeSpawner
from tornado import web
from traitlets import TraitError, default, validate

from fracnb_spawner.cluster.kube import list_pods_in, pod_namespaces, singleuser_selector
from fracnb_spawner.cluster.nodes import free_units, largest_allocatable
from fracnb_spawner.cluster.slots import Ask, Cluster, ResourceAsk, servers_free, slot_kind
from fracnb_spawner.cluster.view import shared_view
from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError, RefusedSpawnError
from fracnb_spawner.common.podkeys import SLOT_KIND_LABEL
from fracnb_spawner.common.units import format_fraction, parse_duration, parse_fraction
from fracnb_spawner.config.overrides import (
    GPU_CARRYING_TRAITS,
    FilledText,
    OverrideError,
    check_spawner_traits,
    label_problems,
)
from fracnb_spawner.config.profiles import (
    UNLISTED_SUFFIX,
    InvalidUserOptionsError,
    ProfileConfigError,
    Selection,
    cull_policy,
    initialize_profiles,
    select,
    selection_overrides,
    validate_profiles,
)
from fracnb_spawner.config.queuekey import queue_max_wait
from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.form import rows as form
from fracnb_spawner.form.advice import AdviceTraits
from fracnb_spawner.form.progress import scheduler_saw_slots, unschedulable_message, waiting_message
from fracnb_spawner.gpu import companions
from fracnb_spawner.gpu.backends import (
    GPU_VISIBILITY_VARIABLES,
    RESERVED_ENV_PREFIX,
    BackendSettings,
    PodFields,
    is_gpu_resource,
)
from fracnb_spawner.gpu.contract import contract_fields
from fracnb_spawner.gpu.dra import named_for_pod
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUConfigError, GPUDefaults, GPUPlan
from fracnb_spawner.gpu.resolve import plan_gpu
from fracnb_spawner.gpu.table import backend_fields, backend_named
from fracnb_spawner.gpu.words import no_node_reason
from fracnb_spawner.queue.coordinator import read_cluster
from fracnb_spawner.queue.spawning import QueueingSpawner, QueuePlan, QueueTimeoutError, merge
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.quota.ledger import LEDGER
from fracnb_spawner.quota.policy import Allocation, QuotaDecision, QuotaPolicy, allocations_from_pods, check_request


def _is_reserved_env(name: str) -> bool:
    return name in GPU_VISIBILITY_VARIABLES or name.startswith(RESERVED_ENV_PREFIX)


def _env_name(variable: Any) -> str:
    # KubeSpawner builds V1EnvVar objects; extra_container_config may add plain dicts.
    return variable["name"] if isinstance(variable, dict) else variable.name


_INVALID_OBJECT_STATUSES = (400, 422)  # the apiserver's BadRequest and Invalid
_PLAN_TRAITS = ("extra_resource_limits", "extra_resource_guarantees", "node_selector", "scheduler_name")
_validated: dict[int, tuple[Any, Any, tuple[GPUDefaults, BackendSettings]]] = {}
_quota_policies: dict[int, tuple[Any, QuotaPolicy]] = {}


# The notice above the form (outside its own stylesheet): the look of its quota line, in amber.
KEPT_PLACE_STYLE = 'style="background: #fff8c5; border-left: 4px solid #9a6700; padding: 6px 10px"'


class FractionalSpawner(QueueingSpawner, KubeSpawner, FractionalTraits, AdviceTraits):
    """KubeSpawner whose profiles may carry a ``gpu`` key; see docs/spawner.md."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fracnb_plan: GPUPlan | None = None
        self.fracnb_selection: dict[str, str] = {}
        self._fracnb_env: dict[str, str] = {}
        self._fracnb_labels: dict[str, str] = {}
        self._fracnb_annotations: dict[str, str] = {}
        self._pristine: dict[str, Any] = {}
        self._form_choice: dict = {}  # the last choice submitted on the form, shown again after a refusal
        self._spawn_ask: Ask | None = None  # what this spawn's pod competes for (its slot kind and size)
        self._pod_parts = PodFields()  # claims and objects beside the pod (backend_table: dra)
        self._companion_refs: list[dict[str, str]] = []  # those objects once created, kept in the state
        self._companions_pending = False  # this spawn's objects are still to be created
        try:
            check_spawner_traits({name: getattr(self, name) for name in GPU_CARRYING_TRAITS}, self.is_gpu_resource)
        except OverrideError as error:
            raise TraitError(str(error)) from None

    # ---- configuration -------------------------------------------------------------------------------

    @validate("profile_list")
    def _check_profile_list(self, proposal: dict) -> Any:
        value = proposal["value"]
        if not callable(value):
            try:
                validate_profiles(initialize_profiles(value), self.gpu_defaults(), self.backend_settings())
            except ProfileConfigError as error:
                raise TraitError(f"FractionalSpawner.profile_list: {error}") from None
        return value

    def is_gpu_resource(self, name: str) -> bool:
        return is_gpu_resource(name, self.backend_settings())

    async def resolve_profiles(self) -> list[dict]:
        """The initialized, validated profile list (a callable one is called now)."""
        raw = self.profile_list
        try:
            if callable(raw):
                raw = await maybe_future(raw(self))
            profiles = initialize_profiles(raw)
            self._validate_once(raw, profiles)
            self._longest_queue_wait = max((queue_max_wait(p.get("queue")) for p in profiles), default=0)
        except ProfileConfigError as error:
            self.log.error("fracnb: invalid profile_list: %s", error)
            raise HubConfigError(f"The hub's profile configuration is invalid: {error}") from None
        except Exception as error:  # a callable list may raise or return anything: never a traceback
            self.log.exception("fracnb: could not read profile_list")
            message = f"The hub's profile configuration could not be read ({type(error).__name__}); see the hub log"
            raise HubConfigError(message) from error
        return profiles

    def _validate_once(self, raw: Any, profiles: list[dict]) -> None:
        # Each spawner holds its own copy of the configured list: validate a given content once per
        # hub configuration (comparing copies is cheap; validating is not).
        settings = (self.gpu_defaults(), self.backend_settings(), self.cull_defaults())
        if callable(self.profile_list):
            validate_profiles(profiles, *settings)
            return
        cached = _validated.get(id(self.config))
        if cached is not None and cached[0] is self.config and cached[1] == raw and cached[2] == settings:
            return
        validate_profiles(profiles, *settings)
        _validated[id(self.config)] = (self.config, _copy_plain(raw), settings)

    @default("server_token_scopes")
    def _default_server_token_scopes(self) -> list[str]:
        if not self.fracnb_service_name:
            return []
        # The "server" role's scopes, plus calling the fracnb service for quota and cull status.
        return ["users:activity!user", "access:servers!server", f"access:services!service={self.fracnb_service_name}"]

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # load_user_options validates and applies user_options when the spawn starts; without a
        # hook JupyterHub logs "Received unhandled user_options" for every spawn.
        return _applied_by_load_user_options

    # ---- the spawn form --------------------------------------------------------------------------------

    @default("options_form")
    def _options_form_default(self) -> Any:
        return self.render_options_form

    async def render_options_form(self, spawner: FractionalSpawner | None = None) -> str:
        profiles = await self.resolve_profiles()
        if not profiles:
            return ""
        rows = form.describe(profiles, self.gpu_defaults())
        annotate = getattr(self, "annotate_form_rows", None)
        if annotate is not None:
            rows = await annotate(rows)
        quota = await self.form_quota_line()
        advice = await self.form_advice(self.user.name, profiles, rows)
        shown = self._form_choice or self.user_options or advice.preselect or {}
        kept = self.kept_place_text()
        notice = f"<p {KEPT_PLACE_STYLE} data-fracnb-queue-place>{html.escape(kept)}</p>" if kept else ""
        return advice.html + notice + form.render(profiles, rows, shown, quota)

    async def form_quota_line(self) -> str | None:
        """The form's line with the user's quota and their teams' use (None without quotas)."""
        policy = self.quota_policy()
        if not policy.has_limits:
            return None
        return form.quota_line(await self._quota_decision(Fraction(0), fresh=False))

    async def _quota_decision(self, fraction: Fraction, *, fresh: bool) -> QuotaDecision:
        allocations = await self._allocations_in_cluster(fresh=fresh)
        return check_request(
            self.quota_policy(), LEDGER.allocations(allocations), user=self.user.name,
            groups=self._group_members(), server=self.name, fraction=fraction,
        )  # fmt: skip

    # options_from_form is KubeSpawner's (synchronous, returns user_options). The checks that need
    # I/O (a callable profile_list, the quota) run in the two hooks JupyterHub awaits before a spawn.

    async def run_options_from_form(self, form_data: dict) -> dict:
        """The spawn form's user_options, refused on the form itself (no spawn starts) when invalid."""
        options = await maybe_future(super().run_options_from_form(form_data))
        self._form_choice = dict(options) if isinstance(options, dict) else {}
        await self.check_options(options)
        return options

    async def options_from_query(self, query_data: dict) -> dict:
        """user_options from /hub/spawn?... query arguments, checked like the form's."""
        options = await maybe_future(super().options_from_query(query_data))
        await self.check_options(options)
        return options

    async def check_options(self, options: dict) -> None:
        """Refuse invalid options (400), choices no node offers (503) or options over quota (403)
        without applying anything."""
        profiles = await self.resolve_profiles()
        if profiles:
            selection = self.select_options(profiles, options)
            plan = self.plan_for(selection)
            await self.check_placeable(selection, plan)
            await self.check_quota(selection, plan, reserve=False)

    # ---- applying a choice -----------------------------------------------------------------------------

    async def load_user_options(self) -> None:
        """Validate the (possibly forged) user_options, then apply the profile and the GPU plan.

        Refusals are ``InvalidRequestError`` (4xx) or ``HubConfigError`` (500), both ``ValueError``s
        as KubeSpawner's refusals are.
        """
        self._restore_config()
        profiles = await self.resolve_profiles()
        if not profiles:
            return await super().load_user_options()
        selection = self.select_options(profiles, self.user_options)
        plan = self.plan_for(selection)
        await self.check_placeable(selection, plan)
        await self.check_quota(selection, plan, reserve=True)
        self.user_options = selection.user_options
        try:
            self._load_profile(selection.slug, profiles)
        except Exception as error:
            LEDGER.release(self.user.name, self.name)
            if isinstance(error, web.HTTPError):
                raise
            # Applying overrides may expand the user's free text: a 400, so that input cannot count
            # toward the hub's consecutive failure limit; the traceback goes to the hub log.
            self.log.exception("fracnb: could not apply profile %r for %s", selection.slug, self._log_name)
            raise InvalidRequestError(
                400, f"Invalid server options: the hub could not apply them to profile {selection.slug!r}; "
                "see the hub log", reason="invalid-options",
            ) from error  # fmt: skip
        self.apply_plan(selection, plan)
        return None

    def select_options(self, profiles: list[dict], options: object) -> Selection:
        """The validated choice for ``options``, or an ``InvalidRequestError`` (400) saying what is wrong."""
        try:
            selection = select(profiles, options)
            selection_overrides(selection, self.is_gpu_resource)  # free text asking for GPUs: refused here too
        except InvalidUserOptionsError as error:
            raise InvalidRequestError(400, f"Invalid server options: {error}", reason="invalid-options") from None
        except Exception as error:  # hostile input gets a 400, never a traceback
            self.log.exception("fracnb: could not validate user_options for %s", self._log_name)
            raise InvalidRequestError(
                400, "Invalid server options: they could not be read; choose again on the spawn form",
                reason="invalid-options",
            ) from error  # fmt: skip
        return selection

    def plan_for(self, selection: Selection) -> GPUPlan:
        try:
            return plan_gpu(selection.gpu, self.gpu_defaults())
        except GPUConfigError as error:
            raise HubConfigError(f"The hub's profile configuration is invalid: {error}") from None

    async def check_quota(self, selection: Selection, plan: GPUPlan, *, reserve: bool) -> None:
        """Refuse the spawn with a 4xx when over quota; with ``reserve``, hold the fraction.

        The check and the reservation happen under the hub-wide ledger lock, against the
        cluster's pods (listed fresh, so a hub restart neither forgets nor double-counts)
        plus admitted spawns whose pods don't exist yet.
        """
        policy = self.quota_policy()
        if plan.fraction == 0 or not policy.has_limits:
            return
        async with LEDGER.lock:
            decision = check_request(
                policy, LEDGER.allocations(await self._allocations_in_cluster()),
                user=self.user.name, groups=self._group_members(), server=self.name, fraction=plan.fraction,
            )  # fmt: skip
            if not decision.allowed:
                raise InvalidRequestError(403, form.quota_refusal(decision), reason="quota")
            if reserve:
                LEDGER.reserve(Allocation(self.user.name, self.name, plan.fraction, selection.slug))

    def quota_policy(self) -> QuotaPolicy:
        """``c.FracnbQuotas`` as a policy, read once per hub configuration object."""
        cached = _quota_policies.get(id(self.config))
        if cached is None or cached[0] is not self.config:
            cached = (self.config, FracnbQuotas(parent=self).policy())
            _quota_policies[id(self.config)] = cached
        return cached[1]

    def _group_members(self) -> dict[str, list[str]]:
        return {group.name: [member.name for member in group.users] for group in self.user.groups}

    async def _allocations_in_cluster(self, *, fresh: bool = True) -> list[Allocation]:
        """GPUs held by singleuser pods in every namespace they may live in (:func:`.kube.pod_namespaces`).

        ``fresh``: one LIST now, for the admission check, which must be exact. Otherwise KubeSpawner's
        own shared pod reflector (same pods, same scope, no request), for the spawn form's advice.
        """
        if not fresh:
            try:
                reflector = await self._start_watching_pods()
                return allocations_from_pods(list(reflector.pods.values()))
            except Exception as error:  # the form then shows no refusals; the spawn still counts exactly
                self.log.warning("fracnb: no pod reflector for the spawn form's quota check: %r", error)
                return []
        configured = self._pristine.get("namespace", self.namespace)  # before any profile's override
        namespaces = pod_namespaces(
            await self.resolve_profiles(), configured, user_namespaces=self.enable_user_namespaces
        )
        try:
            pods = await list_pods_in(self.api, namespaces, singleuser_selector(self.component_label))
        except (ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
            self.log.error("fracnb: cannot list singleuser pods to count GPU quotas: %r", error)
            message = "GPU quotas cannot be checked now: the hub could not read the cluster's pods; try again later"
            raise RefusedSpawnError(503, message, reason="cluster-unreadable") from None
        return allocations_from_pods(pods)

    async def stop(self, now: bool = False) -> None:
        try:
            await super().stop(now=now)
            await companions.delete(self.api.api_client, self._companion_refs, self.log)
            self._companion_refs = []
            # KubeSpawner also stops a leftover pod in the middle of a start, then creates the pod
            # again: its objects must be made again too.
            self._companions_pending = bool(self._pod_parts.companions)
        finally:
            LEDGER.release(self.user.name, self.name)

    async def annotate_form_rows(self, rows: dict) -> dict:
        """Add free capacity (cluster-wide) and quota refusals to the spawn form's rows.

        Both come from shared watches, not from requests per form load: free capacity from the
        hub-wide :mod:`.clusterview`, GPUs held from KubeSpawner's pod reflector. The spawn itself
        recounts exactly (:meth:`check_quota`).
        """
        policy = self.quota_policy()
        nodes, pods = await self._cluster_view() if self.show_availability else ([], [])
        allocations = await self._allocations_in_cluster(fresh=False) if policy.has_limits else []
        annotated = {}
        profiles = await self.resolve_profiles()
        for key, original in rows.items():
            row = original
            selection = self._row_selection(profiles, key)
            ask = self._slot_ask(selection, row.plan) if selection else None
            placement = _placement_of(ask)
            if nodes and placement:
                resource, selector, units = placement
                row = row.with_availability(
                    free_units(nodes, pods, resource, selector), await self.form_queue_text(profiles, key, ask)
                )
                if self.refuse_unplaceable_choices and largest_allocatable(nodes, resource, selector) < units:
                    row = row.refused(no_node_reason(row.plan))
            elif self.show_availability:
                row = await self._with_dra_availability(row, ask, await self.form_queue_text(profiles, key, ask))
            if row.allowed and policy.has_limits and row.plan.fraction > 0:
                decision = check_request(
                    policy, LEDGER.allocations(allocations), user=self.user.name,
                    groups=self._group_members(), server=self.name, fraction=row.plan.fraction,
                )  # fmt: skip
                if not decision.allowed:
                    row = row.refused(decision.message)
            annotated[key] = row
        return annotated

    async def _with_dra_availability(
        self, row: form.ChoiceRow, ask: Ask | None, queue_text: str | None
    ) -> form.ChoiceRow:
        """A dra choice's free count, from the hub-wide views of nodes, ResourceSlices and claims."""
        cluster = await self._cluster_for(ask) if ask is not None and ask.needs_devices else None
        if cluster is None or ask is None:
            return row
        row = row.with_availability(servers_free(ask, cluster), queue_text)
        if self.refuse_unplaceable_choices and not ask.could_ever_fit(cluster):
            row = row.refused(no_node_reason(row.plan))
        return row

    async def _cluster_for(self, ask: Ask) -> Cluster | None:
        """What the hub-wide watches show of the cluster, as ``ask`` reads it; None while unreadable."""
        return await read_cluster(
            shared_view(self.api, self.log), self.api, self.log, devices=ask.needs_devices, wait=True
        )

    def _placement(self, selection: Selection, plan: GPUPlan) -> tuple[str, dict[str, str], int] | None:
        """The extended resource, node selector and units a pod of this choice asks the default scheduler for.

        None when no extended resource is asked for, another scheduler (HAMi, KAI) places the pod,
        or the profile's overrides make the node selector unknowable before the spawn (a callable).
        """
        return _placement_of(self._slot_ask(selection, plan))

    def _selection_node_selector(self, selection: Selection) -> dict[str, str] | None:
        """The configured node selector with the choice's overrides merged as KubeSpawner merges them."""
        selector = dict(self._pristine.get("node_selector", self.node_selector))
        try:
            overrides = selection_overrides(selection, self.is_gpu_resource)
        except InvalidUserOptionsError:
            return None
        for override in overrides:
            value = override.get("node_selector")
            if value is None:
                continue
            if not isinstance(value, dict):
                return None
            for key, item in value.items():
                if item is None:
                    selector.pop(key, None)
                else:
                    selector[key] = str(item)
        return selector

    async def check_placeable(self, selection: Selection, plan: GPUPlan) -> None:
        """Refuse at once (503) a choice no node of the cluster offers, rather than wait for a timeout.

        Only with ``refuse_unplaceable_choices`` and ``show_availability`` and while the hub-wide
        view of nodes is readable; otherwise the scheduler decides.
        """
        ask = self._slot_ask(selection, plan)
        if not self.refuse_unplaceable_choices or await self._slots_exist(ask) is not False:
            return
        message = no_node_reason(plan)
        raise RefusedSpawnError(503, message[0].upper() + message[1:], reason="unschedulable")

    async def _slots_exist(self, ask: Ask | None) -> bool | None:
        """Whether some node or DRA device could hold a server of ``ask`` (used or not); None when the
        hub cannot tell (no ask, ``show_availability`` off, the cluster unreadable)."""
        if ask is None or not self.show_availability:
            return None
        cluster = await self._cluster_for(ask)
        return None if cluster is None else ask.could_ever_fit(cluster)

    def _row_selection(self, profiles: list[dict], key: form.RowKey) -> Selection | None:
        slug, option, choice = key
        try:
            return select(profiles, {"profile": slug} if option is None else {"profile": slug, option: choice})
        except InvalidUserOptionsError:
            return None

    def _slot_ask(self, selection: Selection, plan: GPUPlan) -> Ask | None:
        """What a server of this choice competes for (its slot kind and size), as its backend counts it;
        None when the hub does not count it (another scheduler places it, or its node selector is unknown)."""
        ask_for = backend_named(plan.scheduler_backend or plan.backend).counted_by.ask
        if ask_for is None:
            return None
        fields = backend_fields(plan, self.backend_settings())
        return ask_for(plan, fields, self.backend_settings(), self._selection_node_selector(selection))

    async def _cluster_view(self) -> tuple[list[dict], list[dict]]:
        """Nodes and GPU-holding pods cluster-wide, from the hub-wide watch (no request per form load).

        Empty while they cannot be read (RBAC): the form then says nothing about free capacity.
        """
        return await shared_view(self.api, self.log).snapshot()

    def apply_plan(self, selection: Selection, plan: GPUPlan) -> None:
        """Write the plan's pod fields onto this spawner's traits."""
        self._remember(*_PLAN_TRAITS)
        gpu_cull, cpu_cull = self.cull_defaults()
        cull = cull_policy(selection.gpu, selection.cull, gpu_cull, cpu_cull)
        fields = backend_fields(plan, self.backend_settings())
        display_name = selection.profile.get("display_name")
        contract = contract_fields(
            plan,
            profile=selection.slug,
            choice=selection.choice_text,
            cull=cull,
            model=plan.product,
            display_name=display_name if isinstance(display_name, str) else None,
        )
        self.extra_resource_limits = {**self.extra_resource_limits, **fields.resources}
        self.extra_resource_guarantees = {**self.extra_resource_guarantees, **fields.resources}
        self.node_selector = {**self.node_selector, **fields.node_selector}
        if fields.scheduler_name:
            self.scheduler_name = fields.scheduler_name
        self._fracnb_labels = {**fields.labels, **contract.labels}
        self._fracnb_annotations = {**fields.annotations, **contract.annotations}
        self._fracnb_env = {**fields.environment, **contract.environment}
        if self.fracnb_service_url:
            self._fracnb_env["FRACNB_SERVICE_URL"] = self.fracnb_service_url
        kernel_timeout = parse_duration(self.gpu_kernel_cull_idle_timeout)
        if plan is not CPU_ONLY and kernel_timeout:
            # Read by the notebook side's server extension: args would be dropped when the image's
            # own command is used, environment variables never are.
            self._fracnb_env["FRACNB_KERNEL_CULL_IDLE_TIMEOUT"] = str(kernel_timeout)
        self._pod_parts = named_for_pod(fields, self.pod_name) if fields.companions else fields
        self._companions_pending = bool(fields.companions)
        self.fracnb_plan = plan
        self.fracnb_selection = {"profile": selection.slug, "choice": selection.choice_text}
        self._spawn_ask = self._slot_ask(selection, plan)
        self._apply_queue_plan(selection, plan, fields)

    def _apply_queue_plan(self, selection: Selection, plan: GPUPlan, fields: Any) -> None:
        """The slot-kind label of a GPU pod, and what its spawn queues for (None: it never queues)."""
        ask = self._spawn_ask
        if ask is not None:
            kind = ask.kind
            max_wait = queue_max_wait(selection.profile.get("queue"))
            self._queue_plan = QueuePlan(ask, max_wait) if max_wait > 0 else None
        elif fields.resources or fields.scheduler_name:
            kind = slot_kind(next(iter(fields.resources), fields.scheduler_name or ""), fields.node_selector)
        else:
            return
        self._fracnb_labels[SLOT_KIND_LABEL] = kind

    def get_env(self) -> dict[str, str]:
        """The environment, with GPU-visibility and FRACNB_* variables only as fracnb sets them."""
        env = {k: v for k, v in super().get_env().items() if not _is_reserved_env(k)}
        env.update(self._fracnb_env)
        return env

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's pod plus fracnb's labels and annotations (added literally, not format-expanded)."""
        pod = await super().get_pod_manifest()
        pod.metadata.labels = {**(pod.metadata.labels or {}), **self._fracnb_labels}
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), **self._fracnb_annotations}
        companions.attach_claims(pod, self._pod_parts)
        if self.extra_container_config.get("env"):
            # get_env() already controls the reserved names; a raw env list in extra_container_config doesn't.
            container = pod.spec.containers[0]
            kept = [var for var in container.env or [] if not _is_reserved_env(_env_name(var))]
            container.env = kept + [V1EnvVar(name=k, value=v) for k, v in self._fracnb_env.items()]
        return pod

    # ---- state across hub restarts ---------------------------------------------------------------------

    def get_state(self) -> dict:
        state = super().get_state()
        if self.fracnb_plan is not None:
            state["fracnb"] = {
                **self.fracnb_selection,
                "backend": self.fracnb_plan.backend,
                "fraction": format_fraction(self.fracnb_plan.fraction),
                "memory_bytes": self.fracnb_plan.memory_bytes,
            }
            if self._companion_refs:
                state["fracnb"]["companions"] = self._companion_refs
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        saved = state.get("fracnb")
        if saved:
            self.fracnb_selection = {"profile": saved.get("profile", ""), "choice": saved.get("choice", "")}
            backend = saved.get("backend", "none")
            self.fracnb_plan = GPUPlan(
                backend, parse_fraction(saved.get("fraction", "0")), saved.get("memory_bytes", 0)
            )
            self._companion_refs = [ref for ref in saved.get("companions", []) if isinstance(ref, dict)]

    def clear_state(self) -> None:
        super().clear_state()
        self.fracnb_plan = None
        self.fracnb_selection = {}

    async def _start(self) -> Any:
        """KubeSpawner's start, queued when no slot is free, failing with a plain reason before the hub's timeout."""
        inner = asyncio.ensure_future(super()._start())
        cancelled = True
        try:
            result = await self._await_started(inner)
            cancelled = False
            return result
        except QueueTimeoutError:
            cancelled = False
            inner.cancel()  # KubeSpawner's own wait for the pod, before the pod goes
            await asyncio.gather(inner, return_exceptions=True)
            message = await self._give_up_waiting()
            raise RefusedSpawnError(503, message, reason="queue-timeout") from None
        except (asyncio.TimeoutError, TimeoutError):
            cancelled = False
            reason = self._scheduling_failure()
            if reason is None:
                raise
            # The scheduler's text is in the spawn's event log and here in the hub log, not in the headline.
            self.log.warning("fracnb: no node took %s in %s s: %s", self._log_name, self.start_timeout, reason)
            slots = await self._slots_exist(self._spawn_ask)
            slots = scheduler_saw_slots(reason, self.fracnb_plan) if slots is None else slots
            message = unschedulable_message(self.fracnb_plan, self.start_timeout, slots_exist=slots)
            raise RefusedSpawnError(503, message, reason="unschedulable") from None
        except ApiException as error:
            cancelled = False
            if error.status not in _INVALID_OBJECT_STATUSES:
                raise
            # The apiserver refused an object built from the profile and the user's choices: say why,
            # as a refusal (it repeats for every spawn of this choice; restarting the hub fixes nothing).
            message = f"The cluster refused this server's pod: {_api_message(error)}"
            raise RefusedSpawnError(400, message, reason="invalid-pod") from None
        except Exception:
            cancelled = False
            raise
        finally:
            if not inner.done():
                inner.cancel()
                await asyncio.gather(inner, return_exceptions=True)
            self._leave_queue(cancelled=cancelled)

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> Any:
        """Create the plan's objects beside the pod (once per spawn), then the pod, then make the pod
        their owner (so that the garbage collector removes them with it, even a queued pod's).

        Here rather than in ``_start``: KubeSpawner applies the user's choice (``load_user_options``)
        inside ``_start``, and retries this request after deleting a leftover pod of the same name.
        """
        if self._companions_pending:
            await companions.delete(self.api.api_client, self._companion_refs, self.log)  # an earlier spawn's
            try:
                await companions.create(self.api.api_client, self.namespace, self._pod_parts.companions, self.log)
            except companions.CompanionError as error:
                raise HubConfigError(f"This server could not start: {error}") from None
            self._companion_refs = companions.references(self._pod_parts.companions, self.namespace)
            self._companions_pending = False
        created = await super()._make_create_pod_request(pod, request_timeout)
        if created and self._companion_refs:
            await self._adopt_companions()
        return created

    async def _adopt_companions(self) -> None:
        """Make the pod just created the owner of its companions; a failure only leaves them to the stop."""
        try:
            # Read now, not from the reflector: a pod replaced during the start has a new uid.
            made = await self.api.read_namespaced_pod(self.pod_name, self.namespace)
        except ApiException as error:
            self.log.warning("fracnb: could not read %s to own its companions: %s", self.pod_name, error.reason)
            return
        owner = companions.owner_reference(self.api.api_client.sanitize_for_serialization(made))
        await companions.adopt(self.api.api_client, self._companion_refs, owner, self.log)

    def _scheduling_failure(self) -> str | None:
        events = getattr(self, "events", None) or []
        for event in reversed(events):
            if event.get("reason") == "FailedScheduling":
                return str(event.get("message"))
        return None

    # ---- progress -------------------------------------------------------------------------------------

    async def progress(self) -> Any:
        """KubeSpawner's events (the event log), each scheduler refusal followed by a plain headline.

        The spawn page shows the latest message as its headline: repeating the plain one after every
        raw ``FailedScheduling`` event keeps the scheduler's text in the log only.
        """
        async for event in merge(self._kube_progress(), self.queue_progress()):
            yield event

    async def _kube_progress(self) -> Any:
        async for event in super().progress():
            if "raw_event" not in event and self.queue_hides_patience():
                continue  # KubeSpawner's "taking longer than expected": the queue headline says more
            yield event
            message = waiting_message(self.fracnb_plan, event.get("raw_event") or {})
            if message:
                yield {"progress": event.get("progress", 50), "message": message}

    # ---- no leaks between spawns -----------------------------------------------------------------------

    def _remember(self, *names: str) -> None:
        """Keep the configured value of traits about to be overridden, to restore before the next spawn."""
        for name in names:
            if name not in self._pristine:
                self._pristine[name] = _copy_plain(getattr(self, name))

    def _apply_overrides(self, spawner_override: dict) -> None:
        self._remember(*spawner_override)
        super()._apply_overrides(spawner_override)

    def _load_profile(self, slug: str, profile_list: list[dict]) -> None:
        """KubeSpawner's profile loading, with free text put in literally and checked first.

        Same order and merging as KubeSpawner; refusals of what the user's text would do
        are a 400 (an ``InvalidUserOptionsError`` from ``select`` for a bad slug, as
        KubeSpawner raises ``ValueError``).
        """
        selection = select(profile_list, {**(self.user_options or {}), "profile": slug})
        try:
            overrides = selection_overrides(selection, self.is_gpu_resource)
        except InvalidUserOptionsError as error:
            raise InvalidRequestError(400, f"Invalid server options: {error}", reason="invalid-options") from None
        free_text = [name for name, key in selection.choices if name + UNLISTED_SUFFIX in selection.user_options]
        try:
            for override in overrides:
                self._apply_overrides(override)
            problems = [] if not free_text else self._label_problems()
        except (TraitError, ValueError, TypeError) as error:
            if not free_text:
                raise
            self._restore_config()
            message = f"option {free_text[0]!r}: the value cannot be used here ({error})"[:300]
            raise InvalidRequestError(400, f"Invalid server options: {message}", reason="invalid-options") from None
        if problems:
            self._restore_config()
            raise InvalidRequestError(
                400, f"Invalid server options: option {free_text[0]!r}: {problems[0]}", reason="invalid-options"
            )

    def _label_problems(self) -> list[str]:
        """Labels, node-selector entries and annotation keys of the pod that the apiserver would refuse."""
        expanded = {
            "extra_labels": self._expand_all(self.extra_labels),
            "node_selector": self.node_selector,
            "extra_annotations": self._expand_all(self.extra_annotations),
        }
        return list(label_problems(expanded, expanded=True))

    def _expand_user_properties(self, template: str, slug_scheme: str | None = None) -> str:
        """KubeSpawner's template expansion, leaving a user's free text (in a ``FilledText``) literal."""
        if isinstance(template, FilledText):
            template = template.template
        return super()._expand_user_properties(template, slug_scheme)

    def _restore_config(self) -> None:
        """Undo overrides of an earlier spawn on this object before applying the new choice."""
        for name, value in self._pristine.items():
            setattr(self, name, _copy_plain(value))
        self._fracnb_env, self._fracnb_labels, self._fracnb_annotations = {}, {}, {}
        self._queue_plan = self._queue_ticket = self._queue_started_limit = None
        self._queue_went_straight = False


def _applied_by_load_user_options(spawner: FractionalSpawner, user_options: dict) -> None:
    """``apply_user_options``: nothing to do here (see ``FractionalSpawner.load_user_options``)."""


def _placement_of(ask: Ask | None) -> tuple[str, dict[str, str], int] | None:
    """An extended-resource ask as (resource, node selector, units); None for other asks."""
    return (ask.resource, dict(ask.selector), ask.units) if isinstance(ask, ResourceAsk) else None


def _copy_plain(value: Any) -> Any:
    """Copy nested dicts and lists (what overrides mutate in place); share everything else."""
    if isinstance(value, dict):
        return {key: _copy_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_plain(item) for item in value]
    return value


def _api_message(error: ApiException, limit: int = 500) -> str:
    """The apiserver's own message from an error answer (its Status object), shortened."""
    try:
        message = str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        message = str(error.reason)
    return message if len(message) <= limit else message[: limit - 1] + "…"
