"""The hub's byte sizes and GPU amounts in words, held to the cases the notebook side and the front
end are held to too (extension/test-data/; the hub reads the files itself, it imports nothing of
the notebook side), and the sentences built from them on the form, in refusals and on the
service's page."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fracnb_spawner.common.units import format_bytes, format_gpus, gpus_text, share_text, share_words, use_text
from fracnb_spawner.quota.policy import QuotaPolicy, check_request
from fracnb_spawner.quota.words import quota_line
from fracnb_spawner.service.page import ServerRow, UseRow, UserView
from tests.shared_cases import exact, shared_cases

SHARES = shared_cases("gpu-shares.json")


@pytest.mark.parametrize("case", shared_cases("byte-sizes.json")["cases"], ids=lambda c: str(c["bytes"]))
def test_byte_sizes(case) -> None:
    assert format_bytes(case["bytes"]) == case["text"]


@pytest.mark.parametrize("case", SHARES["amounts"], ids=lambda c: c["exact"])
def test_gpu_amounts(case) -> None:
    amount = exact(case["exact"])
    assert format_gpus(amount) == case["amount"]
    assert gpus_text(amount) == case["gpus_text"]
    assert share_text(amount) == case["gpus_text"], "the service page's amounts"
    assert share_words(amount) == case["share"]


@pytest.mark.parametrize("case", SHARES["uses"], ids=lambda c: f"{c['used']}-of-{c['limit']}")
def test_gpu_uses(case) -> None:
    assert use_text(exact(case["used"]), exact(case["limit"])) == case["text"]


def test_no_limit_is_said_as_such() -> None:
    assert share_text(None) == "no limit"


# ---- sentences built from them -------------------------------------------------------------------


def test_refusals_name_units_by_the_rule() -> None:
    """Not "of your 1 GPUs", and what a choice needs is an amount of GPUs, not a bare number."""
    policy = QuotaPolicy(default_user=Fraction(1), groups={"team-a": Fraction(1, 2)})
    mine = check_request(policy, [], user="ann", groups={}, server="", fraction=Fraction(5, 4))
    assert mine.message == "you use 0 of your 1 GPU; this choice needs 1.25 GPUs"
    team = check_request(policy, [], user="ann", groups={"team-a": ["ann"]}, server="", fraction=Fraction(3, 4))
    assert team.message == "team-a uses 0 of 0.5 GPU; this choice needs 0.75 GPU"
    line = quota_line(check_request(policy, [], user="ann", groups={}, server="", fraction=Fraction(0)))
    assert line == "Your GPU quota: 0 of 1 GPU in use"


def view(used: str, limit: str | None, available: str | None, *, servers: int, named_servers: bool) -> UserView:
    rows = [
        ServerRow("ann", f"s{i}", "quarter", Fraction(1, 4), None, 0.0, None, None, None, False) for i in range(servers)
    ]
    mine = UseRow("ann", Fraction(used), None if limit is None else Fraction(limit), servers)
    return UserView("ann", rows, mine, [], None if available is None else Fraction(available), named_servers)


def test_the_page_never_says_quota_of_no_limit_or_up_to_none() -> None:
    unlimited = view("1/4", None, None, servers=1, named_servers=True)
    assert f"{unlimited.holding_text} {unlimited.headroom_text}" == (
        "You hold 0.25 GPU; you have no quota of your own. No quota limits what you can start."
    )
    full = view("1", "1", "0", servers=2, named_servers=True)
    assert f"{full.holding_text} {full.headroom_text}" == (
        "You hold 1 GPU of your quota of 1 GPU. Your quotas leave no GPU for one more server now."
    )
    idle = view("0", "1", "1", servers=0, named_servers=True)
    assert f"{idle.holding_text} {idle.headroom_text}" == (
        "You hold 0 GPUs of your quota of 1 GPU. A server could take up to 1 GPU."
    )
    assert view("1/4", "1", "3/4", servers=1, named_servers=True).headroom_text == (
        "One more server could take up to 0.75 GPU."
    )


def test_one_server_at_a_time_is_not_offered_one_more() -> None:
    """Without named servers a user runs one server: the next one starts in its place, with its share back."""
    single = view("1/4", "1", "3/4", servers=1, named_servers=False)
    assert single.headroom_text == (
        "You can run one server at a time; once yours stops, a new one could take up to 1 GPU."
    )
    assert view("0", "1", "1", servers=0, named_servers=False).headroom_text == "A server could take up to 1 GPU."
    over = view("3/2", "1", "0", servers=1, named_servers=False)  # over a quota lowered since it started
    assert over.headroom_text == "You can run one server at a time; once yours stops, a new one could take up to 1 GPU."
    team = view("1/4", None, "0", servers=1, named_servers=False)
    team.groups.append(UseRow("team-a", Fraction(2), Fraction(2)))
    assert (
        team.headroom_text == "You can run one server at a time; once yours stops, a new one could take up to 0.25 GPU."
    )
    team.groups.append(UseRow("lab", Fraction(3), Fraction(2)))
    assert team.headroom_text == "You can run one server at a time; your quotas leave no GPU for a new one now."


def test_a_cpu_only_server_has_no_gpu() -> None:
    row = ServerRow("ann", "", "cpu", Fraction(0), None, 0.0, None, None, None, False)
    assert row.share_text == "no GPU"
