"""The runner's pure pod handling: argv/env as a kubelet builds them, on the pod's own IP."""

import pytest

from fracnb_testbed.podspec import (
    IpPool,
    PodSpecError,
    container_argv,
    container_env,
    exit_code_of,
    finished_phase,
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
