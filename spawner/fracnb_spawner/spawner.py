"""``FractionalSpawner``: KubeSpawner with GPU-fraction profiles."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

import aiohttp
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner import KubeSpawner
from tornado import web
from traitlets import TraitError, default, validate

from fracnb_spawner.choosing import Choosing
from fracnb_spawner.cluster.reflectors import needs_restart, recovering
from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError, RefusedSpawnError
from fracnb_spawner.config.applied import SpawnValues, apply_overrides
from fracnb_spawner.config.overrides import GPU_CARRYING_TRAITS, FilledText, OverrideError, check_spawner_traits
from fracnb_spawner.config.profiles import ProfileConfigError, initialize_profiles, validate_profiles
from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.form import spawnform
from fracnb_spawner.form.advice import AdviceTraits
from fracnb_spawner.form.progress import waiting_message
from fracnb_spawner.gpu.backends import PodFields, is_gpu_resource
from fracnb_spawner.gpu.companions import CompanionError, Companions
from fracnb_spawner.hubstate import HubState
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.spawning import QueueTimeoutError, SpawnQueue, hub_server_activity, merge
from fracnb_spawner.queue.text import node_lost_message
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.spawnplan import SpawnPlan, plan_from_state, pod_with_plan

_INVALID_OBJECT_STATUSES = (400, 422)  # the apiserver's BadRequest and Invalid


class FractionalSpawner(KubeSpawner, FractionalTraits, AdviceTraits):
    """KubeSpawner whose profiles may carry a ``gpu`` key; see docs/spawner.md and docs/architecture.md.

    ``load_user_options`` resolves the user's choice once into a frozen :class:`~.spawnplan.SpawnPlan`
    (``spawn_plan``): the GPU plan, fracnb's pod fields, the overrides, the quota request and the
    queue's slot kind. ``get_pod_manifest`` merges the plan into KubeSpawner's pod; nothing of the
    plan is written onto KubeSpawner's traits. A choice's ``kubespawner_override`` keeps KubeSpawner's
    semantics: applied once per spawn, and undone before the next one.

    KubeSpawner internals this class overrides: ``_start`` (queue and plain refusals),
    ``_make_create_pod_request`` (objects beside the pod, the queue's gate), ``_apply_overrides``
    (undone between spawns), ``_expand_user_properties`` (a user's free text stays literal) and
    ``_start_reflector`` (reflectors that survive an apiserver outage); it calls
    ``_start_watching_pods`` (the pod reflector, for the form's quota line).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spawn_plan: SpawnPlan | None = None  # this spawn's, or the running server's (from the state)
        self.choosing = Choosing(self)
        self.queue = SpawnQueue(self, self._running_queue, self._activity)
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
        value = proposal["value"]
        if not callable(value):
            try:
                validate_profiles(initialize_profiles(value), self.gpu_defaults(), self.backend_settings())
            except ProfileConfigError as error:
                raise TraitError(f"FractionalSpawner.profile_list: {error}") from None
        return value

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
            await self.choosing.admit(self.choosing.plan_for(profiles, options), reserve=False)

    # ---- applying a choice ---------------------------------------------------------------------------

    async def load_user_options(self) -> None:
        """Validate the (possibly forged) user_options, then resolve them once into ``spawn_plan``.

        Refusals are ``InvalidRequestError`` (4xx) or ``HubConfigError`` (500), both ``ValueError``s
        as KubeSpawner's refusals are.
        """
        self.values.restore(self)
        self.spawn_plan = None
        self.queue.reset()
        self.hub_state.stop_notices.pop((self.user.name, self.name), None)
        profiles = await self.resolve_profiles()
        if not profiles:
            return await super().load_user_options()
        plan = self.choosing.plan_for(profiles, self.user_options)
        await self.choosing.admit(plan, reserve=True)
        self.user_options = plan.selection.user_options if plan.selection else self.user_options
        try:
            apply_overrides(self, plan.overrides, plan.selection)
        except Exception as error:
            self.hub_state.ledger.release(self.user.name, self.name)
            if isinstance(error, web.HTTPError):
                raise
            # Applying overrides may expand the user's free text: a 400, so that input cannot count
            # toward the hub's consecutive failure limit; the traceback goes to the hub log.
            self.log.exception("fracnb: could not apply profile %r for %s", plan.profile, self._log_name)
            raise InvalidRequestError(
                400, f"Invalid server options: the hub could not apply them to profile {plan.profile!r}; "
                "see the hub log", reason="invalid-options",
            ) from error  # fmt: skip
        self.spawn_plan = plan
        self.queue.reset(plan.ask, plan.max_wait, plan.gpu)
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
            state["fracnb"] = self.spawn_plan.state()
            if self.companions.refs:
                state["fracnb"]["companions"] = self.companions.refs
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        saved = state.get("fracnb")
        if saved:
            self.spawn_plan = plan_from_state(saved)
            self.companions.refs = [ref for ref in saved.get("companions", []) if isinstance(ref, dict)]

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
        inner = asyncio.ensure_future(super()._start())
        self._pod_created = False
        cancelled, succeeded = True, False
        try:
            result = await self.queue.await_started(inner, self._running_url)
            cancelled, succeeded = False, True
            return result
        except QueueTimeoutError:
            cancelled = False
            await _cancelled(inner)  # KubeSpawner's own wait for the pod, before the pod goes
            message = self.queue.gave_up()
            await self._stop_quietly()
            raise RefusedSpawnError(503, message, reason="queue-timeout") from None
        except Exception as error:
            cancelled = False
            plain = await self._plain_refusal(error)
            if plain is None:
                raise
            raise plain from None
        finally:
            await _cancelled(inner)
            self.queue.leave(cancelled=cancelled)
            self.values.restore_start_timeout(self)
            if not succeeded:
                await self._undo_failed_start()

    def _running_url(self) -> str | None:
        """The server's URL once its pod runs, if all that is left of KubeSpawner's start is its wait for that
        (its own result, computed the same way); else None."""
        if not self._pod_created or self.internal_ssl or self.services_enabled or self.after_pod_created_hook:
            return None
        pod = self.pod_reflector.pods.get(self.queue.key) if self.pod_reflector is not None else None
        if not self.is_pod_running(pod):
            return None
        self.pod_id = pod["metadata"]["uid"]
        return self._get_pod_url(pod)

    async def _plain_refusal(self, error: Exception) -> Exception | None:
        """What the user reads when a start fails for a reason fracnb can name; None: the error as it is."""
        if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
            if not self._pod_created:  # every attempt to create the pod went unanswered
                return RefusedSpawnError(503, cluster_unavailable_message("did not answer in time"), reason="cluster")
            return await self.choosing.no_node_refusal(self.spawn_plan, self.events, self.start_timeout)
        if isinstance(error, ApiException) and error.status in _INVALID_OBJECT_STATUSES:
            # The apiserver refused an object built from the profile and the user's choices: say why,
            # as a refusal (it repeats for every spawn of this choice; restarting the hub fixes nothing).
            message = f"The cluster refused this server's pod: {_api_message(error)}"
            return RefusedSpawnError(400, message, reason="invalid-pod")
        if isinstance(error, ApiException) and ((error.status or 0) >= 500 or error.status == 429):
            detail = f"answered {error.status} {error.reason}"
            return RefusedSpawnError(503, cluster_unavailable_message(detail), reason="cluster")
        if isinstance(error, (aiohttp.ClientError, ConnectionError)):
            return RefusedSpawnError(503, cluster_unavailable_message("could not be reached"), reason="cluster")
        return None

    async def _undo_failed_start(self) -> None:
        """A failed start holds no quota, and objects made for a pod that was never created go (a pod left
        over counts by itself, and the hub's stop removes it with its objects)."""
        self.hub_state.ledger.release(self.user.name, self.name)
        if not self._pod_created and self.companions.refs:
            try:
                await self.companions.remove(self.api.api_client, self.log)
            except Exception as error:  # the failure the user reads says more; the log keeps this
                self.log.warning("fracnb: could not remove the objects of %s's failed start: %r", self._log_name, error)

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> Any:
        """Create the plan's objects beside the pod, queue (or not), create the pod, then make it the objects'
        owner (so that the garbage collector removes them with it, even a queued pod's).

        Here rather than in ``_start``: KubeSpawner applies the user's choice (``load_user_options``)
        inside ``_start``, and retries this request after deleting a leftover pod of the same name.
        """
        try:
            await self.companions.create(self.api.api_client, self.namespace, self.log)
        except CompanionError as error:
            raise HubConfigError(f"This server could not start: {error}") from None
        if self.queue.ask is not None:
            await self.queue.join(self.hub_state.gpu_queue(self.api, self.log), pod)
        # On a 409 KubeSpawner stops the leftover pod of the same name (stop(True)) and tries again.
        self._replacing_leftover = True
        try:
            created = await super()._make_create_pod_request(pod, request_timeout)
        finally:
            self._replacing_leftover = False
        if created:
            self._pod_created = True
            self.queue.pod_created()
            await self.companions.adopt(self.api, self.pod_name, self.namespace, self.log)
        return created

    async def stop(self, now: bool = False) -> None:
        if self._replacing_leftover:
            # Only the leftover pod goes: this start keeps its quota reservation and its objects.
            await super().stop(now=now)
            return
        try:
            await super().stop(now=now)
            await self.companions.remove(self.api.api_client, self.log)
        finally:
            self.hub_state.ledger.release(self.user.name, self.name)

    async def _stop_quietly(self) -> None:
        try:
            await self.stop(now=True)
        except Exception as error:  # the refusal says why the spawn ended; the hub's next poll sees the rest
            self.log.warning("fracnb: could not remove %s after its wait in the queue: %r", self._log_name, error)

    async def poll(self) -> int | None:
        """KubeSpawner's poll, except that these pods are not running servers:

        - a pod waiting in the queue that no spawn of this hub process put there (the hub restarted).
          The restarted hub then forgets the spawn at once and, as it stops only servers that poll()
          says run, leaves the pod and its place, which the fracnb service resumes (docs/queue.md).
          KubeSpawner alone says a pending pod runs: the hub would wait ``http_timeout`` for it to
          answer, then stop it, deleting the pod and its place;
        - a pod being deleted (a stop under way when the hub restarted): KubeSpawner says it runs;
        - a pod bound to a node that left the cluster: its pod is deleted (nothing else would), and the
          spawn form says why the server stopped.
        """
        status = await super().poll()
        if status is not None:
            return status
        pod = self.pod_reflector.pods.get(self.queue.key) if self.pod_reflector is not None else None
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            return 0
        if self.queue.ask is None and self.queue.pod_in_queue() is not None:
            return 0
        node = await self.choosing.node_gone(pod)
        if node is not None:
            notice = node_lost_message(node, datetime.now(timezone.utc), self.queue_settings().zone)
            self.hub_state.stop_notices[(self.user.name, self.name)] = notice
            self.log.warning("fracnb: %s ran on node %s, which left the cluster; deleting it", self._log_name, node)
            await self.stop(now=True)
            return 1
        return None

    async def _start_reflector(self, kind: str, reflector_class: type, replace: bool = False, **kwargs: Any) -> Any:
        """KubeSpawner's shared reflector of ``kind``, one that keeps watching through an apiserver outage, and
        made again when its first LIST failed (:mod:`.cluster.reflectors`)."""
        if not replace and needs_restart(self.__class__.reflectors.get(self._get_reflector_key(kind))):
            self.log.warning("fracnb: the %s reflector is not watching; starting it again", kind)
            replace = True
        return await super()._start_reflector(kind, recovering(reflector_class), replace=replace, **kwargs)

    # ---- progress -------------------------------------------------------------------------------------

    async def progress(self) -> Any:
        """KubeSpawner's events (the event log), each scheduler refusal followed by a plain headline, and
        the queue's headline while the spawn waits.

        The spawn page shows the latest message as its headline: repeating the plain one after every
        raw ``FailedScheduling`` event keeps the scheduler's text in the log only.
        """
        queue = self.queue.progress(lambda: self._start_future is not None and self._start_future.done())
        async for event in merge(self._kube_progress(), queue):
            yield event

    async def _kube_progress(self) -> Any:
        gpu = self.spawn_plan.gpu if self.spawn_plan else None
        async for event in super().progress():
            if "raw_event" not in event and self.queue.hides_patience():
                continue  # KubeSpawner's "taking longer than expected": the queue headline says more
            yield event
            message = waiting_message(gpu, event.get("raw_event") or {})
            if message:
                yield {"progress": event.get("progress", 50), "message": message}

    def _activity(self, user: str | None, server: str) -> Any:
        return hub_server_activity(getattr(self.user, "db", None), user, server)

    def _running_queue(self) -> Any:
        """The hub's GPU queue once the hub watches the cluster (a form or a spawn started them), else None."""
        state = HubState.running()
        return state.gpu_queue(self.api, self.log) if state is not None and state.watches is not None else None


def _applied_by_load_user_options(spawner: FractionalSpawner, user_options: dict) -> None:
    """``apply_user_options``: nothing to do here (see ``FractionalSpawner.load_user_options``)."""


async def _cancelled(task: asyncio.Future) -> None:
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def cluster_unavailable_message(what_it_did: str) -> str:
    """A start the cluster's API server failed, in plain words ("The cluster's API server did not answer ...")."""
    return (
        f"The cluster's API server {what_it_did} while this server was being created, so nothing was started "
        "and none of your quota is held. Try again in a minute; if it keeps failing, tell your hub admin."
    )


def _api_message(error: ApiException, limit: int = 500) -> str:
    """The apiserver's own message from an error answer (its Status object), shortened."""
    try:
        message = str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        message = str(error.reason)
    return message if len(message) <= limit else message[: limit - 1] + "…"
