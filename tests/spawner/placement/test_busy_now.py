"""A holder busy now, read from its pod's ``fracnb.io/busy-since`` (the fracnb service writes it from the
notebooks' session reports), against literal dicts: the annotation, the threshold, and the card it turns a
new share away from."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fracnb_spawner.cluster.devices import DraWant
from fracnb_spawner.cluster.slots import Cluster
from fracnb_spawner.cluster.view import trim_pod
from fracnb_spawner.common.podkeys import BUSY_SINCE_ANNOTATION, SLOT_KIND_LABEL
from fracnb_spawner.culling import isoformat
from fracnb_spawner.placement.cards import dra_cards, holders_by_pod
from fracnb_spawner.placement.decide import BUSY_NOW_SECONDS, Busyness, Holder, busy_now, busy_words, decide
from tests.spawner.placement.test_cards import DRIVER, GIB, NODES, claim, gpu, notebook, slice_

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
WANT = DraWant(DRIVER, "gpu", memory=20 * GIB)


def ago(seconds: float) -> str:
    return isoformat(NOW - timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        (None, None),  # no kernel busy, or no report: the history decides
        ("", None),
        (ago(BUSY_NOW_SECONDS - 1), None),  # a short cell says nothing the history does not
        (ago(BUSY_NOW_SECONDS), True),  # busy for the threshold: a long cell runs on
        (ago(3600), True),
        ("2026-12-01T11:00:00", True),  # without a zone: UTC, as everything fracnb writes
        ("2026-12-01T11:55:00+01:00", True),  # 10:55 UTC
        (ago(-600), None),  # a clock ahead of the hub's: not busy for long yet
        ("soon", None),  # not a time: unknown, never busy
    ],
)
def test_a_holder_counts_as_busy_now_once_its_kernels_were_busy_for_the_threshold(since, expected) -> None:
    assert BUSY_NOW_SECONDS == 300  # the replay's "busy for 5 minutes" (bench/replay_placement.py)
    assert busy_now(since, NOW) is expected


def test_the_threshold_can_be_passed_in() -> None:
    assert busy_now(ago(60), NOW, after=60) is True
    assert busy_now(ago(59), NOW, after=60) is None


def annotated(name: str, user: str, since: str | None) -> dict:
    pod = notebook(name, user)
    if since is not None:
        pod["metadata"]["annotations"][BUSY_SINCE_ANNOTATION] = since
    return pod


def test_each_notebook_pod_is_a_holder_of_its_user_busy_now_only_past_the_threshold() -> None:
    pods = [annotated("jupyter-ann", "ann", ago(900)), annotated("jupyter-bob", "bob", ago(60)),
            annotated("jupyter-cat", "cat", None), {"metadata": {"name": "batch", "namespace": "hub"}}]  # fmt: skip
    assert holders_by_pod(pods, NOW) == {
        ("hub", "jupyter-ann"): Holder("ann", busy_now=True),
        ("hub", "jupyter-bob"): Holder("bob"),
        ("hub", "jupyter-cat"): Holder("cat"),
    }


def test_the_hubs_pod_view_keeps_the_busy_since_annotation() -> None:
    pod = annotated("jupyter-ann", "ann", ago(900))
    pod["metadata"]["labels"] = {SLOT_KIND_LABEL: "gpu.nvidia.com.a100"}
    pod["metadata"]["annotations"]["unrelated.example/note"] = "dropped"
    kept = trim_pod(pod)
    assert kept is not None
    assert kept["metadata"]["annotations"][BUSY_SINCE_ANNOTATION] == ago(900)
    assert "unrelated.example/note" not in kept["metadata"]["annotations"]


def test_with_equal_histories_the_next_share_goes_beside_the_holder_not_busy_now() -> None:
    """Two cards, one holder each, both users 40 % busy by their history; ann has run one cell for 15 min."""
    cluster = Cluster(
        NODES,
        [annotated("jupyter-ann", "ann", ago(900)), annotated("jupyter-bob", "bob", ago(30))],
        [slice_("dev-0", gpu("gpu-0", "GPU-a")), slice_("dev-1", gpu("gpu-0", "GPU-b"))],
        [claim("jupyter-ann", "dev-0", "gpu-0"), claim("jupyter-bob", "dev-1", "gpu-0")],
    )
    cards = dra_cards(cluster, WANT, NOW)
    history = Busyness({"ann": 0.4, "bob": 0.4}, 0.4)
    placement = decide("adaptive", cards, 20 * GIB, history, reserve=0)
    assert placement is not None
    assert [card.node for card in placement.ranked] == ["dev-1", "dev-0"]
    assert placement.reason == (
        "card 0 of dev-1: 0.4 busy expected of 1 holder (from their busy time), the least busy of 2 cards that fit; "
        "nothing waits for whole cards"
    )
    # Ten minutes on, bob's cell runs on too: both busy now, so the cards tie and the key decides.
    later = dra_cards(cluster, WANT, NOW + timedelta(minutes=10))
    assert [holder.busy_now for card in later for holder in card.holders] == [True, True]
    # Without the annotation (the old hub) the two cards tie: the first by key, beside the busy holder.
    unmarked = [annotated("jupyter-ann", "ann", None), annotated("jupyter-bob", "bob", None)]
    blind = dra_cards(Cluster(NODES, unmarked, cluster.slices, cluster.claims), WANT, NOW)
    assert decide("adaptive", blind, 20 * GIB, history, reserve=0).ranked[0].node == "dev-0"


def test_the_reason_says_how_many_holders_are_busy_now_beside_the_expectation() -> None:
    cluster = Cluster(
        NODES,
        [annotated("jupyter-ann", "ann", ago(900)), annotated("jupyter-bob", "bob", None),
         annotated("jupyter-cat", "cat", None), annotated("jupyter-dan", "dan", None)],
        [slice_("dev-0", gpu("gpu-0", "GPU-a")), slice_("dev-1", gpu("gpu-0", "GPU-b"))],
        [claim("jupyter-ann", "dev-0", "gpu-0"), claim("jupyter-bob", "dev-0", "gpu-0"),
         claim("jupyter-cat", "dev-1", "gpu-0"), claim("jupyter-dan", "dev-1", "gpu-0")],
    )  # fmt: skip
    cards = dra_cards(cluster, WANT, NOW)
    placement = decide("packed", cards, 20 * GIB, Busyness({}, 0.2), reserve=0)
    assert placement is not None
    assert placement.ranked[0].node == "dev-1"  # both as full: the one not expected to keep a holder busy
    assert "taken, 0.4 busy expected of 2 holders (from their busy time))" in placement.reason
    spread = decide("spread", cards, 20 * GIB, Busyness({}, 0.2), reserve=0)
    assert [card.node for card in spread.ranked] == ["dev-1", "dev-0"]
    dev_0 = next(card for card in cards if card.node == "dev-0")
    assert busy_words(dev_0, Busyness({}, 0.2)) == (
        "1.2 busy expected of 2 holders (1 busy now, the others from their busy time)"
    )
