"""Whether a server's cull deadline says its variables will be saved (service-me.schema.json ``saves_variables``):
only a GPU server whose stop for that reason hibernates first. Pure: literal pods and decisions."""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction

import pytest

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.culling import Action, CullDecision, CullPolicy, Reason, server_status
from fracnb_spawner.hibernation.settings import HibernationSettings
from fracnb_spawner.service.cullpass import PodFacts, saves_variables

AT = datetime(2026, 12, 6, 14, 5, tzinfo=timezone.utc)
ON = HibernationSettings().applies  # the service's default: idle stops hibernate, max-age ones do not
OFF = HibernationSettings(timeout=0).applies


def pod(fraction: str) -> PodFacts:
    return PodFacts(annotations={}, profile="quarter", fraction=Fraction(fraction))


def warned(reason: Reason) -> CullDecision:
    return CullDecision(Action.WARN, reason, AT, 240.0)


@pytest.mark.parametrize(
    ("server", "reason", "hibernates", "saves"),
    [
        (pod("1/4"), Reason.IDLE, ON, True),
        (pod("1/4"), Reason.DEMAND, ON, True),
        (pod("1/4"), Reason.GPU_UNUSED, ON, True),
        (pod("1/4"), Reason.MAX_AGE, ON, False),  # hibernate_at_max_age is off by default
        (pod("1/4"), Reason.MAX_AGE, HibernationSettings(at_max_age=True).applies, True),
        (pod("1/4"), Reason.GPU_UNUSED_BUSY, ON, False),  # a busy kernel cannot be saved
        (pod("1/4"), Reason.IDLE, OFF, False),  # hibernation_timeout 0: never asked
        (pod("0"), Reason.IDLE, ON, False),  # a CPU-only server is never asked to save
        (None, Reason.IDLE, ON, False),  # no pod: nothing to ask
    ],
)
def test_only_a_stop_that_hibernates_says_it_saves(server, reason, hibernates, saves) -> None:
    decision = warned(reason)
    assert saves_variables(server, decision, hibernates) is saves
    status = server_status(decision, CullPolicy(idle_timeout=3600), saves_variables=saves)
    assert problems(SERVICE_REPORT, status, "/$defs/cullStatus", check_formats=True) == []
    # Present only when true: a meter of an older version refuses fields it does not know.
    assert status["deadline"].get("saves_variables", False) is saves


def test_no_deadline_no_claim() -> None:
    status = server_status(CullDecision(Action.KEEP), CullPolicy(), saves_variables=True)
    assert status["deadline"] is None
