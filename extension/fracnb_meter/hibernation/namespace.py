"""Which of a kernel's names are the user's variables, and the versions a restore compares. Pure."""

from __future__ import annotations

import platform
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# IPython's own names in every kernel; the rest of its bookkeeping starts with "_".
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
# Versions always recorded when loaded: the libraries whose objects the saver treats itself.
TRACKED = ("cloudpickle", "numpy", "pandas", "torch", "jax", "jaxlib", "cupy")
# type_name() of a module bound to a name.
MODULE_TYPE = "builtins.module"


def user_variables(user_ns: Mapping[str, Any], hidden: Mapping[str, Any]) -> dict[str, Any]:
    """The user's variables: not IPython's bookkeeping, not what the kernel started with."""
    chosen = {}
    for name, value in user_ns.items():
        if name.startswith("_") or name in IPYTHON_NAMES:
            continue
        if name in hidden and hidden[name] is value:
            continue  # IPython's startup names (user_ns_hidden), unless the user rebound them
        chosen[name] = value
    return chosen


def is_import(value: Any) -> bool:
    """Whether a name holds a module (``import numpy as np``): saved by name with the variables and
    imported again at restore, but not a variable the user made, so never counted or listed as one."""
    return isinstance(value, types.ModuleType)


def made_by_user(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A manifest's variable records less the modules (their type is ``MODULE_TYPE``): what users are told of."""
    return [record for record in records if record.get("type") != MODULE_TYPE]


def as_shown(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest as users are told of it: its variables less the modules."""
    return {**manifest, "variables": made_by_user(manifest["variables"])}


def type_name(value: Any) -> str:
    """'numpy.ndarray', 'pandas.core.frame.DataFrame', 'builtins.dict'."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def top_packages(values: Iterable[Any]) -> set[str]:
    """The top-level packages of the values' types (and of modules bound to names)."""
    found = set()
    for value in values:
        module = value.__name__ if isinstance(value, types.ModuleType) else type(value).__module__
        top = (module or "").split(".", 1)[0]
        if top and top not in sys.stdlib_module_names and top not in ("builtins", "__main__"):
            found.add(top)
    return found


def versions(packages: Iterable[str], version_of: Callable[[str], str | None]) -> dict[str, str]:
    """Python's version and each package's, where known (sorted, for a stable manifest)."""
    found = {"python": platform.python_version()}
    for package in sorted(set(packages) | {name for name in TRACKED if name in sys.modules}):
        version = version_of(package)
        if version is not None:
            found[package] = version
    return found


def version_differences(saved: Mapping[str, str], current: Mapping[str, str | None]) -> list[str]:
    """Each difference a restore warns about: 'numpy 2.4.6 → 2.5.0', 'pandas 3.1.1 → not installed'."""
    differences = []
    for package, version in sorted(saved.items()):
        now = current.get(package)
        if now != version:
            name = "Python" if package == "python" else package
            differences.append(f"{name} {version} \N{RIGHTWARDS ARROW} {now or 'not installed'}")
    return differences
