"""A queued notebook that may still borrow when its turn comes (docs/lending.md, "Borrowing a training card").
Pure.

A gated pod's node selector can only grow (Kubernetes lets a gated pod's scheduling directives be narrowed,
never changed), so a pod created for its own pool could never move to the borrowable one. A queued spawn with a
borrowing option is therefore created with the part of the two node selectors they agree on
(:func:`open_selector`), the borrowable pool's tolerations (harmless on its own pool) and the borrowable
selector in ``fracnb.io/borrowable`` (the fracnb service's reclaim pass reads it). When its turn comes, the
queue lifts its gate and adds the rest of the chosen pool's selector in one patch (:func:`lift_operations`):
its own pool's while that has room, else the borrowable pool's, with the borrower's label and annotation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fracnb_spawner.borrowing.decide import TOLERATION_KEYS, Borrow
from fracnb_spawner.common.podkeys import (
    BORROWABLE_ANNOTATION,
    BORROWED_FROM_ANNOTATION,
    BORROWED_LABEL,
    QUEUE_GATE,
    SLOT_KIND_LABEL,
)


def open_selector(own: Mapping[str, str], borrowable: Mapping[str, str]) -> dict[str, str]:
    """The node selector both pools' selectors agree on (the same key with the same value)."""
    return {key: value for key, value in own.items() if borrowable.get(key) == value}


def queue_borrowable(pod: Any, borrow: Borrow) -> dict[str, str]:
    """Ready KubeSpawner's V1Pod ``pod``, about to be created gated, to start on either pool (changed in place);
    its own pool's full node selector, for :func:`lift_operations`."""
    from kubernetes_asyncio.client.models import V1Toleration  # noqa: PLC0415 -- pure callers need no client

    own = dict(pod.spec.node_selector or {})
    pod.spec.node_selector = open_selector(own, borrow.node_selector) or None
    tolerations = [V1Toleration(**{TOLERATION_KEYS[k]: v for k, v in t.items()}) for t in borrow.tolerations]
    if tolerations:
        pod.spec.tolerations = [*(pod.spec.tolerations or []), *tolerations]
    annotation = json.dumps(dict(borrow.node_selector), sort_keys=True)
    pod.metadata.annotations = {**(pod.metadata.annotations or {}), BORROWABLE_ANNOTATION: annotation}
    return own


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def lift_operations(own: Mapping[str, str], borrow: Borrow | None, borrowing: bool) -> list[dict[str, Any]]:
    """The JSON patch that lifts the queue gate of a queued pod; with a borrowing option, also the chosen pool's
    node selector (its own pool's ``own``, or the borrowable one's when ``borrowing``), and for a borrower the
    slot kind, ``fracnb.io/borrowed`` and ``fracnb.io/borrowed-from`` of :func:`.decide.borrowed_pod`."""
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": QUEUE_GATE}]},
        {"op": "remove", "path": "/spec/schedulingGates"},
    ]
    if borrow is None:
        return operations
    selector = dict(borrow.node_selector) if borrowing else dict(own)
    operations.append({"op": "add", "path": "/spec/nodeSelector", "value": selector})  # a superset of the open one
    if borrowing:
        operations += [
            {"op": "add", "path": f"/metadata/labels/{_pointer(SLOT_KIND_LABEL)}", "value": borrow.ask.kind},
            {"op": "add", "path": f"/metadata/labels/{_pointer(BORROWED_LABEL)}", "value": "true"},
            {
                "op": "add",
                "path": f"/metadata/annotations/{_pointer(BORROWED_FROM_ANNOTATION)}",
                "value": borrow.own_kind,
            },
        ]
    return operations


def borrowable_selector(pod: Mapping[str, Any]) -> dict[str, str] | None:
    """The borrowable pool's node selector a queued pod may still start on; None: it may not borrow."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(BORROWABLE_ANNOTATION)
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(found, dict) or not found or not all(isinstance(v, str) for v in found.values()):
        return None
    return {str(key): value for key, value in found.items()}
