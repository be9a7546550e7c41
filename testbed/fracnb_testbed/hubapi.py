"""One request to a JupyterHub's REST API (or a hub service's) with an API token, for the demo's tests and
benchmarks: the answer as (status, decoded JSON), an error's body as text, never an exception for a 4xx/5xx."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def token_request(
    url: str, token: str, *, method: str = "GET", body: Any = None, timeout: float = 30
) -> tuple[int, Any]:
    """(status, answer) of ``method url`` sent with ``token``: JSON decoded, an error's body as text."""
    sent = urllib.request.Request(  # noqa: S310 - the testbed's own http URLs
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(sent, timeout=timeout) as answer:  # noqa: S310
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        with error:
            raw = error.read()
        try:
            return error.code, json.loads(raw) if raw else None
        except ValueError:
            return error.code, raw.decode(errors="replace")
