"""The state directory's layout and its state file (what runs, where, on which ports)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fracnb_testbed.errors import TestbedError
from fracnb_testbed.pki import Pki
from fracnb_testbed.procs import ProcessRecord

STATE_FILE = "state.json"
RUNNER_CHILDREN_FILE = "runner-children.json"
RUNNER_ENV_FILE = "runner-env.json"
RUNNER_READY_FILE = "runner.ready"
ETCD_DATA_DIR = "etcd-data"
HOMES_DIR = "homes"
AUDIT_LOG_FILE = "audit.log"  # the apiserver's (fracnb_testbed.audit)
# What one run of the cluster leaves and only that run may use: the next `up` starts a new,
# empty cluster, so none of it may outlive the processes (stale etcd data held the old nodes,
# and a stale ready file would announce a runner that has not started).
CLUSTER_DATA = (ETCD_DATA_DIR, RUNNER_READY_FILE, RUNNER_CHILDREN_FILE, AUDIT_LOG_FILE)


@dataclass
class TestbedState:
    """Everything ``down`` and ``status`` need, saved after each started component."""

    __test__ = False

    directory: Path
    cluster: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    pod_network: str = ""
    processes: list[ProcessRecord] = field(default_factory=list)
    created_directory: bool = False
    homes: str = ""  # where hub users' homes persist; "" means homes/ in the state dir

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def pki(self) -> Pki:
        return Pki(self.directory / "pki")

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    @property
    def pods(self) -> Path:
        return self.directory / "pods"

    @property
    def homes_dir(self) -> Path:
        """The root of the persistent home directories of hub users' servers."""
        return Path(self.homes) if self.homes else self.directory / HOMES_DIR

    @property
    def etcd_data(self) -> Path:
        return self.directory / ETCD_DATA_DIR

    def log_of(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def save(self) -> None:
        payload = {
            "cluster": self.cluster,
            "ports": self.ports,
            "pod_network": self.pod_network,
            "processes": [record.to_dict() for record in self.processes],
            "created_directory": self.created_directory,
            "homes": self.homes,
        }
        temporary = self.directory / f".{STATE_FILE}.tmp"
        temporary.write_text(json.dumps(payload, indent=2))
        temporary.replace(self.directory / STATE_FILE)

    @classmethod
    def load(cls, directory: Path) -> TestbedState:
        path = directory / STATE_FILE
        try:
            payload = json.loads(path.read_text())
        except FileNotFoundError as error:
            raise TestbedError(
                f"no testbed state in {directory} ({STATE_FILE} is missing); "
                "start one with `fracnb-testbed up` or pass the right --state-dir"
            ) from error
        return cls(
            directory=directory,
            cluster=payload["cluster"],
            ports=payload["ports"],
            pod_network=payload["pod_network"],
            processes=[ProcessRecord(**record) for record in payload["processes"]],
            created_directory=payload.get("created_directory", False),
            homes=payload.get("homes", ""),
        )


def clear_cluster_data(directory: Path) -> None:
    """Remove what a previous run of the cluster left (its etcd data, runner files)."""
    for name in CLUSTER_DATA:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def write_runner_env(directory: Path, env: dict[str, str]) -> None:
    """Extra environment for local pod processes; the runner reads it at every pod start."""
    temporary = directory / f".{RUNNER_ENV_FILE}.tmp"
    temporary.write_text(json.dumps(env))
    temporary.replace(directory / RUNNER_ENV_FILE)


def read_runner_env(directory: Path) -> dict[str, str]:
    try:
        return dict(json.loads((directory / RUNNER_ENV_FILE).read_text()))
    except (OSError, ValueError):
        return {}


def load_runner_children(directory: Path) -> list[ProcessRecord]:
    """The pod processes the runner last reported (for cleanup if the runner was killed)."""
    try:
        return [ProcessRecord(**r) for r in json.loads((directory / RUNNER_CHILDREN_FILE).read_text())]
    except (OSError, ValueError):
        return []


def save_runner_children(directory: Path, records: list[ProcessRecord]) -> None:
    temporary = directory / f".{RUNNER_CHILDREN_FILE}.tmp"
    temporary.write_text(json.dumps([record.to_dict() for record in records]))
    temporary.replace(directory / RUNNER_CHILDREN_FILE)
