"""Cluster descriptions: YAML node groups expanded into v1 Node objects.

A description is a mapping with ``name`` and ``nodeGroups``; each group is::

    - name: a100-ts4            # node names are a100-ts4-0, a100-ts4-1, ...
      count: 2                  # default 1
      runner: kwok              # kwok (simulated pods) or local (pods run as local processes)
      labels: {nvidia.com/gpu.replicas: "4"}          # string values only
      annotations: {}
      capacity: {cpu: "64", memory: 512Gi, nvidia.com/gpu.shared: 32}
      allocatable: {...}        # default: same as capacity
      taints: [{key: k, value: v, effect: NoSchedule}]
      draDevices: {gpus: [...], mig: [...]}  # fake GPUs published as DRA ResourceSlices (dra.py)
      sharedDevicesAllocationPolicy: packed  # the NVIDIA device plugin's, for replicated GPUs

A top-level ``kueue`` mapping runs Kueue's manager with the cluster (fracnb_testbed.kueue); its keys
are merged into the manager's Configuration (e.g. ``resources: {transformations: [...]}``).

Validation is pure and reports the file and group it is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fracnb_testbed.dra import FakeDevice, device_classes, parse_dra_devices, resource_slice
from fracnb_testbed.errors import TestbedError

RUNNERS = ("kwok", "local")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GROUP_KEYS = {
    "name",
    "count",
    "runner",
    "labels",
    "annotations",
    "capacity",
    "allocatable",
    "taints",
    "draDevices",
    "sharedDevicesAllocationPolicy",
}
TOP_KEYS = {"name", "description", "nodeGroups", "kueue"}
# The NVIDIA device plugin's flags.plugin.sharedDevicesAllocationPolicy (v0.20.0): which replica,
# hence which card, a time-sliced or MIG request gets. Nothing on the testbed reads it but the
# replay benchmark, which models that choice (bench/replay_cards.py); "distributed" is upstream's default.
ALLOCATION_POLICIES = ("distributed", "packed")
MAX_NODES_PER_GROUP = 5000
# KWOK manages exactly the nodes with this label (kwok --manage-nodes-with-label-selector).
KWOK_SELECTOR_LABEL = ("type", "kwok")
RUNNER_LABEL = "fracnb.io/runner"
NODE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
BASE_NODE_INFO = {
    "architecture": "amd64",
    "operatingSystem": "linux",
    "osImage": "fracnb testbed",
    "kernelVersion": "fake",
    "containerRuntimeVersion": "fake",
    "kubeletVersion": "fake",
    "kubeProxyVersion": "fake",
    "bootID": "",
    "machineID": "",
    "systemUUID": "",
}
READY_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "node is ready"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "enough memory"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "enough PIDs"),
)


@dataclass(frozen=True)
class NodeGroup:
    name: str
    count: int
    runner: str
    labels: dict[str, str]
    annotations: dict[str, str]
    capacity: dict[str, str]
    allocatable: dict[str, str]
    taints: tuple[dict[str, str], ...] = ()
    dra_devices: tuple[FakeDevice, ...] = ()
    allocation_policy: str = "distributed"

    def node_names(self) -> list[str]:
        return [f"{self.name}-{index}" for index in range(self.count)]


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    groups: tuple[NodeGroup, ...]
    description: str = ""
    source: str = field(default="<memory>", compare=False)
    # Kueue manager Configuration keys; None: no Kueue.
    kueue: dict[str, Any] | None = None

    @property
    def node_count(self) -> int:
        return sum(group.count for group in self.groups)

    def groups_run_by(self, runner: str) -> list[NodeGroup]:
        return [group for group in self.groups if group.runner == runner]

    @property
    def uses_dra(self) -> bool:
        """Whether any node publishes DRA devices (the testbed then runs kube-controller-manager)."""
        return any(group.dra_devices for group in self.groups)

    @property
    def needs_controller_manager(self) -> bool:
        """DRA claims need its resourceclaim controller; Kueue's Workloads its garbage collector."""
        return self.uses_dra or self.kueue is not None


def _fail(source: str, where: str, message: str) -> TestbedError:
    return TestbedError(f"{source}: {where}: {message}")


def _string_map(raw: Any, source: str, where: str, what: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(source, where, f"{what} must be a mapping of names to strings")
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise _fail(
                source,
                where,
                f'{what} {key!r}: value {value!r} must be a string; quote it, e.g. {key}: "{value}"',
            )
    return dict(raw)


def _quantities(raw: Any, source: str, where: str, what: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise _fail(source, where, f"{what} must be a non-empty mapping, e.g. {{cpu: '8'}}")
    result = {}
    for key, value in raw.items():
        text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
        if not isinstance(key, str) or not QUANTITY_RE.match(text):
            raise _fail(
                source,
                where,
                f"{what} {key!r}: {value!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)",
            )
        result[key] = text
    return result


def _taints(raw: Any, source: str, where: str) -> tuple[dict[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(source, where, "taints must be a list of {key, value, effect}")
    taints = []
    for taint in raw:
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str):
            raise _fail(source, where, f"taint {taint!r} needs a string 'key'")
        if taint.get("effect") not in TAINT_EFFECTS:
            raise _fail(source, where, f"taint {taint['key']!r}: effect must be one of {TAINT_EFFECTS}")
        taints.append({k: str(v) for k, v in taint.items() if k in ("key", "value", "effect")})
    return tuple(taints)


def parse_group(raw: Any, source: str, index: int) -> NodeGroup:
    """Validate one node group mapping."""
    if not isinstance(raw, dict):
        raise _fail(source, f"nodeGroups[{index}]", "each node group must be a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not NODE_NAME_RE.match(name):
        raise _fail(
            source,
            f"nodeGroups[{index}]",
            f"name {name!r} must be lowercase letters, digits and '-' (it prefixes node names)",
        )
    where = f"node group {name!r}"
    unknown = sorted(set(raw) - GROUP_KEYS)
    if unknown:
        raise _fail(source, where, f"unknown keys {unknown}; allowed: {sorted(GROUP_KEYS)}")
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_NODES_PER_GROUP:
        raise _fail(source, where, f"count {count!r} must be an integer from 1 to {MAX_NODES_PER_GROUP}")
    runner = raw.get("runner", "kwok")
    if runner not in RUNNERS:
        raise _fail(source, where, f"runner {runner!r} must be one of {RUNNERS}")
    capacity = _quantities(raw.get("capacity"), source, where, "capacity")
    allocatable = (
        _quantities(raw["allocatable"], source, where, "allocatable") if "allocatable" in raw else dict(capacity)
    )
    policy = raw.get("sharedDevicesAllocationPolicy", ALLOCATION_POLICIES[0])
    if policy not in ALLOCATION_POLICIES:
        raise _fail(source, where, f"sharedDevicesAllocationPolicy {policy!r} must be one of {ALLOCATION_POLICIES}")
    return NodeGroup(
        name=name,
        count=count,
        runner=runner,
        labels=_string_map(raw.get("labels"), source, where, "label"),
        annotations=_string_map(raw.get("annotations"), source, where, "annotation"),
        capacity=capacity,
        allocatable=allocatable,
        taints=_taints(raw.get("taints"), source, where),
        dra_devices=parse_dra_devices(raw.get("draDevices"), lambda message: _fail(source, where, message)),
        allocation_policy=policy,
    )


def parse_cluster(raw: Any, source: str = "<memory>") -> ClusterSpec:
    """Validate a loaded cluster description."""
    if not isinstance(raw, dict):
        raise TestbedError(f"{source}: a cluster description must be a mapping with nodeGroups")
    # "x-" keys hold YAML anchors shared by groups, as in docker-compose files.
    unknown = sorted(key for key in set(raw) - TOP_KEYS if not str(key).startswith("x-"))
    if unknown:
        raise _fail(
            source,
            "top level",
            f"unknown keys {unknown}; allowed: {sorted(TOP_KEYS)} and x-* for anchors",
        )
    groups_raw = raw.get("nodeGroups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise _fail(source, "top level", "nodeGroups must be a non-empty list of node groups")
    groups = tuple(parse_group(group, source, index) for index, group in enumerate(groups_raw))
    kueue = raw.get("kueue")
    if kueue is not None and not isinstance(kueue, dict):
        raise _fail(source, "kueue", "must be a mapping of Kueue Configuration keys, e.g. {resources: {...}}, or {}")
    seen: set[str] = set()
    for group in groups:
        if group.name in seen:
            raise _fail(source, f"node group {group.name!r}", "the name is used twice")
        seen.add(group.name)
    return ClusterSpec(
        name=str(raw.get("name") or Path(source).stem),
        groups=groups,
        description=str(raw.get("description", "")),
        source=source,
        kueue=dict(kueue) if kueue is not None else None,
    )


def builtin_cluster_names() -> list[str]:
    """Names of the descriptions shipped in the package (``mixed``, ``large``, ...)."""
    folder = resources.files("fracnb_testbed") / "clusters"
    return sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def load_cluster(name_or_path: str | Path) -> ClusterSpec:
    """Load a built-in description by name, or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise TestbedError(f"cluster description {path} does not exist")
        text, source = path.read_text(), str(path)
    else:
        entry = resources.files("fracnb_testbed") / "clusters" / f"{name_or_path}.yaml"
        if not entry.is_file():
            raise TestbedError(
                f"unknown cluster {name_or_path!r}; built-in ones: "
                f"{', '.join(builtin_cluster_names())}, or give a path to a YAML file"
            )
        text, source = entry.read_text(), f"{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise TestbedError(f"{source}: not valid YAML: {error}") from error
    return parse_cluster(raw, source)


def node_manifest(group: NodeGroup, name: str, address: str) -> dict[str, Any]:
    """The v1 Node for one member of a group, created Ready with its capacity in place."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        RUNNER_LABEL: group.runner,
        **group.labels,
    }
    if group.runner == "kwok":
        labels[KWOK_SELECTOR_LABEL[0]] = KWOK_SELECTOR_LABEL[1]
    conditions = [
        {"type": kind, "status": status, "reason": reason, "message": message}
        for kind, status, reason, message in READY_CONDITIONS
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", **group.annotations},
        },
        "spec": {"taints": [dict(taint) for taint in group.taints]} if group.taints else {},
        "status": {
            "capacity": dict(group.capacity),
            "allocatable": dict(group.allocatable),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": dict(BASE_NODE_INFO),
            "phase": "Running",
        },
    }


def fake_node_address(index: int) -> str:
    """A distinct, unroutable InternalIP for the index-th KWOK node (10.250.0.0/16)."""
    return f"10.250.{index // 250}.{index % 250 + 1}"


def node_manifests(spec: ClusterSpec, local_address: str = "127.0.0.1") -> list[dict[str, Any]]:
    """Every Node of the cluster; local nodes carry the runner's host address."""
    manifests = []
    kwok_index = 0
    for group in spec.groups:
        for name in group.node_names():
            if group.runner == "local":
                address = local_address
            else:
                address = fake_node_address(kwok_index)
                kwok_index += 1
            manifests.append(node_manifest(group, name, address))
    return manifests


def dra_manifests(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The driver's DeviceClasses and one ResourceSlice per node with DRA devices; none without."""
    slices = [
        resource_slice(name, group.dra_devices)
        for group in spec.groups
        if group.dra_devices
        for name in group.node_names()
    ]
    return [*device_classes(), *slices] if slices else []
