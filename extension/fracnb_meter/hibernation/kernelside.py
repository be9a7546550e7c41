"""The calls that run inside the user's kernel: the server's silent executions, the magic, the widget.

The server sends one ``execute_request`` with ``silent=True, store_history=False`` and an empty
cell, and asks for one user expression, e.g.::

    __import__("fracnb_meter.hibernation.kernelside").hibernation.kernelside.hibernate('{...}')

The argument and the answer are JSON strings, so nothing but text crosses, and the server reads
the answer with ``ast.literal_eval`` + ``json.loads``. The call prints nothing and lets no warning
through: a silent execution's output would still reach the notebook.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import metadata
from typing import Any

from . import layout
from .damage import lost_in_entry
from .placement import Placement, choose_placement


def _shell() -> Any:
    from IPython import get_ipython  # noqa: PLC0415

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("fracnb hibernation runs inside an IPython kernel")
    return shell


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        yield


@cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # scans every installed package: only when needed


def package_version(top_level: str) -> str | None:
    """The installed version of the distribution that provides ``top_level`` (no import needed).

    Most packages are distributed under their import name (numpy, torch, jax); only the others
    need the scan of every installed distribution (sklearn is scikit-learn's).
    """
    try:
        return metadata.version(top_level)
    except (metadata.PackageNotFoundError, ValueError):
        pass
    for distribution in _distributions().get(top_level, []):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def current_versions(packages: list[str]) -> dict[str, str | None]:
    import platform  # noqa: PLC0415

    return {name: platform.python_version() if name == "python" else package_version(name) for name in packages}


def notebook_file(explicit: str | None = None) -> str | None:
    """This kernel's notebook: the absolute path jupyter_server put in JPY_SESSION_NAME."""
    path = explicit or os.environ.get("JPY_SESSION_NAME", "")
    return os.path.abspath(path) if path else None


def kernel_id() -> str:
    """This kernel's id, from its connection file's name (kernel-<id>.json)."""
    try:
        from ipykernel import get_connection_file  # noqa: PLC0415

        name = os.path.basename(get_connection_file())
    except Exception:
        return ""
    return name.removeprefix("kernel-").removesuffix(".json")


# ---- save (the server's call) ---------------------------------------------------------------------


# The last save's answer, with the execution count it saw and the notebook it saved: a stop's save
# (``if_changed``) right after the hub's own, with no cell run between, answers it again instead of
# writing the same variables twice within the pod's grace period.
_last_save: dict[str, Any] = {}


def _unchanged_since_last_save(shell: Any, notebook: str) -> str | None:
    """The last save's answer if no cell ran since and its saved state is still there; else None."""
    if _last_save.get("count") != shell.execution_count or _last_save.get("notebook") != notebook:
        return None
    manifest = saved_state(notebook)
    answer = _last_save["answer"]
    return answer if manifest is not None and manifest.get("saved_at") == json.loads(answer)["saved_at"] else None


def hibernate(arguments: str) -> str:
    """Save this kernel's variables; ``arguments`` and the answer are JSON (see the module docs).
    With ``if_changed``, a kernel that ran no cell since its last save answers that save again."""
    from .saver import SaveRequest, save_namespace  # noqa: PLC0415

    options = json.loads(arguments)
    shell = _shell()
    if options.get("if_changed"):
        unchanged = _unchanged_since_last_save(shell, options["notebook_file"])
        if unchanged is not None:
            return unchanged
    request = SaveRequest(
        notebook_path=options.get("notebook_path"),
        notebook_file=options["notebook_file"],
        kernel_id=options.get("kernel_id", ""),
        limit_bytes=int(options["limit_bytes"]),
        deadline=options.get("deadline"),
    )
    with _quiet():
        result = save_namespace(shell.user_ns, shell.user_ns_hidden, request, os.environ, version_of=package_version)
    answer = json.dumps(result)
    if result.get("status") in ("saved", "partly_saved"):
        _last_save.update(count=shell.execution_count, notebook=options["notebook_file"], answer=answer)
    return answer


# ---- restore (the server's call, the magic and the widget) ---------------------------------------


def gpu_free_bytes(devices: list[Mapping[str, Any]]) -> int | None:
    """Free memory of the GPU the saved frameworks would use here; None when they have no GPU."""
    frameworks = {str(d["framework"]) for d in devices if not str(d["device"]).startswith("cpu")}
    free: list[int] = []
    with contextlib.suppress(Exception):
        if "torch" in frameworks:
            import torch  # noqa: PLC0415

            if not torch.cuda.is_available():
                return None
            free.append(int(torch.cuda.mem_get_info()[0]))
        if "jax" in frameworks:
            import jax  # noqa: PLC0415

            stats = jax.devices("gpu")[0].memory_stats() or {}
            free.append(int(stats.get("bytes_limit", 0)) - int(stats.get("bytes_in_use", 0)))
        if "cupy" in frameworks:
            import cupy  # noqa: PLC0415

            free.append(int(cupy.cuda.runtime.memGetInfo()[0]))
        return min(free) if free else None
    return None


def server_gpu_bytes(budget: Any) -> int | None:
    """GPU memory this server's kernels hold now (fracnb's own NVML attribution), or None."""
    from ..nvml import unavailable  # noqa: PLC0415
    from ..processes import looks_like_container, parent_pid, server_pid  # noqa: PLC0415
    from ..sampler import Sampler  # noqa: PLC0415
    from ..usage import KernelInfo, build_usage  # noqa: PLC0415

    sampler = Sampler(0.0, utilization=False)
    try:
        me = KernelInfo(id="", name="", session_name=None, path=None, execution_state=None, pid=os.getpid())
        from datetime import datetime, timezone  # noqa: PLC0415

        document = build_usage(
            reading=sampler.read() if budget.memory_bytes != 0 else unavailable(""),
            kernels=[me],
            server_pid=server_pid(),
            parent_of=parent_pid,
            budget=budget,
            budget_error=None,
            in_container=looks_like_container(os.environ, os.path.exists),
            sampled_at=datetime.now(timezone.utc),
        )
        value = (document.get("server") or {}).get("gpu_memory_bytes")
        return int(value) if value is not None else None
    except Exception:
        return None
    finally:
        sampler.close()


def placement_here(devices: list[Mapping[str, Any]]) -> Placement:
    """Where GPU arrays go in this kernel: FRACNB_GPU_MEMORY_LIMIT against what the server holds."""
    device_bytes = sum(int(d["bytes"]) for d in devices if not str(d["device"]).startswith("cpu"))
    if device_bytes == 0:
        return Placement(on_gpu=False, notice=None)  # before any import: a plain restore stays light
    from ..contract import ContractError, read_budget  # noqa: PLC0415

    try:
        budget = read_budget(os.environ)
    except ContractError:
        budget = None
    budget_bytes = None if budget is None else budget.memory_bytes
    return choose_placement(
        device_bytes,
        gpu_free_bytes=gpu_free_bytes(devices),
        budget_bytes=budget_bytes,
        server_used_bytes=server_gpu_bytes(budget) if budget is not None and budget_bytes else None,
    )


def restore(
    notebook: str | None = None, *, force: bool = False, on_conflict: str | None = None, user_ns: Any = None
) -> dict[str, Any]:
    """Restore the saved variables of ``notebook`` (default: this kernel's) into the namespace;
    names already set there are replaced only with ``on_conflict="take"`` (restorer.ON_CONFLICT)."""
    from .restorer import restore_namespace  # noqa: PLC0415

    target = notebook_file(notebook)
    if target is None:
        return _no_notebook()
    namespace = user_ns if user_ns is not None else _shell().user_ns
    entry = layout.find_entry(os.environ, target)
    with _quiet():
        return restore_namespace(
            namespace,
            entry,
            os.environ,
            force=force,
            on_conflict=on_conflict,
            current_versions=current_versions,
            placement_of=placement_here,
        )


def restore_json(arguments: str) -> str:
    """The server's restore call: ``{"notebook_file": ..., "force": bool, "on_conflict": ...}`` in, the report out."""
    options = json.loads(arguments)
    report = restore(
        options.get("notebook_file"), force=bool(options.get("force")), on_conflict=options.get("on_conflict")
    )
    return json.dumps(report)


def _no_notebook() -> dict[str, Any]:
    return {
        "status": "none",
        "reason": "this kernel does not know its notebook (JPY_SESSION_NAME is unset): name it, "
        "e.g. %fracnb_restore analysis.ipynb",
        "restored": [],
        "failed": [],
        "skipped_at_save": [],
        "warnings": [],
        "notices": [],
        "conflicts": [],
        "bytes": 0,
        "saved_at": None,
        "seconds": 0.0,
    }


def saved_state(notebook: str | None = None) -> dict[str, Any] | None:
    """The manifest of this notebook's saved state (JSON only), or None when there is none or it is unsafe."""

    target = notebook_file(notebook)
    if target is None:
        return None
    try:
        return layout.read_manifest(layout.find_entry(os.environ, target), layout.state_root(os.environ))
    except (OSError, ValueError, layout.UnsafeStateError):
        return None


def lost_variables(notebook: str | None, manifest: dict[str, Any]) -> list[dict[str, str]]:
    """The variables of ``notebook``'s saved state (``manifest``) that its damaged files have lost."""
    target = notebook_file(notebook)
    return [] if target is None else lost_in_entry(layout.find_entry(os.environ, target), manifest)


def unrestored_state(notebook: str | None = None) -> dict[str, Any] | None:
    """The manifest of this notebook's saved state while it was not restored yet, else None."""

    manifest = saved_state(notebook)
    target = notebook_file(notebook)
    if manifest is None or target is None:
        return None
    restored = layout.read_restored(layout.find_entry(os.environ, target))
    return None if restored and restored.get("generation") == manifest.get("generation") else manifest


def discard(notebook: str | None = None) -> bool:
    """Remove this notebook's saved state; False when there was none. Raises layout.UnsafeStateError
    rather than delete through a symbolic link."""

    target = notebook_file(notebook)
    if target is None:
        return False
    entry = layout.find_entry(os.environ, target)
    layout.refuse_links(entry, layout.state_root(os.environ))
    existed = (entry / layout.MANIFEST).exists()
    layout.discard(entry, layout.state_root(os.environ))
    return existed


def call_expression(function: str, arguments: Mapping[str, Any]) -> str:
    """The user expression the server sends: one call of a function here with JSON arguments."""
    module = __name__
    return f"__import__({module!r}, fromlist=['_']).{function}({json.dumps(arguments)!r})"
