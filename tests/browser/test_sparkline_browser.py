"""The GPU memory charts (sparklines) in a real JupyterLab: the panel's, per kernel and for the
server, follow the simulated memory, mark the peak and the budget, and survive a reload; the
notebook widget draws the same chart."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.meter_lab import BUDGET_BYTES, GIB, FakeGpu, LabServer
from tests.e2e.pages import run_cell

pytestmark = pytest.mark.browser

NOTEBOOK = "chart.ipynb"
UPDATE_TIMEOUT_MS = 20_000
STATUS = ".fracnb-meter-status"
PANEL = "#fracnb-meter-panel"
CHART_HEIGHT = 40
TOP_SHARE = 0.9  # src/sparkline.ts: the higher of budget and peak at 90 % of the height


@pytest.fixture(scope="module")
def kernel(lab_server: LabServer) -> Iterator[tuple[str, int]]:
    session = lab_server.start_notebook(NOTEBOOK)
    kernel_id = session["kernel"]["id"]
    yield kernel_id, lab_server.kernel_pid(kernel_id)
    lab_server.api("DELETE", f"api/sessions/{session['id']}")


@pytest.fixture(scope="module")
def page(browser: Browser, lab_server: LabServer, kernel: tuple[str, int]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    page.goto(f"{lab_server.url}lab?reset&token={lab_server.token}")
    expect(page.locator(STATUS)).to_be_visible(timeout=60_000)
    yield page
    context.close()
    assert not uncaught, f"uncaught errors in the page: {uncaught}"


def open_panel(page: Page) -> Locator:
    panel = page.locator(PANEL)
    if not panel.is_visible():
        page.locator(STATUS).click()
    expect(panel).to_be_visible()
    return panel


def set_memory(fake_gpu: FakeGpu, pid: int, gib: float) -> None:
    fake_gpu.heal()
    fake_gpu.set_kernel_memory(pid, int(gib * GIB))


def y_of(gib: float, top_gib: float) -> float:
    return round(CHART_HEIGHT * (1 - gib / top_gib), 1)


def vertices(chart: Locator) -> list[tuple[float, float]]:
    return drawn(chart)[0]


def drawn(chart: Locator) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """The line's vertices and the peak dot, read from one rendering (each poll redraws the chart,
    and the x of every point moves as the session's span grows)."""
    points, cx, cy = chart.evaluate(
        """svg => {
            const peak = svg.querySelector(".fracnb-sparkline-peak");
            return [svg.querySelector(".fracnb-sparkline-line").getAttribute("points") || "",
                    peak ? peak.getAttribute("cx") : "nan", peak ? peak.getAttribute("cy") : "nan"];
        }"""
    )
    line = [(float(x), float(y)) for x, y in (pair.split(",") for pair in points.split())]
    return line, (float(cx), float(cy))


def expect_words(chart: Locator, pattern: str) -> None:
    expect(chart.locator("title")).to_have_text(re.compile(pattern), timeout=UPDATE_TIMEOUT_MS)


def test_the_kernels_chart_follows_memory_up_and_down_with_peak_and_budget(
    page: Page, fake_gpu: FakeGpu, kernel: tuple[str, int], artifacts: Path
) -> None:
    kernel_id, pid = kernel
    panel = open_panel(page)
    chart = panel.locator(f'[data-kernel-id="{kernel_id}"] svg.fracnb-sparkline')
    top = BUDGET_BYTES / GIB / TOP_SHARE  # the budget (20 GiB) stays above every reading here

    set_memory(fake_gpu, pid, 4)
    expect_words(chart, rf"^GPU memory of {re.escape(NOTEBOOK)} over the last .*: now 4 GiB; peak 4 GiB")
    set_memory(fake_gpu, pid, 12)
    expect_words(chart, r": now 12 GiB; peak 12 GiB, now; budget 20 GiB\.$")
    line, peak = drawn(chart)
    assert peak[1] == y_of(12, top)
    assert peak in line
    assert line[-1][1] == peak[1]  # the line ends at the peak's height (a later reading may repeat it)

    set_memory(fake_gpu, pid, 3)
    expect_words(chart, r": now 3 GiB; peak 12 GiB, .*; budget 20 GiB\.$")
    line, peak = drawn(chart)
    assert line[-1][1] == y_of(3, top)  # the line fell with the memory
    assert peak[1] == y_of(12, top)  # the peak stayed where it was
    assert peak in line
    assert min(y for _, y in line) == peak[1]  # nothing on the line is above the peak
    assert [x for x, _ in line] == sorted(x for x, _ in line)
    budget = chart.locator(".fracnb-sparkline-budget")
    expect(budget).to_have_attribute("y1", f"{y_of(20, top):g}")
    expect(chart).to_have_attribute("role", "img")
    assert chart.get_attribute("aria-label") == chart.locator("title").text_content()

    server = panel.locator('svg.fracnb-sparkline[data-series="server"]')
    expect_words(server, r"^GPU memory of this server over the last .*; budget 20 GiB\.$")
    expect(server.locator(".fracnb-sparkline-budget")).to_have_count(1)
    expect(server.locator(".fracnb-sparkline-peak")).to_have_count(1)
    panel.screenshot(path=artifacts / "lab-panel-charts.png")


def test_the_charts_survive_reloading_the_page(
    page: Page, lab_server: LabServer, fake_gpu: FakeGpu, kernel: tuple[str, int]
) -> None:
    kernel_id, pid = kernel
    set_memory(fake_gpu, pid, 2)
    expected = lab_server.usage()["history"]
    kept = next(k for k in expected["kernels"] if k["id"] == kernel_id)["series"]
    assert kept["peak"]["bytes"] >= 12 * GIB  # the previous test's peak, kept by the server

    page.reload()
    panel = open_panel(page)
    chart = panel.locator(f'[data-kernel-id="{kernel_id}"] svg.fracnb-sparkline')
    # The first chart after the reload already shows the session so far, not one reading.
    expect_words(chart, rf": now 2 GiB; peak {kept['peak']['bytes'] / GIB:g} GiB, ")
    # (Not as many points as before: a longer session may have merged buckets since.)
    assert len(kept["points"]) > 1
    assert len(vertices(chart)) > 1


def test_the_widget_draws_the_same_chart(
    browser: Browser, lab_server: LabServer, fake_gpu: FakeGpu, artifacts: Path
) -> None:
    notebook = "widget-chart.ipynb"
    session = lab_server.start_notebook(notebook)
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    try:
        pid = lab_server.kernel_pid(session["kernel"]["id"])
        set_memory(fake_gpu, pid, 5)
        page = context.new_page()
        page.goto(f"{lab_server.url}lab/tree/{notebook}?reset&token={lab_server.token}")
        run_cell(page, "from fracnb_meter.widget import show; meter = show(interval=0.5)")
        kernel_chart = page.locator(".jp-OutputArea-output svg.fracnb-sparkline", has_text="this kernel")
        expect_words(kernel_chart, r"^GPU memory of this kernel over the last .*: now 5 GiB; peak 5 GiB")
        set_memory(fake_gpu, pid, 9)
        expect_words(kernel_chart, r": now 9 GiB; peak 9 GiB, now; budget 20 GiB\.$")
        set_memory(fake_gpu, pid, 1)
        expect_words(kernel_chart, r": now 1 GiB; peak 9 GiB, ")
        expect(kernel_chart.locator(".fracnb-sparkline-budget")).to_have_count(1)
        line, peak = drawn(kernel_chart)
        assert peak in line
        server_chart = page.locator(".jp-OutputArea-output svg.fracnb-sparkline", has_text="this server")
        expect(server_chart).to_have_count(1)
        page.locator(".jp-OutputArea-output").first.screenshot(path=artifacts / "widget-charts.png")
    finally:
        context.close()
        fake_gpu.processes.pop(pid, None)
        fake_gpu.write()
        lab_server.api("DELETE", f"api/sessions/{session['id']}")


def test_a_new_kernel_for_the_same_notebook_goes_on_with_its_chart_and_says_so(
    page: Page, lab_server: LabServer, fake_gpu: FakeGpu
) -> None:
    notebook = "carry-chart.ipynb"
    first = lab_server.start_notebook(notebook)
    first_pid = lab_server.kernel_pid(first["kernel"]["id"])
    panel = open_panel(page)
    set_memory(fake_gpu, first_pid, 7)
    first_chart = panel.locator(f'[data-kernel-id="{first["kernel"]["id"]}"] svg.fracnb-sparkline')
    expect_words(first_chart, r": now 7 GiB; peak 7 GiB")
    expect(first_chart.locator("title")).not_to_contain_text("previous kernel")
    lab_server.api("DELETE", f"api/sessions/{first['id']}")
    fake_gpu.processes.pop(first_pid, None)

    second = lab_server.start_notebook(notebook)
    second_pid = lab_server.kernel_pid(second["kernel"]["id"])
    try:
        set_memory(fake_gpu, second_pid, 1)
        chart = panel.locator(f'[data-kernel-id="{second["kernel"]["id"]}"] svg.fracnb-sparkline')
        expect_words(chart, r": now 1 GiB; peak 7 GiB, .* It goes on from this notebook's previous kernel\.$")
    finally:
        fake_gpu.processes.pop(second_pid, None)
        fake_gpu.write()
        lab_server.api("DELETE", f"api/sessions/{second['id']}")
