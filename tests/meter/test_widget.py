"""The notebook quota widget: what it shows, and that it updates while a cell runs."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from jupyter_core.paths import jupyter_path

from fracnb_meter.displayzone import save_zone
from fracnb_meter.hibernation.offerwidget import RestoreOffer
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import MeterServer
from fracnb_meter.widget import (
    CRITICAL_AT,
    LEVEL_COLOURS,
    OVER_AT,
    WARNING_AT,
    LocalUsage,
    QuotaMeter,
    level_of,
    next_time_html,
    quota_entry_text,
    view_of,
)
from fracnb_meter.wording import cull_warning
from fracnb_schemas import USAGE, check, problems
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, Kernel, wait_for_execution_state
from tests.service_reports import ReportServer, past_session
from tests.shared_cases import shared_cases


def document(kernel: int | None, server: int | None, budget: int | None = 20 * GIB) -> dict:
    return {
        "available": True,
        "reason": None,
        "simulated": False,
        "gpus": [{"memory_total_bytes": 80 * GIB}],
        "kernels": [{"gpu_memory_bytes": kernel}],
        "server": {"gpu_memory_bytes": server},
        "budget": {"memory_bytes": budget, "fraction": 0.25 if budget else None, "backend": "time-slicing"},
        "quota": None,
    }


def test_view_against_the_budget() -> None:
    view = view_of(document(2 * GIB, 17 * GIB))
    assert view.kernel_fraction == 0.1
    assert view.server_fraction == 0.85
    assert (view.kernel_level, view.server_level) == ("normal", "warning")
    assert view.text.startswith("GPU memory of your 0.25 GPU: this kernel 2 GiB")
    assert "17 GiB of 20 GiB budget (85 %)" in view.text
    assert view_of(document(0, 19 * GIB)).server_level == "critical"
    assert view_of(document(0, GIB)).server_level == "normal"


def test_both_bars_follow_the_panels_levels_and_colours() -> None:
    """The kernel bar is coloured like the server bar, over budget included."""
    view = view_of(document(19 * GIB, 24 * GIB))
    assert (view.kernel_level, view.server_level) == ("critical", "over")
    assert "over budget: on a shared GPU you are now using your neighbours' memory" in view.text
    meter = QuotaMeter(lambda: document(24 * GIB, 24 * GIB))
    try:
        meter.refresh()
        assert meter.kernel_bar.style.bar_color == meter.server_bar.style.bar_color == LEVEL_COLOURS["over"]
    finally:
        meter.close()


def test_a_cpu_only_server_shows_no_bars() -> None:
    reason = "No GPU for this server: it was started with a CPU-only profile."
    cpu_only = {"available": False, "reason": reason, "budget": {"backend": "none"}}
    view = view_of(cpu_only)
    assert view.text == reason
    assert not view.show_bars


def test_view_without_budget_uses_the_device_and_says_unknown() -> None:
    view = view_of(document(None, None, budget=None))
    assert "of 80 GiB device total" in view.text
    assert "this kernel unknown" in view.text
    assert view.kernel_fraction == 0.0


def test_view_when_unavailable_and_with_quota() -> None:
    unavailable = {"available": False, "reason": "No GPU is visible to this server."}
    assert view_of(unavailable).text == "GPU \N{EN DASH}: No GPU is visible to this server."
    with_quota = document(0, 0) | {
        "quota": {
            "user": {"used": {"gpus": 0.75, "exact": "3/4"}, "limit": {"state": "limited", "gpus": 2, "exact": "2"}},
            "groups": [
                {
                    "name": "a",
                    "used": {"gpus": 5.75, "exact": "23/4"},
                    "limit": {"state": "limited", "gpus": 6, "exact": "6"},
                }
            ],
        }
    }
    assert view_of(with_quota).quota_text == (
        "GPU quota across servers \N{EM DASH} you: 0.75 of 2 GPUs, a: 5.75 of 6 GPUs"
    )


def test_group_names_reach_the_widget_as_text_not_markup() -> None:
    unlimited = {"state": "unlimited"}
    quota = {
        "user": {"used": {"gpus": 0.25, "exact": "1/4"}, "limit": unlimited},
        "groups": [
            {"name": "<img src=x onerror=alert(1)>", "used": {"gpus": 0.25, "exact": "1/4"}, "limit": unlimited}
        ],
    }
    meter = QuotaMeter(lambda: document(GIB, GIB) | {"quota": quota})
    try:
        meter.refresh()
        assert "<img" not in meter.quota.value
        assert "&lt;img src=x onerror=alert(1)&gt;: 0.25 GPU, unlimited" in meter.quota.value
    finally:
        meter.close()


@pytest.mark.parametrize("case", shared_cases("gpu-shares.json")["quota_entries"], ids=lambda c: c["text"])
def test_quota_text_for_every_limit_state(case) -> None:
    """The front end's quota lines (src/summary.ts quotaText) are held to the same cases."""
    assert problems(USAGE, {"used": case["used"], "limit": case["limit"]}, "/$defs/userQuota") == []
    assert quota_entry_text(case["used"], case["limit"]) == case["text"]


LEVELS = shared_cases("meter-levels.json")


@pytest.mark.parametrize("case", LEVELS["cases"], ids=lambda c: f"{c['used_bytes']}-of-{c['limit_bytes']}")
def test_levels_shared_with_the_panel(case) -> None:
    assert level_of(case["used_bytes"], case["limit_bytes"]) == case["level"]


def test_thresholds_and_colours_shared_with_the_panel() -> None:
    """The panel's are checked against the same file, style/base.css included (src/__tests__/levels.spec.ts)."""
    assert tuple(LEVELS["thresholds"][k] for k in ("warning", "critical", "over")) == (WARNING_AT, CRITICAL_AT, OVER_AT)
    colours = LEVELS["colours"]
    assert {level: f"var({c['variable']}, {c['fallback']})" for level, c in colours.items()} == LEVEL_COLOURS


def test_colour_fallbacks_are_jupyterlabs_light_theme() -> None:
    """Outside JupyterLab (classic notebook, VS Code) the widget's bars look as in Lab's light theme."""
    candidates = jupyter_path("lab", "themes", "@jupyterlab", "theme-light-extension", "index.css")
    theme = next(Path(p) for p in candidates if Path(p).exists()).read_text()
    for level, colour in LEVELS["colours"].items():
        if colour["variable"].startswith("--jp-"):
            # e.g. --jp-warn-color1:var(--md-orange-700,#f57c00)
            defined = re.search(rf"{colour['variable']}:\s*(?:var\([\w-]+,\s*)?(#[0-9a-fA-F]+)", theme)
            assert defined is not None, colour["variable"]
            assert defined[1].lower() == colour["fallback"], level


def test_meter_refreshes_from_a_thread() -> None:
    readings = [document(GIB, GIB), document(4 * GIB, 4 * GIB)]
    calls: list[int] = []
    changed = threading.Event()

    def source() -> dict[str, Any]:
        calls.append(1)
        if len(calls) >= 2:
            changed.set()
        return readings[min(len(calls), 2) - 1]

    meter = QuotaMeter(source)
    try:
        meter.refresh()
        assert meter.kernel_bar.value == 0.05
        meter.start(interval=0.01)
        assert changed.wait(timeout=10)
        wait_until(lambda: meter.kernel_bar.value == 0.2, what="the kernel bar at 0.2", timeout=10, interval=0.01)
        assert "4 GiB" in meter.label.value
    finally:
        meter.close()
    assert meter._thread is None


def test_widget_updates_while_a_cell_runs(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    kernel = kernels["analysis.ipynb"]
    state = meter_server.state
    state.write(FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, kernel.pid, GIB)]))
    client = kernel.client
    reply = client.execute_interactive("%load_ext fracnb_meter", timeout=60, output_hook=lambda _msg: None)
    assert reply["content"]["status"] == "ok"
    msg_id = client.execute("import time; time.sleep(3)")
    wait_for_execution_state(meter_server, kernel.id, "busy")
    # The notebook "allocates" more while the cell is still sleeping.
    state.write(FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, kernel.pid, 5 * GIB)]))
    texts_during_cell = []
    while True:
        message = client.get_iopub_msg(timeout=30)
        content = message["content"]
        if message["msg_type"] == "comm_msg":
            value = content["data"].get("state", {}).get("value")
            if isinstance(value, str):
                texts_during_cell.append(value)
        if (
            message["msg_type"] == "status"
            and message["parent_header"].get("msg_id") == msg_id
            and content["execution_state"] == "idle"
        ):
            break
    client.execute_interactive("%unload_ext fracnb_meter", timeout=60, output_hook=lambda _m: None)
    assert any("this kernel 5 GiB" in text for text in texts_during_cell), texts_during_cell
    assert any("of 20 GiB budget" in text for text in texts_during_cell)


def test_the_widget_shows_the_culling_warning_in_the_front_ends_words() -> None:
    due = {"reason": "demand", "cull_at": "2026-11-23T14:05:00Z", "seconds_left": 240, "warning": True}
    with_warning = {**document(GIB, GIB), "cull": {"idle_timeout_seconds": 3600, "max_age_seconds": 0, "deadline": due}}
    assert view_of(with_warning).cull_text == cull_warning(due)
    meter = QuotaMeter(lambda: with_warning)
    try:
        meter.refresh()
        assert meter.cull.value.startswith("Someone is waiting for a GPU; this idle server stops at ")
        assert meter.cull.layout.display == ""
    finally:
        meter.close()
    not_yet = {**with_warning, "cull": {**with_warning["cull"], "deadline": {**due, "warning": False}}}
    assert view_of(not_yet).cull_text is None
    assert view_of(document(GIB, GIB)).cull_text is None


def with_history(doc: dict, peak: int | None, advice: dict | None = None) -> dict:
    point = None if peak is None else {"at_s": 5.0, "bytes": peak}
    history = {"server": {"step_s": 1.0, "peak": point, "latest": point, "points": []}, "kernels": [], "now_s": 9.0}
    return {**doc, "history": history, "advice": advice}


def test_the_widget_shows_the_sessions_peak_and_the_advice_for_next_time() -> None:
    advice = {"state": "advice", "text": "1/8 GPU <10 GiB> would have fit.", "larger": False, "sessions": 3,
              "p95_bytes": 4 * GIB}  # fmt: skip
    meter = QuotaMeter(lambda: with_history(document(GIB, GIB), 6 * GIB, advice))
    try:
        meter.refresh()
        assert meter.next_time.value == (
            '<div class="fracnb-meter-next-time">This session peaked at 6 GiB of 20 GiB.</div>'
            '<div class="fracnb-meter-next-time">1/8 GPU &lt;10 GiB&gt; would have fit.</div>'
        )
        assert meter.next_time.layout.display == ""
    finally:
        meter.close()
    assert next_time_html(with_history(document(GIB, GIB), 6 * GIB, {"state": "none"})) == (
        '<div class="fracnb-meter-next-time">This session peaked at 6 GiB of 20 GiB.</div>'
    )
    assert next_time_html(with_history(document(GIB, GIB), None, advice)) == ""  # before the first reading
    assert next_time_html(document(GIB, GIB)) == ""  # no history kept


def test_the_widgets_own_document_carries_the_services_advice(nvml_state, monkeypatch: pytest.MonkeyPatch) -> None:
    service = ReportServer.start()
    try:
        service.earlier_sessions = [past_session(peak_bytes=p * GIB) for p in (3, 4, 2)]
        contract = {"FRACNB_GPU_FRACTION": "0.25", "FRACNB_GPU_MEMORY_LIMIT": str(20 * GIB),
                    "FRACNB_ISOLATION": "none", "FRACNB_GPU_BACKEND": "time-slicing", "FRACNB_PROFILE": "quarter",
                    "FRACNB_CHOICE": ""}  # fmt: skip
        for name, value in {**contract, **service.environment()}.items():
            monkeypatch.setenv(name, value)
        source = LocalUsage()
        try:
            usage = source()
        finally:
            source.sampler.close()
        check(USAGE, usage, check_formats=True)
        assert usage["advice"]["text"] == (
            "Your last 3 sessions on 0.25 GPU peaked at 4 GiB or less. 1/8 GPU (10 GiB) would have fit."
        )
    finally:
        service.stop()


def test_the_widget_offers_the_saved_variables_and_restores_them_on_a_click() -> None:
    manifest = {
        "saved_at": "2026-11-25T14:05:00+00:00",
        "bytes": {"total": 3 * GIB + GIB // 5},
        "variables": [{"name": "model"}, {"name": "frame"}],
    }
    reports = [
        {"status": "confirm", "reason": "the saved state was made with other versions", "warnings": ["numpy 1 → 2"]},
        {
            "status": "restored", "reason": None, "restored": ["model", "frame"], "failed": [], "skipped_at_save": [],
            "warnings": ["numpy 1 → 2"], "notices": [], "bytes": 3 * GIB,
        },
    ]  # fmt: skip
    forced: list[bool] = []

    def restore(force: bool, on_conflict: str | None) -> dict:
        assert on_conflict is None
        forced.append(force)
        return {"restored": [], "failed": [], "skipped_at_save": [], "notices": [], **reports[len(forced) - 1]}

    offer = RestoreOffer(offer=lambda: manifest, restore=restore)
    meter = QuotaMeter(lambda: document(0, 0), restore_offer=offer)
    try:
        assert offer.widget in meter.widget.children
        assert offer.widget.layout.display == ""
        assert offer.button.description.startswith("Restore variables from ")
        assert offer.button.description.endswith("(3.2 GiB)")
        assert offer.button.tooltip == "model, frame"
        offer.button.click()
        assert "other versions" in offer.result.value
        assert offer.button.description == "Restore anyway"
        offer.button.click()
        assert forced == [False, True]
        assert "Restored 2 variables (3 GiB): model, frame." in offer.result.value
        assert offer.button.layout.display == "none"
    finally:
        meter.close()
    nothing = RestoreOffer(offer=lambda: None, restore=restore)
    assert nothing.widget.layout.display == "none"


def test_the_widget_asks_before_it_replaces_names_the_kernel_already_holds() -> None:
    manifest = {"saved_at": "2026-11-25T14:05:00+00:00", "bytes": {"total": 900}, "variables": [{"name": "lr"}]}
    base = {"reason": None, "failed": [], "skipped_at_save": [], "warnings": [], "notices": [], "bytes": 900}
    asked: list[str | None] = []

    def restore(force: bool, on_conflict: str | None) -> dict:
        asked.append(on_conflict)
        if on_conflict is None:
            return {**base, "status": "conflict", "restored": [], "conflicts": ["lr", "steps"]}
        kept = on_conflict == "keep"
        return {**base, "status": "restored", "restored": ["seed"] if kept else ["lr", "steps", "seed"],
                "conflicts": ["lr", "steps"]}  # fmt: skip

    for click, expected in [("button", "Kept your own values of lr, steps."), ("take", "Restored 3 variables")]:
        offer = RestoreOffer(offer=lambda: manifest, restore=restore)
        offer.button.click()
        assert (
            offer.result.value == "Nothing was restored yet: lr, steps differ between this kernel and the saved state."
        )
        assert offer.button.description == "Keep mine"
        assert offer.take.layout.display == ""
        getattr(offer, click).click()
        assert expected in offer.result.value
        assert offer.button.layout.display == offer.take.layout.display == "none"
    assert asked == [None, "keep", None, "take"]


def test_the_widget_writes_times_in_the_zone_the_browser_told_and_asks_before_discarding(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("FRACNB_DISPLAY_TIMEZONE", "Europe/Berlin")
    manifest = {
        "saved_at": "2026-11-28T00:37:00+00:00",
        "bytes": {"total": 7969177},
        "variables": [{"name": "weights"}, {"name": "notes"}],
    }
    discarded: list[bool] = []
    offer = RestoreOffer(
        offer=lambda: manifest, restore=lambda force, on_conflict: {}, discard=lambda: discarded.append(True) or True
    )
    # Before a page told its zone: the spawner's.
    assert re.fullmatch(r"Restore variables from (\d+ \w+ )?01:37 CET \(7\.6 MiB\)", offer.button.description)
    save_zone(os.environ, "America/New_York")
    offer.refresh()
    assert re.fullmatch(r"Restore variables from (\d+ \w+ )?19:37 EST \(7\.6 MiB\)", offer.button.description)

    # Discard only asks; "Keep them" keeps them.
    offer.discard_button.click()
    assert offer.confirmation.layout.display == ""
    assert "Delete the 2 variables saved at" in offer.question.value
    assert "19:37 EST (7.6 MiB)? They cannot be restored afterwards." in offer.question.value
    offer.keep_button.click()
    assert offer.confirmation.layout.display == "none"
    assert discarded == []
    # The explicit second click deletes them.
    offer.discard_button.click()
    offer.confirm_button.click()
    assert discarded == [True]
    assert offer.result.value == "The saved variables were discarded."
    assert offer.button.layout.display == "none"
    assert offer.discard_button.layout.display == "none"
