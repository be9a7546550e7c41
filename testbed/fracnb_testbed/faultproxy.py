"""A proxy in front of the testbed's kube-apiserver that fails or stalls the requests a test picks.

Clients talk plain HTTP to the proxy (its own kubeconfig, :attr:`FaultProxy.kubeconfig`); the proxy
forwards each request to the apiserver over TLS with the testbed's admin certificate and streams
the answer back (watches included), unless a rule matches the request:

- ``fail``: answer with an error status and a Kubernetes ``Status`` body; the apiserver never sees it;
- ``stall``: forward the request (the apiserver acts on it) but hold the answer back for a while, as
  a slow or overloaded apiserver does; a client whose timeout is shorter never learns the outcome.

The proxy runs its own event loop in a thread, so blocking tests and asyncio tests can both use it::

    with FaultProxy(testbed.state) as proxy:
        proxy.fail("POST", r"/pods$", status=500)
        ...  # clients configured with proxy.kubeconfig
"""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from fracnb_testbed.state import TestbedState

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


@dataclass
class Rule:
    method: str
    path: re.Pattern[str]
    status: int = 0  # fail with this status
    stall: float = 0.0  # or hold the answer back this many seconds
    times: int | None = None  # how many requests it applies to (None: all)
    matched: int = 0

    def applies(self, method: str, path: str) -> bool:
        if self.times is not None and self.matched >= self.times:
            return False
        return method == self.method and bool(self.path.search(path))


@dataclass
class FaultProxy:
    state: TestbedState
    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, status answered
    port: int = 0

    # ---- rules -----------------------------------------------------------------------------------

    def fail(self, method: str, path: str, *, status: int = 500, times: int | None = None) -> Rule:
        """Answer requests of ``method`` whose path matches the regular expression ``path`` with ``status``."""
        rule = Rule(method, re.compile(path), status=status, times=times)
        self.rules.append(rule)
        return rule

    def stall(self, method: str, path: str, *, seconds: float, times: int | None = None) -> Rule:
        """Forward matching requests, then hold each answer back ``seconds``."""
        rule = Rule(method, re.compile(path), stall=seconds, times=times)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    # ---- running ---------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.state.directory / f"kubeconfig-faultproxy-{self.port}"

    def __enter__(self) -> FaultProxy:
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the fault proxy did not start")
        self.kubeconfig.write_text(yaml.safe_dump(_kubeconfig(f"http://127.0.0.1:{self.port}")))
        return self

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self.kubeconfig.unlink(missing_ok=True)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        started.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _start(self) -> None:
        pki = self.state.pki
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        await self._session.close()  # ends the watches still streaming through
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        rule = next((r for r in self.rules if r.applies(request.method, request.path)), None)
        if rule is not None:
            rule.matched += 1
        if rule is not None and rule.status:
            self.seen.append((request.method, request.path, rule.status))
            return web.json_response(_status(rule.status), status=rule.status)
        upstream = f"{self.state.server}{request.rel_url}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.request(
            request.method, upstream, headers=headers, data=body or None, timeout=timeout
        ) as answer:
            if rule is not None and rule.stall:
                await asyncio.sleep(rule.stall)
            self.seen.append((request.method, request.path, answer.status))
            response = web.StreamResponse(status=answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            try:
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientError):
                pass  # the client (a stopped watch) or the apiserver went away mid-stream
            return response


def _status(code: int) -> dict[str, Any]:
    reason = {500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout", 429: "TooManyRequests"}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"injected by the fault proxy: {code}",
        "reason": reason.get(code, "InternalError"),
        "code": code,
    }


def _kubeconfig(server: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "faultproxy", "cluster": {"server": server}}],
        "users": [{"name": "faultproxy", "user": {"token": "unused"}}],
        "contexts": [{"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy"}}],
        "current-context": "faultproxy",
    }
