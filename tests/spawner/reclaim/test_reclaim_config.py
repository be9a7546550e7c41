"""c.FracnbReclaim refused at start with the key named; the reclaim policy and lending in the dry run's
words; the event's message on an evicted pod."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.configure import check_config
from fracnb_spawner.dryrun import summary
from fracnb_spawner.reclaim.config import FracnbReclaim
from fracnb_spawner.reclaim.lending import lending_of
from fracnb_spawner.reclaim.victims import Policy
from fracnb_spawner.service.reclaiming import reason_text


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("evictions_per_minute", 0, "FracnbReclaim.evictions_per_minute: 0 allows no eviction"),
     ("every", 0.0, "FracnbReclaim.every: 0.0 s is not a time between passes")],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_the_key(key: str, value: object, said: str) -> None:
    config = Config()
    config.FracnbReclaim[key] = value
    with pytest.raises(TraitError, match=said):
        check_config(config)


def test_the_policy_and_the_dry_run_lines() -> None:
    config = Config()
    config.FracnbReclaim.enabled = True
    config.FracnbReclaim.priority_below = -10
    config.FracnbReclaim.namespaces = ["batch"]
    assert FracnbReclaim(config=config).policy() == Policy(-10, frozenset({"batch"}))
    lines = summary(config, backends=["dra", "time-slicing", "none"])
    start = lines.index("lending and reclaim (docs/lending.md):")
    assert lines[start + 1].startswith(
        "  dra: lends whole cards and shares, taken back by the fracnb service's evictions"
    )
    assert lines[start + 2].startswith("  time-slicing: cannot lend a whole card (a time-sliced card cannot be")
    assert "evicts pods of priority below -10 (and the notebook's) in batch, never a notebook" in lines[start + 3]
    assert "at most 10 a minute" in lines[start + 3]
    assert summary(Config(), backends=["dra"])[-1].startswith("  off (FracnbReclaim.enabled = False)")


def test_which_backends_can_lend_a_whole_card() -> None:
    assert [b for b in ("time-slicing", "mps", "mig", "hami", "kai", "dra", "whole") if not lending_of(b).not_whole] == [
        "hami", "kai", "dra", "whole"
    ]  # fmt: skip
    assert lending_of("none").text() == "cannot lend: no GPU"


def test_the_event_says_for_whom() -> None:
    waiter = {"metadata": {"namespace": "jhub", "annotations": {
        "fracnb.io/gpu-fraction": "1/4", "hub.jupyter.org/username": "alice"}}}  # fmt: skip
    assert reason_text(waiter) == "reclaimed for a 0.25 GPU notebook of alice"
    assert reason_text({"metadata": {"namespace": "team-a"}}) == "reclaimed for a GPU notebook of team-a"
