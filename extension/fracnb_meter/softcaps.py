"""Memory caps for frameworks that no environment variable can cap, applied as they are imported.

The spawner sets ``FRACNB_SOFT_CAP_BYTES`` where the sharing mechanism enforces no memory
limit (time-slicing, KAI), next to the variables PyTorch, JAX and CuPy read themselves.
TensorFlow has no such variable: its cap must be set through its API after import and
before the GPU is first used. ``install()`` runs in every Python process of the notebook
image (from ``fracnb_meter_softcaps.pth``) and, when the variable is set, registers a hook
that applies the cap the moment ``tensorflow`` finishes importing. Nothing is imported
eagerly, and the caps stay cooperative: a user can change them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

ImportCallback = Callable[[ModuleType], None]


def cap_bytes(environ: Mapping[str, str]) -> int | None:
    value = environ.get("FRACNB_SOFT_CAP_BYTES", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs callbacks right after named modules execute, without importing them itself."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[ImportCallback]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _NotifyingLoader(spec.loader, self.callbacks.pop(fullname))
                return spec
        return None


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callbacks: list[ImportCallback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:  # get_code, get_resource_reader, ... of the real loader
        return getattr(self._loader, name)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)


_finder = _PostImportFinder()


def when_imported(name: str, callback: ImportCallback) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _finder.callbacks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def cap_tensorflow(tf: Any, limit_bytes: int) -> None:
    """Limit every visible GPU to ``limit_bytes`` (a logical device with memory_limit in MiB)."""
    config = getattr(tf, "config", None)
    if config is None:  # a partial import; TensorFlow itself will fail louder
        return
    limit_mib = max(1, limit_bytes // 2**20)
    for gpu in config.list_physical_devices("GPU"):
        try:
            config.set_logical_device_configuration(gpu, [config.LogicalDeviceConfiguration(memory_limit=limit_mib)])
        except RuntimeError:  # the GPU was initialised already; the cap can no longer change
            return


def install(environ: Mapping[str, str] = os.environ) -> bool:
    """Register the import hooks when the spawner asked for soft caps; True if it did."""
    limit = cap_bytes(environ)
    if limit is None:
        return False
    when_imported("tensorflow", lambda tf: cap_tensorflow(tf, limit))
    return True
