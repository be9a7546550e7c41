"""The @fracnb/meter front end in a real JupyterLab, driven by headless Chromium.

The only stand-in is the GPU: the server process loads the fake libnvidia-ml.so.1, and
the tests change what it reports for the kernel's pid while the page is open.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Browser, Error, Page, expect

from tests.browser.meter_lab import BUDGET_BYTES, GIB, ApiError, FakeGpu, LabServer, wait_for_animations, wait_for_polls

pytestmark = pytest.mark.browser

NOTEBOOK = "gpu-meter.ipynb"
UPDATE_TIMEOUT_MS = 20_000
STATUS = ".fracnb-meter-status"
TOAST = ".Toastify__toast"


@pytest.fixture(scope="module")
def kernel(lab_server: LabServer) -> Iterator[tuple[str, int]]:
    """A real python3 kernel in a session for NOTEBOOK: (kernel id, pid)."""
    session = lab_server.start_notebook(NOTEBOOK)
    kernel_id = session["kernel"]["id"]
    yield kernel_id, lab_server.kernel_pid(kernel_id)
    lab_server.api("DELETE", f"api/sessions/{session['id']}")


@pytest.fixture(scope="module")
def lab(browser: Browser, lab_server: LabServer, kernel: tuple[str, int]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    page.goto(f"{lab_server.url}lab?reset&token={lab_server.token}")
    expect(page.locator(STATUS)).to_be_visible(timeout=60_000)
    yield page
    context.close()
    assert not uncaught, f"uncaught errors in the page: {uncaught}"


def set_memory(fake_gpu: FakeGpu, kernel: tuple[str, int], memory: int | None) -> None:
    fake_gpu.heal()
    fake_gpu.set_kernel_memory(kernel[1], memory)


def dismiss_toasts(page: Page) -> None:
    """Close the notifications earlier tests raised, for a clean screenshot."""
    toasts = page.locator(TOAST)
    for _ in range(toasts.count()):
        toasts.first.locator(".jp-Notification-Toast-Close").click()
        wait_for_animations(page)  # the next toast slides into place
    expect(page.locator(TOAST)).to_have_count(0)


def open_panel(page: Page) -> None:
    panel = page.locator("#fracnb-meter-panel")
    if not panel.is_visible():
        page.locator(STATUS).click()
    expect(panel).to_be_visible()


def test_status_bar_follows_the_kernels_gpu_memory(
    lab: Page, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    status = lab.locator(STATUS)

    set_memory(fake_gpu, kernel, int(3.1 * GIB))
    expect(status).to_have_text("GPU 3.1 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-normal\b"))
    expect(status).to_have_attribute("title", re.compile(r"3\.1 GiB .*budget of 20 GiB"))
    lab.screenshot(path=artifacts / "lab-status-normal.png")

    set_memory(fake_gpu, kernel, 17 * GIB)
    expect(status).to_have_text("GPU 17 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-warning\b"))
    lab.locator(".jp-StatusBar-Widget").screenshot(path=artifacts / "statusbar-warning.png")


def test_panel_lists_the_kernel_by_notebook_with_device_and_budget(
    lab: Page, lab_server: LabServer, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    set_memory(fake_gpu, kernel, 6 * GIB)
    open_panel(lab)
    panel = lab.locator("#fracnb-meter-panel")

    row = panel.locator(f'[data-kernel-id="{kernel[0]}"]')
    expect(row.locator(".fracnb-meter-kernel-name")).to_have_text(NOTEBOOK)
    expect(row.locator(".fracnb-meter-kernel-memory")).to_have_text("6 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(row).to_contain_text(f"pid {kernel[1]}")
    expect(panel.locator(".fracnb-meter-total-used")).to_have_text("6 GiB")

    usage = lab_server.usage()
    device = panel.locator(".fracnb-meter-device")
    expect(device).to_have_count(len(usage["gpus"]))
    assert usage["simulated"]
    name = device.first.locator(".fracnb-meter-device-name")
    # The badge says "simulated"; the name does not say it again.
    expect(name).to_have_text(re.compile(r"^0: NVIDIA A100-SXM4-80GB\s*simulated$"))
    expect(device.first.locator(".fracnb-meter-badge")).to_have_count(1)
    expect(device.first).to_contain_text("37 % busy")

    budget = panel.locator(".fracnb-meter-facts").first
    expect(budget).to_contain_text("Share0.25 GPU")
    expect(budget).to_contain_text(f"Memory{BUDGET_BYTES // GIB} GiB")
    expect(budget).to_contain_text("ProfileQuarter of an A100")  # the display name, not the slug
    expect(budget).not_to_contain_text("quarter")
    expect(budget).to_contain_text("time-slicing")
    expect(budget).to_contain_text(
        "Memory cap19 GiB (95 % of the budget) for PyTorch, JAX and CuPy; TensorFlow through the startup hook."
    )
    expect(budget).not_to_contain_text("nothing stops you")
    expect(lab.locator(STATUS)).to_have_text("GPU 6 / 20 GiB")
    lab.screenshot(path=artifacts / "lab-panel.png")

    # The notebook name opens the notebook.
    row.locator(".fracnb-meter-kernel-name").click()
    expect(lab.locator(".jp-MainAreaWidget.jp-NotebookPanel")).to_be_visible(timeout=30_000)
    current_tab = lab.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
    expect(current_tab).to_contain_text(NOTEBOOK)


def test_panel_shows_how_long_the_kernels_gpu_has_been_unused(
    lab: Page, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    set_memory(fake_gpu, kernel, 8 * GIB)  # held, with no GPU work
    open_panel(lab)
    row = lab.locator(f'#fracnb-meter-panel [data-kernel-id="{kernel[0]}"]')
    unused = row.locator(".fracnb-meter-kernel-unused")
    expect(row.locator(".fracnb-meter-kernel-memory")).to_have_text("8 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(unused).to_have_text(re.compile(r"^GPU unused for [1-9]\d* s$"), timeout=UPDATE_TIMEOUT_MS)
    lab.screenshot(path=artifacts / "lab-panel-gpu-unused.png")
    try:
        fake_gpu.set_kernel_work(kernel[1], 70)
        expect(unused).to_have_count(0, timeout=UPDATE_TIMEOUT_MS)  # GPU work resets the count
    finally:
        fake_gpu.set_kernel_work(kernel[1], None)
    expect(unused).to_have_count(1, timeout=UPDATE_TIMEOUT_MS)


def test_critical_colour_and_one_notification_per_crossing(
    lab: Page, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    status = lab.locator(STATUS)
    kernel_toasts = lab.locator(TOAST, has_text=f"{NOTEBOOK} uses")
    set_memory(fake_gpu, kernel, 2 * GIB)
    expect(status).to_have_text("GPU 2 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    before = kernel_toasts.count()

    set_memory(fake_gpu, kernel, int(19.5 * GIB))
    expect(status).to_have_text("GPU 19.5 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-critical\b"))
    expect(kernel_toasts).to_have_count(before + 1, timeout=UPDATE_TIMEOUT_MS)
    expect(kernel_toasts.last).to_contain_text("98 % of your 20 GiB budget")
    wait_for_animations(lab)  # the toast has finished sliding in before the screenshot
    lab.screenshot(path=artifacts / "lab-critical-notification.png")

    # Several more polls above the threshold raise nothing new: not a second kernel toast, and, the
    # server's total being above the threshold too, no toast about it (a kernel crossing says it all).
    wait_for_polls(lab, 3)
    expect(kernel_toasts).to_have_count(before + 1)
    expect(lab.locator(TOAST, has_text="This server uses")).to_have_count(0)

    # ... falling back withdraws the toast, which no longer holds ...
    set_memory(fake_gpu, kernel, 4 * GIB)
    expect(status).to_have_text("GPU 4 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(kernel_toasts).to_have_count(before, timeout=UPDATE_TIMEOUT_MS)
    # ... and crossing again raises a new one.
    set_memory(fake_gpu, kernel, 20 * GIB)
    expect(status).to_have_text("GPU 20 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(kernel_toasts).to_have_count(before + 1, timeout=UPDATE_TIMEOUT_MS)


def test_over_budget_is_a_state_of_its_own(
    lab: Page, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    status = lab.locator(STATUS)
    set_memory(fake_gpu, kernel, 19 * GIB)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-critical\b"), timeout=UPDATE_TIMEOUT_MS)
    critical_colour = status.evaluate("e => getComputedStyle(e).backgroundColor")

    set_memory(fake_gpu, kernel, 24 * GIB)  # 120 % of the budget, on a time-sliced GPU
    expect(status).to_have_text("GPU 24 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-over\b"))
    expect(status).to_have_attribute("title", re.compile(r"on a shared GPU you are now using your neighbours' memory"))
    over_colour = status.evaluate("e => getComputedStyle(e).backgroundColor")
    assert _rgb(over_colour) != _rgb(critical_colour)
    assert _rgb(over_colour) == (0x6A, 0x1B, 0x9A)

    over_toasts = lab.locator(TOAST, has_text="Over budget")
    expect(over_toasts).to_have_count(1, timeout=UPDATE_TIMEOUT_MS)
    expect(over_toasts).to_contain_text(f"{NOTEBOOK} uses 24 GiB, 120 % of your 20 GiB budget")
    expect(over_toasts).to_contain_text("neighbours' memory")
    # The 95 % toast of the same notebook became this one: one toast per notebook.
    expect(lab.locator(TOAST, has_text=f"{NOTEBOOK} uses")).to_have_count(1)

    open_panel(lab)
    panel = lab.locator("#fracnb-meter-panel")
    expect(panel.locator(".fracnb-meter-total .fracnb-meter-bar-fill.fracnb-meter-over")).to_have_count(1)
    expect(panel.locator(".fracnb-meter-over-note")).to_contain_text("neighbours' memory")
    wait_for_animations(lab)  # the toast has finished sliding in before the screenshot
    lab.screenshot(path=artifacts / "lab-over-budget.png")

    # Memory drops: the state and the toast go.
    set_memory(fake_gpu, kernel, 3 * GIB)
    expect(status).to_have_text("GPU 3 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-normal\b"))
    expect(lab.locator(TOAST, has_text=f"{NOTEBOOK} uses")).to_have_count(0, timeout=UPDATE_TIMEOUT_MS)


def test_server_crossing_without_a_kernel_crossing_is_notified(
    lab: Page, fake_gpu: FakeGpu, kernel: tuple[str, int]
) -> None:
    server_pid = psutil.Process(kernel[1]).ppid()
    status = lab.locator(STATUS)
    server_toasts = lab.locator(TOAST, has_text="This server uses")
    set_memory(fake_gpu, kernel, GIB)
    fake_gpu.set_kernel_memory(server_pid, 0)
    expect(status).to_have_text("GPU 1 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    before = server_toasts.count()

    # GPU memory held by the server process itself (not by a kernel) still counts.
    fake_gpu.set_kernel_memory(server_pid, int(18.5 * GIB))
    expect(status).to_have_text("GPU 19.5 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)
    expect(server_toasts).to_have_count(before + 1, timeout=UPDATE_TIMEOUT_MS)
    expect(server_toasts.last).to_contain_text("98 % of your 20 GiB budget")
    fake_gpu.processes.pop(server_pid)
    fake_gpu.write()


def test_unknown_process_memory_shows_the_whole_device_marked(
    lab: Page, lab_server: LabServer, fake_gpu: FakeGpu, kernel: tuple[str, int]
) -> None:
    status = lab.locator(STATUS)
    set_memory(fake_gpu, kernel, 2 * GIB)
    expect(status).to_have_text("GPU 2 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)

    # NVML has no figure for the kernel's process (old drivers in containers do this).
    fake_gpu.device_used = 12 * GIB
    fake_gpu.set_kernel_memory(kernel[1], None)
    expect(status).to_have_text("GPU 12 / 80 GiB*", timeout=UPDATE_TIMEOUT_MS)
    usage = lab_server.usage()
    assert usage["server"]["gpu_memory_bytes"] is None
    expect(status).to_have_attribute("title", re.compile(r"Whole device.*budget is 20 GiB"))
    expect(status).to_have_attribute("title", re.compile(re.escape(usage["reason"])))
    open_panel(lab)
    row = lab.locator(f'#fracnb-meter-panel [data-kernel-id="{kernel[0]}"]')
    expect(row.locator(".fracnb-meter-kernel-memory")).to_have_text("unknown")
    fake_gpu.heal()


def test_nvml_failure_shows_no_gpu_with_the_reason(
    lab: Page, lab_server: LabServer, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    status = lab.locator(STATUS)
    set_memory(fake_gpu, kernel, GIB)
    expect(status).to_have_text("GPU 1 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)

    fake_gpu.fail("nvmlDeviceGetCount_v2")
    expect(status).to_have_text("GPU \u2013", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_class(re.compile(r"\bfracnb-meter-unavailable\b"))
    reason = lab_server.usage()["reason"]
    assert reason
    expect(status).to_have_attribute("title", re.compile(re.escape(reason)))
    open_panel(lab)
    expect(lab.locator("#fracnb-meter-panel .fracnb-meter-reason")).to_have_text(reason)
    dismiss_toasts(lab)
    lab.screenshot(path=artifacts / "lab-unavailable.png")

    fake_gpu.heal()
    expect(status).to_have_text("GPU 1 / 20 GiB", timeout=UPDATE_TIMEOUT_MS)


def notebook7_settings_race(error: Error) -> bool:
    """Notebook 7's own race, not the meter's: its keyboard-shortcuts plugin reads its settings' schema when
    another plugin's settings load, sometimes before its own have ("Cannot read properties of undefined (reading
    'schema')", thrown from Notebook 7's core bundle). It happens with every third-party extension disabled."""
    top = next((line for line in (error.stack or "").splitlines() if ".js" in line), "")
    return "(reading 'schema')" in error.message and "notebook_core." in top


def test_notebook7_shows_the_meter(
    browser: Browser,
    lab_server: LabServer,
    fake_gpu: FakeGpu,
    kernel: tuple[str, int],
    artifacts: Path,
) -> None:
    set_memory(fake_gpu, kernel, 5 * GIB)
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[Error] = []
    page.on("pageerror", lambda error: uncaught.append(error))  # noqa: PLW0108 - Playwright wants a function
    try:
        page.goto(f"{lab_server.url}notebooks/{NOTEBOOK}?token={lab_server.token}")
        status = page.locator(STATUS)
        expect(status).to_have_text("GPU 5 / 20 GiB", timeout=60_000)
        # The notebook itself is open and its kernel connected, with nothing thrown on the way.
        expect(page.locator(".jp-Notebook")).to_be_visible(timeout=60_000)
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        unexplained = [f"{error.message}\n{error.stack}" for error in uncaught if not notebook7_settings_race(error)]
        assert not unexplained, f"uncaught errors while Notebook 7 opened a notebook: {unexplained}"
        status.click()
        row = page.locator(f'#fracnb-meter-panel [data-kernel-id="{kernel[0]}"]')
        expect(row.locator(".fracnb-meter-kernel-memory")).to_have_text("5 GiB")
        expect(row.locator(".fracnb-meter-kernel-unused")).to_have_text(re.compile(r"^GPU unused for \d+ (s|min)$"))
        page.screenshot(path=artifacts / "notebook7.png")
    finally:
        context.close()


def test_settings_schema_rejects_unknown_keys(lab_server: LabServer) -> None:
    """The schema has additionalProperties: false; JupyterLab's settings API enforces it."""
    url = "lab/api/settings/@fracnb/meter:plugin"
    lab_server.api("PUT", url, {"raw": json.dumps({"refreshRate": 2000})})
    with pytest.raises(ApiError) as refused:
        lab_server.api("PUT", url, {"raw": json.dumps({"refreshRat": 2000})})
    assert refused.value.status == 400
    with pytest.raises(ApiError) as too_fast:
        lab_server.api("PUT", url, {"raw": json.dumps({"refreshRate": 10})})
    assert too_fast.value.status == 400
    lab_server.api("PUT", url, {"raw": "{}"})


def test_dark_theme_colours_the_panel(
    browser: Browser,
    lab_server: LabServer,
    fake_gpu: FakeGpu,
    kernel: tuple[str, int],
    artifacts: Path,
) -> None:
    themes = "lab/api/settings/@jupyterlab/apputils-extension:themes"
    lab_server.api("PUT", themes, {"raw": json.dumps({"theme": "JupyterLab Dark"})})
    set_memory(fake_gpu, kernel, 17 * GIB)
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    try:
        page.goto(f"{lab_server.url}lab?reset&token={lab_server.token}")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=60_000)
        status = page.locator(STATUS)
        expect(status).to_have_text("GPU 17 / 20 GiB", timeout=60_000)
        open_panel(page)
        panel = page.locator("#fracnb-meter-panel")
        layout = page.evaluate("getComputedStyle(document.body).getPropertyValue('--jp-layout-color1').trim()")
        background = panel.evaluate("e => getComputedStyle(e).backgroundColor")
        assert _rgb(background) == _rgb(layout)
        # Everything inside follows the theme too: no light surface, no dark-on-dark text.
        font = page.evaluate("getComputedStyle(document.body).getPropertyValue('--jp-ui-font-color1').trim()")
        assert _rgb(panel.evaluate("e => getComputedStyle(e).color")) == _rgb(font)
        surfaces = panel.evaluate(
            """e => [e, ...e.querySelectorAll('*')]
                .map(n => getComputedStyle(n).backgroundColor)
                .filter(c => c !== 'rgba(0, 0, 0, 0)')"""
        )
        light = [colour for colour in surfaces if sum(_rgb(colour)) > 3 * 200]
        assert not light, f"light backgrounds in the dark panel: {light}"
        texts = panel.evaluate(
            """e => [...e.querySelectorAll('dt, dd, h3, p, span, button')]
                .filter(n => n.textContent.trim())
                .map(n => getComputedStyle(n).color)"""
        )
        dark_text = [colour for colour in texts if sum(_rgb(colour)) < 3 * 90]
        assert not dark_text, f"dark text on the dark panel: {dark_text}"
        page.screenshot(path=artifacts / "lab-dark-panel.png")

        # Notebook 7 shares the theme setting and the panel.
        page.goto(f"{lab_server.url}notebooks/{NOTEBOOK}?token={lab_server.token}")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=60_000)
        expect(page.locator(STATUS)).to_have_text("GPU 17 / 20 GiB", timeout=60_000)
        open_panel(page)
        layout = page.evaluate("getComputedStyle(document.body).getPropertyValue('--jp-layout-color1').trim()")
        assert _rgb(panel.evaluate("e => getComputedStyle(e).backgroundColor")) == _rgb(layout)
        page.screenshot(path=artifacts / "notebook7-dark-panel.png")
    finally:
        context.close()
        lab_server.api("PUT", themes, {"raw": "{}"})


def _rgb(colour: str) -> tuple[int, int, int]:
    """'#111111', '#111' or 'rgb(17, 17, 17)' as a tuple."""
    if colour.startswith("#"):
        digits = colour[1:]
        if len(digits) == 3:
            digits = "".join(d * 2 for d in digits)
        return (int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16))
    red, green, blue = (int(part) for part in re.findall(r"\d+", colour)[:3])
    return (red, green, blue)
