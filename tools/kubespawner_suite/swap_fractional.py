"""pytest plugin: KubeSpawner's own test suite with ``FractionalSpawner`` in KubeSpawner's place.

Loaded with ``-p swap_fractional``, before pytest imports the suite's modules: it replaces
``kubespawner.KubeSpawner``, the name every test module imports, by ``FractionalSpawner`` (a
subclass, so ``c.KubeSpawner`` configuration applies to it as it would in a hub). The session
fails at once if a test module still holds the stock class.
"""

from __future__ import annotations

import kubespawner
import pytest

from fracnb_spawner.spawner import FractionalSpawner

STOCK = kubespawner.KubeSpawner
kubespawner.KubeSpawner = FractionalSpawner


def pytest_report_header() -> str:
    return f"kubespawner.KubeSpawner is {FractionalSpawner.__module__}.FractionalSpawner (fracnb)"


def pytest_collection_finish(session: pytest.Session) -> None:
    modules = {getattr(item, "module", None) for item in session.items}
    stale = sorted(m.__name__ for m in modules if m is not None and getattr(m, "KubeSpawner", None) is STOCK)
    if stale:
        raise pytest.UsageError(f"{', '.join(stale)} imported the stock KubeSpawner before the swap")
