"""A live GPU quota widget for notebooks: this kernel's and this server's GPU memory.

    %load_ext fracnb_meter            # shows the meter below the cell
    from fracnb_meter.widget import show; show(interval=2.0)

The meter reads NVML inside the kernel (same attribution rules as the server extension)
from a daemon thread, so it keeps updating while a cell runs: widget updates are IOPub
messages, which flow during execution, unlike asyncio tasks or front-end callbacks.
"""

from __future__ import annotations

import html
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone, tzinfo
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from .contract import Budget, ContractError, gpu_withheld, read_budget
from .displayzone import display_zone
from .hibernation.offerwidget import RestoreOffer
from .hubservice import NO_REPORT, Report, fetch_report_blocking
from .memoryhistory import MemoryHistory, record_usage
from .nextadvice import Advice, advice_request, fetch_advice_blocking
from .nvml import unavailable
from .processes import looks_like_container, parent_pid, server_pid
from .sampler import Sampler
from .sparkline import svg
from .usage import KernelInfo, build_usage
from .wording import cull_warning, format_bytes, format_gpus, format_share, format_use, session_peak

UsageSource = Callable[[], dict[str, Any]]
# The panel's thresholds (extension/src/summary.ts): amber, red, and over the budget.
# extension/test-data/meter-levels.json holds both to the same levels and colours.
WARNING_AT, CRITICAL_AT, OVER_AT = 0.80, 0.95, 1.0
# The panel's colours (extension/style/base.css), so both bars read like the server bar there;
# the fallbacks are JupyterLab's light theme, for front ends without its variables.
LEVEL_COLOURS = {
    "normal": "var(--jp-brand-color1, #1976d2)",
    "warning": "var(--jp-warn-color1, #f57c00)",
    "critical": "var(--jp-error-color1, #d32f2f)",
    "over": "var(--fracnb-meter-over-color, #6a1b9a)",
}
OVER_BUDGET_NOTE = "over budget: on a shared GPU you are now using your neighbours' memory"


def readable(value: int | None) -> str:
    return "unknown" if value is None else format_bytes(value)


def level_of(used: int | None, limit: int | None) -> str:
    """'normal', 'warning', 'critical' or 'over': the same levels as the panel's bars."""
    if used is None or not limit:
        return "normal"
    share = used / limit
    if share > OVER_AT:
        return "over"
    return "critical" if share >= CRITICAL_AT else "warning" if share >= WARNING_AT else "normal"


@dataclass(frozen=True)
class MeterView:
    """What the widget shows, computed from a usage document."""

    kernel_fraction: float  # of the limit, 0..1 (0 when unknown)
    server_fraction: float
    kernel_level: str  # 'normal', 'warning', 'critical' or 'over' (LEVEL_COLOURS)
    server_level: str
    text: str
    quota_text: str | None
    show_bars: bool = True
    cull_text: str | None = None  # the culling warning, while one is due (wording.cull_warning)


def _fraction(used: int | None, limit: int | None) -> float:
    if used is None or not limit:
        return 0.0
    return min(1.0, used / limit)


def quota_entry_text(used: Mapping[str, Any], limit: Mapping[str, Any]) -> str:
    """``0.25 of 1 GPU``, ``0.25 GPU, unlimited`` or ``0 GPUs, no quota`` (usage.schema.json)."""
    if limit["state"] == "limited":
        return format_use(used["gpus"], limit["gpus"])
    return f"{format_gpus(used['gpus'])}, {'unlimited' if limit['state'] == 'unlimited' else 'no quota'}"


def _quota_text(quota: Mapping[str, Any] | None) -> str | None:
    if not quota:
        return None
    user = quota["user"]
    parts = [f"you: {quota_entry_text(user['used'], user['limit'])}"]
    parts += [f"{g['name']}: {quota_entry_text(g['used'], g['limit'])}" for g in quota["groups"]]
    return "GPU quota across servers \N{EM DASH} " + ", ".join(parts)


def view_of(document: dict[str, Any], zone: tzinfo | None = None) -> MeterView:
    """Pure: the meter's bars and text for one usage document, its times in ``zone`` (default: local)."""
    view = _memory_view(document)
    return replace(view, cull_text=cull_warning((document.get("cull") or {}).get("deadline"), zone))


def _memory_view(document: dict[str, Any]) -> MeterView:
    budget_terms = document.get("budget") or {}
    quota = _quota_text(document.get("quota"))
    if not document.get("available"):
        reason = document.get("reason") or "no GPU visible"
        if budget_terms.get("backend") == "none":  # a CPU-only server: nothing to measure
            return MeterView(0.0, 0.0, "normal", "normal", reason, quota, show_bars=False)
        return MeterView(0.0, 0.0, "normal", "normal", f"GPU \N{EN DASH}: {reason}", quota)
    budget = budget_terms.get("memory_bytes")
    device_total = sum(g["memory_total_bytes"] for g in document.get("gpus", []))
    limit, limit_name = (budget, "budget") if budget else (device_total, "device total")
    kernel = (document.get("kernels") or [{}])[0].get("gpu_memory_bytes")
    server = document.get("server", {}).get("gpu_memory_bytes")
    fraction = budget_terms.get("fraction")
    share = f" of your {format_share(fraction)}" if fraction else ""
    simulated = " (simulated GPU)" if document.get("simulated") else ""
    text = (
        f"GPU memory{share}{simulated}: this kernel {readable(kernel)}, this server "
        f"{readable(server)} of {readable(limit)} {limit_name}"
    )
    if server is not None and limit:
        text += f" ({100 * server / limit:.0f} %)"
    server_level = level_of(server, limit) if budget else "normal"
    if server_level == "over":
        text += f" \N{EM DASH} {OVER_BUDGET_NOTE}"
    if document.get("reason"):
        text += f" \N{EM DASH} {document['reason']}"
    return MeterView(
        _fraction(kernel, limit),
        _fraction(server, limit),
        level_of(kernel, limit) if budget else "normal",
        server_level,
        text,
        quota,
    )


def charts_html(document: Mapping[str, Any]) -> str:
    """Pure: this kernel's and this server's memory over the session as inline SVG ('' without history)."""
    history = document.get("history")
    if not history or not document.get("available"):
        return ""
    budget = (document.get("budget") or {}).get("memory_bytes")
    charts = [("this kernel", kernel["series"]) for kernel in history["kernels"][:1]]
    charts.append(("this server", history["server"]))
    return "".join(
        f'<div class="fracnb-meter-chart"><span>{name}</span> {svg(name, series, history["now_s"], budget)}</div>'
        for name, series in charts
    )


def next_time_html(document: Mapping[str, Any]) -> str:
    """Pure: the server's peak in the widget's history and the hub's advice for next time ('' before a reading)."""
    history = document.get("history")
    peak = (history or {}).get("server", {}).get("peak") if document.get("available") else None
    budget = (document.get("budget") or {}).get("memory_bytes")
    text = session_peak(None if peak is None else peak["bytes"], budget)
    if text is None:
        return ""
    advice = document.get("advice")
    lines = [text] if not advice or advice["state"] == "none" else [text, advice["text"]]
    return "".join(f'<div class="fracnb-meter-next-time">{html.escape(line)}</div>' for line in lines)


class LocalUsage:
    """Usage document computed inside this kernel from NVML, like the server's endpoint."""

    def __init__(self, floor_seconds: float = 1.0, service_interval: float = 15.0) -> None:
        self.sampler = Sampler(floor_seconds, utilization=False)  # the busy share is the server's business
        self.service_interval = service_interval
        self._report: Report = NO_REPORT
        self._report_at: float | None = None
        self._advice: Advice = None
        try:
            self.budget, self.budget_error = read_budget(os.environ), None
        except ContractError as error:
            self.budget, self.budget_error = Budget(), str(error)
        self.no_gpu_reason = gpu_withheld(self.budget, os.environ)
        self.history, self._history_origin = MemoryHistory(datetime.now(timezone.utc)), time.monotonic()
        service_url = os.environ.get("FRACNB_SERVICE_URL", "") if self.no_gpu_reason is None else ""
        choice = os.environ.get("FRACNB_CHOICE", "").strip() or None
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self._advice_request = advice_request(service_url, token, self.budget.profile, choice)

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
            reading=self.sampler.read() if self.no_gpu_reason is None else unavailable(self.no_gpu_reason),
            kernels=[me],
            server_pid=server_pid(),
            parent_of=parent_pid,
            budget=self.budget,
            budget_error=self.budget_error,
            in_container=looks_like_container(os.environ, os.path.exists),
            sampled_at=datetime.now(timezone.utc),
        )
        document["history"] = record_usage(self.history, document, time.monotonic() - self._history_origin)
        document["quota"], document["cull"] = self._service_report()
        document["advice"] = self._advice
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
            self._advice = fetch_advice_blocking(self._advice_request)
        return self._report


class QuotaMeter:
    """Two bars (this kernel, this server) against the budget, refreshed by a daemon thread."""

    def __init__(self, source: UsageSource | None = None, restore_offer: RestoreOffer | None = None) -> None:
        self.source = source or LocalUsage()
        # This notebook's variables saved when its server was stopped, if any (docs/hibernation.md).
        self.restore_offer = restore_offer or RestoreOffer()
        self.kernel_bar = widgets.FloatProgress(min=0.0, max=1.0, description="kernel")
        self.server_bar = widgets.FloatProgress(min=0.0, max=1.0, description="server")
        self.label = widgets.HTML()
        self.quota = widgets.HTML()
        self.charts = widgets.HTML()
        self.next_time = widgets.HTML()
        self.cull = widgets.HTML()
        self.widget = widgets.VBox(
            [
                self.label,
                self.kernel_bar,
                self.server_bar,
                self.charts,
                self.next_time,
                self.quota,
                self.cull,
                self.restore_offer.widget,
            ]
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> MeterView:
        document = self.source()
        view = view_of(document, display_zone(os.environ))  # the browser's zone, once a page told it
        self.charts.value = charts_html(document)
        self.charts.layout.display = "" if self.charts.value else "none"
        self.next_time.value = next_time_html(document)
        self.next_time.layout.display = "" if self.next_time.value else "none"
        for bar, value, level in (
            (self.kernel_bar, view.kernel_fraction, view.kernel_level),
            (self.server_bar, view.server_fraction, view.server_level),
        ):
            bar.value = value
            bar.style.bar_color = LEVEL_COLOURS[level]
            bar.layout.display = "" if view.show_bars else "none"
        self.label.value = html.escape(view.text)
        self.quota.value = html.escape(view.quota_text or "")  # group names are text, not markup
        self.quota.layout.display = "" if view.quota_text else "none"
        self.cull.value = html.escape(view.cull_text or "")
        self.cull.layout.display = "" if view.cull_text else "none"
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
