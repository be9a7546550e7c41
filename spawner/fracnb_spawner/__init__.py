"""fracnb hub side: ``FractionalSpawner`` and its helpers.

``FractionalSpawner`` is imported lazily so that the pure modules (quota, culling) load
without KubeSpawner.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FractionalSpawner", "setup"]


def __getattr__(name: str) -> Any:
    if name == "FractionalSpawner":
        from fracnb_spawner.spawner import FractionalSpawner  # noqa: PLC0415

        return FractionalSpawner
    if name == "setup":
        from fracnb_spawner.configure import setup  # noqa: PLC0415

        return setup
    raise AttributeError(name)
