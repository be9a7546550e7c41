"""Objects a backend creates beside the pod (``PodFields.companions``), and the pod's claims on them.

Today these are the ``dra`` backend's ResourceClaims, one per server, named after the pod, which
the pod refers to by ``resourceClaimName``. The spawner sends each claim in the same moment as the
pod (kube-scheduler sees the claim when it first looks at the pod, instead of one more hub request
later), annotated with the pod's name. Then it makes the pod the claim's owner (a patch), so that the
garbage collector removes the claim with the pod: at once for a pod waiting in the GPU queue, else once
kube-scheduler has bound the pod (its allocation written: a patch before that made its write of the
allocation conflict, and retry), and before the start returns. A hub dying in between leaves a claim
without owner: the next start of
that server replaces it (a claim of the same name left by an earlier start), and the fracnb
service's sweep (:mod:`fracnb_spawner.service.claimsweep`) gives it its pod as owner, or deletes it
when its pod is gone. The stop deletes the claims too (at once, rather than when the collector gets
to them); their names are in the spawner's state, so a restarted hub deletes them too.
:class:`Companions` holds that life cycle for one spawner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kubernetes_asyncio.client import ResourceV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.common.clock import SYSTEM_CLOCK

# kind -> the ResourceV1Api methods that create, patch and delete one namespaced object of it.
_CALLS = {
    "ResourceClaim": (
        "create_namespaced_resource_claim",
        "patch_namespaced_resource_claim",
        "delete_namespaced_resource_claim",
    ),
}
# What the hub does to them: create; patch (the pod as owner); delete (at stop, and a leftover of the same name).
# Reading them (the spawn form's free capacity, the GPU queue) is the watch's list and watch.
CLAIM_VERBS = ("create", "patch", "delete")
MERGE_PATCH = "application/merge-patch+json"
LEFTOVER_GONE_SECONDS = 30.0  # how long a start waits for a deleted leftover claim to be gone (its finalizer)
LEFTOVER_RETRY_SECONDS = 0.2
BOUND_POLL_SECONDS = 0.1  # how often the owner's patch looks whether kube-scheduler bound the pod (in memory)
ADOPT_AFTER_SECONDS = 5.0  # the patch goes then even if the pod is not bound yet (it may wait for a device)


def rbac_hint(kind: str, namespace: str) -> str:
    """The rule the hub's service account lacks when the apiserver answers 403 about ``kind`` objects."""
    resource = kind.lower() + "s"
    return (
        f"the hub's service account needs the RBAC rule apiGroups [resource.k8s.io], resources [{resource}], "
        f"verbs [{', '.join(CLAIM_VERBS)}] in namespace {namespace!r}: apply the ClusterRole fracnb-hub-dra "
        "of helm-values/rbac.yaml with its binding to the hub's service account (docs/spawner.md)"
    )


class CompanionError(RuntimeError):
    """A companion object could not be created; the message names it and the likely fix."""


def _failure(doing: str, obj: Mapping[str, Any], namespace: str, error: ApiException) -> CompanionError:
    hint = f"; {rbac_hint(obj['kind'], namespace)}" if error.status == 403 else ""
    what = f"{obj['kind']} {namespace}/{obj['metadata']['name']}"
    return CompanionError(f"the hub could not {doing} {what} ({error.status} {error.reason}){hint}")


def references(objects: Iterable[Mapping[str, Any]], namespace: str) -> list[dict[str, str]]:
    """What the spawner keeps in its state to find the objects again: kind, namespace and name."""
    return [{"kind": obj["kind"], "namespace": namespace, "name": obj["metadata"]["name"]} for obj in objects]


def owner_patch(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes ``owner`` (an ownerReference) an object's one owner."""
    return {"metadata": {"ownerReferences": [dict(owner)]}}


def owner_reference(pod: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to ``pod`` (a pod as the API returns it)."""
    metadata = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}


async def create(api_client: Any, namespace: str, objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Create each object in ``namespace``, without owner; the names already taken (by an earlier start's)."""
    api = ResourceV1Api(api_client)
    taken = []
    for obj in objects:
        try:
            await getattr(api, _CALLS[obj["kind"]][0])(namespace, dict(obj))
        except ApiException as error:
            if error.status != 409:
                raise _failure("create", obj, namespace, error) from error
            taken.append(obj["metadata"]["name"])
    return taken


async def replace(api_client: Any, namespace: str, objects: Iterable[Mapping[str, Any]], log: Any) -> None:
    """Delete each object of the same name an earlier start left, and create ours once it is gone (an
    allocated claim goes only when kube-controller-manager has freed it)."""
    api = ResourceV1Api(api_client)
    clock = SYSTEM_CLOCK
    for obj in objects:
        create_call, _patch, delete_call = _CALLS[obj["kind"]]
        log.info("fracnb: replacing the leftover %s %s/%s", obj["kind"], namespace, obj["metadata"]["name"])
        deadline = clock.monotonic() + LEFTOVER_GONE_SECONDS
        try:
            await _delete_one(api, delete_call, obj["metadata"]["name"], namespace)
            while True:
                try:
                    await getattr(api, create_call)(namespace, dict(obj))
                    break
                except ApiException as error:
                    if error.status != 409 or clock.monotonic() > deadline:
                        raise
                await asyncio.sleep(LEFTOVER_RETRY_SECONDS)  # polling with create: the hub may not read claims
        except ApiException as error:
            raise _failure("replace the leftover", obj, namespace, error) from error


async def adopt(api_client: Any, namespace: str, objects: Iterable[Mapping[str, Any]], pod: Mapping[str, Any]) -> None:
    """Make ``pod`` (as the apiserver answered its creation) the owner of each object."""
    api = ResourceV1Api(api_client)
    patch = owner_patch(owner_reference(pod))
    for obj in objects:
        try:
            await getattr(api, _CALLS[obj["kind"]][1])(
                obj["metadata"]["name"], namespace, patch, _content_type=MERGE_PATCH
            )
        except ApiException as error:
            raise _failure("make the pod the owner of", obj, namespace, error) from error


async def _delete_one(api: Any, delete_call: str, name: str, namespace: str) -> None:
    try:
        await getattr(api, delete_call)(name, namespace)
    except ApiException as error:
        if error.status != 404:  # the garbage collector may have removed it with its old pod meanwhile
            raise


async def delete(api_client: Any, refs: Iterable[Mapping[str, str]], log: Any) -> None:
    """Delete each object; one already gone is fine, and no failure here fails the stop."""
    api = ResourceV1Api(api_client)
    for ref in refs:
        _create, _patch, delete_call = _CALLS.get(ref.get("kind", ""), (None, None, None))
        if delete_call is None:
            continue
        try:
            await _delete_one(api, delete_call, ref["name"], ref["namespace"])
        except ApiException as error:
            log.warning("fracnb: could not delete %s %s/%s: %s", ref["kind"], ref["namespace"], ref["name"], error)


class Companions:
    """One spawner's companion objects: those its plan wants, and those it created (by reference)."""

    def __init__(self) -> None:
        self.wanted: list[dict[str, Any]] = []
        self.refs: list[dict[str, str]] = []  # kept in the hub's state
        self.made = False  # this start created them (KubeSpawner may create its pod again, they stay)
        self._adopting: asyncio.Future | None = None

    def plan(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """This spawn's objects (named after its pod), created with the pod."""
        self.wanted = [dict(obj) for obj in objects]
        self.made = False
        self.forget_adoption()

    async def with_pod(
        self,
        api_client: Any,
        namespace: str,
        *,
        create_pod: Callable[[], Awaitable[Any]],
        drop_pod: Callable[[], Awaitable[None]],
        bound: Callable[[str], bool],
        log: Any,
    ) -> Any:
        """Create the pod (``create_pod()``: the apiserver's answer, None when KubeSpawner should try again) and
        the objects at once; then make the pod their owner, at once if it is gated, else once ``bound(uid)``
        (:meth:`adopted` waits for that). A leftover object of the same name may have been seen by
        kube-scheduler with the new pod: the pod goes (``drop_pod``), the object is made again, and None makes
        KubeSpawner create the pod again. CompanionError: the pod, if made, is still there."""
        if not self.wanted:
            return await create_pod()
        if self.made:
            made = await create_pod()
        else:
            self.refs = references(self.wanted, namespace)
            made, taken = await asyncio.gather(
                create_pod(), create(api_client, namespace, self.wanted), return_exceptions=True
            )
            for outcome in (taken, made):
                if isinstance(outcome, BaseException):
                    raise outcome
            self.made = True
            if taken:
                if made is not None:
                    await drop_pod()
                await replace(api_client, namespace, [o for o in self.wanted if o["metadata"]["name"] in taken], log)
                return None
        if made is None:
            return None
        pod = api_client.sanitize_for_serialization(made)
        self.forget_adoption()
        if pod.get("spec", {}).get("schedulingGates"):  # kube-scheduler leaves it alone until the gate goes
            await adopt(api_client, namespace, self.wanted, pod)
        else:
            self._adopting = asyncio.ensure_future(self._adopt_once_bound(api_client, namespace, pod, bound))
        return made

    async def _adopt_once_bound(
        self, api_client: Any, namespace: str, pod: Mapping[str, Any], bound: Callable[[str], bool]
    ) -> None:
        deadline = SYSTEM_CLOCK.monotonic() + ADOPT_AFTER_SECONDS
        while True:  # the reflector's view, in memory: no request per look
            if bound(pod["metadata"]["uid"]) or SYSTEM_CLOCK.monotonic() >= deadline:
                break
            await asyncio.sleep(BOUND_POLL_SECONDS)
        await adopt(api_client, namespace, self.wanted, pod)

    async def adopted(self) -> None:
        """Before a start returns: the pod owns its objects (CompanionError if that failed)."""
        if self._adopting is not None:
            await self._adopting

    def forget_adoption(self) -> None:
        """A start that ended otherwise: the stop deletes the objects (the fracnb service's sweep, if the hub dies)."""
        if self._adopting is not None and not self._adopting.done():
            self._adopting.cancel()
        elif self._adopting is not None and not self._adopting.cancelled():
            self._adopting.exception()  # retrieved: the start's own failure says more
        self._adopting = None

    async def remove(self, api_client: Any, log: Any) -> None:
        """At stop, and after a start that failed: the collector would remove them with the pod, later."""
        await delete(api_client, self.refs, log)
        self.refs = []

    def saved(self) -> dict[str, Any]:
        """What the hub keeps across its restarts (in ``get_state``, beside the spawn plan's)."""
        return {"companions": self.refs} if self.refs else {}

    def restore(self, saved: Mapping[str, Any]) -> None:
        self.refs = [ref for ref in saved.get("companions", []) if isinstance(ref, dict)]

    async def remove_quietly(self, api_client: Any, log: Any, server: str) -> None:
        """After a start that failed; a failure is only logged: what the user reads says more."""
        if not self.refs:
            return
        try:
            await self.remove(api_client, log)
        except Exception as error:
            log.warning("fracnb: could not remove the objects of %s's failed start: %r", server, error)
