"""A live GPU quota widget for notebooks: this kernel's and this server's GPU memory.

    %load_ext fracnb_meter            # shows the meter below the cell
    from fracnb_meter.widget import show; show(interval=2.0)

The meter reads NVML inside the kernel (same attribution rules as the server extension)
from a daemon thread, so it keeps updating while a cell runs: widget updates are IOPub
messages, which flow during execution, unlike asyncio tasks or front-end callbacks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from .contract import Budget, ContractError, read_budget
from .hubservice import NO_REPORT, Report, fetch_report_blocking
from .processes import looks_like_container, parent_pid
from .sampler import Sampler
from .usage import KernelInfo, build_usage

UsageSource = Callable[[], dict[str, Any]]
WARNING_AT, DANGER_AT = 0.80, 0.95


def format_bytes(value: int | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / (1 << 30):.1f} GiB"


@dataclass(frozen=True)
class MeterView:
    """What the widget shows, computed from a usage document."""

    kernel_fraction: float  # of the limit, 0..1 (0 when unknown)
    server_fraction: float
    bar_style: str  # 'success', 'warning' or 'danger' (by the server's share of the limit)
    text: str
    quota_text: str | None


def _fraction(used: int | None, limit: int | None) -> float:
    if used is None or not limit:
        return 0.0
    return min(1.0, used / limit)


def _gpus(amount: float) -> str:
    return f"{amount:g} GPU" if amount == 1 else f"{amount:g} GPUs"


def quota_entry_text(used: Mapping[str, Any], limit: Mapping[str, Any]) -> str:
    """``0.25 of 1 GPU``, ``0.25 GPUs, unlimited`` or ``0.25 GPUs, no quota`` (usage.schema.json)."""
    if limit["state"] == "limited":
        return f"{used['gpus']:g} of {_gpus(limit['gpus'])}"
    return f"{_gpus(used['gpus'])}, {'unlimited' if limit['state'] == 'unlimited' else 'no quota'}"


def _quota_text(quota: Mapping[str, Any] | None) -> str | None:
    if not quota:
        return None
    user = quota["user"]
    parts = [f"you: {quota_entry_text(user['used'], user['limit'])}"]
    parts += [f"{g['name']}: {quota_entry_text(g['used'], g['limit'])}" for g in quota["groups"]]
    return "GPU quota across servers \N{EM DASH} " + ", ".join(parts)


def view_of(document: dict[str, Any]) -> MeterView:
    """Pure: the meter's bars and text for one usage document."""
    if not document.get("available"):
        reason = document.get("reason") or "no GPU visible"
        return MeterView(0.0, 0.0, "", f"GPU \N{EN DASH}: {reason}", _quota_text(document.get("quota")))
    budget = (document.get("budget") or {}).get("memory_bytes")
    device_total = sum(g["memory_total_bytes"] for g in document.get("gpus", []))
    limit, limit_name = (budget, "budget") if budget else (device_total, "device total")
    kernel = (document.get("kernels") or [{}])[0].get("gpu_memory_bytes")
    server = document.get("server", {}).get("gpu_memory_bytes")
    server_share = _fraction(server, limit)
    style = "danger" if server_share >= DANGER_AT else "warning" if server_share >= WARNING_AT else "success"
    simulated = " (simulated GPU)" if document.get("simulated") else ""
    text = (
        f"GPU memory{simulated}: this kernel {format_bytes(kernel)}, this server "
        f"{format_bytes(server)} of {format_bytes(limit)} {limit_name}"
    )
    if server is not None and limit:
        text += f" ({100 * server / limit:.0f} %)"
    if document.get("reason"):
        text += f" — {document['reason']}"
    return MeterView(_fraction(kernel, limit), server_share, style, text, _quota_text(document.get("quota")))


def server_pid() -> int:
    """The Jupyter server that started this kernel (jupyter_client exports JPY_PARENT_PID)."""
    value = os.environ.get("JPY_PARENT_PID", "")
    return int(value) if value.isdigit() else os.getppid()


class LocalUsage:
    """Usage document computed inside this kernel from NVML, like the server's endpoint."""

    def __init__(self, floor_seconds: float = 1.0, service_interval: float = 15.0) -> None:
        self.sampler = Sampler(floor_seconds)
        self.service_interval = service_interval
        self._report: Report = NO_REPORT
        self._report_at: float | None = None
        try:
            self.budget, self.budget_error = read_budget(os.environ), None
        except ContractError as error:
            self.budget, self.budget_error = Budget(), str(error)

    def __call__(self) -> dict[str, Any]:
        me = KernelInfo(
            id="this-kernel",
            name="",
            session_name=os.environ.get("JPY_SESSION_NAME"),
            path=None,
            execution_state=None,
            pid=os.getpid(),
        )
        document = build_usage(
            reading=self.sampler.read(),
            kernels=[me],
            server_pid=server_pid(),
            parent_of=parent_pid,
            budget=self.budget,
            budget_error=self.budget_error,
            in_container=looks_like_container(os.environ, os.path.exists),
            sampled_at=datetime.now(timezone.utc),
        )
        document["quota"], document["cull"] = self._service_report()
        return document

    def _service_report(self) -> Report:
        """The user's quota from the hub's fracnb service, asked at most every service_interval."""
        now = time.monotonic()
        if self._report_at is None or now - self._report_at >= self.service_interval:
            self._report_at = now
            self._report = fetch_report_blocking(
                os.environ.get("FRACNB_SERVICE_URL", ""),
                os.environ.get("JUPYTERHUB_API_TOKEN", ""),
                os.environ.get("JUPYTERHUB_SERVER_NAME", ""),
            )
        return self._report


class QuotaMeter:
    """Two bars (this kernel, this server) against the budget, refreshed by a daemon thread."""

    def __init__(self, source: UsageSource | None = None) -> None:
        self.source = source or LocalUsage()
        self.kernel_bar = widgets.FloatProgress(min=0.0, max=1.0, description="kernel")
        self.server_bar = widgets.FloatProgress(min=0.0, max=1.0, description="server")
        self.label = widgets.HTML()
        self.quota = widgets.HTML()
        self.widget = widgets.VBox([self.label, self.kernel_bar, self.server_bar, self.quota])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> MeterView:
        view = view_of(self.source())
        self.kernel_bar.value = view.kernel_fraction
        self.server_bar.value = view.server_fraction
        self.server_bar.bar_style = view.bar_style
        self.label.value = view.text
        self.quota.value = view.quota_text or ""
        self.quota.layout.display = "" if view.quota_text else "none"
        return view

    def start(self, interval: float = 2.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(interval,), name="fracnb-meter", daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None

    def close(self) -> None:
        self.stop()
        self.widget.close()
        sampler = getattr(self.source, "sampler", None)
        if sampler is not None:
            sampler.close()


_current: QuotaMeter | None = None


def show(interval: float = 2.0, source: UsageSource | None = None) -> QuotaMeter:
    """Display a live meter below the current cell (replacing a previous one)."""
    global _current  # noqa: PLW0603 - one meter per kernel, replaced on each call
    if _current is not None:
        _current.close()
    _current = QuotaMeter(source)
    _current.refresh()
    display(_current.widget)
    _current.start(interval)
    return _current


def load_ipython_extension(ipython: Any) -> None:
    show()


def unload_ipython_extension(ipython: Any) -> None:
    global _current  # noqa: PLW0603
    if _current is not None:
        _current.close()
        _current = None
