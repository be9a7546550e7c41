"""Helpers for the meter tests."""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_client.blocking import BlockingKernelClient

GIB = 1 << 30


@dataclass
class Kernel:
    id: str
    pid: int
    client: BlockingKernelClient


def evaluate(client: BlockingKernelClient, expression: str, setup: str = "") -> str:
    """Run ``setup`` in the kernel and return repr(expression) as the kernel printed it."""
    reply = client.execute_interactive(
        setup, user_expressions={"value": expression}, timeout=60, output_hook=lambda _msg: None
    )
    content = reply["content"]
    assert content["status"] == "ok", content
    result = content["user_expressions"]["value"]
    assert result["status"] == "ok", result
    return result["data"]["text/plain"]
