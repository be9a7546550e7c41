"""The `kueue` cluster's pieces that need no Kueue binary: its description, the manager's config,
the rewritten webhooks and the build lookup."""

import base64

import pytest
import yaml

from fracnb_testbed import kueue
from fracnb_testbed.clusters import load_cluster, parse_cluster
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.state import TestbedState

WEBHOOK_MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- {name: mjob.kb.io, clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}}
- {name: mpod.kb.io, failurePolicy: Fail, clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- {name: vworkload.kb.io, clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-workload}}}
"""


def test_the_kueue_cluster_runs_the_manager_and_the_garbage_collector():
    spec = load_cluster("kueue")
    assert spec.needs_controller_manager
    assert not spec.uses_dra
    (transformation,) = spec.kueue["resources"]["transformations"]
    assert transformation["outputs"] == {"fracnb.io/gpu-milli": "250"}
    assert load_cluster("mixed").kueue is None
    assert not load_cluster("mixed").needs_controller_manager


def test_a_kueue_key_that_is_not_a_mapping_is_refused_by_name():
    with pytest.raises(TestbedError, match="kueue: must be a mapping"):
        parse_cluster({"kueue": ["pod"], "nodeGroups": [{"name": "cpu", "capacity": {"cpu": "8"}}]}, "site.yaml")


def test_the_manager_listens_on_loopback_and_takes_the_clusters_keys(tmp_path):
    state = TestbedState(directory=tmp_path, ports={"kueue-health": 1, "kueue-webhook": 2, "kueue-visibility": 3})
    config = kueue.manager_config(state, {"resources": {"transformations": []}})
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:1"}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 2, "certDir": str(tmp_path / "kueue-certs")}
    assert config["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": 3}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"] == {"frameworks": ["pod"]}
    assert config["resources"] == {"transformations": []}


def test_webhooks_are_called_by_url_and_pods_without_a_queue_pass_them():
    manifests = list(yaml.safe_load_all(WEBHOOK_MANIFESTS))
    mutating, validating = kueue.webhook_configurations(manifests, 19443, b"PEM")
    assert mutating["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    (pod_hook,) = mutating["webhooks"]  # the job integration's webhook is left out
    assert pod_hook["clientConfig"] == {
        "url": "https://127.0.0.1:19443/mutate--v1-pod",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert pod_hook["objectSelector"] == {
        "matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]
    }
    assert pod_hook["failurePolicy"] == "Fail"
    (workload_hook,) = validating["webhooks"]
    assert "objectSelector" not in workload_hook


def test_a_missing_build_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv(kueue.KUEUE_DIR_ENV, str(tmp_path))
    with pytest.raises(TestbedError, match=r"testbed/go/build-kueue\.sh") as caught:
        kueue.find_kueue()
    assert str(tmp_path / "bin" / "kueue") in str(caught.value)


def test_the_default_build_dir_carries_the_pinned_version(monkeypatch, tmp_path):
    monkeypatch.delenv(kueue.KUEUE_DIR_ENV, raising=False)
    monkeypatch.setenv("FRACNB_TESTBED_CACHE", str(tmp_path))
    assert kueue.default_build_dir() == tmp_path / f"kueue-{kueue.pinned_version()}"
    assert kueue.pinned_version().startswith("v0.")
