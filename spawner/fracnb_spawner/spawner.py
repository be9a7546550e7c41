"""``FractionalSpawner``: KubeSpawner with GPU-fraction profiles."""

from __future__ import annotations

import asyncio
from typing import Any

from jupyterhub.app import JupyterHub
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner import KubeSpawner
from traitlets import TraitError, default, validate

from fracnb_spawner.choosing import Choosing
from fracnb_spawner.cluster.reflectors import needs_restart, recovering
from fracnb_spawner.cluster.refusals import start_refusal
from fracnb_spawner.common.errors import HubConfigError, RefusedSpawnError
from fracnb_spawner.common.logsafe import join_hub_log
from fracnb_spawner.common.refusals import logged_refusals
from fracnb_spawner.config.applied import SpawnValues, apply_choice
from fracnb_spawner.config.overrides import GPU_CARRYING_TRAITS, FilledText, OverrideError, check_spawner_traits
from fracnb_spawner.config.profiles import checked_profile_list
from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.form import spawnform
from fracnb_spawner.form.advice import AdviceTraits
from fracnb_spawner.form.progress import with_plain_headlines
from fracnb_spawner.gpu.backends import PodFields, is_gpu_resource
from fracnb_spawner.gpu.companions import CompanionError, Companions
from fracnb_spawner.hibernation.userstop import hibernate_before_user_stop, may_hold_kernels
from fracnb_spawner.history.hubstopnotices import record_user_stop
from fracnb_spawner.hubstate import HubState
from fracnb_spawner.placement.hub import place
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.kueue.stop import note_stop, stop_past_kueue
from fracnb_spawner.queue.releases import CullDefaults
from fracnb_spawner.queue.spawning import QueueTimeoutError, SpawnQueue, hub_server_activity, merge, ready_unless_left
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.spawnplan import SpawnPlan, plan_from_state, pod_with_plan

CANCEL_AGAIN_SECONDS = 1.0  # how long a cancelled start may run on before it is cancelled again


class FractionalSpawner(KubeSpawner, FractionalTraits, AdviceTraits):
    """KubeSpawner whose profiles may carry a ``gpu`` key; see docs/spawner.md and docs/architecture.md.

    ``load_user_options`` resolves the user's choice once into a frozen :class:`~.spawnplan.SpawnPlan`
    (``spawn_plan``): the GPU plan, fracnb's pod fields, the overrides, the quota request and the
    queue's slot kind. ``get_pod_manifest`` merges the plan into KubeSpawner's pod; nothing of the
    plan is written onto KubeSpawner's traits. A choice's ``kubespawner_override`` keeps KubeSpawner's
    semantics: applied once per spawn, and undone before the next one.

    KubeSpawner internals this class overrides: ``_start`` (queue, plain refusals), ``_make_create_pod_request``
    (the queue's gate, a leftover pod, objects beside the pod), ``_apply_overrides`` (undone between spawns),
    ``_expand_user_properties`` (free text stays literal), ``_start_reflector`` (reflectors that survive an
    apiserver outage); it calls ``_start_watching_pods`` (the pod reflector, for the form's quota line).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hub_state.setting(self.config, "hub log", lambda: join_hub_log(self.log))  # fracnb's INFO lines too
        if JupyterHub.initialized():  # its shutdown's stops are told as such, not as someone's request
            self.hub_state.stops.watch_hub_shutdown(JupyterHub.instance())
        self.share_settings(self.hub_state.setting(self.config, "derived settings", dict))
        self.spawn_plan: SpawnPlan | None = None  # this spawn's, or the running server's (from the state)
        self.choosing = Choosing(self)
        self.queue = SpawnQueue(self, self._running_queue, self._activity, self._service_cull_defaults)
        self.companions = Companions()
        self.values = SpawnValues()  # trait values a kubespawner_override changed, and start_timeout
        self._form_choice: dict = {}  # the last choice submitted on the form, shown again after a refusal
        self._replacing_leftover = False  # KubeSpawner is removing a leftover pod in the middle of this start
        self._pod_created = False  # this start's pod was created (the apiserver said so)
        try:
            check_spawner_traits({name: getattr(self, name) for name in GPU_CARRYING_TRAITS}, self.is_gpu_resource)
        except OverrideError as error:
            raise TraitError(str(error)) from None

    # ---- configuration -------------------------------------------------------------------------------

    @validate("profile_list")
    def _check_profile_list(self, proposal: dict) -> Any:
        return checked_profile_list(proposal["value"], self.gpu_defaults(), self.backend_settings())

    @property
    def hub_state(self) -> HubState:
        """What this hub process shares between spawners (watches, queue, ledger, settings)."""
        return HubState.current()

    def is_gpu_resource(self, name: str) -> bool:
        return is_gpu_resource(name, self.backend_settings())

    def quota_policy(self) -> QuotaPolicy:
        """``c.FracnbQuotas`` as a policy, read once per hub configuration."""
        return self.hub_state.setting(self.config, "quotas", lambda: FracnbQuotas(parent=self).policy())

    def queue_settings(self) -> FracnbQueue:
        """``c.FracnbQueue``, read once per hub configuration."""
        return self.hub_state.setting(self.config, "queue", lambda: FracnbQueue(parent=self))

    async def resolve_profiles(self) -> list[dict]:
        """The initialized, validated profile list (a callable one is called now)."""
        return await self.choosing.resolve_profiles()

    @default("server_token_scopes")
    def _default_server_token_scopes(self) -> list[str]:
        if not self.fracnb_service_name:
            return []
        # The "server" role's scopes, plus calling the fracnb service for quota and cull status.
        return ["users:activity!user", "access:servers!server", f"access:services!service={self.fracnb_service_name}"]

    @default("progress_ready_hook")
    def _default_progress_ready_hook(self) -> Any:
        return ready_unless_left

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # load_user_options validates and applies user_options when the spawn starts; without a
        # hook JupyterHub logs "Received unhandled user_options" for every spawn.
        return _applied_by_load_user_options

    # ---- the spawn form and the options ---------------------------------------------------------------
    # options_from_form is KubeSpawner's (synchronous). The checks that need I/O (a callable profile_list,
    # the quota) run in the two hooks JupyterHub awaits before a spawn starts.

    @default("options_form")
    def _options_form_default(self) -> Any:
        return self.render_options_form

    async def render_options_form(self, spawner: FractionalSpawner | None = None) -> str:
        return await spawnform.render_form(self.choosing)

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
            with logged_refusals(self.log, self.user.name, self.name, options):
                await self.choosing.admit(await self.choosing.checked_plan(profiles, options), reserve=False)

    # ---- applying a choice ---------------------------------------------------------------------------

    async def load_user_options(self) -> None:
        """Validate the (possibly forged) user_options, then resolve them once into ``spawn_plan``.

        Refusals are ``InvalidRequestError`` (4xx) or ``HubConfigError`` (500), both ``ValueError``s
        as KubeSpawner's refusals are.
        """
        self.values.restore(self)
        # The hub has read start()'s longer timeout by now: KubeSpawner's own waits use the configured one.
        self.values.restore_start_timeout(self)
        self.spawn_plan = None
        self.queue.reset()
        self.hub_state.stops.forget(self.user.name, self.name)
        profiles = await self.resolve_profiles()
        if not profiles:
            return await super().load_user_options()
        with logged_refusals(self.log, self.user.name, self.name, self.user_options):
            plan = await self.choosing.checked_plan(profiles, self.user_options)
            await self.choosing.admit(plan, reserve=True)
        self.user_options = dict(plan.selection.user_options) if plan.selection else self.user_options
        try:
            apply_choice(self, plan.overrides, plan.selection, plan.profile)
        except Exception:
            self.hub_state.ledger.release(self.user.name, self.name)
            raise
        self.spawn_plan = plan
        self.queue.reset(plan.ask, plan.max_wait, plan.gpu, plan.borrow)
        self.companions.plan(plan.pod.companions)
        return None

    def _apply_overrides(self, spawner_override: dict) -> None:
        self.values.remember(self, spawner_override)
        super()._apply_overrides(spawner_override)

    def _expand_user_properties(self, template: str, slug_scheme: str | None = None) -> str:
        """KubeSpawner's template expansion, leaving a user's free text (in a ``FilledText``) literal."""
        if isinstance(template, FilledText):
            template = template.template
        return super()._expand_user_properties(template, slug_scheme)

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's pod with the plan merged in (:func:`~.spawnplan.pod_with_plan`)."""
        pod = await super().get_pod_manifest()
        return pod_with_plan(pod, self.spawn_plan.pod if self.spawn_plan else PodFields())

    # ---- state across hub restarts ---------------------------------------------------------------------

    def get_state(self) -> dict:
        state = super().get_state()
        if self.spawn_plan is not None:
            state["fracnb"] = {**self.spawn_plan.state(), **self.companions.saved()}
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        saved = state.get("fracnb")
        if saved:
            self.spawn_plan = plan_from_state(saved)
            self.companions.restore(saved)

    def clear_state(self) -> None:
        super().clear_state()
        self.spawn_plan = None
        # The hub forgot the server (stopped, or seen stopped: a pod gone, a node lost): so does the quota.
        self.hub_state.ledger.release(self.user.name, self.name)

    # ---- starting and stopping -------------------------------------------------------------------------

    def start(self) -> Any:
        future = super().start()
        # The hub waits start_timeout for start() (read right after this returns): a queued spawn may wait
        # longer for its turn. The spawn's end (_start) puts the configured value back.
        self.values.extend_start_timeout(self, self.choosing.longest_queue_wait)
        return future

    async def _start(self) -> Any:
        """KubeSpawner's start, queued when no slot is free, failing with a plain reason before the hub's timeout."""
        with logged_refusals(self.log, self.user.name, self.name, self.user_options):
            return await self._start_queued()

    async def _start_queued(self) -> Any:
        inner = asyncio.ensure_future(super()._start())
        self._pod_created = False
        cancelled, succeeded = True, False
        try:
            result = await self.queue.await_started(inner, self._running_url)
            cancelled = False
            await self._owning()
            succeeded = True
            return result
        except QueueTimeoutError:
            cancelled = False
            await _cancelled(inner)  # KubeSpawner's own wait for the pod, before the pod goes
            message = self.queue.gave_up()
            await self._stop_quietly()
            raise RefusedSpawnError(503, message, reason="queue-timeout") from None
        except Exception as error:
            cancelled = False
            plain = start_refusal(error, pod_created=self._pod_created)
            if plain is None and isinstance(error, (asyncio.TimeoutError, TimeoutError)):
                plain = await self.choosing.no_node_refusal(self.spawn_plan, self.events, self.start_timeout)
            if plain is None:
                raise
            raise plain from None
        finally:
            await _cancelled(inner)
            self.queue.leave(cancelled=cancelled)
            self.values.restore_start_timeout(self)
            if not succeeded:  # a failed start holds no quota; the objects of a pod never created go
                self.companions.forget_adoption()
                self.hub_state.ledger.release(self.user.name, self.name)
                if not self._pod_created:
                    await self.companions.remove_quietly(self.api.api_client, self.log, self._log_name)

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> Any:
        """Queue (or not), create the pod and the plan's objects beside it at once, the pod their owner
        (:mod:`.gpu.companions`). Here, not in ``_start``: KubeSpawner applies the user's choice inside
        ``_start``, and retries this request after deleting a leftover pod of the same name."""
        await self._queued_and_placed(pod)
        try:
            made = await self.companions.with_pod(
                self.api.api_client, self.namespace, create_pod=lambda: self._created_pod(pod, request_timeout),
                drop_pod=self._replace_leftover, bound=self._bound, log=self.log,
            )  # fmt: skip
        except CompanionError as error:
            # The pod would wait for its claim forever: it goes now, and with it what it owns.
            await self._stop_quietly()
            raise HubConfigError(f"This server could not start: {error}") from None
        if made is None:
            return False
        self._pod_created = True
        self.queue.pod_created()
        return True

    async def stop(self, now: bool = False) -> None:
        if self._replacing_leftover:  # only the leftover pod goes: this start keeps its quota
            return await super().stop(now=now)
        try:
            if not now:  # now: a spawn given up, or a leftover pod before KubeSpawner's retry; nothing to save
                left = self.queue.note_stopped(self.hub_state.stops)  # a user's stop while queued leaves the queue
                # A server whose pod never ran (still queued, placed or starting) has nothing to save or to tell.
                if not left and may_hold_kernels(self.queue.reflected_pod()):
                    await record_user_stop(self, await hibernate_before_user_stop(self))
            stopping, timeout = super().stop(now=now), self.queue_settings().kueue_finalizer_timeout
            await stop_past_kueue(stopping, self.queue.reflected_pod, api=self.api, log=self.log, timeout=timeout)
            await self.companions.remove(self.api.api_client, self.log)
        finally:
            self.hub_state.ledger.release(self.user.name, self.name)

    async def poll(self) -> int | None:
        """KubeSpawner's poll, except for pods it says run that are not running servers: a queued pod no spawn of
        this process put there (the hub restarted: the spawn is forgotten at once, the pod keeps its place and
        the fracnb service resumes it, docs/queue.md), a pod being deleted (a stop under way at the restart, or
        Kueue's eviction, which the form then says), a pod on a node that left (deleted; the form says why)."""
        status = await super().poll()
        pod = self.queue.reflected_pod()
        deleting = pod is not None and bool(pod["metadata"].get("deletionTimestamp"))
        if deleting:
            note_stop(self, pod)  # if Kueue deletes it, the form says why
        if status is not None or pod is None:
            return status
        if deleting or (self.queue.ask is None and self.queue.pod_in_queue()):
            return 0
        if await self.choosing.lost_node(pod):
            await self.stop(now=True)
            return 1
        return None

    async def _start_reflector(self, kind: str, reflector_class: type, replace: bool = False, **kwargs: Any) -> Any:
        """KubeSpawner's shared reflector of ``kind``, one that keeps watching through an apiserver outage, and
        made again when its first LIST failed (:mod:`.cluster.reflectors`)."""
        replace = replace or needs_restart(self.__class__.reflectors.get(self._get_reflector_key(kind)), self.log)
        return await super()._start_reflector(kind, recovering(reflector_class), replace=replace, **kwargs)

    # ---- progress -------------------------------------------------------------------------------------

    async def progress(self) -> Any:
        """KubeSpawner's events with plain headlines (:func:`~.form.progress.with_plain_headlines`), and the
        queue's headline while the spawn waits."""
        kube = with_plain_headlines(super().progress(), lambda: self.queue.plan, self.queue.hides_patience)
        queue = self.queue.progress(lambda: self._start_future is not None and self._start_future.done())
        async for event in merge(kube, queue):
            yield event

    def _activity(self, user: str | None, server: str) -> Any:
        return hub_server_activity(getattr(self.user, "db", None), user, server)

    def _running_queue(self) -> Any:
        """The hub's GPU queue once the hub watches the cluster (a form or a spawn started them), else None."""
        state = HubState.running()
        return state.gpu_queue(self.api, self.log) if state is not None and state.watches is not None else None

    def _service_cull_defaults(self) -> CullDefaults:
        """The fracnb service's default policy and warning lead (``c.FracnbService``), read once per hub
        configuration: the queue's estimate decides a holder's deadline as the service does."""

        def read() -> CullDefaults:
            service = FracnbService(config=self.config)
            return CullDefaults(CullPolicy(service.default_idle_timeout, service.default_max_age), service.warning_lead)

        return self.hub_state.setting(self.config, "cull defaults", read)

    # ---- the pod of a start: KubeSpawner's creation and wait, with fracnb's queue, placement and objects ----

    async def _queued_and_placed(self, pod: Any) -> None:
        """Before the pod is created: its turn in the GPU queue (or a gated pod), then its card (:mod:`.placement`),
        once per spawn (KubeSpawner's retry after a leftover pod finds the claim made already)."""
        if self.queue.ask is not None:
            await self.queue.join(self.hub_state.gpu_queue(self.api, self.log), pod)
        if not self.companions.made:
            await place(self, pod, self.queue.borrowed)

    async def _created_pod(self, pod: Any, request_timeout: float) -> Any:
        """KubeSpawner's ``_make_create_pod_request``, keeping the apiserver's answer (the pod as created: its uid
        makes it the owner of its objects without reading it again). None: KubeSpawner's back-off tries again."""
        self.log.info("Attempting to create pod %s, with timeout %s", pod.metadata.name, request_timeout)
        try:
            return await asyncio.wait_for(self.api.create_namespaced_pod(self.namespace, pod), request_timeout)
        except asyncio.TimeoutError:
            return None  # it may have been created: the next try meets it (409) and replaces it
        except ApiException as error:
            if error.status != 409:
                self.log.exception("Failed for %s", pod.to_str())
                raise
        kept = await self.queue.take_over_kept_pod(pod)
        if kept is not None:  # Kueue's queue: replacing the pod would send it to the back (a new Workload)
            made, self.api_token = kept  # JupyterHub registers the token a spawner reuses
            return made
        self.log.info("Found existing pod %s, attempting to kill", pod.metadata.name)
        await self._replace_leftover()
        return None

    async def _replace_leftover(self) -> None:
        """Delete the pod of this server's name before KubeSpawner creates it again; this start keeps its quota."""
        self._replacing_leftover = True
        try:
            await self.stop(True)
        finally:
            self._replacing_leftover = False

    def _bound(self, uid: str) -> bool:
        """Whether kube-scheduler bound this start's pod (``uid``), as KubeSpawner's pod reflector has it."""
        pod = self.queue.reflected_pod() or {}
        return pod.get("metadata", {}).get("uid") == uid and bool(pod.get("spec", {}).get("nodeName"))

    def _running_url(self) -> str | None:
        """KubeSpawner's result (the server's URL) once the pod runs, if all that is left of its start is its wait."""
        pod = self.queue.reflected_pod() if self._pod_created else None
        if not self.is_pod_running(pod) or self.internal_ssl or self.services_enabled:
            return None
        if self.after_pod_created_hook:  # it runs after KubeSpawner's own wait
            return None
        self.pod_id = pod["metadata"]["uid"]
        return self._get_pod_url(pod)

    async def _owning(self) -> None:
        """Before a start returns: its pod owns its objects; if that failed, the start fails and the pod goes."""
        try:
            await self.companions.adopted()
        except CompanionError as error:
            await self._stop_quietly()
            raise HubConfigError(f"This server could not start: {error}") from None

    async def _stop_quietly(self) -> None:
        try:
            await self.stop(now=True)
        except Exception as error:  # the refusal says why the spawn ended; the hub's next poll sees the rest
            self.log.warning("fracnb: could not remove %s after its start was given up: %r", self._log_name, error)


def _applied_by_load_user_options(spawner: FractionalSpawner, user_options: dict) -> None:
    """``apply_user_options``: nothing to do here (see ``FractionalSpawner.load_user_options``)."""


async def _cancelled(task: asyncio.Future) -> None:
    """Cancel ``task`` and wait for its end. Again while it runs on: before Python 3.12, ``asyncio.wait_for`` (in
    KubeSpawner's requests, and fracnb's pod creation) loses a cancellation that meets its request's answer,
    and the start would then wait for its pod as long as its timeout allows."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
    await asyncio.gather(task, return_exceptions=True)
