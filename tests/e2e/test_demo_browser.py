"""The demo end to end in a real browser: log in, choose 0.25 GPU on the spawn form, use the
simulated GPU from a notebook cell and see the meter, and see the group's use as a second user."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from fracnb_schemas import USAGE, problems
from fracnb_testbed.demo import RunningDemo

from .pages import log_in, profile_row, run_cell, shot, start_profile

TEAM_USE = "Your GPU quota: 0 of 0.5 GPU in use · team-a (your team, together): 0.25 of 0.5 GPU in use"


def test_spawn_form_describes_every_choice(demo: RunningDemo, page: Page) -> None:
    log_in(page, demo, "carol")
    page.goto(f"{demo.settings.url}/hub/spawn")
    shot(page, "spawn-form")
    expect(profile_row(page, "cpu")).to_contain_text("CPU only, no GPU visible")
    quarter = profile_row(page, "quarter")
    expect(quarter).to_contain_text("0.25 GPU (time-slicing)")
    expect(quarter).to_contain_text("20 GiB GPU memory")
    expect(quarter).to_contain_text("not enforced")  # isolation: time-slicing shares memory
    expect(profile_row(page, "half")).to_contain_text("40 GiB GPU memory")


def test_spawn_form_shows_availability(demo: RunningDemo, page: Page) -> None:
    log_in(page, demo, "carol")
    page.goto(f"{demo.settings.url}/hub/spawn")
    # The local A100 is sliced 4 ways: at most 4 quarters are free.
    expect(profile_row(page, "quarter")).to_contain_text(re.compile(r"[0-4] free now"), timeout=5_000)


def test_quarter_gpu_notebook_meters_simulated_memory(demo: RunningDemo, page: Page) -> None:
    log_in(page, demo, "ann")
    start_profile(page, demo, "ann", "quarter")
    status = page.locator(".fracnb-meter-status-text")
    expect(status).to_contain_text(re.compile(r"GPU 0(\.0)? / 20 GiB"), timeout=30_000)
    shot(page, "lab-quarter-gpu")

    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    run_cell(page, 'import fracnb_meter.simulate as sim\nsim.allocate("6GiB")')
    # allocate() returns this kernel's simulated total, shown as a sentence rather than bytes.
    expect(page.locator(".jp-OutputArea-output").first).to_contain_text(
        "this kernel now uses 6 GiB of simulated GPU memory on GPU 0", timeout=60_000
    )
    expect(status).to_contain_text(re.compile(r"GPU 6(\.0)? / 20 GiB"), timeout=30_000)
    shot(page, "lab-simulated-6gib")

    # The notebook's server asks the hub's fracnb service for the user's quota with its own token.
    usage = page.request.get(f"{demo.settings.url}/user/ann/fracnb/api/usage").json()
    assert problems(USAGE, usage, check_formats=True) == []
    assert usage["budget"]["memory_bytes"] == 20 << 30
    team = {
        "name": "team-a",
        "used": {"gpus": 0.25, "exact": "1/4"},
        "limit": {"state": "limited", "gpus": 0.5, "exact": "1/2"},
    }
    assert team in usage["quota"]["groups"]
    assert usage["cull"]["idle_timeout_seconds"] == demo.settings.idle_timeout

    # The quota widget in the notebook: this kernel's memory and the group's quota, live.
    run_cell(page, "%load_ext fracnb_meter")
    widget = page.locator(".jp-OutputArea-output .widget-html-content", has_text="this kernel")
    expect(widget.first).to_contain_text("this kernel 6 GiB", timeout=60_000)
    quota = page.locator(".jp-OutputArea-output .widget-html-content", has_text="team-a")
    expect(quota.first).to_contain_text("team-a: 0.25 of 0.5 GPU", timeout=60_000)
    shot(page, "lab-quota-widget")


def test_second_user_sees_the_team_quota_and_no_impossible_choice(
    demo: RunningDemo, browser: Browser, page: Page
) -> None:
    ann = browser.new_context()
    try:
        ann_page = ann.new_page()
        log_in(ann_page, demo, "ann")
        start_profile(ann_page, demo, "ann", "quarter")  # team-a now holds 0.25 of its 0.5
    finally:
        ann.close()
    log_in(page, demo, "bob")
    page.goto(f"{demo.settings.url}/hub/spawn")
    expect(page.locator("[data-fracnb-quota]")).to_have_text(TEAM_USE)
    # The demo's cluster has no 2-way time-sliced node: "1/2 GPU" is greyed out, not offered to wait.
    half = profile_row(page, "half")
    expect(half).to_contain_text("no node in this cluster offers 0.5 GPU (time-slicing)")
    expect(half.locator("input[name=profile]")).to_be_disabled()
    shot(page, "spawn-form-team-quota")
    assert "/user/bob/" not in page.url
