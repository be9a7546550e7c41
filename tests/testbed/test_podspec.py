"""The runner's pure pod handling: argv/env as a kubelet builds them, on the pod's own IP."""

from pathlib import PurePosixPath

import pytest

from fracnb_testbed.podspec import (
    IpPool,
    PodSpecError,
    container_argv,
    container_env,
    exit_code_of,
    finished_phase,
    path_safe,
    persistent_home,
    running_status,
)

POD = {
    "metadata": {"name": "jupyter-ada", "namespace": "hub", "uid": "u-1", "labels": {"a": "b"}},
    "spec": {"nodeName": "local-cpu-0", "containers": [{"name": "notebook", "image": "img"}]},
}


def no_keys(*_):
    return None


def test_wildcard_address_becomes_the_pod_ip_in_args_and_env():
    container = {
        "name": "notebook",
        "args": ["jupyterhub-singleuser", "--ip=0.0.0.0", "--port=8888"],
        "env": [{"name": "JUPYTERHUB_SERVICE_URL", "value": "http://0.0.0.0:8888/user/ada/"}],
    }
    env = container_env(container, POD, "127.9.9.2", "127.0.0.1", no_keys)
    assert env == {"JUPYTERHUB_SERVICE_URL": "http://127.9.9.2:8888/user/ada/"}
    argv = container_argv(container, env, "127.9.9.2")
    assert argv == ["jupyterhub-singleuser", "--ip=127.9.9.2", "--port=8888"]


def test_field_refs_variable_references_and_key_refs():
    container = {
        "name": "c",
        "command": ["echo", "$(GREETING)", "$$(GREETING)", "$(UNDEFINED)"],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "GREETING", "value": "hello $(NAME)"},
            {"name": "FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}},
        ],
    }
    keys = {("configmaps", "m", "k"): "mapped"}
    env = container_env(container, POD, "127.9.9.3", "127.0.0.1", lambda *k: keys.get(k))
    assert env["NAME"] == "jupyter-ada"
    assert env["NS"] == "hub"
    assert env["IP"] == "127.9.9.3"
    assert env["LABEL"] == "b"
    assert env["GREETING"] == "hello jupyter-ada"
    assert env["FROM_MAP"] == "mapped"
    argv = container_argv(container, env, "127.9.9.3")
    assert argv == ["echo", "hello jupyter-ada", "$(GREETING)", "$(UNDEFINED)"]


def test_unrunnable_containers_are_explained():
    with pytest.raises(PodSpecError, match="neither command nor args"):
        container_argv({"name": "c"}, {}, "127.9.9.2")
    missing = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }
    with pytest.raises(PodSpecError, match="secretKeyRef s/k does not exist"):
        container_env(missing, POD, "127.9.9.2", "127.0.0.1", no_keys)
    with pytest.raises(PodSpecError, match="envFrom is not supported"):
        container_env({"name": "c", "envFrom": [{}]}, POD, "127.9.9.2", "127.0.0.1", no_keys)


def test_ip_pool_hands_out_distinct_addresses_and_reuses_released_ones():
    pool = IpPool("127.50.1.0/24")
    first, second = pool.allocate(), pool.allocate()
    assert (first, second) == ("127.50.1.2", "127.50.1.3")
    pool.release(first)
    assert pool.allocate() == first
    remaining = [pool.allocate() for _ in range(251)]
    assert remaining[-1] == "127.50.1.254"
    with pytest.raises(PodSpecError, match="no free local pod IP"):
        pool.allocate()


def test_exit_codes_and_phases_follow_container_runtimes():
    assert exit_code_of(3) == 3
    assert exit_code_of(-15) == 143
    assert finished_phase({"a": 0, "b": 0}) == "Succeeded"
    assert finished_phase({"a": 0, "b": 1}) == "Failed"


def test_running_status_satisfies_kubespawner_readiness():
    status = running_status(POD, "127.9.9.2", "127.0.0.1", "2026-01-01T00:00:00Z")
    assert status["phase"] == "Running"
    assert status["podIP"] == "127.9.9.2"
    assert all(s["ready"] for s in status["containerStatuses"])
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == ready["ContainersReady"] == "True"


def _hub_pod(namespace: str, annotations: dict[str, str]) -> dict:
    return {"metadata": {"name": "jupyter-x", "namespace": namespace, "uid": "u-2", "annotations": annotations}}


def test_a_hub_users_server_has_one_home_per_namespace_user_and_server():
    assert persistent_home(_hub_pod("hub", {"hub.jupyter.org/username": "ada"})) == PurePosixPath("hub/ada")
    named = {"hub.jupyter.org/username": "ada", "hub.jupyter.org/servername": "gpu-run"}
    assert persistent_home(_hub_pod("hub", named)) == PurePosixPath("hub/ada__gpu-run")
    assert persistent_home(_hub_pod("other", named)) == PurePosixPath("other/ada__gpu-run")
    # Pods KubeSpawner did not make get a fresh home each.
    assert persistent_home(POD) is None
    assert persistent_home(_hub_pod("hub", {"hub.jupyter.org/username": ""})) is None


def test_any_user_name_becomes_one_harmless_path_component():
    assert path_safe("ada.lovelace-1") == "ada.lovelace-1"
    assert path_safe("..") == "_2e."
    assert path_safe(".profile") == "_2eprofile"
    assert path_safe("../../etc") == "_2e._2f.._2fetc"
    assert path_safe("a/b") == "a_2fb"
    assert path_safe("a_b") == "a_5fb"
    assert path_safe("zoë") == "zo_c3_ab"
    # Distinct (user, server) pairs never share a home, even when names contain '_'.
    pairs = [("a", "b"), ("a__b", ""), ("a_", "_b"), ("a", "_b"), ("a_", "b")]
    homes = {
        persistent_home(_hub_pod("hub", {"hub.jupyter.org/username": u, "hub.jupyter.org/servername": s}))
        for u, s in pairs
    }
    assert len(homes) == len(pairs)
