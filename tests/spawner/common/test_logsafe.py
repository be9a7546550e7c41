"""Log lines users cannot forge: user text is shown escaped, and the service's handler escapes the rest."""

from __future__ import annotations

import io
import logging

import pytest

from fracnb_spawner.common.logsafe import EscapeControlCharacters, escape_controls, shown

HOSTILE = [
    "bob\n[I 2024-01-01 00:00:00.000 JupyterHub app:1] fake: admin logged in",
    "bob\r[I fake]",
    "bob\x1b[2Kfake",
    "bob\u2028fake",
    "bob\x85fake",
    "bob\u202efake",
    "bob\tfake",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_escaped_text_is_one_printable_line(text: str) -> None:
    for safe in (escape_controls(text), shown(text)):
        assert safe.isprintable(), safe
        assert "fake" in safe


def test_printable_text_is_left_alone() -> None:
    assert escape_controls("Zoë's server (1/4 GPU)") == "Zoë's server (1/4 GPU)"
    assert shown("Zoë") == "'Zoë'"


def test_shown_is_cut_to_its_limit() -> None:
    assert len(shown("x" * 1000, limit=50)) == 50


def test_the_handler_filter_escapes_messages_but_keeps_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(EscapeControlCharacters())
    logger = logging.getLogger("fracnb.test.logsafe")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("403 GET /api/users/%s", "x\nFORGED line")
        logger.warning("no %s placeholders %d", "args", 5)
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed for %s", "y\rz")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "403 GET /api/users/x\\nFORGED line"
    assert lines[1] == "no args placeholders 5"
    assert lines[2] == "failed for y\\rz"
    assert lines[3] == "Traceback (most recent call last):"
    assert not any(line.startswith("FORGED") for line in lines)


PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {
        "display_name": "Custom",
        "slug": "custom",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {"base": {"display_name": "Base", "kubespawner_override": {"image": "base:1"}}},
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Image",
                    "validation_regex": "^[a-z0-9./:-]+$",
                    "kubespawner_override": {"image": "{value}"},
                },
            },
        },
    },
]

FORGED = "x\n[W 2024-01-01 00:00:00.000 JupyterHub app:1] FORGED"
FORGED_OPTIONS = [
    {"profile": FORGED},
    {"profile": "custom", "image": FORGED},
    {"profile": "custom", "image--unlisted-choice": FORGED},
    {"profile": "custom", FORGED: "base"},
    {"profile": "cpu", "image": "base", FORGED + "--unlisted-choice": "x"},
    {"profile": [FORGED]},
]


@pytest.mark.parametrize("options", FORGED_OPTIONS)
async def test_refusals_show_user_text_escaped(make_spawner, options: dict) -> None:
    """The hub logs a refused spawn's message: user text in it must not start a new log line."""
    from tornado import web
    from traitlets.config import Config

    config = Config()
    config.FractionalSpawner.profile_list = PROFILES
    spawner = make_spawner(config, options)
    with pytest.raises(web.HTTPError) as refused:
        await spawner.load_user_options()
    assert 400 <= refused.value.status_code < 500
    message = getattr(refused.value, "message", None) or refused.value.log_message
    assert "FORGED" in message  # shown, escaped: the user sees what was refused
    assert message.isprintable(), message
