"""Every Kubernetes event of a spawn gets a plain headline; the raw event stays in the event log only."""

from __future__ import annotations

import re
from fractions import Fraction

from fracnb_spawner.form.progress import page_event, plain_headline
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.gpu.resolve import with_enforcement

QUARTER = with_enforcement(GPUPlan("time-slicing", Fraction(1, 4), 20 << 30))
RAW = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[(Normal|Warning)\]")


def kube_event(reason: str, message: str, kind: str = "Normal") -> dict:
    raw = {"reason": reason, "message": message, "type": kind, "lastTimestamp": "2026-11-25T15:28:03Z"}
    return {"progress": 50, "raw_event": raw, "message": f"2026-11-25T15:28:03Z [{kind}] {message}"}


def test_an_ordinary_start_reads_plainly() -> None:
    events = [
        kube_event("Scheduled", "Successfully assigned ns/jupyter-ann to local-a100-ts4-0"),
        kube_event("Pulling", "Pulling image example/notebook"),
        kube_event("Started", "Started container notebook as local process 16796"),
    ]
    shown = [page_event(QUARTER, event) for event in events]
    assert [e["message"] for e in shown] == [
        "A node with a free 0.25 GPU (time-slicing) took your server: starting it.",
        "Getting the notebook image ready (a node's first start takes longer).",
        "Starting your notebook server.",
    ]
    for event, original in zip(shown, events, strict=True):
        assert not RAW.search(event["message"])
        # The page's event log keeps the raw event; a style rule hides it in the headline.
        assert f'<span class="fracnb-event-raw">{original["message"]}</span>' in event["html_message"]
        assert "#progress-message .fracnb-event-raw" in event["html_message"]


def test_the_scheduler_and_warnings_get_plain_words_too() -> None:
    full = kube_event("FailedScheduling", "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared.", "Warning")
    assert plain_headline(QUARTER, full["raw_event"]).startswith("Waiting for a free 0.25 GPU (time-slicing) slot")
    odd = kube_event("BackOff", "Back-off restarting failed container <b>", "Warning")
    shown = page_event(None, odd)
    assert shown["message"] == "Starting your server; the cluster reported a problem (see the event log)."
    assert "&lt;b&gt;" in shown["html_message"]
    assert page_event(QUARTER, {"progress": 10, "message": "Queued for a 0.25 GPU"}) == {
        "progress": 10,
        "message": "Queued for a 0.25 GPU",
    }
