"""A test's websocket to a real server, opened and closed completely inside one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

CLOSE_WAIT_S = 10.0


@asynccontextmanager
async def connected(url: str, token: str) -> AsyncIterator[WebSocketClientConnection]:
    """A websocket to ``url`` with ``token``. On the way out it is closed and the server's close awaited: a
    socket left for tornado to close after the test's event loop ended is an unclosed socket that the garbage
    collector reports during some later test."""
    socket = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    try:
        yield socket
    finally:
        socket.close()
        with suppress(asyncio.TimeoutError):  # tornado aborts the connection itself after its own close timeout
            await asyncio.wait_for(_drained(socket), CLOSE_WAIT_S)


async def _drained(socket: WebSocketClientConnection) -> None:
    while await socket.read_message() is not None:
        pass  # messages already on their way; None once the server's close frame is in
