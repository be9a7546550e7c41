"""Where a start's time goes: the moments each pod (and its ResourceClaim) reached each step, as watches of
the bench's namespace see them, beside the spawner's own start() call.

Steps: start() called -> pod created (the hub's request) -> claim created (DRA only: sent with the pod, so
either may come first: a negative median says the claim did) -> claim allocated and pod bound
(kube-scheduler) -> pod ready (KWOK) -> start() returned (the hub's reflector saw it ready).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import statistics
from collections import defaultdict
from typing import Any

from fracnb_spawner.common.podkeys import CLAIM_POD_ANNOTATION

STEPS = ("called", "pod", "claim", "allocated", "bound", "ready", "returned")


class Phases:
    """First moment (loop clock) each pod reached each step."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.api_client, self.namespace = api_client, namespace
        self.seen: dict[str, dict[str, float]] = defaultdict(dict)
        self.tasks: list[asyncio.Task] = []

    def mark(self, pod: str, step: str) -> None:
        self.seen[pod].setdefault(step, asyncio.get_running_loop().time())

    def start(self) -> None:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        claims = f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims"
        watches = ((base, self._pod), (claims, self._claim))
        self.tasks = [asyncio.ensure_future(self._watch(path, handle)) for path, handle in watches]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _watch(self, path: str, handle: Any) -> None:
        while True:
            response = await self.api_client.rest_client.pool_manager.get(
                f"{self.api_client.configuration.host}{path}?watch=true&allowWatchBookmarks=false",
                timeout=None,
            )
            async with response:
                async for line in response.content:
                    if line.strip():
                        event = json.loads(line)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            handle(event["object"])

    def _pod(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.mark(name, "pod")
        if pod["spec"].get("nodeName"):
            self.mark(name, "bound")
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            self.mark(name, "ready")

    def _claim(self, claim: dict[str, Any]) -> None:
        owners = claim["metadata"].get("ownerReferences") or []
        pod = (claim["metadata"].get("annotations") or {}).get(CLAIM_POD_ANNOTATION)
        pod = pod or next((o["name"] for o in owners if o.get("kind") == "Pod"), None)  # the earlier designs'
        if pod is None:
            return
        self.mark(pod, "claim")
        if (claim.get("status") or {}).get("allocation"):
            self.mark(pod, "allocated")

    def summary(self, pods: str) -> str:
        """Median seconds between consecutive steps, over the pods whose name matches the regular expression
        ``pods``."""
        gaps: dict[str, list[float]] = defaultdict(list)
        for pod, moments in self.seen.items():
            if not re.fullmatch(pods, pod):
                continue
            reached = [step for step in STEPS if step in moments]
            for earlier, later in itertools.pairwise(reached):
                gaps[f"{earlier}->{later}"].append(moments[later] - moments[earlier])
        return ", ".join(f"{gap} {statistics.median(values):.2f} s" for gap, values in gaps.items())
