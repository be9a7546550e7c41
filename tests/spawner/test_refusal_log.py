"""A refused spawn is one log line (INFO for what the request causes, WARNING for the cluster), and
the hub's own records about it go: its traceback with the form's "Failed to spawn" and its
"Error starting ...'s server" line; every other error keeps its traceback."""

from __future__ import annotations

import logging

import pytest
from tornado.log import access_log, app_log, gen_log

from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError, RefusedSpawnError
from fracnb_spawner.common.refusals import QuietRefusals, choice_words, is_expected, logged_refusals


@pytest.fixture
def hub_log(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    logger = logging.getLogger("fracnb-test-hub")
    caplog.set_level(logging.DEBUG, logger="fracnb-test-hub")
    yield logger
    for each in (logger, app_log, gen_log, access_log):  # the filter goes on tornado's loggers too
        each.filters = [f for f in each.filters if not isinstance(f, QuietRefusals)]


def spawn_with_form(log: logging.Logger, error: Exception, options: dict) -> None:
    """What JupyterHub's SpawnHandler does around FractionalSpawner.run_options_from_form."""
    try:
        with logged_refusals(log, "ann", "", options):
            raise error
    except Exception as caught:
        log.error("Failed to spawn single-user server with form", exc_info=True)
        log.error(f"Error starting ann's server: {caught}")


def test_an_over_quota_refusal_is_one_info_line(hub_log, caplog) -> None:
    refusal = InvalidRequestError(403, "Over GPU quota: you use 0.25 of your 0.25 GPU", reason="quota")
    spawn_with_form(hub_log, refusal, {"profile": "quarter"})
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.exc_info is None
    assert record.getMessage() == (
        "fracnb: refused a server for 'ann', choice 'quarter': Over GPU quota: you use 0.25 of your 0.25 GPU "
        "[403 quota]"
    )


def test_a_cluster_the_hub_cannot_read_is_a_warning_line(hub_log, caplog) -> None:
    refusal = RefusedSpawnError(503, "The hub cannot count GPU quotas right now", reason="cluster-unreadable")
    assert not is_expected(refusal)
    spawn_with_form(hub_log, refusal, {"profile": "half", "size": "x\ny"})
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "choice 'half' (size='x\\ny')" in record.getMessage()


@pytest.mark.parametrize("error", [HubConfigError("profile_list is broken"), RuntimeError("a bug")])
def test_unexpected_errors_keep_their_traceback(hub_log, caplog, error: Exception) -> None:
    spawn_with_form(hub_log, error, {"profile": "quarter"})
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
    assert caplog.records[0].exc_info is not None


def test_a_refusal_logged_inside_another_block_is_logged_once(hub_log, caplog) -> None:
    refusal = RefusedSpawnError(503, "No 0.25 GPU became free within 10 min", reason="queue-timeout")
    outer = logged_refusals(hub_log, "bob", "gpu", {"profile": "quarter"})
    inner = logged_refusals(hub_log, "bob", "gpu", {"profile": "quarter"})
    with pytest.raises(RefusedSpawnError), outer, inner:  # load_user_options within _start
        raise refusal
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "for 'bob' (server 'gpu'), choice 'quarter'" in record.getMessage()


def test_choice_words() -> None:
    assert choice_words({}) == "the default choice"
    assert choice_words({"profile": "quarter"}) == "'quarter'"
    assert choice_words({"profile": "shared", "size": "half"}) == "'shared' (size='half')"


def test_tornado_and_jupyterhub_lines_quoting_the_refusal_go(hub_log, caplog) -> None:
    refusal = InvalidRequestError(400, "Invalid server options: unknown option(s) 'size'", reason="invalid-options")
    with pytest.raises(InvalidRequestError), logged_refusals(hub_log, "bob", "", {"profile": "quarter"}):
        raise refusal
    app_log.error(f"Not starting bob's server : {refusal}")
    gen_log.warning("400 POST /hub/api/users/bob/server (127.0.0.1): %s", refusal.jupyterhub_message)
    gen_log.warning("400 POST /hub/api/users/bob/server (127.0.0.1): something else")
    assert [r.getMessage()[:24] for r in caplog.records] == ["fracnb: refused a server", "400 POST /hub/api/users/"]
