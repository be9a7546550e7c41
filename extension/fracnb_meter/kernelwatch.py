"""Reads every kernel's IOPub for GPU out-of-memory errors (the I/O around fracnb_meter.oomerrors).

The watcher opens its own IOPub subscription per kernel, the way jupyter_server watches kernel
activity: IOPub is a publish socket, so one more subscriber takes nothing from the notebook's
clients and cannot slow them. It learns of kernels by comparing the kernel manager's list every
``SYNC_SECONDS`` and whenever the session endpoint is asked (which also catches an automatic
restart on new ports); a restart on the same ports needs nothing: the subscription reconnects by
itself. Not from jupyter_server's kernel action events: with a listener on them, a kernel whose
first cell ran at once stayed "idle" to the server while it computed, so the hub heard no
activity from a busy silent cell and the fracnb service culled it. An error in a kernel's first
seconds can be missed.

Only ``error`` and ``stream`` messages are verified and decoded; all others are dropped after
their header. Nothing here is on the usage endpoint's request path: messages arrive on the
server's event loop as the kernels send them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_client.session import Session
from zmq.eventloop.zmqstream import ZMQStream

from .oomerrors import is_candidate, oom_in_message

log = logging.getLogger(__name__)

SYNC_SECONDS = 5.0

OnOom = Callable[[str, str, str | None], object]  # (kernel id, kernel name, execution request id)


@dataclass
class _Subscription:
    address: tuple[Any, ...]
    stream: ZMQStream


def iopub_address(kernel: Any) -> tuple[Any, ...] | None:
    """Where a kernel publishes, with its signing key; None while it has no IOPub port yet."""
    port = getattr(kernel, "iopub_port", 0)
    if not port:
        return None
    return (kernel.transport, kernel.ip, port, kernel.session.key)


class KernelWatch:
    """One IOPub subscription per running kernel; ``on_oom`` is called for each out-of-memory message."""

    def __init__(self, manager: Any, on_oom: OnOom) -> None:
        self._manager = manager
        self._on_oom = on_oom
        self._subscriptions: dict[str, _Subscription] = {}
        self._unwatchable: set[str] = set()
        self._stopped = False

    @property
    def watched(self) -> list[str]:
        return sorted(self._subscriptions)

    def sync(self) -> None:
        """Subscribe to new kernels, resubscribe moved ones, drop those gone."""
        if self._stopped:
            return
        running = set(self._manager.list_kernel_ids())
        for kernel_id in list(self._subscriptions):
            kernel = self._manager.get_kernel(kernel_id) if kernel_id in running else None
            if kernel is None or iopub_address(kernel) != self._subscriptions[kernel_id].address:
                self._close(kernel_id)
        self._unwatchable &= running
        for kernel_id in running - set(self._subscriptions) - self._unwatchable:
            self._open(kernel_id)

    def stop(self) -> None:
        """Close every subscription; later kernel events change nothing."""
        self._stopped = True
        for kernel_id in list(self._subscriptions):
            self._close(kernel_id)

    def _open(self, kernel_id: str) -> None:
        kernel = self._manager.get_kernel(kernel_id)
        address = iopub_address(kernel)
        if address is None:
            return  # not started yet: the next event or sync finds it
        try:
            stream = kernel.connect_iopub()
        except Exception as error:  # a kernel without local ZMQ channels (a gateway's, say)
            log.warning("fracnb_meter: kernel %s's output cannot be read for GPU errors (%s)", kernel_id, error)
            self._unwatchable.add(kernel_id)
            return
        # A session of its own: sharing the kernel's would flag the server's own reads as replays.
        session = kernel.session.clone()
        stream.on_recv(lambda parts: self._receive(kernel_id, kernel.kernel_name, session, parts))
        self._subscriptions[kernel_id] = _Subscription(address, stream)

    def _close(self, kernel_id: str) -> None:
        subscription = self._subscriptions.pop(kernel_id)
        if not subscription.stream.closed():
            subscription.stream.close(linger=0)

    def _receive(self, kernel_id: str, kernel_name: str, session: Session, parts: list[bytes]) -> None:
        try:
            _identities, frames = session.feed_identities(parts)
            # frames: signature, header, parent header, metadata, content. Only the header is read
            # before the type is known, so large outputs (images, say) cost no signature check here.
            if not is_candidate(session.unpack(frames[1])["msg_type"]):
                return
            message = session.deserialize(frames)
            if oom_in_message(message):
                request_id = (message.get("parent_header") or {}).get("msg_id") or None
                self._on_oom(kernel_id, kernel_name, request_id)
        except Exception:  # one unreadable message must not end the watch
            log.debug("fracnb_meter: unreadable IOPub message from kernel %s", kernel_id, exc_info=True)
