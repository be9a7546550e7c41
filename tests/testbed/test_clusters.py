"""Cluster descriptions: validation errors name the group; built-ins expand to GFD-style nodes."""

import pytest

from fracnb_testbed.clusters import (
    KWOK_SELECTOR_LABEL,
    RUNNER_LABEL,
    builtin_cluster_names,
    load_cluster,
    node_manifests,
    parse_cluster,
)
from fracnb_testbed.errors import TestbedError


def group(**overrides):
    base = {"name": "gpu", "count": 2, "capacity": {"cpu": "8", "nvidia.com/gpu.shared": "4"}}
    return {**base, **overrides}


@pytest.mark.parametrize(
    ("raw_group", "message"),
    [
        (group(labels={"nvidia.com/gpu.replicas": 4}), "'nvidia.com/gpu.replicas': value 4 must"),
        (group(count=0), "count 0 must be an integer"),
        (group(runner="docker"), "runner 'docker' must be one of"),
        (group(capacity={"cpu": "eight"}), "'eight' is not a Kubernetes quantity"),
        (group(capacity={}), "capacity must be a non-empty mapping"),
        (group(taints=[{"key": "k", "effect": "Sometimes"}]), "effect must be one of"),
        (group(colour="blue"), "unknown keys ['colour']"),
        (group(sharedDevicesAllocationPolicy="spread"), "sharedDevicesAllocationPolicy 'spread' must be one of"),
    ],
)
def test_invalid_group_is_reported_with_its_name(raw_group, message):
    with pytest.raises(TestbedError) as error:
        parse_cluster({"nodeGroups": [raw_group]}, "test.yaml")
    assert "test.yaml: node group 'gpu'" in str(error.value)
    assert message in str(error.value)


def test_bad_group_name_and_duplicates_are_rejected():
    with pytest.raises(TestbedError, match=r"nodeGroups\[0\]: name 'GPU_nodes'"):
        parse_cluster({"nodeGroups": [group(name="GPU_nodes")]}, "t.yaml")
    with pytest.raises(TestbedError, match="'gpu': the name is used twice"):
        parse_cluster({"nodeGroups": [group(), group()]}, "t.yaml")
    with pytest.raises(TestbedError, match="nodeGroups must be a non-empty list"):
        parse_cluster({"name": "empty"}, "t.yaml")


def test_unknown_builtin_and_missing_file_are_clear(tmp_path):
    with pytest.raises(TestbedError, match=r"unknown cluster 'nope'; built-in ones: .*mixed"):
        load_cluster("nope")
    with pytest.raises(TestbedError, match="does not exist"):
        load_cluster(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("nodeGroups: [\n")
    with pytest.raises(TestbedError, match=r"broken\.yaml: not valid YAML"):
        load_cluster(broken)


def test_expansion_names_labels_and_capacity():
    spec = parse_cluster(
        {
            "nodeGroups": [
                group(labels={"nvidia.com/gpu.replicas": "4"}),
                {"name": "here", "runner": "local", "capacity": {"cpu": "2"}},
            ]
        }
    )
    nodes = {node["metadata"]["name"]: node for node in node_manifests(spec)}
    assert sorted(nodes) == ["gpu-0", "gpu-1", "here-0"]
    kwok_node, local_node = nodes["gpu-1"], nodes["here-0"]
    assert kwok_node["metadata"]["labels"][KWOK_SELECTOR_LABEL[0]] == KWOK_SELECTOR_LABEL[1]
    assert kwok_node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert kwok_node["status"]["allocatable"]["nvidia.com/gpu.shared"] == "4"
    assert KWOK_SELECTOR_LABEL[0] not in local_node["metadata"]["labels"]
    assert local_node["metadata"]["labels"][RUNNER_LABEL] == "local"
    assert local_node["status"]["addresses"][0]["address"] == "127.0.0.1"
    addresses = {nodes[n]["status"]["addresses"][0]["address"] for n in ("gpu-0", "gpu-1")}
    assert len(addresses) == 2


def test_mixed_has_every_sharing_mechanism():
    spec = load_cluster("mixed")
    nodes = node_manifests(spec)

    def having(label, value):
        return [n for n in nodes if n["metadata"]["labels"].get(label) == value]

    four_way = having("nvidia.com/gpu.sharing-strategy", "time-slicing")
    assert {n["status"]["capacity"]["nvidia.com/gpu.shared"] for n in four_way} >= {"32", "64"}
    mig = having("nvidia.com/mig.strategy", "mixed")[0]
    assert mig["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == "14"
    assert mig["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] == "14"
    assert having("gpu", "on")[0]["status"]["capacity"]["nvidia.com/gpu"] == "80"
    assert having("nvidia.com/mps.capable", "true")[0]["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] == "mps"
    local = having(RUNNER_LABEL, "local")
    assert any("nvidia.com/gpu.shared" in n["status"]["capacity"] for n in local)
    assert any(not any(k.startswith("nvidia.com/") for k in n["status"]["capacity"]) for n in local)


def test_every_builtin_loads_and_large_is_large():
    for name in builtin_cluster_names():
        assert load_cluster(name).node_count > 0
    assert load_cluster("large").node_count >= 300


def test_reference_clusters_are_the_same_hardware_split_two_ways():
    """The replay's clusters: 4 servers x 8 GPUs; fracnb's shares the 16 development GPUs 8 ways."""
    fractional, whole = load_cluster("reference"), load_cluster("reference-whole")
    for spec in (fractional, whole):
        assert [(g.name, g.count, g.labels["node-pool"]) for g in spec.groups] == [
            ("dev", 2, "development"),
            ("train", 2, "training"),
        ]
        assert {g.labels["nvidia.com/gpu.count"] for g in spec.groups} == {"8"}
    dev, train = fractional.groups
    assert dev.capacity["nvidia.com/gpu.shared"] == "64"
    assert (dev.labels["nvidia.com/gpu.replicas"], dev.labels["nvidia.com/gpu.sharing-strategy"]) == (
        "8",
        "time-slicing",
    )
    assert train.capacity["nvidia.com/gpu"] == "8"
    assert (dev.allocation_policy, train.allocation_policy) == ("packed", "distributed")
    assert all(g.capacity["nvidia.com/gpu"] == "8" and "nvidia.com/gpu.shared" not in g.capacity for g in whole.groups)


def test_reference_dra_publishes_the_same_cards_as_dra_devices():
    spec = load_cluster("reference-dra")
    assert [(g.name, g.count, g.labels["node-pool"]) for g in spec.groups] == [
        ("dev", 2, "development"),
        ("train", 2, "training"),
    ]
    for g in spec.groups:
        assert [(d.kind, d.memory, d.count) for d in g.dra_devices] == [("gpu", "32Gi", 8)]
        assert not any(name.startswith("nvidia.com/") for name in g.capacity)
