"""The apiserver's audit log of LISTs and WATCHes of pods and nodes: who asked, for what.

The apiserver's request metrics count every client together; the testbed's own scheduler, controllers,
KWOK and runner list and watch pods cluster-wide too, whenever their watches expire. A test that bounds
what the hub asks for reads this log and counts the hub's client (its User-Agent) alone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fracnb_testbed.state import AUDIT_LOG_FILE as LOG_FILE

POLICY_FILE = "audit-policy.yaml"
# A long demo keeps listing; the log rotates at this size (megabytes), keeping one old file.
LOG_MAX_MEGABYTES = 100
AUDITED_VERBS = ("list", "watch")
AUDITED_RESOURCES = ("pods", "nodes")
# The testbed's own Python clients name themselves, so a test can tell them from the hub's client.
RUNNER_USER_AGENT = "fracnb-testbed-runner"
HELPER_USER_AGENT = "fracnb-testbed"


def policy() -> dict[str, Any]:
    """One event per request (when it completes, or for a watch when its stream starts) for the audited
    verbs and resources; nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {
                "level": "Metadata",
                "verbs": list(AUDITED_VERBS),
                "resources": [{"group": "", "resources": list(AUDITED_RESOURCES)}],
            },
            {"level": "None"},
        ],
    }


def apiserver_flags(directory: Path) -> list[str]:
    """The apiserver's flags for the audit log in the state directory (see :func:`write_policy`)."""
    return [
        f"--audit-policy-file={directory / POLICY_FILE}",
        f"--audit-log-path={directory / LOG_FILE}",
        "--audit-log-format=json",
        f"--audit-log-maxsize={LOG_MAX_MEGABYTES}",
        "--audit-log-maxbackup=1",
    ]


def write_policy(directory: Path) -> None:
    (directory / POLICY_FILE).write_text(yaml.safe_dump(policy(), sort_keys=False))


@dataclass(frozen=True)
class AuditedRequest:
    verb: str  # "list" or "watch"
    resource: str  # "pods" or "nodes"
    cluster_wide: bool  # False for a namespace's pods
    user_agent: str
    request_uri: str


def parse_events(lines: Iterable[str]) -> Iterator[AuditedRequest]:
    """One request per audited request: a watch logs when its stream starts and again when it ends, and is
    counted at its start; a list is counted when it completes. A line the apiserver is still writing is
    skipped."""
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        stage = "ResponseStarted" if event.get("verb") == "watch" else "ResponseComplete"
        if event.get("stage") != stage:
            continue
        uri = event.get("requestURI", "")
        yield AuditedRequest(
            verb=event.get("verb", ""),
            resource=event.get("objectRef", {}).get("resource", ""),
            cluster_wide="/namespaces/" not in uri.split("?", 1)[0],
            user_agent=event.get("userAgent", ""),
            request_uri=uri,
        )


def log_files(directory: Path) -> list[Path]:
    """The log's files, oldest first: the one the apiserver rotated out (it names it ``audit-<time>.log``, and
    keeps one) and the current one. A long cluster's earlier requests are in the rotated file."""
    current = directory / LOG_FILE
    rotated = sorted(directory.glob(f"{current.stem}-*{current.suffix}"))
    return rotated + ([current] if current.exists() else [])


def requests_in(directory: Path) -> list[AuditedRequest]:
    """Every audited request the log of this cluster still holds, oldest first."""
    requests: list[AuditedRequest] = []
    for path in log_files(directory):
        with path.open(encoding="utf-8", errors="replace") as log:
            requests.extend(parse_events(log))
    return requests


def count_by_resource(
    requests: Iterable[AuditedRequest], user_agent: str, verb: str = "list", cluster_wide: bool | None = None
) -> Counter[str]:
    """One client's requests of ``verb``, by resource; ``cluster_wide``: only those over all namespaces, or only
    a namespace's (None: both). The testbed's scheduler, controllers, KWOK and runner list and watch pods too;
    the apiserver's own request counts would add them."""
    return Counter(
        request.resource
        for request in requests
        if request.user_agent == user_agent
        and request.verb == verb
        and (cluster_wide is None or request.cluster_wide == cluster_wide)
    )
