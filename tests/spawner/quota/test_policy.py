"""Quota arithmetic, pod recounting and quota configuration."""

from fractions import Fraction

import pytest
from traitlets import TraitError
from traitlets.config import Config

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.common.units import format_gpus
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.quota.policy import (
    Allocation,
    QuotaPolicy,
    allocations_from_pods,
    check_request,
    parse_gpus,
    usage_report,
)


def pod(user, server="", fraction="1/8", profile="shared", phase="Running", **extra):
    annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server}
    if fraction is not None:
        annotations["fracnb.io/gpu-fraction"] = fraction
    metadata = {"annotations": annotations, "labels": {"fracnb.io/profile": profile}}
    metadata.update(extra)
    return {"metadata": metadata, "status": {"phase": phase}}


def test_eighths_add_up_exactly_to_one_gpu():
    allocations = [Allocation("ann", f"s{i}", Fraction(1, 8)) for i in range(7)]
    policy = QuotaPolicy(default_user=Fraction(1))
    decision = check_request(policy, allocations, user="ann", groups={}, server="s7", fraction=Fraction(1, 8))
    assert decision.allowed
    assert decision.user_used == Fraction(7, 8)
    allocations.append(Allocation("ann", "s7", Fraction(1, 8)))
    refused = check_request(policy, allocations, user="ann", groups={}, server="s8", fraction=Fraction(1, 8))
    assert not refused.allowed
    assert refused.message == "you use 1 of your 1 GPU; this choice needs 0.125 GPU"


def test_thirds_are_exact_where_floats_are_not():
    # 0.1 + 0.2 > 0.3 in floats; three tenths must fit a quota of 3/10 exactly.
    policy = QuotaPolicy(default_user=parse_gpus(0.3))
    allocations = [Allocation("ann", "a", parse_gpus(0.1)), Allocation("ann", "b", parse_gpus(0.1))]
    decision = check_request(policy, allocations, user="ann", groups={}, server="c", fraction=parse_gpus("0.1"))
    assert decision.allowed


def test_restarting_server_does_not_count_against_itself():
    policy = QuotaPolicy(default_user=Fraction(2))
    allocations = [Allocation("ann", "big", Fraction(2))]
    again = check_request(policy, allocations, user="ann", groups={}, server="big", fraction=2)
    assert again.allowed
    other = check_request(policy, allocations, user="ann", groups={}, server="x", fraction=2)
    assert not other.allowed
    assert other.message == "you use 2 of your 2 GPUs; this choice needs 2 GPUs"


def test_group_quota_counts_all_members():
    policy = QuotaPolicy(groups={"team-a": Fraction(6)})
    allocations = [
        Allocation("ann", "", Fraction(5)),
        Allocation("bob", "", Fraction(3, 4)),
        Allocation("zed", "", Fraction(4)),  # not in the team
    ]
    groups = {"team-a": ["ann", "bob", "cy"]}
    decision = check_request(policy, allocations, user="cy", groups=groups, server="", fraction=Fraction(1, 2))
    assert not decision.allowed
    assert decision.message == "team-a uses 5.75 of 6 GPUs; this choice needs 0.5 GPU"
    fits = check_request(policy, allocations, user="cy", groups=groups, server="", fraction=Fraction(1, 4))
    assert fits.allowed
    assert fits.groups[0].used == Fraction(23, 4)


def test_every_quota_group_must_fit_and_groups_without_quota_are_ignored():
    policy = QuotaPolicy(groups={"small": Fraction(1), "big": Fraction(10)})
    allocations = [Allocation("bob", "", Fraction(3, 4))]
    groups = {"small": ["ann", "bob"], "big": ["ann", "bob"], "free": ["ann"]}
    decision = check_request(policy, allocations, user="ann", groups=groups, server="", fraction=Fraction(1, 2))
    assert not decision.allowed
    assert decision.message.startswith("small uses 0.75 of 1 GPU;")
    assert [g.name for g in decision.groups] == ["big", "small"]


def test_user_quota_overrides_default_and_none_is_unlimited():
    policy = QuotaPolicy(default_user=Fraction(1), users={"boss": None, "intern": Fraction(0)})
    many = [Allocation("boss", str(i), Fraction(1)) for i in range(9)]
    assert check_request(policy, many, user="boss", groups={}, server="x", fraction=8).allowed
    assert not check_request(policy, [], user="intern", groups={}, server="", fraction=Fraction(1, 8)).allowed
    # CPU-only servers (fraction 0) are never refused.
    assert check_request(policy, [], user="intern", groups={}, server="", fraction=0).allowed


def test_allocations_from_pods_reads_annotations_and_skips_others():
    pods = [
        pod("ann", "", "1/8"),
        pod("ann", "gpu", "2", profile="whole"),
        pod("bob", "", "1/4", phase="Succeeded"),
        pod("cy", "", "1/4", phase="Failed"),
        pod("dee", "", "1/2", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("eve", "", None),  # not a fracnb pod
        {"metadata": {"name": "bare"}},
    ]
    allocations = allocations_from_pods(pods)
    assert allocations == [
        Allocation("ann", "", Fraction(1, 8), "shared"),
        Allocation("ann", "gpu", Fraction(2), "whole"),
        Allocation("dee", "", Fraction(1, 2), "shared"),
    ]


def test_a_pod_behind_the_queues_gate_or_kueues_reserves_its_share_as_waiting():
    def gated(user, gate):
        return pod(user) | {"spec": {"schedulingGates": [{"name": gate}]}}

    pods = [gated("ann", "fracnb.io/queue"), gated("bob", "kueue.x-k8s.io/admission"), gated("cy", "other.io/gate")]
    assert [a.waiting for a in allocations_from_pods(pods)] == [True, True, False]


def test_usage_report_is_json_ready_with_exact_strings():
    policy = QuotaPolicy(default_user=Fraction(1), groups={"team-a": Fraction(6)})
    allocations = [
        Allocation("ann", "", Fraction(1, 8), "shared"),
        Allocation("ann", "gpu", Fraction(1, 4), "quarter"),
        Allocation("bob", "", Fraction(5), "five"),
    ]
    report = usage_report(policy, allocations, user="ann", groups={"team-a": ["ann", "bob"], "misc": ["ann"]})
    assert problems(SERVICE_REPORT, report | {"culling": {}, "warning_lead_seconds": 900}) == []
    assert report["used"] == {"gpus": 0.375, "exact": "3/8"}
    assert report["quota"] == {"state": "limited", "gpus": 1.0, "exact": "1"}
    assert report["servers"] == [
        {"server": "", "profile": "shared", "fraction": {"gpus": 0.125, "exact": "1/8"}},
        {"server": "gpu", "profile": "quarter", "fraction": {"gpus": 0.25, "exact": "1/4"}},
    ]
    assert report["groups"] == [
        {"name": "misc", "used": {"gpus": 0.375, "exact": "3/8"}, "quota": {"state": "none"}},
        {
            "name": "team-a",
            "used": {"gpus": 5.375, "exact": "43/8"},
            "quota": {"state": "limited", "gpus": 6.0, "exact": "6"},
        },
    ]
    # The tightest headroom: 5/8 for the user, 5/8 for team-a.
    assert report["available"] == {"state": "limited", "gpus": 0.625, "exact": "5/8"}


@pytest.mark.parametrize(
    ("policy", "quota", "available"),
    [
        # Nobody configured a quota: nothing limits anyone.
        (QuotaPolicy(), {"state": "none"}, {"state": "unlimited"}),
        # The admin is mapped to None: unlimited, though everyone else has 1 GPU.
        (QuotaPolicy(default_user=Fraction(1), users={"ann": None}), {"state": "unlimited"}, {"state": "unlimited"}),
        # An explicit entry wins over the default.
        (
            QuotaPolicy(default_user=None, users={"ann": Fraction(1, 2)}),
            {"state": "limited", "gpus": 0.5, "exact": "1/2"},
            {"state": "limited", "gpus": 0.25, "exact": "1/4"},
        ),
    ],
    ids=["no-quota", "unlimited", "limited"],
)
def test_usage_report_says_which_kind_of_limit(policy, quota, available):
    report = usage_report(policy, [Allocation("ann", "", Fraction(1, 4))], user="ann", groups={})
    assert problems(SERVICE_REPORT, report | {"culling": {}, "warning_lead_seconds": 900}) == []
    assert (report["quota"], report["available"]) == (quota, available)


def test_format_gpus():
    assert [format_gpus(Fraction(n, d)) for n, d in [(23, 4), (1, 3), (2, 1), (0, 1)]] == [
        "5.75",
        "0.333",
        "2",
        "0",
    ]


def test_config_accepts_numbers_and_ratio_strings():
    config = Config()
    config.FracnbQuotas.default_user_quota = "3/4"
    config.FracnbQuotas.user_quotas = {"boss": None, "ann": 0.5}
    config.FracnbQuotas.group_quotas = {"team-a": 6}
    policy = FracnbQuotas(config=config).policy()
    assert policy == QuotaPolicy(
        default_user=Fraction(3, 4),
        users={"boss": None, "ann": Fraction(1, 2)},
        groups={"team-a": Fraction(6)},
    )


@pytest.mark.parametrize(
    ("trait", "value", "message"),
    [
        (
            "group_quotas",
            {"team-a": "6 gpus"},
            "group_quotas['team-a']: '6 gpus' is not a number of GPUs; use e.g. 6, 0.5 or \"3/4\"",
        ),
        ("group_quotas", {"team-a": None}, "group_quotas['team-a']: None is not a number of GPUs"),
        ("user_quotas", {"ann": -1}, "user_quotas['ann']: -1 is negative"),
        ("user_quotas", {"ann": "1/0"}, "user_quotas['ann']: '1/0' is not a number of GPUs"),
        ("default_user_quota", True, "default_user_quota: True is not a number of GPUs"),
    ],
)
def test_config_errors_name_the_key_and_the_fix(trait, value, message):
    with pytest.raises(TraitError) as raised:
        FracnbQuotas(**{trait: value})
    assert str(raised.value).startswith(f"FracnbQuotas.{message}")
    assert "use e.g." in str(raised.value)
