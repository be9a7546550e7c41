"""The spawn form's free-text field in Chromium: its ``pattern`` checks what the server checks.

Browsers compile ``pattern`` with the ``v`` flag; a Python regex copied as is may be an error
there and silently check nothing. The form is rendered by the real template and each value is
typed into the real field; Chromium's verdict must equal Python's ``re.fullmatch``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

from fracnb_spawner.config.profiles import initialize_profiles
from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.form import rows as form

pytestmark = pytest.mark.browser

# validation_regex -> values to type (non-empty: browsers don't check an empty field)
SAMPLES = {
    "[a-z-]+": ["abc-def", "ABC", "a b", "-"],
    r"^registry\.example\.org/[a-z0-9/-]+:[a-z0-9.]+": ["registry.example.org/team/nb:1.2", "registryXexample.org/a:1"],
    r"(?P<x>a)(?P=x)\d\w*": ["aa1x", "aa\u0661\u00e9", "ab1"],
    r"[^\W\d]+": ["abc", "a1", "\u00e9t\u00e9", "a_b"],
    r"\Aab\Z": ["ab", "abc"],
    r"(?:x|y)(?=z)z": ["xz", "yz", "zz"],
    r"[\w.-]{1,8}": ["a.b-c", "a/b", "\u00fc", "123456789"],
    r"\s*\S+": [" x", "  ", "x y"],
    r"[\]\[]+": ["][", "a"],
    r"[&]{2}x|!!|[(){}/|]+": ["&&x", "!!", "x", "(){}/|"],
    r"(?<!a)b|ab": ["b", "ab", "cb"],
    r"\d{3}-\d{4}": ["555-1234", "5551234"],
    r"[^/]+": ["a b", "a/b"],
    "\u00e9+$": ["\u00e9\u00e9", "e"],
    "(?i)abc": ["ABC", "x"],  # no exact v-flag form: no pattern, only the server checks
    r"\bword\b": ["word", "x"],
}


@pytest.fixture(scope="module")
def page(browser: Browser) -> Iterator[Page]:
    profiles = initialize_profiles(
        [
            {
                "display_name": f"Profile {index}",
                "slug": f"p{index}",
                "profile_options": {"text": {"unlisted_choice": {"enabled": True, "validation_regex": regex}}},
            }
            for index, regex in enumerate(SAMPLES)
        ]
    )
    html = form.render(profiles, form.describe(profiles, FractionalTraits().gpu_defaults()), {})
    context = browser.new_context()
    page = context.new_page()
    page.set_content(f"<!doctype html><meta charset='utf-8'><form>{html}</form>")
    yield page
    context.close()


@pytest.mark.parametrize(("index", "regex"), list(enumerate(SAMPLES)))
def test_browser_pattern_agrees_with_the_server(page: Page, index: int, regex: str) -> None:
    select = f"select[name='profile-option-p{index}--text']"
    field = page.locator(f"input[name='profile-option-p{index}--text--unlisted-choice']")
    assert page.locator(select + " option").all_inner_texts() == ["Other..."]
    page.select_option(select, "unlisted-choice")
    assert field.is_enabled()
    for value in SAMPLES[regex]:
        field.fill(value)
        browser_accepts = field.evaluate("input => input.checkValidity()")
        server_accepts = re.fullmatch(regex, value) is not None
        # Without a pattern the browser lets everything through and the server alone decides.
        expected = server_accepts if field.get_attribute("pattern") is not None else True
        assert browser_accepts == expected, (regex, value)


def test_every_translatable_pattern_is_present(page: Page) -> None:
    """Patterns are left out only where no exact form exists, never because the translation broke."""
    patterns = page.locator("input[data-fracnb-unlisted]").evaluate_all("inputs => inputs.map(i => i.pattern)")
    untranslatable = {"(?i)abc", r"\bword\b"}
    assert [bool(p) for p in patterns] == [regex not in untranslatable for regex in SAMPLES]
    # Chromium reports a pattern that does not compile as valid for every value; each one here compiles.
    compiled = page.evaluate(
        "patterns => patterns.filter(p => p).map(p => { try { new RegExp(p, 'v'); return true; }"
        " catch (e) { return false; } })",
        patterns,
    )
    assert all(compiled)
