"""Culls and hibernations reach the log: the service's own (an INFO line each, by default) and the hub's
(fracnb's loggers write through the hub log's handlers)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from fracnb_spawner.common.logsafe import join_hub_log
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import outcome_text
from fracnb_spawner.service.app import FracnbService


@pytest.fixture
def fracnb_logger() -> Iterator[logging.Logger]:
    """The ``fracnb`` logger, put back as it was after the test."""
    logger = logging.getLogger("fracnb")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield logger
    logger.handlers, logger.propagate = handlers, propagate
    logger.setLevel(level)


def test_the_service_logs_a_cull_at_its_default_level(fracnb_logger, capsys) -> None:
    service = FracnbService()
    service._configure_logging()
    logging.getLogger("fracnb.service").info("Culled server %r of %r (%s, HTTP %s)", "", "ann", "idle", 202)
    assert "Culled server '' of 'ann' (idle, HTTP 202)" in capsys.readouterr().err
    assert service.log_level == logging.INFO


def test_the_hub_log_gets_fracnbs_info_lines(fracnb_logger) -> None:
    written = io.StringIO()
    hub_log = logging.getLogger("fracnb-test-hub-app")
    hub_log.handlers = [logging.StreamHandler(written)]
    hub_log.setLevel(logging.INFO)
    hub_log.propagate = False
    join_hub_log(logging.LoggerAdapter(hub_log, {}))
    logging.getLogger("fracnb.queue").info("a place in the queue")
    logging.getLogger("fracnb.queue").debug("below the hub's level")
    assert written.getvalue() == "a place in the queue\n"


def test_a_log_without_handlers_changes_nothing(fracnb_logger) -> None:
    before = (list(fracnb_logger.handlers), fracnb_logger.propagate)
    silent = logging.getLogger("fracnb-test-silent")
    silent.handlers = [logging.NullHandler()]
    silent.propagate = False
    join_hub_log(silent)
    join_hub_log(logging.getLogger("fracnb-test-child.of.root"))  # reaches the root logger: fracnb does already
    assert (list(fracnb_logger.handlers), fracnb_logger.propagate) == before


def test_a_failed_hibernation_says_why_in_the_log() -> None:
    hung = Hibernation(None, "the server gave no answer within 135 s", 135.0)
    assert outcome_text(hung) == "failed: the server gave no answer within 135 s"
    off = Hibernation(None, "hibernation is turned off on this server", 0.1, turned_off=True)
    assert outcome_text(off) == "hibernation is turned off on this server"
    nothing = Hibernation({"saved_bytes": 0, "kernels": []}, None, 0.2)
    assert outcome_text(nothing) == "nothing to save"
