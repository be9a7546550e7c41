"""Helpers for the meter tests."""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_client.blocking import BlockingKernelClient

from fracnb_meter.testing.server import MeterServer
from fracnb_testbed.procs import wait_until

GIB = 1 << 30
# The FRACNB_* contract of a quarter of an A100 by time-slicing with a 20 GiB budget, as the spawner sets it.
QUARTER_CONTRACT = {
    "FRACNB_GPU_FRACTION": "0.25",
    "FRACNB_GPU_MEMORY_LIMIT": str(20 * GIB),
    "FRACNB_ISOLATION": "none",
    "FRACNB_GPU_BACKEND": "time-slicing",
    "FRACNB_PROFILE": "quarter",
}


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


def wait_for_execution_state(server: MeterServer, kernel_id: str, state: str, timeout: float = 30) -> None:
    """Wait until the server itself sees the kernel as ``state`` ("busy" or "idle"): a client gets the kernel's
    reply before the server has read its status from IOPub."""

    def reached() -> bool:
        status, model = server.request(f"api/kernels/{kernel_id}")
        return status == 200 and model["execution_state"] == state

    wait_until(reached, what=f"kernel {kernel_id} to be {state}", timeout=timeout, interval=0.05)
