"""A demo stack of a test module's own, and JSON requests to its hub and services."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fracnb_testbed.demo import DemoSettings, RunningDemo, free_port, prepare_fake_gpu, running_demo
from fracnb_testbed.handle import Testbed


@contextmanager
def demo_with_fake_gpu(testbed: Testbed, state_dir: Path, **settings: Any) -> Iterator[RunningDemo]:
    """The demo stack in a namespace of its own on ``testbed``, its local pods seeing the simulated GPU.

    ``settings``: further :class:`DemoSettings` fields (``extra_config``, ``idle_timeout``, ...).
    """
    previous_env = testbed.runner_env()
    runner_env = prepare_fake_gpu(state_dir / "fakenvml")
    testbed.set_runner_env({**previous_env, **runner_env})
    namespace = testbed.create_namespace()
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


def request(demo: RunningDemo, path: str, token: str, *, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer) of a request to the hub (``hub/api/...``) or a service (``services/...``)."""
    sent = urllib.request.Request(  # noqa: S310 - the demo's own http URL
        f"{demo.settings.url}/{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(sent, timeout=30) as answer:  # noqa: S310
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


def answer_of(demo: RunningDemo, path: str, token: str, *, method: str = "GET", body: Any = None) -> Any:
    """The JSON answer of a request that must succeed."""
    status, answer = request(demo, path, token, method=method, body=body)
    assert status < 400, f"{method} {path}: {status} {answer}"
    return answer
