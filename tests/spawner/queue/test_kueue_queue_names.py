"""Each hub user's own Kueue LocalQueue: a name one for one with the username (names that are DNS labels kept as
they were, any other hashed, as KubeSpawner's slugs), a spawn refused before its pod unless the queue is the
user's, and what the dry run tells an admin. tests/kueue/test_queue_ownership_on_kueue.py runs the refusal on the
real Kueue."""

import logging
from types import SimpleNamespace

import pytest
import yaml
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodSpec
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.dryrun import main
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.kueue import model as kueue
from fracnb_spawner.queue.localqueues import local_queue_name
from fracnb_spawner.queue.spawning import SpawnQueue
from tests.spawner.queue.fakes import FakeClock, FakeLocalQueues, ask, local_queue
from tests.spawner.queue.test_kueue_engine import QUARTER

TEMPLATE = "fracnb-{username}"  # c.FracnbQueue.kueue_local_queue's default


@pytest.mark.parametrize("user", ["ann", "bob", "carol", "carol-smith", "7", "a--b"])
def test_a_name_that_is_already_a_dns_label_keeps_the_queue_it_had(user):
    assert local_queue_name(TEMPLATE, user) == f"fracnb-{user}"


def test_names_that_fold_together_get_queues_of_their_own():
    names = {
        user: local_queue_name(TEMPLATE, user)
        for user in ("carol", "carol_", "Carol", "carol.", "_carol", "carol.smith", "carol_smith", "carol-smith")
    }
    assert names == {
        "carol": "fracnb-carol",
        "carol_": "fracnb-carol---dbfdf2f0",
        "Carol": "fracnb-carol---b2dd7d8a",
        "carol.": "fracnb-carol---54e0d999",
        "_carol": "fracnb-carol---a7d315ee",
        "carol.smith": "fracnb-carol-smith---8a881d04",
        "carol_smith": "fracnb-carol-smith---12d97e0b",
        "carol-smith": "fracnb-carol-smith",
    }
    assert len(set(names.values())) == len(names)


def test_a_kept_name_never_equals_a_hashed_one():
    # "a---b" would look like a hashed name: it is hashed itself, as KubeSpawner does with its separator
    assert local_queue_name(TEMPLATE, "a---b") == "fracnb-a-b---1acd27f8"
    assert local_queue_name(TEMPLATE, "") == "fracnb-x---e3b0c442"
    assert local_queue_name(TEMPLATE, "ünïcode") == "fracnb-n-code---b8be8967"


def test_a_long_name_is_cut_to_63_characters_with_its_hash_kept():
    fits = "y" * 56  # 63 with "fracnb-": kept
    assert local_queue_name(TEMPLATE, fits) == f"fracnb-{fits}"
    longer = local_queue_name(TEMPLATE, "y" * 57)
    assert longer == "fracnb-" + "y" * 45 + "---8cb8e168"
    assert len(longer) == 63
    assert local_queue_name(TEMPLATE, "y" * 58) != longer, "two long names that share a start"
    assert local_queue_name("{username}", "a" * 63) == "a" * 63
    assert local_queue_name("{username}", "a" * 64) == "a" * 52 + "---ffe054fe"


def test_a_template_that_would_share_a_queue_or_leave_no_room_is_refused_naming_the_key():
    with pytest.raises(TraitError, match=r"kueue_local_queue: 'notebooks' .*has no \{username\}"):
        FracnbQueue(kueue_local_queue="notebooks")
    with pytest.raises(TraitError, match=r"kueue_local_queue: .*leaves 10 characters of 63"):
        FracnbQueue(kueue_local_queue="{username}-" + "q" * 52)
    assert FracnbQueue(kueue_local_queue="{username}").kueue_local_queue == "{username}"


def test_a_users_queue_is_theirs_unless_missing_or_marked_as_anothers():
    own, unmarked = local_queue("jhub", "fracnb-carol", "carol"), local_queue("jhub", "fracnb-carol")
    assert kueue.not_own_queue_text(own, "carol", "fracnb-carol", "jhub") is None
    assert kueue.not_own_queue_text(unmarked, "carol", "fracnb-carol", "jhub") is None
    missing = kueue.not_own_queue_text(None, "carol_", "fracnb-carol---dbfdf2f0", "jhub")
    assert missing.startswith("No GPU server was started: Kueue has no LocalQueue fracnb-carol---dbfdf2f0 in jhub")
    assert "annotated fracnb.io/hub-user: carol_" in missing
    # a queue named by fracnb's earlier, folding rule for carol.smith, which is carol-smith's name now
    folded = local_queue("jhub", "fracnb-carol-smith", "carol.smith")
    foreign = kueue.not_own_queue_text(folded, "carol-smith", "fracnb-carol-smith", "jhub")
    assert "belongs to hub user 'carol.smith' (annotation fracnb.io/hub-user), so its quota is not yours" in foreign
    assert "create yours, fracnb-carol-smith, annotated fracnb.io/hub-user: carol-smith" in foreign


def spawn_queue(user: str, answers: FakeLocalQueues) -> SpawnQueue:
    """``user``'s GPU spawn with engine "kueue", the apiserver holding the LocalQueues of ``answers``."""
    host = SimpleNamespace(
        name="", namespace="jhub", pod_name=f"jupyter-{user}", start_timeout=60, log=logging.getLogger("test"),
        user=SimpleNamespace(name=user, groups=[]), config=Config(), api=SimpleNamespace(api_client=answers),
        pod_reflector=SimpleNamespace(pods={}), queue_settings=lambda: FracnbQueue(engine="kueue"),
    )  # fmt: skip
    queue = SpawnQueue(host, lambda: None, lambda user, server: None, clock=FakeClock())
    queue.reset(ask(), max_wait=600, plan=QUARTER)
    return queue


async def refused_join(user: str, answers: FakeLocalQueues) -> tuple[web.HTTPError, V1Pod]:
    queue = spawn_queue(user, answers)
    pod = V1Pod(metadata=V1ObjectMeta(name=f"jupyter-{user}"), spec=V1PodSpec(containers=[]))
    with pytest.raises(web.HTTPError) as refused:
        await queue.join(None, pod)
    assert queue.place is None
    assert not pod.metadata.labels, "refused before the pod is labelled, let alone created"
    return refused.value, pod


async def test_a_user_whose_name_folds_into_anothers_is_refused_rather_than_given_that_queue():
    carols = FakeLocalQueues(local_queue("jhub", "fracnb-carol", "carol"))
    refusal, _ = await refused_join("carol_", carols)
    assert refusal.status_code == 403
    assert "Kueue has no LocalQueue fracnb-carol---dbfdf2f0 in jhub" in refusal.jupyterhub_message
    queue = spawn_queue("carol", carols)
    pod = V1Pod(metadata=V1ObjectMeta(name="jupyter-carol"), spec=V1PodSpec(containers=[]))
    await queue.join(None, pod)
    assert pod.metadata.labels[kueue.QUEUE_NAME_LABEL] == "fracnb-carol"


async def test_a_queue_marked_as_another_users_is_refused_and_an_unreadable_one_too():
    misnamed = FakeLocalQueues(local_queue("jhub", "fracnb-carol-smith", "carol.smith"))
    refusal, _ = await refused_join("carol-smith", misnamed)
    assert refusal.status_code == 403
    assert "belongs to hub user 'carol.smith'" in refusal.jupyterhub_message
    refusal, _ = await refused_join("carol-smith", FakeLocalQueues(status=503))
    assert refusal.status_code == 503
    assert "could not read your LocalQueue fracnb-carol-smith in jhub (Service Unavailable)" in (
        refusal.jupyterhub_message
    )


def kueue_hub_config(tmp_path):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("c = get_config()\nc.FracnbQueue.engine = 'kueue'\n")
    return path


def test_the_dry_run_says_how_per_user_queues_are_named_and_marked(tmp_path, capsys):
    assert main([str(kueue_hub_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "per-user LocalQueues (engine kueue, docs/queue.md):" in out
    assert "ann -> fracnb-ann, carol.smith -> fracnb-carol-smith---8a881d04" in out
    assert "annotate each with fracnb.io/hub-user: <exact hub username>" in out
    assert "--kueue-queue-of <username>" in out
    builtin = tmp_path / "builtin.py"
    builtin.write_text("c = get_config()\n")
    assert main([str(builtin)]) == 0
    assert "per-user LocalQueues" not in capsys.readouterr().out


def test_the_dry_run_prints_a_users_local_queue_to_fill_in(tmp_path, capsys):
    assert main([str(kueue_hub_config(tmp_path)), "--kueue-queue-of", "carol", "carol_"]) == 0
    carol, carol_ = yaml.safe_load_all(capsys.readouterr().out)
    assert carol["kind"] == "LocalQueue"
    assert carol["metadata"]["name"] == "fracnb-carol"
    assert carol["metadata"]["annotations"] == {"fracnb.io/hub-user": "carol"}
    assert carol_["metadata"]["name"] == "fracnb-carol---dbfdf2f0"
    assert carol_["metadata"]["annotations"] == {"fracnb.io/hub-user": "carol_"}
    assert carol_["spec"] == {"clusterQueue": "<the user's team ClusterQueue>"}
