"""A thin client for the JupyterHub REST API calls the service makes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

PAGINATION = "application/jupyterhub-pagination+json"


class HubAPI:
    """Calls ``{api_url}/...`` with the service's token."""

    def __init__(self, api_url: str, token: str, *, request_timeout: float = 60) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.request_timeout = request_timeout
        self.http = AsyncHTTPClient(force_instance=True, max_clients=64)

    def close(self) -> None:
        self.http.close()

    async def request(
        self, method: str, path: str, *, body: Any = None, accept: str = "application/json"
    ) -> tuple[int, Any]:
        request = HTTPRequest(
            f"{self.api_url}/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}", "Accept": accept},
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True,
            request_timeout=self.request_timeout,
        )
        response = await self.http.fetch(request)
        return response.code, json.loads(response.body) if response.body else None

    async def get(self, path: str, **params: Any) -> Any:
        query = f"?{urlencode(params)}" if params else ""
        _, data = await self.request("GET", f"{path}{query}", accept=PAGINATION)
        return data

    async def iter_users(
        self, *, state: str = "ready", page_size: int = 0, parallel_pages: int = 4
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Yield pages of user models with ``state``."""
        async for page in self._iter_pages("users", {"state": state}, page_size, parallel_pages):
            yield page

    async def _iter_pages(
        self, path: str, params: dict[str, Any], page_size: int, parallel_pages: int
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Yield pages of a paginated listing.

        The first page tells the total; the remaining pages are fetched a few at a time in
        parallel, which hides request latency behind the hub's own work.
        """
        first = await self.get(path, **params, offset=0, **({"limit": page_size} if page_size else {}))
        items, pagination = _page(first)
        yield items
        if not pagination or not pagination.get("next"):
            return
        limit, total = pagination["limit"], pagination["total"]
        offsets = list(range(pagination["offset"] + limit, total, limit))
        for start in range(0, len(offsets), parallel_pages):
            batch = offsets[start : start + parallel_pages]
            pages = await asyncio.gather(*(self.get(path, **params, offset=o, limit=limit) for o in batch))
            for page in pages:
                yield _page(page)[0]

    async def stop_server(self, user: str, server: str) -> int:
        """Stop a server: 204 stopped, 202 stopping; 0 if the hub refused (already gone)."""
        path = f"users/{quote(user, safe='')}/server"
        if server:
            path = f"users/{quote(user, safe='')}/servers/{quote(server, safe='')}"
        try:
            code, _ = await self.request("DELETE", path)
        except HTTPClientError as error:
            if error.code in (400, 404):
                return 0
            raise
        return code

    async def user(self, name: str) -> dict[str, Any]:
        return await self.get(f"users/{quote(name, safe='')}")

    async def group_members(self, name: str) -> list[str]:
        group = await self.get(f"groups/{quote(name, safe='')}")
        return list(group.get("users") or [])

    async def members_of(self, names: Iterable[str]) -> dict[str, list[str]]:
        """Members of each named group that exists (a quota may name a group nobody created yet)."""

        async def one(name: str) -> list[str] | None:
            try:
                return await self.group_members(name)
            except HTTPClientError as error:
                if error.code == 404:
                    return None
                raise

        names = sorted(set(names))
        found = await asyncio.gather(*(one(name) for name in names))
        return {name: members for name, members in zip(names, found, strict=True) if members is not None}


def _page(data: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    # A hub that ignores the pagination Accept header answers with a bare list.
    if isinstance(data, list):
        return data, None
    return data["items"], data.get("_pagination")
