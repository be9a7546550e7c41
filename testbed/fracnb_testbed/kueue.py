"""Kueue's manager on the testbed, for clusters whose description has a ``kueue`` key.

Kueue v0.17.0 is built by testbed/go/build-kueue.sh into a cache directory holding ``bin/kueue``
and the manifests copied from its module (``manifests/crds/*.yaml``, ``manifests/webhooks.yaml``).
Here it runs on 127.0.0.1 as it does in a cluster, with three differences:

- its webhooks are reached by URL with a CA bundle from the testbed's PKI (no Service, no
  internal certificate manager, which only issues a cert for the in-cluster Service name);
- the two pod webhooks carry an objectSelector (``kueue.x-k8s.io/queue-name`` exists), so pods
  without a queue, CPU-only servers among them, pass when Kueue is down;
- it runs in a user + mount namespace where the two certificate directories Kueue hard-codes,
  ``/visibility`` and ``/etc/kueue/metrics/certs``, are bind mounts of the state dir's. Bind
  mounts need existing mount points: where they are absent they are created once (empty
  directories; that needs root) and otherwise start fails saying which to create.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fracnb_testbed import procs
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.kubeapi import KubeRest, ensure_namespace
from fracnb_testbed.pki import issue_serving_cert
from fracnb_testbed.state import TestbedState

KUEUE_DIR_ENV = "FRACNB_KUEUE_DIR"
NAMESPACE = "kueue-system"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "go" / "build-kueue.sh"
VERSIONS_FILE = Path(__file__).resolve().parent.parent / "go" / "versions.env"
BUILD_HINT = (
    f"Build it with testbed/go/build-kueue.sh (about 13 minutes cold on two cores) and export "
    f"{KUEUE_DIR_ENV}=<the directory it prints>."
)
# Kueue hard-codes these certificate directories (pkg/visibility/server.go and cmd/kueue/main.go, v0.17.0).
VISIBILITY_CERT_DIR = "/visibility"
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"
# The webhooks of plain pods and of Kueue's own objects (config/components/webhook/manifests.yaml);
# the other integrations (jobs, jobsets, ...) are off in the manager's config.
WEBHOOKS = {
    "mpod.kb.io",
    "mclusterqueue.kb.io",
    "mresourceflavor.kb.io",
    "mworkload.kb.io",
    "vpod.kb.io",
    "vclusterqueue.kb.io",
    "vcohort.kb.io",
    "vresourceflavor.kb.io",
    "vworkload.kb.io",
}
POD_WEBHOOKS = {"mpod.kb.io", "vpod.kb.io"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's API and the collection of each kind the testbed and its tests create.
API = "/apis/kueue.x-k8s.io/v1beta2"
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def collection_path(manifest: Mapping[str, Any]) -> str:
    """Where to POST a Kueue object: its kind's collection, in its metadata.namespace if it has one."""
    namespace = manifest["metadata"].get("namespace")
    prefix = f"{API}/namespaces/{namespace}" if namespace else API
    return f"{prefix}/{PLURALS[manifest['kind']]}"


SERVING_NAMES = ("localhost", "visibility-server.kueue-system.svc", "kueue-webhook-service.kueue-system.svc")
START_TIMEOUT = 120.0
CRD_TIMEOUT = 60.0


@dataclass(frozen=True)
class KueueBuild:
    """A built Kueue: the manager binary and the manifests copied from its module."""

    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / "bin" / "kueue"

    @property
    def crds(self) -> list[Path]:
        return sorted((self.directory / "manifests" / "crds").glob("*.yaml"))

    @property
    def webhooks(self) -> Path:
        return self.directory / "manifests" / "webhooks.yaml"

    def missing(self) -> list[str]:
        absent = [] if os.access(self.binary, os.X_OK) else [str(self.binary)]
        if not self.crds:
            absent.append(str(self.directory / "manifests" / "crds"))
        if not self.webhooks.is_file():
            absent.append(str(self.webhooks))
        return absent


def pinned_version() -> str:
    """KUEUE_VERSION from testbed/go/versions.env."""
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.startswith("KUEUE_VERSION="):
            return line.partition("=")[2].strip()
    raise TestbedError(f"{VERSIONS_FILE} has no KUEUE_VERSION line")


def default_build_dir() -> Path:
    """Where build-kueue.sh puts its output by default."""
    root = os.environ.get("FRACNB_TESTBED_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fracnb-testbed"
    )
    return Path(root) / f"kueue-{pinned_version()}"


def find_kueue() -> KueueBuild:
    """The build in $FRACNB_KUEUE_DIR, else in the default cache; TestbedError saying how to build."""
    explicit = os.environ.get(KUEUE_DIR_ENV)
    build = KueueBuild(Path(explicit) if explicit else default_build_dir())
    missing = build.missing()
    if missing:
        raise TestbedError(f"Kueue is not built: {', '.join(missing)} missing. {BUILD_HINT}")
    return build


def manager_config(state: TestbedState, overrides: dict[str, Any]) -> dict[str, Any]:
    """The manager's Configuration: everything on 127.0.0.1, plain pods only, certificates from the state dir."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{state.ports['kueue-health']}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": state.ports["kueue-webhook"], "certDir": str(certs_dir(state))},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": state.ports["kueue-visibility"]},
        "integrations": {"frameworks": ["pod"]},
        **overrides,
    }


def webhook_configurations(manifests: list[dict[str, Any]], port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's two webhook configurations with only :data:`WEBHOOKS`, each called by URL on 127.0.0.1."""
    bundle = base64.b64encode(ca_bundle).decode()
    result = []
    for manifest in manifests:
        kind = manifest["kind"]
        hooks = []
        for original in manifest.get("webhooks", []):
            if original["name"] not in WEBHOOKS:
                continue
            path = original["clientConfig"]["service"]["path"]
            hook = {**original, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}}
            if hook["name"] in POD_WEBHOOKS:
                hook["objectSelector"] = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
            hooks.append(hook)
        prefix = "kueue-mutating" if kind.startswith("Mutating") else "kueue-validating"
        result.append({**manifest, "metadata": {"name": f"{prefix}-webhook-configuration"}, "webhooks": hooks})
    return result


def certs_dir(state: TestbedState) -> Path:
    return state.directory / "kueue-certs"


def log_path(state: TestbedState) -> Path:
    return state.log_of("kueue")


def ensure_mount_points() -> None:
    """Create the hard-coded certificate directories as empty mount points where absent (needs root once)."""
    for path in (VISIBILITY_CERT_DIR, METRICS_CERT_DIR):
        if Path(path).is_dir():
            continue
        try:
            Path(path).mkdir(parents=True)
        except OSError as error:
            raise TestbedError(
                f"Kueue v0.17 reads certificates from the fixed path {path}, which does not exist and "
                f"could not be created ({error.strerror}). Create the empty directories once as root: "
                f"mkdir -p {VISIBILITY_CERT_DIR} {METRICS_CERT_DIR} (the testbed bind-mounts its own "
                f"certificates over them in a private mount namespace and writes nothing there)"
            ) from error


def manager_argv(build: KueueBuild, state: TestbedState) -> list[str]:
    """unshare into a user + mount namespace, bind the certificate dirs, exec the manager."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise TestbedError("Kueue needs util-linux's unshare to mount its certificate paths; install util-linux")
    script = f'mount --bind "$1" {VISIBILITY_CERT_DIR} && mount --bind "$1" {METRICS_CERT_DIR} && exec "$2" "$3" "$4"'
    config = state.directory / "kueue-config.yaml"
    return [
        unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        script,
        "kueue",
        str(certs_dir(state)),
        str(build.binary),
        f"--config={config}",
        f"--kubeconfig={state.kubeconfig}",
    ]


def allocate_ports(state: TestbedState) -> None:
    for name in ("kueue-webhook", "kueue-visibility", "kueue-health"):
        state.ports.setdefault(name, procs.free_port())


def install(rest: KubeRest, build: KueueBuild, state: TestbedState, overrides: dict[str, Any]) -> None:
    """Certificates, config, namespace, CRDs (created, not applied: workloads' is too big) and webhooks."""
    allocate_ports(state)
    state.save()
    issue_serving_cert(state.pki, certs_dir(state), SERVING_NAMES, ("127.0.0.1",))
    config = state.directory / "kueue-config.yaml"
    config.write_text(yaml.safe_dump(manager_config(state, overrides), sort_keys=False))
    ensure_namespace(rest, NAMESPACE)
    names = []
    for path in build.crds:
        crd = yaml.safe_load(path.read_text())
        rest.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, exist_ok=True)
        names.append(crd["metadata"]["name"])
    procs.wait_until(lambda: all(_established(rest, name) for name in names), what="Kueue's CRDs", timeout=CRD_TIMEOUT)
    manifests = [doc for doc in yaml.safe_load_all(build.webhooks.read_text()) if doc]
    paths = {
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }
    for manifest in webhook_configurations(manifests, state.ports["kueue-webhook"], state.pki.ca_cert.read_bytes()):
        rest.create(f"/apis/admissionregistration.k8s.io/v1/{paths[manifest['kind']]}", manifest, exist_ok=True)


def _established(rest: KubeRest, name: str) -> bool:
    status, answer = rest.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    if status != 200:
        return False
    conditions = (answer.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def healthy(state: TestbedState) -> bool:
    """The manager's readiness probe answers 200."""
    url = f"http://127.0.0.1:{state.ports['kueue-health']}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def start_manager(state: TestbedState, build: KueueBuild | None = None) -> procs.ProcessRecord:
    """Start the manager (again, after :func:`stop_manager`) and wait for its webhooks and readiness."""
    build = build or find_kueue()
    ensure_mount_points()
    state.processes = [record for record in state.processes if record.name != "kueue"]
    record = procs.spawn("kueue", manager_argv(build, state), log_path(state))
    state.processes.append(record)
    state.save()
    procs.wait_until(
        lambda: healthy(state) and _listening(state.ports["kueue-webhook"]),
        what="Kueue's manager /readyz and webhook port",
        watched=record,
        timeout=START_TIMEOUT,
    )
    return record


def stop_manager(state_dir: Path) -> None:
    """Stop the running manager, keeping the cluster (Kueue down)."""
    state = TestbedState.load(state_dir.resolve())
    for record in state.processes:
        if record.name == "kueue":
            procs.stop(record)


def restart_manager(state_dir: Path) -> None:
    """Start the manager of a testbed whose manager :func:`stop_manager` stopped."""
    start_manager(TestbedState.load(state_dir.resolve()))


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0
