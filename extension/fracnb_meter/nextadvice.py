"""The user's advice for next time, from the hub's fracnb service, for the panel and the widget.

The service answers ``GET {FRACNB_SERVICE_URL}api/advice?profile=<FRACNB_PROFILE>&choice=<FRACNB_CHOICE>``
for the server's own token (``JUPYTERHUB_API_TOKEN``) with the spawn form's advice on this
server's choice, from the user's own sessions (schemas/service-advice.schema.json, checked here
on receipt). The meter computes no advice itself. Anything going wrong (no service, no answer, a
shape this version does not know) means no advice: the usage document's ``advice`` is null and
the panel and the widget say nothing about it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fracnb_schemas import SERVICE_ADVICE, check

from .hubcalls import Request, ThrottledGet, get_blocking

Advice = dict[str, Any] | None


def advice_request(service_url: str, token: str, profile: str | None, choice: str | None) -> Request | None:
    """The URL and headers of the request, or None when there is nothing to ask (no service, no GPU profile)."""
    if not service_url.startswith(("http://", "https://")) or not token or not profile:
        return None
    query = urlencode({"profile": profile, "choice": choice or ""})
    return f"{service_url.rstrip('/')}/api/advice?{query}", {
        "Authorization": f"token {token}",
        "Accept": "application/json",
    }


def parse_advice(body: bytes) -> tuple[Advice, str | None]:
    """The advice in an answer's body, or None and why."""
    try:
        document = json.loads(body)
        check(SERVICE_ADVICE, document)
    except ValueError as error:  # bad JSON, or a SchemaMismatchError
        return None, str(error)
    return document, None


def fetch_advice_blocking(request: Request | None, timeout: float = 3.0) -> Advice:
    """For the in-kernel widget's thread."""
    body = get_blocking(request, timeout)
    return None if body is None else parse_advice(body)[0]


class ServiceAdvice(ThrottledGet[Advice]):
    """For the server extension: the latest advice, asked again at most every ``min_interval`` seconds.

    The advice changes only when this server's (or another of the user's) sessions are reported,
    every ``FracnbMeter.session_report_interval`` seconds: asking more often gains nothing.
    """

    def __init__(self, request: Request | None, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        super().__init__(request, min_interval, parse_advice, None, what="advice", clock=clock)
