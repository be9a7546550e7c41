"""The spawn form: every choice's share, budget and isolation, all of it HTML-escaped."""

from __future__ import annotations

import re

import pytest
from traitlets.config import Config

from fracnb_spawner.form.jspattern import html_pattern

HOSTILE_NAME = '<script>alert("x")</script>'


async def test_form_describes_every_choice_escaped(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "CPU", "slug": "cpu", "description": "<b>plain</b>"},
        {
            "display_name": HOSTILE_NAME,
            "slug": "shared",
            "profile_options": {
                "size": {
                    "display_name": "Size",
                    "choices": {
                        "eighth": {"display_name": "1/8 <i>GPU</i>", "gpu": {"fraction": "1/8"}},
                        "mig": {"display_name": "MIG", "gpu": {"backend": "mig", "mig_profile": "1g.10gb"}},
                        "hami": {"display_name": "HAMi", "gpu": {"fraction": 0.5, "backend": "hami"}},
                    },
                }
            },
        },
    ]
    config.FractionalSpawner.show_availability = False
    html = await make_spawner(config).render_options_form()
    assert HOSTILE_NAME not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "<b>plain</b>" not in html
    assert "1/8 &lt;i&gt;GPU&lt;/i&gt;" in html
    assert "0.125 GPU (time-slicing), 10 GiB GPU memory, not enforced (shared, soft caps only)" in html
    assert "1g.10gb MIG slice, 10 GiB GPU memory, hard limit (hardware partition)" in html
    assert "0.5 GPU (hami), 40 GiB GPU memory, enforced by HAMi" in html
    assert "CPU only, no GPU visible" in html
    # KubeSpawner's field names, so its form parsing keeps working.
    assert 'name="profile-option-shared--size"' in html
    assert re.search(r'<input type="radio" name="profile" value="cpu"\s+checked', html)


FREE_TEXT_OPTION = {
    "display_name": "Free",
    "slug": "free",
    "profile_options": {
        "image": {
            "display_name": "Image",
            "choices": {"base": {"display_name": "Base"}},
            "unlisted_choice": {"enabled": True, "validation_regex": "[a-z-]+"},
        },
        "other": {
            "unlisted_choice": {"enabled": True, "display_name_in_choices": "Type one", "validation_regex": "(?i)x"}
        },
    },
}


async def test_free_text_entry_is_labelled_and_its_pattern_is_browser_syntax(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [FREE_TEXT_OPTION]
    config.FractionalSpawner.show_availability = False
    html = await make_spawner(config).render_options_form()
    assert '<option value="unlisted-choice">Other...</option>' in html  # KubeSpawner's label
    assert '<option value="unlisted-choice">Type one</option>' in html
    # [a-z-] is an error under the v flag browsers use; the translation is not
    assert 'pattern="(?:[a-z\\u{2d}]){1,}"' in html
    assert html.count("pattern=") == 1  # (?i) has no exact v-flag form: no pattern, the server checks


@pytest.mark.parametrize(
    ("regex", "pattern"),
    [
        ("[a-z-]+", r"(?:[a-z\u{2d}]){1,}"),
        (r"^registry\.example\.org/[a-z0-9]+", r"^registry\u{2e}example\u{2e}org\u{2f}(?:[a-z0-9]){1,}"),
        (r"(?P<x>a)(?P=x)", r"(a)(?:\1)"),
        (r"\d{3}\w?", r"(?:[\p{Nd}]){3}(?:[[\p{L}\p{N}_]]){0,1}"),
        (r"[^\W\d]", r"[^[^\p{L}\p{N}_]\p{Nd}]"),
        (r"\Aab\Z", "^ab$"),
        (r"a{2,3}?(?=b)(?<!c)b", r"(?:a){2,3}?(?=b)(?<!c)b"),
        ("x|yz", "(?:x|yz)"),
        (".", "."),
        ("é", r"\u{e9}"),
    ],
)
def test_html_pattern_translates(regex: str, pattern: str) -> None:
    assert html_pattern(regex) == pattern


@pytest.mark.parametrize(
    "regex", [None, "", "(?i)abc", "(?i:a)b", r"\bword", "a++", "(?>a)", "(a)?(?(1)b|c)", "[", "x" * 1001]
)
def test_html_pattern_gives_up_where_no_exact_form_exists(regex: str | None) -> None:
    assert html_pattern(regex) is None
