"""A demo stack of a test module's own, and JSON requests to its hub and services."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fracnb_testbed import demo_kueue
from fracnb_testbed.demo import DEMO_USERS, DemoSettings, RunningDemo, free_port, prepare_fake_gpu, running_demo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.hubapi import token_request
from tests.websockets import connected


@contextmanager
def demo_with_fake_gpu(testbed: Testbed, state_dir: Path, **settings: Any) -> Iterator[RunningDemo]:
    """The demo stack in a namespace of its own on ``testbed``, its local pods seeing the simulated GPU.

    ``settings``: further :class:`DemoSettings` fields (``extra_config``, ``idle_timeout``, ...). With
    ``engine="kueue"`` (on the ``kueue`` cluster) the Kueue objects of the demo's users are created first, as
    the demo command does.
    """
    previous_env = testbed.runner_env()
    runner_env = {**prepare_fake_gpu(state_dir / "fakenvml"), **checkout_env()}
    testbed.set_runner_env({**previous_env, **runner_env})
    namespace = testbed.create_namespace()
    if settings.get("engine") == "kueue":
        demo_kueue.install_queues(testbed, settings.get("users", DEMO_USERS), namespace, lambda _message: None)
        settings.setdefault("kueue_visibility_url", demo_kueue.visibility_url(testbed.state))
    demo_settings = DemoSettings(
        state_dir=state_dir, kubeconfig=testbed.kubeconfig, namespace=namespace, port=free_port(), **settings
    )
    try:
        with running_demo(demo_settings, testbed=testbed) as running:
            running.runner_env = runner_env
            yield running
    finally:
        testbed.set_runner_env(previous_env)
        testbed.delete_namespace(namespace)


def checkout_env() -> dict[str, str]:
    """What makes the notebook pods run this checkout's meter and front end, as the hub runs its spawner: its
    sources first on ``PYTHONPATH`` and its built labextension on ``JUPYTER_PATH``, where they are set (the
    runner gives a pod only the runner env and the pod's own, as an image would)."""
    return {name: os.environ[name] for name in ("PYTHONPATH", "JUPYTER_PATH") if os.environ.get(name)}


def request(demo: RunningDemo, path: str, token: str, *, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer) of a request to the hub (``hub/api/...``) or a service (``services/...``)."""
    return token_request(f"{demo.settings.url}/{path}", token, method=method, body=body)


def answer_of(demo: RunningDemo, path: str, token: str, *, method: str = "GET", body: Any = None) -> Any:
    """The JSON answer of a request that must succeed."""
    status, answer = request(demo, path, token, method=method, body=body)
    assert status < 400, f"{method} {path}: {status} {answer}"
    return answer


def progress_until(
    demo: RunningDemo, user: str, token: str, wanted: Callable[[str], bool], timeout: float = 60
) -> list[str]:
    """The messages of the hub's progress API (``hub/api/users/<user>/server/progress``, an event stream) up to
    the first one ``wanted``; an AssertionError with those seen if none comes within ``timeout`` seconds or the
    spawn ends first."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    sent = urllib.request.Request(  # noqa: S310 - the demo's own http URL
        f"{demo.settings.url}/hub/api/users/{user}/server/progress", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(sent, timeout=timeout) as stream:  # noqa: S310
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data:"):
                seen.append(str(json.loads(line[len("data:") :]).get("message", "")))
                if wanted(seen[-1]):
                    return seen
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"{user}'s progress never said what was awaited; it said: {seen}")


def run_cell(demo: RunningDemo, user: str, kernel_id: str, code: str, token: str, *, timeout: float = 60) -> None:
    """Run ``code`` in a kernel of ``user``'s server as a notebook page does: an execute_request on the kernel's
    websocket, through the hub's proxy; an AssertionError unless the kernel answers ``ok`` within ``timeout``."""
    url = f"{demo.settings.url.replace('http', 'ws', 1)}/user/{user}/api/kernels/{kernel_id}/channels"
    msg_id = uuid.uuid4().hex
    request = {
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": user, "session": uuid.uuid4().hex,
                   "date": "", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }  # fmt: skip

    async def execute() -> dict[str, Any]:
        async with connected(url, token) as socket:
            await socket.write_message(json.dumps(request))
            while True:
                raw = await socket.read_message()
                assert raw is not None, "the kernel's websocket closed before the cell's reply"
                message = json.loads(raw)
                if message.get("parent_header", {}).get("msg_id") == msg_id and message["channel"] == "shell":
                    return message["content"]

    reply = asyncio.run(asyncio.wait_for(execute(), timeout))
    assert reply["status"] == "ok", reply
