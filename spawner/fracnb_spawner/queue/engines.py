"""The queue engines by name (``c.FracnbQueue.engine``): the one place that knows both."""

from __future__ import annotations

from fracnb_spawner.queue.builtin import BuiltinEngine
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.engine import Engine
from fracnb_spawner.queue.kueue.engine import KueueEngine

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (BuiltinEngine(), KueueEngine())}


def engine_of(settings: FracnbQueue) -> Engine:
    """The engine ``settings`` (``c.FracnbQueue``) choose; the engines hold no state, so each is made once."""
    return ENGINES[settings.engine]
