"""A dra spawn as a hub whose ServiceAccount has only the rights a test grants (the testbed's
apiserver authorizes with RBAC): without the rule on resourceclaims the spawn fails with the rule
to add, and its pod goes; with helm-values/rbac.yaml's rules it starts, and the pod owns its
claim (the hub's patch) by the time the start returns."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tornado import web

from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.dra import claims_in, templates_in
from tests.spawner_k8s.rbac import hub_with_rules

pytestmark = pytest.mark.k8s

RBAC_YAML = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"
# What z2jh's hub Role grants in the hub's namespace, as far as a spawn needs it (no patch: see pod_patch_rules).
CHART_POD_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


def rules_of_rbac_yaml(kind: str, name: str) -> list[dict]:
    documents = yaml.safe_load_all(RBAC_YAML.read_text())
    (role,) = [d for d in documents if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    return role["rules"]


def dra_rules_of_rbac_yaml() -> list[dict]:
    return rules_of_rbac_yaml("ClusterRole", "fracnb-hub-dra")


def pod_patch_rules() -> list[dict]:
    """helm-values/rbac.yaml's Role for the patches the chart's Role does not allow (the queue's gate lift)."""
    return rules_of_rbac_yaml("Role", "fracnb-hub-pod-patch")


POD_RULES = CHART_POD_RULES + pod_patch_rules()  # the hub's namespace as rbac.yaml leaves it


async def test_without_rights_on_claims_the_spawn_names_the_missing_rule_and_its_pod_goes(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    async with hub_with_rules(dra_testbed, dra_namespace, POD_RULES) as api:
        spawner = dra_spawner({"profile": "any-quarter"}, user="norights")
        spawner.api = api
        with pytest.raises(web.HTTPError) as caught:
            await spawner.start()
    assert caught.value.status_code == 500
    message = caught.value.jupyterhub_message
    assert f"could not create ResourceClaim {dra_namespace}/jupyter-norights-gpu (403 Forbidden)" in message
    assert "resources [resourceclaims], verbs [create, patch, delete]" in message
    assert "helm-values/rbac.yaml" in message
    assert [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name] == []


async def test_without_patch_on_claims_the_start_fails_naming_the_rule_and_leaves_nothing(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    """Each verb of the rule is needed: without ``patch`` the pod cannot be made the claim's owner."""
    rules = [
        {**rule, "verbs": [verb for verb in rule["verbs"] if verb != "patch"]} for rule in dra_rules_of_rbac_yaml()
    ]
    async with hub_with_rules(dra_testbed, dra_namespace, POD_RULES + rules) as api:
        spawner = dra_spawner({"profile": "any-quarter"}, user="nopatch")
        spawner.api = api
        with pytest.raises(web.HTTPError) as caught:
            await spawner.start()
    assert caught.value.status_code == 500
    message = caught.value.jupyterhub_message
    assert f"could not make the pod the owner of ResourceClaim {dra_namespace}/jupyter-nopatch-gpu (403" in message
    assert "verbs [create, patch, delete]" in message
    assert [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name] == []
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the failed start's claim to go", timeout=30
    )


async def test_the_rules_of_rbac_yaml_are_enough_and_the_pod_owns_its_claim(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    async with hub_with_rules(dra_testbed, dra_namespace, POD_RULES + dra_rules_of_rbac_yaml()) as api:
        spawner = dra_spawner({"profile": "any-quarter"}, user="rights")
        spawner.api = api
        await spawner.start()
        (claim,) = claims_in(dra_testbed, dra_namespace)
        (pod,) = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name]
        assert [ref["uid"] for ref in claim["metadata"].get("ownerReferences", [])] == [pod["metadata"]["uid"]]
        assert claim["metadata"]["labels"]["fracnb.io/gpu-backend"] == "dra"
        assert claim["status"]["allocation"]["devices"]["results"], "the pod runs on the device its claim holds"
        assert templates_in(dra_testbed, dra_namespace) == [], "no template: the hub makes the claim itself"
        await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claim to go at stop", timeout=30
    )
