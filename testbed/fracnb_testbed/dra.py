"""Fake GPUs for Dynamic Resource Allocation: ResourceSlices and DeviceClasses as NVIDIA's DRA
driver (kubernetes-sigs/dra-driver-nvidia-gpu) publishes them, for KWOK nodes.

A node group's ``draDevices`` says what each of its nodes has::

    draDevices:
      gpus:                       # whole GPUs, shareable by memory (--consumable-shares=memory)
        - {product: NVIDIA A100-SXM4-80GB, memory: 80Gi, count: 1}
      mig:                        # MIG devices (a GPU in MIG mode offers only these)
        - {product: NVIDIA A100-SXM4-80GB, profile: 1g.10gb, memory: 10Gi, count: 2}

As the driver does: devices carry the attributes ``type`` (gpu or mig), ``productName``,
``uuid`` and, on MIG devices, ``profile`` and ``parentUUID``, under the driver's domain; a GPU
allows multiple allocations and publishes a ``memory`` capacity whose request policy takes
1 MiB steps and defaults to all of it. There is no kubelet plugin: kube-scheduler allocates,
kube-controller-manager makes claims from templates and frees them when their pods go.
Everything here is pure.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

DRIVER = "gpu.nvidia.com"
RESOURCE_API = "resource.k8s.io/v1"
DRA_KEYS = {"gpus", "mig"}
GPU_KEYS = {"product", "memory", "count"}
MIG_KEYS = {"product", "profile", "memory", "count"}
_QUANTITY_RE = re.compile(r"^[0-9]+(Mi|Gi|Ti)$")
_PROFILE_RE = re.compile(r"^\d+g\.\d+gb(\+me)?$")
STEP = "1Mi"


@dataclass(frozen=True)
class FakeDevice:
    """One device kind a node has ``count`` of."""

    kind: str  # gpu or mig
    product: str
    memory: str
    count: int
    profile: str = ""


def parse_dra_devices(raw: Any, fail: Any) -> tuple[FakeDevice, ...]:
    """Validate a group's ``draDevices``; ``fail(message)`` makes the error naming the group."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or set(raw) - DRA_KEYS:
        raise fail(f"draDevices must be a mapping with {sorted(DRA_KEYS)}")
    devices = []
    for kind, keys in (("gpus", GPU_KEYS), ("mig", MIG_KEYS)):
        for index, entry in enumerate(raw.get(kind) or []):
            where = f"draDevices.{kind}[{index}]"
            if not isinstance(entry, dict) or set(entry) != keys:
                raise fail(f"{where} must have exactly the keys {sorted(keys)}")
            memory, count, product = str(entry["memory"]), entry["count"], entry["product"]
            if not _QUANTITY_RE.match(memory):
                raise fail(f"{where}: memory {memory!r} must be a whole number of Mi, Gi or Ti")
            if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 64:
                raise fail(f"{where}: count {count!r} must be from 1 to 64")
            if not isinstance(product, str) or not product:
                raise fail(f"{where}: product must be a name such as 'NVIDIA A100-SXM4-80GB'")
            profile = str(entry.get("profile", ""))
            if kind == "mig" and not _PROFILE_RE.match(profile):
                raise fail(f"{where}: profile {profile!r} is not a MIG profile such as '1g.10gb'")
            devices.append(FakeDevice("gpu" if kind == "gpus" else "mig", product, memory, count, profile))
    return tuple(devices)


def _device_uuid(node: str, name: str) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.{name}.fracnb.test"))


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def device_entries(node: str, devices: tuple[FakeDevice, ...]) -> list[dict[str, Any]]:
    """The ``spec.devices`` of a node's ResourceSlice."""
    entries = []
    gpu_index = 0
    for device in devices:
        for _ in range(device.count):
            if device.kind == "gpu":
                name = f"gpu-{gpu_index}"
                policy = {"default": device.memory, "validRange": {"min": STEP, "max": device.memory, "step": STEP}}
                entries.append(
                    {
                        "name": name,
                        "allowMultipleAllocations": True,
                        "attributes": {
                            "type": _string("gpu"),
                            "productName": _string(device.product),
                            "uuid": _string(_device_uuid(node, name)),
                        },
                        "capacity": {"memory": {"value": device.memory, "requestPolicy": policy}},
                    }
                )
            else:
                parent = f"gpu-{gpu_index}"
                name = f"{parent}-mig-{device.profile.replace('.', '-').replace('+', '-')}-{len(entries)}"
                entries.append(
                    {
                        "name": name,
                        "attributes": {
                            "type": _string("mig"),
                            "productName": _string(device.product),
                            "profile": _string(device.profile),
                            "uuid": _string("MIG-" + _device_uuid(node, name).removeprefix("GPU-")),
                            "parentUUID": _string(_device_uuid(node, parent)),
                        },
                        "capacity": {"memory": {"value": device.memory}},
                    }
                )
            gpu_index += device.kind == "gpu"
        if device.kind == "mig":
            gpu_index += 1  # the MIG devices of one entry are carved from one more GPU
    return entries  # fmt: skip


def resource_slice(node: str, devices: tuple[FakeDevice, ...]) -> dict[str, Any]:
    """One ResourceSlice holding every device of ``node`` (one pool per node, as the driver has)."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": device_entries(node, devices),
        },
    }


def device_classes() -> list[dict[str, Any]]:
    """The driver's DeviceClasses for GPUs and MIG devices (its Helm chart installs them)."""
    classes = []
    for name, kind in ((DRIVER, "gpu"), ("mig.nvidia.com", "mig")):
        expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        classes.append(
            {
                "apiVersion": RESOURCE_API,
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
    return classes  # fmt: skip
