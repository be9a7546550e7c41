"""Culls and hibernations reach the log: the service's own (an INFO line each, by default) and the hub's
(fracnb's loggers write through the hub log's handlers)."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from fracnb_spawner.common.logsafe import join_hub_log, server_shown
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import outcome_text
from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.cullpass import PassReport
from fracnb_spawner.service.loops import pass_summary


@pytest.fixture
def fracnb_logger() -> Iterator[logging.Logger]:
    """The ``fracnb`` logger, put back as it was after the test."""
    logger = logging.getLogger("fracnb")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield logger
    logger.handlers, logger.propagate = handlers, propagate
    logger.setLevel(level)


def test_the_service_logs_a_cull_at_its_default_level_with_its_time(fracnb_logger, capsys) -> None:
    """Its lines reach the hub log among the hub's own: with their time, as the hub writes its lines."""
    service = FracnbService()
    service._configure_logging()
    logging.getLogger("fracnb.service").info("Culled %s (%s, HTTP %s)", server_shown("ann", ""), "idle", 202)
    written = capsys.readouterr().err
    assert "Culled the default server of 'ann' (idle, HTTP 202)" in written
    assert re.search(
        r"^\[I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} fracnb\.service test_service_log:\d+\] Culled", written, re.M
    )
    assert service.log_level == logging.INFO


def test_the_log_names_the_default_server_and_whom_a_pass_warned() -> None:
    assert server_shown("ann", "") == "the default server of 'ann'"
    assert server_shown("ann", "gpu") == "server 'gpu' of 'ann'"
    report = PassReport(servers=3, warned=1, warned_servers=[server_shown("bob", "")], culled=[("ann", "", "idle")])
    assert pass_summary(report) == (
        "Culling pass: 3 servers, 1 warned of its coming stop (the default server of 'bob'), 1 culled in 0.00s"
    )
    assert pass_summary(PassReport(servers=2)) == "Culling pass: 2 servers, 0 warned, 0 culled in 0.00s"


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
