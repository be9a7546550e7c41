"""``up``, ``down`` and ``status``: the control plane, the nodes and the runner as processes."""

from __future__ import annotations

import os
import random
import shutil
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from fracnb_testbed import audit, kueue, procs
from fracnb_testbed.binaries import CONTROLLER_MANAGER, check_controller_manager, find_bin_dir, write_kwok_stages
from fracnb_testbed.clusters import ClusterSpec, dra_manifests, node_manifests
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.kubeapi import KubeRest, ensure_namespace, write_kubeconfig
from fracnb_testbed.pki import generate_pki
from fracnb_testbed.state import (
    RUNNER_READY_FILE,
    STATE_FILE,
    TestbedState,
    clear_cluster_data,
    load_runner_children,
    write_runner_env,
)

Progress = Callable[[str], None]
# Slow machines (two busy cores) need generous start-up limits.
START_TIMEOUTS = {
    "etcd": 60.0,
    "kube-apiserver": 180.0,
    "kube-scheduler": 90.0,
    "kube-controller-manager": 90.0,
    "kwok": 90.0,
    "runner": 60.0,
}
# Resources hami-scheduler accounts itself; its extender config marks them ignoredByScheduler.
HAMI_SCHEDULER_RESOURCES = (
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
)
HAMI_NODES = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["on"]}]}]
    }
}


def _quiet(_: str) -> None:
    """Default progress sink."""


def random_pod_network() -> str:
    """A /24 inside 127.0.0.0/8 for local pod IPs; random so parallel testbeds rarely meet."""
    rng = random.SystemRandom()
    return f"127.{rng.randint(64, 250)}.{rng.randint(0, 255)}.0/24"


USER_SCHEDULER_PROFILE = "z2jh-user-scheduler.yaml"
# The same profile with GPUs in its MostAllocated scoring, as docs/spawner.md ("Packing shares onto few
# cards") suggests to admins: nodes are then filled by GPU shares, not only by CPU and memory.
GPU_PACKING_SCHEDULER = "user-scheduler-gpu-packing"
GPU_SCORING = ({"name": "nvidia.com/gpu.shared", "weight": 3}, {"name": "nvidia.com/gpu", "weight": 3})


def user_scheduler_profile() -> dict:
    """Zero-to-JupyterHub 4.4.0's user-scheduler profile, from the chart's values (the file says which)."""
    return yaml.safe_load((resources.files("fracnb_testbed") / USER_SCHEDULER_PROFILE).read_text())


def gpu_packing_profile() -> dict:
    """z2jh's user-scheduler scoring GPU resources MostAllocated too."""
    profile = user_scheduler_profile()
    profile["schedulerName"] = GPU_PACKING_SCHEDULER
    for plugin in profile["pluginConfig"]:
        if plugin["name"] == "NodeResourcesFit":
            plugin["args"]["scoringStrategy"]["resources"] += [dict(resource) for resource in GPU_SCORING]
    return profile


def scheduler_config(kubeconfig: Path) -> dict:
    """One kube-scheduler serving the default name, z2jh's ``user-scheduler`` (also with GPU scoring), and HAMi's
    and KAI's names."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {
                "schedulerName": "hami-scheduler",
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"ignoredResources": list(HAMI_SCHEDULER_RESOURCES)},
                    },
                    # HAMi places pods only on nodes its device plugin registered (label gpu=on).
                    {"name": "NodeAffinity", "args": {"addedAffinity": HAMI_NODES}},
                ],
            },
            {"schedulerName": "kai-scheduler"},
            user_scheduler_profile(),
            gpu_packing_profile(),
        ],
    }


def etcd_argv(bin_dir: Path, state: TestbedState) -> list[str]:
    client = f"http://127.0.0.1:{state.ports['etcd']}"
    peer = f"http://127.0.0.1:{state.ports['etcd-peer']}"
    return [
        str(bin_dir / "etcd"),
        "--name=testbed",
        f"--data-dir={state.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=testbed={peer}",
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
    ]


def apiserver_argv(bin_dir: Path, state: TestbedState) -> list[str]:
    pki = state.pki
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{state.ports['etcd']}",
        "--etcd-prefix=/registry",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={state.ports['apiserver']}",
        f"--cert-dir={state.directory / 'apiserver-certs'}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--authorization-mode=Node,RBAC",
        # The default/kubernetes Endpoints would point at a loopback address, which is invalid.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        # It taints new nodes not-ready; only the (absent) node lifecycle controller lifts it.
        "--disable-admission-plugins=TaintNodesByCondition",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        *audit.apiserver_flags(state.directory),
    ]


def scheduler_argv(bin_dir: Path, state: TestbedState, config: Path) -> list[str]:
    return [
        str(bin_dir / "kube-scheduler"),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={state.ports['scheduler']}",
        f"--cert-dir={state.directory / 'scheduler-certs'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]


# Only what DRA and Kueue need: claims made from templates (and freed when their pods go), and owner
# references honoured (Kueue v0.17 leaves a deleted pod's Workload holding quota until the garbage
# collector removes it); and the PodDisruptionBudgets' status (disruptionsAllowed), which the
# Eviction API reads when the fracnb service reclaims devices. DRAConsumableCapacity and
# DRAPartitionableDevices are beta and on by default in Kubernetes 1.36, so no feature gate is set.
CONTROLLERS = ("resourceclaim-controller", "garbage-collector-controller", "disruption-controller")


def controller_manager_argv(bin_dir: Path, state: TestbedState) -> list[str]:
    return [
        str(bin_dir / CONTROLLER_MANAGER),
        f"--kubeconfig={state.kubeconfig}",
        f"--authentication-kubeconfig={state.kubeconfig}",
        f"--authorization-kubeconfig={state.kubeconfig}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={state.ports['controller-manager']}",
        f"--cert-dir={state.directory / 'controller-manager-certs'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]


def kwok_argv(bin_dir: Path, state: TestbedState, stages: Path) -> list[str]:
    # No --server-address/--node-port: KWOK's HTTP server would listen on 0.0.0.0.
    return [
        str(bin_dir / "kwok"),
        f"--kubeconfig={state.kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-label-selector=type=kwok",
        "--cidr=10.244.0.0/16",
        "--node-ip=10.250.255.254",
        "--node-lease-duration-seconds=40",
    ]


def runner_argv(state: TestbedState) -> list[str]:
    return [sys.executable, "-m", "fracnb_testbed.runner", "--state-dir", str(state.directory)]


def _https_ok(url: str) -> bool:
    """True when ``url`` answers 200; certificates unchecked (the scheduler's are self-signed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


def _start(state: TestbedState, name: str, argv: list[str], env: dict[str, str] | None = None):
    record = procs.spawn(name, argv, state.log_of(name), env)
    state.processes.append(record)
    state.save()
    return record


def _pick_ports(apiserver_port: int | None) -> dict[str, int]:
    if apiserver_port is not None:
        procs.ensure_port_free(apiserver_port, "kube-apiserver (--apiserver-port)")
    ports = {
        "apiserver": apiserver_port or procs.free_port(),
        "etcd": procs.free_port(),
        "etcd-peer": procs.free_port(),
        "scheduler": procs.free_port(),
        "controller-manager": procs.free_port(),
    }
    if len(set(ports.values())) != len(ports):
        return _pick_ports(apiserver_port)
    return ports


def _prepare_directory(state_dir: Path, progress: Progress) -> bool:
    """Make the state dir ready for a new cluster; True if a testbed created it (so `down` may
    remove it)."""
    created = not state_dir.exists()
    if (state_dir / STATE_FILE).exists():
        created = _forget_stopped_testbed(state_dir, progress)
    state_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("logs", "pods"):
        (state_dir / sub).mkdir(exist_ok=True)
    # Each `up` starts an empty cluster, whatever an earlier run left (e.g. one stopped by an
    # older `down --keep-files`, which kept the etcd data and so the old nodes).
    clear_cluster_data(state_dir)
    return created


def _forget_stopped_testbed(state_dir: Path, progress: Progress) -> bool:
    """Refuse while the recorded testbed runs; forget one that died without `down` (and
    return whether it had created the state dir)."""
    previous = TestbedState.load(state_dir)
    running = [r for r in [*previous.processes, *load_runner_children(state_dir)] if procs.is_alive(r)]
    if running:
        names = ", ".join(f"{r.name} (pid {r.pid})" for r in running)
        raise TestbedError(
            f"a testbed is running in {state_dir}: {names}; stop it with `fracnb-testbed down "
            f"--state-dir {state_dir}` first, or choose another --state-dir"
        )
    progress(f"clearing the state of a testbed in {state_dir} that stopped without `down`")
    (state_dir / STATE_FILE).unlink()
    return previous.created_directory


def _create_nodes(rest: KubeRest, spec: ClusterSpec, state: TestbedState) -> None:
    for manifest in node_manifests(spec):
        status, answer = rest.request("POST", "/api/v1/nodes", manifest)
        if status == 409:
            # Cannot happen with the cleared etcd data; if it does, say how to get out of it.
            raise TestbedError(
                f"node {manifest['metadata']['name']!r} already exists, so the cluster's etcd data "
                f"({state.etcd_data}) is not from this start; stop everything with `fracnb-testbed "
                f"down --state-dir {state.directory}` (or delete {state.etcd_data}) and start again"
            )
        if status >= 300:
            raise TestbedError(f"creating Node {manifest['metadata']['name']!r} failed ({status}): {answer}")


def _create_dra_objects(rest: KubeRest, spec: ClusterSpec) -> None:
    """The DRA driver's DeviceClasses and each node's ResourceSlice (clusters with draDevices)."""
    paths = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
    for manifest in dra_manifests(spec):
        status, answer = rest.request("POST", f"/apis/resource.k8s.io/v1/{paths[manifest['kind']]}", manifest)
        if status >= 300:
            raise TestbedError(
                f"creating {manifest['kind']} {manifest['metadata']['name']!r} failed ({status}): {answer}"
            )


def _kwok_leases_exist(rest: KubeRest, spec: ClusterSpec) -> bool:
    """KWOK holds a lease for every node it manages once it has taken them over."""
    expected = {name for group in spec.groups_run_by("kwok") for name in group.node_names()}
    status, answer = rest.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
    if status != 200:
        return False
    held = {item["metadata"]["name"] for item in answer.get("items", [])}
    return expected <= held


def up(
    spec: ClusterSpec,
    state_dir: Path,
    *,
    bin_dir: str | Path | None = None,
    runner_env: dict[str, str] | None = None,
    apiserver_port: int | None = None,
    homes_dir: Path | None = None,
    progress: Progress = _quiet,
) -> TestbedState:
    """Start everything; on failure stop what was started (logs stay) and raise TestbedError.

    ``homes_dir`` holds hub users' homes, kept across server and testbed restarts (default
    ``homes/`` in the state dir, which a plain ``down`` removes with the rest).
    """
    binaries = find_bin_dir(bin_dir)
    state_dir = state_dir.resolve()
    created = _prepare_directory(state_dir, progress)
    state = TestbedState(
        directory=state_dir,
        cluster=spec.name,
        ports=_pick_ports(apiserver_port),
        pod_network=random_pod_network(),
        created_directory=created,
        homes=str(homes_dir.resolve()) if homes_dir else "",
    )
    state.save()
    write_runner_env(state.directory, dict(runner_env or {}))
    try:
        _start_all(spec, state, binaries, progress)
    except BaseException:
        down(state_dir, keep_files=True)
        raise
    return state


def _start_all(spec: ClusterSpec, state: TestbedState, binaries: Path, progress: Progress) -> None:
    started = time.monotonic()
    generate_pki(state.pki.directory)
    write_kubeconfig(state.kubeconfig, state.server, state.pki)

    progress(f"starting etcd on 127.0.0.1:{state.ports['etcd']}")
    etcd = _start(state, "etcd", etcd_argv(binaries, state))
    health = f"http://127.0.0.1:{state.ports['etcd']}/health"
    procs.wait_until(
        lambda: _http_ok(health),
        what="etcd /health",
        timeout=START_TIMEOUTS["etcd"],
        watched=etcd,
        progress=progress,
    )

    progress(f"starting kube-apiserver on {state.server}")
    audit.write_policy(state.directory)
    apiserver = _start(state, "kube-apiserver", apiserver_argv(binaries, state))
    rest = KubeRest("127.0.0.1", state.ports["apiserver"], state.pki)
    try:
        procs.wait_until(
            rest.ready,
            what="kube-apiserver /readyz",
            watched=apiserver,
            timeout=START_TIMEOUTS["kube-apiserver"],
            progress=progress,
        )
        ensure_namespace(rest, "default")
        progress(f"creating {spec.node_count} nodes of cluster {spec.name!r}")
        _create_nodes(rest, spec, state)
        _create_dra_objects(rest, spec)

        config = state.directory / "scheduler-config.yaml"
        config.write_text(yaml.safe_dump(scheduler_config(state.kubeconfig), sort_keys=False))
        progress("starting kube-scheduler")
        scheduler = _start(state, "kube-scheduler", scheduler_argv(binaries, state, config))
        readyz = f"https://127.0.0.1:{state.ports['scheduler']}/readyz"
        procs.wait_until(
            lambda: _https_ok(readyz),
            what="kube-scheduler /readyz",
            watched=scheduler,
            timeout=START_TIMEOUTS["kube-scheduler"],
            progress=progress,
        )

        if spec.needs_controller_manager:
            _start_controller_manager(state, binaries, progress)
        if spec.kueue is not None:
            _start_kueue(rest, spec, state, progress)

        stages = write_kwok_stages(binaries, state.directory / "kwok-stages.yaml")
        progress("starting kwok")
        # KWOK also reads ~/.kwok/kwok.yaml; a private HOME keeps a user's file out.
        kwok = _start(
            state,
            "kwok",
            kwok_argv(binaries, state, stages),
            env={**os.environ, "HOME": str(state.directory)},
        )
        procs.wait_until(
            lambda: _kwok_leases_exist(rest, spec),
            what="kwok to take over its nodes",
            watched=kwok,
            timeout=START_TIMEOUTS["kwok"],
            progress=progress,
        )
    finally:
        rest.close()

    progress("starting the local process runner")
    runner = _start(state, "runner", runner_argv(state))
    ready_file = state.directory / RUNNER_READY_FILE
    procs.wait_until(
        ready_file.exists,
        what="the local process runner",
        watched=runner,
        timeout=START_TIMEOUTS["runner"],
        progress=progress,
    )
    progress(f"testbed up in {time.monotonic() - started:.1f}s; KUBECONFIG={state.kubeconfig}")


def _start_controller_manager(state: TestbedState, binaries: Path, progress: Progress) -> None:
    check_controller_manager(binaries)
    progress(f"starting kube-controller-manager ({', '.join(CONTROLLERS)})")
    manager = _start(state, "kube-controller-manager", controller_manager_argv(binaries, state))
    healthz = f"https://127.0.0.1:{state.ports['controller-manager']}/healthz"
    procs.wait_until(
        lambda: _https_ok(healthz),
        what="kube-controller-manager /healthz",
        watched=manager,
        timeout=START_TIMEOUTS["kube-controller-manager"],
        progress=progress,
    )


def _start_kueue(rest: KubeRest, spec: ClusterSpec, state: TestbedState, progress: Progress) -> None:
    build = kueue.find_kueue()
    progress(f"installing Kueue's CRDs and webhooks from {build.directory}")
    kueue.install(rest, build, state, spec.kueue or {})
    progress("starting Kueue's manager")
    kueue.start_manager(state, build)


def _grace_at_down(name: str) -> float:
    """How long ``down`` lets a component end by itself after SIGTERM. kube-apiserver stops answering at once but
    keeps its process up to 60 s for clients' open watches (a test's or a hub's) to end; etcd, stopped after it,
    holds the cluster's data, so a kill after 2 s loses nothing and saves each cluster's teardown ~8 s."""
    return 2.0 if name == "kube-apiserver" else 10.0


def down(state_dir: Path, *, keep_files: bool = False, progress: Progress = _quiet) -> list[str]:
    """Stop the recorded processes (runner first), remove the state dir; return what was stopped."""
    state = TestbedState.load(state_dir.resolve())
    stopped = []
    for record in reversed(state.processes):
        if procs.stop(record, grace=_grace_at_down(record.name)):
            stopped.append(record.name)
            progress(f"stopped {record.name} (pid {record.pid})")
    # Pod processes the runner could not clean up (it was killed, not stopped).
    for record in load_runner_children(state.directory):
        if procs.is_alive(record):
            procs.stop_group(record)
            stopped.append(record.name)
            progress(f"stopped leftover pod process {record.name} (pid {record.pid})")
    if keep_files:
        # Logs, certificates and homes stay; the cluster itself is gone with its processes.
        clear_cluster_data(state.directory)
        (state.directory / STATE_FILE).unlink(missing_ok=True)
    elif state.created_directory:
        shutil.rmtree(state.directory, ignore_errors=True)
    else:
        for entry in state.directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return stopped


def status_lines(state_dir: Path) -> list[str]:
    """One line per component: name, pid, running or not, log path; plus endpoints."""
    state = TestbedState.load(state_dir.resolve())
    lines = [f"cluster {state.cluster!r}; apiserver {state.server}; kubeconfig {state.kubeconfig}"]
    for record in state.processes:
        running = "running" if procs.is_alive(record) else "NOT RUNNING"
        lines.append(f"{record.name:15} pid {record.pid:<8} {running:12} log {record.log}")
    children = [r for r in load_runner_children(state.directory) if procs.is_alive(r)]
    lines.append(f"local pod processes: {len(children)}; pod network {state.pod_network}")
    return lines


# ---- stopping and starting one component (fault tests) ---------------------------------------


@dataclass(frozen=True)
class StoppedComponent:
    """A component :func:`stop_component` stopped: what :func:`start_component` runs again."""

    name: str
    argv: list[str]
    env: dict[str, str]


def _command_of(pid: int) -> tuple[list[str], dict[str, str]]:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    raw_env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    env = dict(entry.decode().partition("=")[::2] for entry in raw_env if b"=" in entry)
    return [part.decode() for part in argv if part], env


def stop_component(state_dir: Path, name: str, *, grace: float = 60.0) -> StoppedComponent:
    """Stop one running component (SIGTERM, SIGKILL after ``grace`` s), keeping everything else and the
    cluster's data: an apiserver restarted with etcd kept, for instance."""
    state = TestbedState.load(state_dir.resolve())
    record = next((r for r in state.processes if r.name == name and procs.is_alive(r)), None)
    if record is None:
        raise TestbedError(f"no running {name} in the testbed at {state_dir}")
    argv, env = _command_of(record.pid)
    procs.stop(record, grace=grace)
    return StoppedComponent(name, argv, env)


def start_component(state_dir: Path, stopped: StoppedComponent, *, progress: Progress = _quiet) -> None:
    """Start a component :func:`stop_component` stopped, on the same ports; for the apiserver, wait until ready."""
    state = TestbedState.load(state_dir.resolve())
    state.processes = [r for r in state.processes if r.name != stopped.name]
    record = _start(state, stopped.name, stopped.argv, stopped.env)
    if stopped.name != "kube-apiserver":
        return
    rest = KubeRest("127.0.0.1", state.ports["apiserver"], state.pki)
    try:
        procs.wait_until(
            rest.ready,
            what="kube-apiserver /readyz",
            watched=record,
            timeout=START_TIMEOUTS["kube-apiserver"],
            progress=progress,
        )
    finally:
        rest.close()
