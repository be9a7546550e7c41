"""Pure pieces of the local runner: pod IPs, argv and env of a container, kubelet-style status."""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

WILDCARD_ADDRESS = "0.0.0.0"  # noqa: S104 - the text we replace, never bound
# KubeSpawner puts the hub user and server names, unescaped, on every pod it makes.
USERNAME_ANNOTATION = "hub.jupyter.org/username"
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
PATH_SAFE = frozenset(string.ascii_letters + string.digits + "-.")
VAR_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
KeyLookup = Callable[[str, str, str], "str | None"]


class PodSpecError(Exception):
    """The container cannot be started as specified (reported like CreateContainerConfigError)."""


class IpPool:
    """Hands out the host addresses of a /24 inside 127.0.0.0/8, skipping .0, .1 and .255."""

    def __init__(self, network: str) -> None:
        self._free = [str(ip) for ip in list(ipaddress.ip_network(network).hosts())[1:]]
        self._free.reverse()

    def allocate(self) -> str:
        if not self._free:
            raise PodSpecError("no free local pod IP left in the runner's network")
        return self._free.pop()

    def release(self, ip: str) -> None:
        if ip not in self._free:
            self._free.append(ip)


def path_safe(name: str) -> str:
    """``name`` as one path component: letters, digits, '-' and '.' stay, any other character
    (and a leading '.') becomes ``_xx`` per UTF-8 byte, so distinct names stay distinct and
    no name becomes '..', a hidden entry or a path."""
    escaped = []
    for index, char in enumerate(name):
        if char in PATH_SAFE and not (index == 0 and char == "."):
            escaped.append(char)
        else:
            escaped.append("".join(f"_{byte:02x}" for byte in char.encode()))
    return "".join(escaped)


def persistent_home(pod: Mapping[str, Any]) -> PurePosixPath | None:
    """Where a hub user's server keeps its home, relative to the runner's homes dir.

    One per namespace, user and server, as z2jh's PVC ``claim-{username}--{servername}``: the
    same server finds its files again after a stop, a cull or a testbed restart. None for pods
    KubeSpawner did not make (they get a fresh home each).
    """
    metadata = pod.get("metadata", {})
    annotations = metadata.get("annotations") or {}
    user = annotations.get(USERNAME_ANNOTATION)
    if not user:
        return None
    server = annotations.get(SERVERNAME_ANNOTATION, "")
    # '_' only ever starts an escape, so '__' cannot occur inside an escaped name.
    leaf = path_safe(user) + (f"__{path_safe(server)}" if server else "")
    return PurePosixPath(path_safe(metadata.get("namespace", "default")), leaf)


def to_pod_ip(text: str, pod_ip: str) -> str:
    """A pod has its own network namespace; locally, 0.0.0.0 means the pod's own loopback IP."""
    return text.replace(WILDCARD_ADDRESS, pod_ip)


def expand_references(text: str, variables: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, rest stays."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return variables.get(name, match.group(0))

    return VAR_REFERENCE.sub(replace, text)


def field_value(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    """The value of a ``valueFrom.fieldRef.fieldPath`` the kubelet supports."""
    metadata = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return simple[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return metadata.get(match.group(1), {}).get(match.group(2), "")
    raise PodSpecError(f"fieldRef {path!r} is not supported")


def _env_value(
    entry: Mapping[str, Any], pod: Mapping[str, Any], pod_ip: str, host_ip: str, lookup: KeyLookup
) -> str | None:
    source = entry.get("valueFrom")
    if not source:
        return str(entry.get("value", ""))
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
    for kind, key in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
        if kind in source:
            ref = source[kind]
            value = lookup(key, ref["name"], ref["key"])
            if value is None and not ref.get("optional"):
                raise PodSpecError(f"env {entry['name']}: {kind} {ref['name']}/{ref['key']} does not exist")
            return value
    raise PodSpecError(f"env {entry['name']}: valueFrom {sorted(source)} is not supported")


def container_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    lookup: KeyLookup,
) -> dict[str, str]:
    """The container's own variables, in order, with ``$(VAR)`` and 0.0.0.0 resolved."""
    if container.get("envFrom"):
        raise PodSpecError("envFrom is not supported by the local runner; list env entries")
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        value = _env_value(entry, pod, pod_ip, host_ip, lookup)
        if value is not None:
            env[entry["name"]] = to_pod_ip(expand_references(value, env), pod_ip)
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str], pod_ip: str) -> list[str]:
    """``command`` + ``args``; with no command, the image entrypoint is taken to pass args on."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if not argv:
        raise PodSpecError(
            f"container {container.get('name')!r} has neither command nor args; the local "
            "runner cannot run an image's default entrypoint"
        )
    return [to_pod_ip(expand_references(str(part), env), pod_ip) for part in argv]


def exit_code_of(returncode: int) -> int:
    """Container runtimes report death by signal N as exit code 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _condition(kind: str, status: str, now: str) -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": now}


def running_status(pod: Mapping[str, Any], pod_ip: str, host_ip: str, started_at: str) -> dict[str, Any]:
    """The status a kubelet reports once every container started."""
    containers = pod["spec"]["containers"]
    return {
        "phase": "Running",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": started_at,
        "conditions": [
            _condition(kind, "True", started_at)
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready",
                "PodScheduled",
            )
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": f"local://{pod['metadata']['uid']}/{container['name']}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started_at}},
            }
            for container in containers
        ],
    }


def terminated_container(
    container: Mapping[str, Any],
    uid: str,
    *,
    exit_code: int,
    started_at: str,
    finished_at: str,
    message: str = "",
    reason: str = "",
) -> dict[str, Any]:
    terminated = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        terminated["message"] = message
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": f"local://{uid}/{container['name']}",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }


def finished_phase(exit_codes: Mapping[str, int]) -> str:
    """Succeeded if every container exited 0, else Failed (the runner never restarts)."""
    return "Succeeded" if all(code == 0 for code in exit_codes.values()) else "Failed"


def waiting_status(container: Mapping[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A container the kubelet could not start (the pod stays Pending)."""
    return {
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
    }
