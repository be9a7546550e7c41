"""With KubeSpawner's user namespaces, quotas count every user's pods, wherever they live."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from fractions import Fraction
from types import SimpleNamespace

import pytest
from tornado import web
from traitlets.config import Config

from fracnb_spawner.hubstate import HubState

from .rbac import hub_with_rules

pytestmark = pytest.mark.k8s

QUARTER = [{"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}}]
TEAM = ["ann", "bob", "cid"]


@pytest.fixture
def user_namespaces(testbed, k8s_namespace) -> Iterator[dict[str, str]]:
    """One namespace per user, named as the spawner's template names them (made here: the testbed
    has no controller-manager to give a namespace KubeSpawner creates its default ServiceAccount)."""
    namespaces = {user: testbed.create_namespace(f"{k8s_namespace}-{user}") for user in TEAM}
    yield namespaces
    for namespace in namespaces.values():
        testbed.delete_namespace(namespace)


def team_config(hub_namespace: str) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = QUARTER
    config.FractionalSpawner.enable_user_namespaces = True
    config.FractionalSpawner.user_namespace_template = f"{hub_namespace}-{{username}}"
    config.FracnbQuotas.group_quotas = {"team-a": "1/2"}
    return config


def held_in(testbed, namespaces: dict[str, str]) -> Fraction:
    return sum(
        (
            Fraction(pod["metadata"]["annotations"]["fracnb.io/gpu-fraction"])
            for namespace in namespaces.values()
            for pod in testbed.list_pods(namespace)
        ),
        Fraction(0),
    )


async def test_group_quota_holds_across_a_hub_restart(cluster_spawner, testbed, k8s_namespace, user_namespaces):
    team = SimpleNamespace(name="team-a", users=[SimpleNamespace(name=n) for n in TEAM])

    def spawner_for(user: str):
        spawner = cluster_spawner({"profile": "quarter"}, user=user, config=team_config(k8s_namespace))
        spawner.user.groups = [team]
        assert spawner.namespace == user_namespaces[user]
        return spawner

    first = [spawner_for(user) for user in TEAM[:2]]
    for spawner in first:
        await spawner.start()
    await HubState.discard()  # a new hub process starts with an empty ledger
    late = spawner_for("cid")
    form = await late.render_options_form()
    assert "team-a uses 0.5 of 0.5 GPU" in form, "the form, too, counts pods in other users' namespaces"
    with pytest.raises(web.HTTPError) as refused:
        await late.start()
    assert refused.value.status_code == 403
    assert "team-a uses 0.5 of 0.5 GPU" in (getattr(refused.value, "message", "") or refused.value.log_message)
    assert held_in(testbed, user_namespaces) == Fraction(1, 2)

    await first[0].stop()
    await testbed.wait_for_pod(user_namespaces["ann"], first[0].pod_name, lambda p: p is None, timeout=30)
    again = spawner_for("cid")
    await again.start()  # ann's quarter is free again: counted neither twice nor never
    assert held_in(testbed, user_namespaces) == Fraction(1, 2)
    await asyncio.gather(first[1].stop(), again.stop())


@pytest.fixture
async def namespace_reader(testbed, k8s_namespace):
    """A CoreV1Api as a hub whose ServiceAccount may read pods in its own namespace only (z2jh's Role)."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    async with hub_with_rules(testbed, k8s_namespace, rules) as api:
        yield api


async def test_without_rbac_for_every_namespace_a_spawn_is_refused_not_admitted(
    cluster_spawner, k8s_namespace, user_namespaces, namespace_reader
):
    spawner = cluster_spawner({"profile": "quarter"}, user="cid", config=team_config(k8s_namespace))
    spawner.user.groups = [SimpleNamespace(name="team-a", users=[SimpleNamespace(name="cid")])]
    spawner.api = namespace_reader
    with pytest.raises(web.HTTPError) as refused:
        await spawner.load_user_options()
    assert refused.value.status_code == 503
    assert "GPU quotas cannot be checked now" in refused.value.log_message
    assert HubState.current().ledger.reserved("cid", "") is None

    # Without user namespaces the same Role is enough: the recount lists the hub's namespace only.
    config = team_config(k8s_namespace)
    config.FractionalSpawner.enable_user_namespaces = False
    single = cluster_spawner({"profile": "quarter"}, user="cid", config=config)
    single.user.groups = spawner.user.groups
    single.api = namespace_reader
    await single.load_user_options()
    HubState.current().ledger.release("cid", "")


async def test_without_rbac_for_nodes_the_form_shows_no_counts(cluster_spawner, namespace_reader):
    await HubState.discard()  # the view of this loop reads with the restricted identity below
    config = Config()
    config.FractionalSpawner.profile_list = QUARTER
    viewer = cluster_spawner({}, user="viewer", config=config)
    viewer.api = namespace_reader
    html = await asyncio.wait_for(viewer.render_options_form(), timeout=5)
    assert "Quarter" in html
    assert "free now" not in html
