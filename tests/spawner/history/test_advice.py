"""Right-sizing advice from literal session histories (fracnb_spawner.history.advice)."""

from __future__ import annotations

import pytest

from fracnb_spawner.history.advice import Offer, PastSession, advise, percentile, sessions_on, waiting_text

GIB = 1 << 30
HALF = ("a100", "size", "half")
QUARTER = ("a100", "size", "quarter")
EIGHTH = ("a100", "size", "eighth")
FULL = ("a100", "size", "full")
OFFERS = [
    Offer(EIGHTH, "1/8 GPU", 10 * GIB, free=True),
    Offer(QUARTER, "1/4 GPU", 20 * GIB, free=True),
    Offer(HALF, "1/2 GPU", 40 * GIB, free=False),
    Offer(FULL, "1 GPU", 80 * GIB),
]


def sessions(choice, *peaks_gib, budget=40 * GIB, **extra):
    return [PastSession(choice, budget, None if p is None else int(p * GIB), **extra) for p in peaks_gib]


def test_the_issues_example() -> None:
    history = sessions(HALF, 5.0, 6.1, 4.0, 3.2, 5.5, 6.0)
    advice = advise(history, OFFERS)
    assert advice is not None
    assert advice.text == (
        "Your last 6 sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit: it's free now."
    )
    assert (advice.suggested, advice.larger, advice.sessions) == (EIGHTH, False, 6)


def test_the_peak_is_said_without_percentile_jargon() -> None:
    """The 95th percentile in words: how many sessions stayed at or below it."""
    twenty = sessions(HALF, *([5.0] * 18), 6.1, 30.0)
    assert advise(twenty, OFFERS).text.startswith("19 of your last 20 sessions on 1/2 GPU peaked at 6.1 GiB or less.")
    assert advise(sessions(HALF, 6.1), OFFERS, min_sessions=1).text.startswith(
        "Your last session on 1/2 GPU peaked at 6.1 GiB."
    )


def test_headroom_decides_which_smaller_choice_fits() -> None:
    history = sessions(HALF, 8.0, 8.5, 9.0)  # p95 9 GiB: with 20 % headroom 10.8 GiB > 10 GiB
    assert advise(history, OFFERS).suggested == QUARTER
    assert advise(history, OFFERS, headroom=0.10).suggested == EIGHTH


def test_no_advice_before_the_minimum_number_of_sessions() -> None:
    history = sessions(HALF, 5.0, 6.0)
    assert advise(history, OFFERS) is None
    assert advise(history, OFFERS, min_sessions=2) is not None
    assert advise(sessions(HALF, 5.0, None, 6.0), OFFERS) is None  # unknown peaks do not count


def test_no_advice_when_the_choice_used_is_already_the_right_one() -> None:
    assert advise(sessions(EIGHTH, 7.0, 7.5, 8.0, budget=10 * GIB), OFFERS) is None


def test_only_the_last_choice_used_counts() -> None:
    history = sessions(QUARTER, 3.0, 3.0, 3.0, budget=20 * GIB) + sessions(HALF, 30.0, 30.0, 30.0)
    advice = advise(history, OFFERS)
    assert advice.text.startswith("Your last 3 sessions on 1/4 GPU peaked at 3 GiB or less.")
    assert advice.suggested == EIGHTH


def test_hitting_the_budget_suggests_the_next_size_up() -> None:
    history = sessions(QUARTER, 19.0, budget=20 * GIB, oom_events=1) + sessions(QUARTER, 12.0, 11.0, budget=20 * GIB)
    advice = advise(history, OFFERS)
    assert advice.text == (
        "Your last 3 sessions on 1/4 GPU peaked at 19 GiB or less. 1 of them reached the budget of 20 GiB. "
        "1/2 GPU (40 GiB) gives more room (none is free right now)."
    )
    assert (advice.suggested, advice.larger) == (HALF, True)
    time_at_95 = sessions(QUARTER, 5.0, 5.0, budget=20 * GIB) + sessions(
        QUARTER, 19.5, budget=20 * GIB, seconds_above_95=30.0
    )
    assert advise(time_at_95, OFFERS).suggested == HALF
    assert advise(sessions(FULL, 79.0, 79.0, 79.0, budget=80 * GIB, oom_events=2), OFFERS) is None  # nothing bigger


MIG = [
    Offer(("mig", "slice", "1g.10gb"), "1g.10gb", 10 * GIB, mig=True, free=True),
    Offer(("mig", "slice", "2g.20gb"), "2g.20gb", 20 * GIB, mig=True, free=False),
    Offer(("mig", "slice", "3g.40gb"), "3g.40gb", 40 * GIB, mig=True),
    Offer(("mig", "slice", "7g.80gb"), "7g.80gb", 80 * GIB, mig=True),
    Offer(EIGHTH, "1/8 GPU", 10 * GIB),
]


def test_mig_choices_get_the_smallest_mig_profile_covering_p95_with_headroom() -> None:
    history = sessions(("mig", "slice", "7g.80gb"), 12.0, 14.0, 15.0, 15.5, budget=80 * GIB)
    advice = advise(history, MIG)
    assert advice.suggested == ("mig", "slice", "2g.20gb")  # 15.5 GiB x 1.2 = 18.6 GiB
    assert advice.text.endswith("2g.20gb (20 GiB) would have fit (none is free right now).")


@pytest.mark.parametrize(("share", "expected"), [(0.5, 3), (0.95, 6), (1.0, 6), (0.0, 1)])
def test_percentile_is_nearest_rank(share: float, expected: int) -> None:
    assert percentile([6, 1, 5, 2, 4, 3], share) == expected


def test_advice_for_a_given_choice_reads_only_that_choices_sessions() -> None:
    # The newest session is on 1/4 GPU; a server on 1/2 GPU asks for its own advice for next time.
    history = sessions(QUARTER, 3.0, budget=20 * GIB) + sessions(HALF, 5.0, 6.1, 4.0)
    assert advise(history, OFFERS) is None  # the newest choice has one session only
    advice = advise(history, OFFERS, current=HALF)
    assert advice.text.startswith("Your last 3 sessions on 1/2 GPU peaked at 6.1 GiB or less.")
    assert advice.suggested == EIGHTH
    assert advise(history, OFFERS, current=("a100", "size", "gone")) is None


def test_waiting_text_counts_the_sessions_still_needed() -> None:
    assert sessions_on(sessions(HALF, 5.0, None) + sessions(QUARTER, 2.0), HALF) == sessions(HALF, 5.0)
    assert waiting_text(1) == "No advice yet: 3 sessions needed (1 so far)."
    assert waiting_text(0, min_sessions=5) == "No advice yet: 5 sessions needed (0 so far)."
    assert waiting_text(3) is None
