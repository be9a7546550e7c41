"""A user's stop of a server that cannot answer: the hub does not wait out the whole hibernation bound.

The server is a real listening socket that never answers (a hung notebook server: the connection is
accepted by the kernel, and nothing comes back), and another whose port refuses connections (its
process gone). The hub asks the usage document first, with ``hibernate_on_stop_answer_timeout``; without
an answer the stop goes on at once, and the record says plainly that nothing could be saved.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.config.traits import configured_traits
from fracnb_spawner.form.stopnotice import StoppedNotice
from fracnb_spawner.hibernation.userstop import hibernate_before_user_stop, may_hold_kernels
from fracnb_spawner.history.hubstopnotices import HubStops, record_user_stop
from fracnb_spawner.hubstate import HubState

ANSWER_TIMEOUT = 1.0
HIBERNATION_TIMEOUT = 120  # what the stop would wait for without the first short request


@pytest.fixture
def hung_server() -> Iterator[str]:
    """The base URL of a server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # never accepted: connections wait in the backlog, unanswered
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/user/ann/"
    finally:
        listener.close()


@pytest.fixture
def gone_server() -> str:
    """The base URL of a server whose process is gone: its port refuses connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/user/ann/"


def stopping_spawner(url: str) -> Any:
    """The parts of a running GPU server's FractionalSpawner that a stop on request reads."""
    config = Config()
    config.FracnbService.hibernation_timeout = HIBERNATION_TIMEOUT
    return SimpleNamespace(
        spawn_plan=SimpleNamespace(fraction=0.25),
        server=SimpleNamespace(url=url),
        api_token="server-token",
        hibernate_on_stop=True,
        hibernate_on_stop_answer_timeout=ANSWER_TIMEOUT,
        config=config,
        log=logging.getLogger("fracnb-test-hub"),
        _log_name="ann",
        hub_state=HubState.current(),
        right_sizing_db_url="sqlite:////nonexistent/fracnb-service.sqlite",
        hub=SimpleNamespace(base_url="/hub/"),
        orm_spawner=SimpleNamespace(started=datetime.now(timezone.utc) - timedelta(hours=1)),
        user=SimpleNamespace(name="ann"),
        name="",
        active=False,
        ready=False,
        pending=None,
        _spawn_pending=False,
    )


@pytest.mark.parametrize("which", ["hung_server", "gone_server"])
def test_a_server_that_cannot_answer_is_stopped_without_waiting_out_the_save(
    which: str, request: pytest.FixtureRequest
) -> None:
    spawner = stopping_spawner(request.getfixturevalue(which))
    began = time.monotonic()
    hibernation = asyncio.run(hibernate_before_user_stop(spawner))
    waited = time.monotonic() - began
    assert hibernation is not None
    assert hibernation.report is None
    assert hibernation.problem == f"the server did not answer within {ANSWER_TIMEOUT:g} s"
    # Well under the hibernation's own bound (and under the 10 s the first request used to allow).
    assert waited < ANSWER_TIMEOUT + 5, f"the stop waited {waited:.1f} s for a server that cannot answer"


def test_the_stop_of_a_server_that_did_not_answer_says_nothing_was_saved(hung_server: str) -> None:
    HubState.current().stops = HubStops()
    spawner = stopping_spawner(hung_server)
    hibernation = asyncio.run(hibernate_before_user_stop(spawner))
    asyncio.run(record_user_stop(spawner, hibernation))
    user = SimpleNamespace(name="ann", escaped_name="ann", spawner=spawner, spawners={"": spawner})
    shown = str(StoppedNotice()(user))
    assert "Your server was stopped on request by you or an admin (at " in shown
    assert f"Variables not saved: the server did not answer within {ANSWER_TIMEOUT:g} s." in shown
    assert "Running kernels were shut down" in shown


def test_a_refused_connection_is_told_at_once_and_its_record_says_how_long_it_took(gone_server: str) -> None:
    hibernation = asyncio.run(hibernate_before_user_stop(stopping_spawner(gone_server)))
    assert hibernation is not None
    assert hibernation.report is None
    assert hibernation.seconds < ANSWER_TIMEOUT / 2, "a refused connection was recorded as the whole bound"


RUNNING = {"status": {"phase": "Running", "podIP": "10.0.0.7"}}


@pytest.mark.parametrize(
    ("pod", "asked"),
    [
        (RUNNING, True),
        (None, True),  # not watched yet: asked, the first request is bounded
        ({"spec": {"schedulingGates": [{"name": "fracnb.io/queue"}]}, "status": {"phase": "Pending"}}, False),
        ({"status": {"phase": "Pending", "podIP": "10.0.0.7"}}, False),  # starting: no kernels yet
        ({"status": {"phase": "Running"}}, False),  # no address of its own
        ({"status": {"phase": "Succeeded", "podIP": "10.0.0.7"}}, False),
    ],
)
def test_only_a_running_pod_with_an_address_is_asked_to_save(pod: dict | None, asked: bool) -> None:
    assert may_hold_kernels(pod) is asked


@pytest.mark.parametrize("value", [0, 0.1, 61])
def test_an_answer_timeout_out_of_bounds_is_refused_naming_the_key(value: float) -> None:
    config = Config()
    config.FractionalSpawner.hibernate_on_stop_answer_timeout = value
    with pytest.raises(
        TraitError, match=r"FractionalSpawner\.hibernate_on_stop_answer_timeout: .* between 0\.5 and 60"
    ):
        configured_traits(config)
