"""The user's LocalQueue in Kueue: its name (one for one with the hub username) and the one a pod is in. Shared by
the queue's configuration, the service and the Kueue engine (:mod:`.kueue`), which depends on it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from fracnb_spawner.common.podkeys import KUEUE_QUEUE_LABEL

_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")
_NAME_SAFE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a DNS label (RFC 1123), kept as it is
NAME_LIMIT = 63  # a LocalQueue's name is a label value (kueue.x-k8s.io/queue-name): 63 characters at most
HASH_LENGTH = 8  # KubeSpawner's, in its slugs
HASHED_MINIMUM = HASH_LENGTH + 4  # "x---" and the hash


def local_queue_name(template: str, username: str) -> str:
    """The user's LocalQueue: ``template`` with ``{username}`` replaced by :func:`username_slug`, in the room the
    template leaves of a 63-character DNS label. ValueError for a template without ``{username}`` (users would
    share a queue) or one that leaves too little room for a hashed name."""
    fixed = len(template.format(username=""))
    uses = len(template.format(username="x")) - fixed
    if uses < 1:
        raise ValueError("it has no {username}: every user needs a LocalQueue of their own")
    room = (NAME_LIMIT - fixed) // uses
    if room < HASHED_MINIMUM:
        raise ValueError(
            f"it leaves {room} characters of {NAME_LIMIT} for the user's name; a hashed name needs {HASHED_MINIMUM}"
        )
    return template.format(username=username_slug(username, room))


def username_slug(username: str, room: int) -> str:
    """A hub username in a Kubernetes name, one for one, as KubeSpawner's ``safe_slug`` makes its pod names: a name
    that is already a DNS label of at most ``room`` characters without ``---`` stays as it is ("ann",
    "carol-smith"); any other becomes its lowercase letters and digits joined by "-", ``---`` and the first 8 hex
    digits of its SHA-256 ("carol_" -> "carol---" + 8 hex), so names that fold together ("carol_", "Carol",
    "carol") never share a slug, and a kept name, having no ``---``, never equals a hashed one."""
    if _NAME_SAFE.fullmatch(username) and "---" not in username and len(username) <= room:
        return username
    digest = hashlib.sha256(username.encode("utf-8")).hexdigest()[:HASH_LENGTH]
    stem = _NAME_UNSAFE.sub("-", username.lower()).strip("-")[: room - HASH_LENGTH - 3].rstrip("-")
    return f"{stem or 'x'}---{digest}"


def local_queue_of(pod: Mapping[str, Any]) -> str:
    """ "namespace/name" of the LocalQueue a pod is in Kueue's hands through; "" for any other pod."""
    metadata = pod.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    return f"{metadata.get('namespace')}/{name}" if name else ""
