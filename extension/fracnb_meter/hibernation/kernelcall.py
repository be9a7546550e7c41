"""One silent call into a kernel, from the Jupyter server: the I/O under :mod:`.hibernator`.

The request is an ``execute_request`` with an empty cell, ``silent=True`` (no execution count, no
output in the notebook, nothing in the history), ``stop_on_error=False`` (a failure cannot abort
cells the user queued after it) and one user expression. The server opens a shell channel of its
own, so the reply reaches only this call. It never unpickles anything: the expression's value is
the repr of a JSON string, read with ``ast.literal_eval`` and ``json.loads``.
"""

from __future__ import annotations

import ast
import json
import queue
import time
from typing import Any

from .kernelside import call_expression

EXPRESSION = "fracnb"


class KernelCallError(Exception):
    """The call did not give an answer: the reason says why (timed out, an error in the kernel)."""


async def call_in_kernel(kernel: Any, function: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``fracnb_meter.hibernation.kernelside.<function>(arguments)`` silently in ``kernel``."""
    client = kernel.client()
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)  # noqa: S604 - a channel
    try:
        request_id = client.execute(
            "",
            silent=True,
            store_history=False,
            user_expressions={EXPRESSION: call_expression(function, arguments)},
            allow_stdin=False,
            stop_on_error=False,
        )
        reply = await _reply_to(client, request_id, timeout)
    finally:
        client.stop_channels()
    return _answer(reply)


async def _reply_to(client: Any, request_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KernelCallError("no answer within the time limit")
        try:
            message = await client.get_shell_msg(timeout=remaining)
        except queue.Empty:
            raise KernelCallError("no answer within the time limit") from None
        if (message.get("parent_header") or {}).get("msg_id") == request_id:
            return message


def _answer(reply: dict[str, Any]) -> dict[str, Any]:
    content = reply.get("content") or {}
    if content.get("status") != "ok":
        raise KernelCallError(f"the kernel answered {content.get('status')!r}: {content.get('evalue', '')}")
    result = (content.get("user_expressions") or {}).get(EXPRESSION) or {}
    if result.get("status") != "ok":
        name, value = result.get("ename", "Error"), result.get("evalue", "")
        if name in ("ModuleNotFoundError", "ImportError") and "fracnb_meter" in value:
            raise KernelCallError("fracnb_meter is not installed in this kernel's Python environment")
        raise KernelCallError(f"{name}: {value}")
    text = (result.get("data") or {}).get("text/plain", "")
    try:
        document = json.loads(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError) as error:
        raise KernelCallError(f"the kernel's answer is not a JSON string: {error}") from None
    if not isinstance(document, dict):
        raise KernelCallError("the kernel's answer is not a JSON object")
    return document
