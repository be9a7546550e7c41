"""KubeSpawner's pod and event reflectors, kept watching through an apiserver outage.

KubeSpawner's reflector retries a failed watch with a doubling delay and gives up for good once
the delay passes 30 s ("Watching resources never recovered, giving up"), about 50 s into an
outage. Its list of pods then never changes again: a pod that starts later is never seen
running, so every later spawn waits out its timeout, and a stopped server is never seen gone.
A reflector whose first LIST failed (the hub started while the apiserver was down) stays in
KubeSpawner's registry too, and every later spawn fails on its first load.

:func:`recovering` gives each reflector class a subclass that starts its watch again (with a
fresh LIST) whenever KubeSpawner's loop gives up, and never halts the hub (KubeSpawner halts it
when the reflector of ``enable_user_namespaces`` gives up). :func:`needs_restart` tells a
reflector whose first LIST failed, so that the next spawn or poll replaces it.
"""

from __future__ import annotations

import asyncio
from typing import Any

RETRY_SECONDS = 5.0  # after KubeSpawner's own back-off has given up, between new attempts

_classes: dict[type, type] = {}


class _KeepsWatching:
    """Mixin for a KubeSpawner ``ResourceReflector``: its watch loop never ends before ``stop()``."""

    kind: str
    log: Any
    on_failure: Any
    _stopping: bool

    async def _watch_and_update(self) -> None:
        # A reflector that keeps watching has no failure to report: nothing should halt the hub.
        self.on_failure = None
        while True:
            await super()._watch_and_update()  # type: ignore[misc]
            if self._stopping:
                return
            self.log.warning(
                "fracnb: the %s watch gave up during an apiserver outage; watching again every %ss until it answers",
                self.kind,
                RETRY_SECONDS,
            )
            await asyncio.sleep(RETRY_SECONDS)
            if self._stopping:
                return


def recovering(reflector_class: type) -> type:
    """``reflector_class`` with a watch that resumes after any outage (one subclass per class)."""
    if issubclass(reflector_class, _KeepsWatching):
        return reflector_class
    made = _classes.get(reflector_class)
    if made is None:
        made = _classes[reflector_class] = type(
            f"Recovering{reflector_class.__name__}", (_KeepsWatching, reflector_class), {}
        )
    return made


def needs_restart(reflector: Any, log: Any) -> bool:
    """True (and said in ``log``) for a reflector that is not watching and will not: its first LIST failed,
    or its watch ended without ``stop()`` (a reflector KubeSpawner made before this module's subclass was in
    use)."""
    if reflector is None or getattr(reflector, "_stopping", False):
        return False
    task = reflector.watch_task
    if not reflector.first_load_future.done() or (task is not None and not task.done()):
        return False
    log.warning("fracnb: the %s reflector is not watching; starting it again", reflector.kind)
    return True
