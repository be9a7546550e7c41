"""What a user reads from the hub, offline: refusals in plain words with advice, the quota line, scheduler
headlines without the scheduler's text, choices no node offers, and the form keeping a refused choice."""

from __future__ import annotations

import logging
import re
from fractions import Fraction

import pytest
from jupyterhub.utils import format_exception
from traitlets.config import Config

from fracnb_spawner.cluster.nodes import largest_allocatable
from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError, RefusedSpawnError
from fracnb_spawner.form import rows as form
from fracnb_spawner.form.progress import scheduler_saw_slots, unschedulable_message, waiting_message
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUPlan
from fracnb_spawner.gpu.words import no_node_reason
from fracnb_spawner.quota.policy import GroupUse, QuotaDecision
from fracnb_spawner.quota.words import quota_line, quota_refusal

SCHEDULER_FULL = (
    "0/10 nodes are available: 2 Insufficient nvidia.com/gpu.shared, 8 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/10 nodes are available: 10 Preemption is not helpful for scheduling."
)
SCHEDULER_NO_NODE = "0/10 nodes are available: 10 node(s) didn't match Pod's node affinity/selector."
QUARTER = GPUPlan("time-slicing", Fraction(1, 4), 20 << 30, replicas=4)
HALF = GPUPlan("time-slicing", Fraction(1, 2), 40 << 30, replicas=2)
RAW_TEXT = re.compile(r"SpawnException|HTTP \d{3}|Traceback|nodes are available|\(reason=")


# ---- errors: what JupyterHub shows is the message itself ---------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequestError(403, "Over GPU quota: plain words", reason="quota"),
        RefusedSpawnError(503, "No node could take 0.5 GPU", reason="unschedulable"),
        HubConfigError("The hub's profile configuration is invalid: plain words"),
    ],
    ids=["quota", "unschedulable", "hub-config"],
)
def test_jupyterhub_shows_the_plain_message(error: Exception) -> None:
    # format_exception is what the spawn form, the progress stream and the error page use (5.5 and 6.x).
    message, _html = format_exception(error)
    assert message == error.message
    assert not RAW_TEXT.search(message)
    assert format_exception(error, only_jupyterhub=True)[0] == error.message


# ---- quotas in plain words -------------------------------------------------------------------


def decision(requested: str, user_used: str, user_limit: str | None, groups=()) -> QuotaDecision:
    return QuotaDecision(
        False,
        "team-a uses 0.25 of 0.5 GPU; this choice needs 0.5 GPU",
        Fraction(requested),
        Fraction(user_used),
        None if user_limit is None else Fraction(user_limit),
        tuple(GroupUse(name, Fraction(used), Fraction(limit)) for name, used, limit in groups),
    )


def test_group_refusal_says_what_to_do() -> None:
    refusal = quota_refusal(decision("1/2", "0", "1/2", [("team-a", "1/4", "1/2")]))
    assert refusal == (
        "Over GPU quota: team-a uses 0.25 of 0.5 GPU; this choice needs 0.5 GPU. Choose a share of at most "
        "0.25 GPU, or wait until a server of team-a stops, or ask a teammate in team-a to stop one."
    )


def test_group_refusal_with_nothing_left_says_wait() -> None:
    refusal = quota_refusal(decision("1/4", "0", "1/2", [("team-a", "1/2", "1/2")]))
    assert refusal.endswith("Wait until a server of team-a stops, or ask a teammate in team-a to stop one.")
    assert "at most" not in refusal


def test_own_limit_refusal_points_at_own_servers() -> None:
    refusal = quota_refusal(decision("1/2", "1/4", "1/2"))
    assert refusal.endswith("Choose a share of at most 0.25 GPU, or stop one of your other servers first.")


def test_quota_line_shows_own_quota_and_team_use() -> None:
    line = quota_line(decision("0", "1/4", "1/2", [("team-a", "1/4", "1/2"), ("lab\x1b", "0", "2")]))
    assert line == (
        "Your GPU quota: 0.25 of 0.5 GPU in use · team-a (your team, together): 0.25 of 0.5 GPU in use"
        " · lab\\x1b (your team, together): 0 of 2 GPUs in use"
    )
    assert quota_line(decision("0", "0", None)) is None


# ---- the scheduler's words stay in the event log ---------------------------------------------


def test_waiting_only_for_slots_that_exist() -> None:
    full = waiting_message(QUARTER, {"reason": "FailedScheduling", "message": SCHEDULER_FULL})
    assert full is not None
    assert full.startswith("Waiting for a free 0.25 GPU (time-slicing) slot")
    none_offered = waiting_message(HALF, {"reason": "FailedScheduling", "message": SCHEDULER_NO_NODE})
    assert none_offered is not None
    assert "Waiting" not in none_offered
    assert "as soon as" not in none_offered
    assert none_offered.startswith("No node in this cluster offers 0.5 GPU (time-slicing)")
    for message in (full, none_offered):
        assert not RAW_TEXT.search(message)
    assert waiting_message(CPU_ONLY, {"reason": "FailedScheduling", "message": SCHEDULER_FULL}) is None
    assert waiting_message(QUARTER, {"reason": "Scheduled", "message": "assigned"}) is None


def test_unschedulable_refusal_is_a_plain_headline() -> None:
    assert scheduler_saw_slots(SCHEDULER_FULL)
    assert not scheduler_saw_slots(SCHEDULER_NO_NODE)
    busy = unschedulable_message(QUARTER, 180, slots_exist=True)
    assert busy == (
        "No node could take 0.25 GPU (time-slicing) within 180 s: every matching GPU stayed in use. "
        "Try again later, or choose a smaller share."
    )
    absent = unschedulable_message(HALF, 180, slots_exist=False)
    assert "no node in this cluster offers it" in absent
    assert not RAW_TEXT.search(busy + absent)


# ---- choices no node offers --------------------------------------------------------------------


def node(name: str, labels: dict, allocatable: dict, *, cordoned: bool = False) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
        "status": {"allocatable": allocatable},
    }


NODES = [
    node("ts4", {"nvidia.com/gpu.replicas": "4"}, {"nvidia.com/gpu.shared": "4"}),
    node("whole", {"nvidia.com/gpu.sharing-strategy": "none"}, {"nvidia.com/gpu": "8"}, cordoned=True),
    node("cpu", {}, {"cpu": "8"}),
]


def test_largest_allocatable_sees_only_matching_nodes() -> None:
    assert largest_allocatable(NODES, "nvidia.com/gpu.shared", {"nvidia.com/gpu.replicas": "4"}) == 4
    assert largest_allocatable(NODES, "nvidia.com/gpu.shared", {"nvidia.com/gpu.replicas": "2"}) == 0
    # A cordoned node still exists: its GPUs are waited for, not refused.
    assert largest_allocatable(NODES, "nvidia.com/gpu", {"nvidia.com/gpu.sharing-strategy": "none"}) == 8
    assert largest_allocatable([], "nvidia.com/gpu", {}) == 0


def test_no_node_reason_names_the_share_and_what_to_do() -> None:
    assert no_node_reason(HALF) == (
        "no node in this cluster offers 0.5 GPU (time-slicing), so it cannot start; "
        "choose another option, or ask your hub admin"
    )


# ---- the form -------------------------------------------------------------------------------------

PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "Half", "slug": "half", "gpu": {"fraction": "1/2"}},
    {
        "display_name": "Sized",
        "slug": "sized",
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "eighth": {"display_name": "1/8", "default": True, "gpu": {"fraction": "1/8"}},
                    "quarter": {"display_name": "1/4", "gpu": {"fraction": "1/4"}},
                },
            }
        },
    },
]


async def render(make_spawner, user_options: dict, refuse: dict[str, str] | None = None) -> str:
    from fracnb_spawner.config.profiles import initialize_profiles

    config = Config()
    config.FractionalSpawner.profile_list = PROFILES
    spawner = make_spawner(config)
    profiles = initialize_profiles(PROFILES)
    rows = form.describe(profiles, spawner.gpu_defaults())
    for slug, reason in (refuse or {}).items():
        rows[(slug, None, None)] = rows[(slug, None, None)].refused(reason)
    return form.render(profiles, rows, user_options, "Your GPU quota: 0 of 0.5 GPU in use")


async def test_form_keeps_the_submitted_choice(make_spawner) -> None:
    html = await render(make_spawner, {"profile": "sized", "size": "quarter"})
    assert re.search(r'value="sized"\s+checked', html)
    assert not re.search(r'value="cpu"\s+checked', html)
    assert re.search(r'<option value="quarter" selected>', html)
    assert not re.search(r'<option value="eighth" selected>', html)
    # Without a submitted choice, the defaults.
    html = await render(make_spawner, {})
    assert re.search(r'value="cpu"\s+checked', html)
    assert re.search(r'<option value="eighth" selected>', html)


async def test_unavailable_card_is_disabled_and_says_why(make_spawner) -> None:
    html = await render(make_spawner, {"profile": "half"}, refuse={"half": "no node offers it"})
    card = re.search(r'<div class="fracnb-profile([^"]*)" data-fracnb-profile="half"([^>]*)>(.*?)</label>', html, re.S)
    assert card is not None
    assert "fracnb-unavailable" in card.group(1)
    assert 'aria-disabled="true"' in card.group(2)
    assert re.search(r'value="half"\s+checked\s+disabled', card.group(3)), "kept, but not selectable"
    assert "no node offers it" in html
    assert '<p class="fracnb-quota" data-fracnb-quota>Your GPU quota: 0 of 0.5 GPU in use</p>' in html


# ---- no "Received unhandled user_options" on every spawn --------------------------------------


async def test_user_options_are_not_reported_unhandled(make_spawner, caplog: pytest.LogCaptureFixture) -> None:
    spawner = make_spawner(Config(), {"profile": "cpu"})
    with caplog.at_level(logging.WARNING):
        await spawner._run_apply_user_options({"profile": "cpu", "size": "x"})
    assert "unhandled user_options" not in caplog.text
    assert spawner.user_options == {"profile": "cpu"}  # applied (and checked) by load_user_options


async def test_placement_uses_the_choices_node_selector(make_spawner) -> None:
    from fracnb_spawner.config.profiles import initialize_profiles

    config = Config()
    config.FractionalSpawner.node_selector = {"pool": "cpu", "zone": "a"}
    config.FractionalSpawner.profile_list = [
        {"display_name": "CPU", "slug": "cpu", "default": True},
        {
            "display_name": "GPU pool",
            "slug": "pool",
            "gpu": {"fraction": "1/4"},
            "kubespawner_override": {"node_selector": {"pool": "gpu", "zone": None}},
        },
    ]
    spawner = make_spawner(config)
    ask = spawner.choosing.plan_for(initialize_profiles(config.FractionalSpawner.profile_list), {"profile": "pool"}).ask
    resource, selector, units = ask.resource, ask.selector, ask.units
    # KubeSpawner merges a dict override into the configured value; None removes a key.
    assert selector["pool"] == "gpu"
    assert "zone" not in selector
    assert selector["nvidia.com/gpu.replicas"] == "4"
    assert (resource, units) == ("nvidia.com/gpu.shared", 1)
