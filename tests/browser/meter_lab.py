"""Helpers of the browser tests: the simulated GPU, the Jupyter server process, constants."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fracnb_meter.testing import fakenvml
from fracnb_schemas import USAGE, problems
from fracnb_testbed.procs import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION = REPO / "extension" / "fracnb_meter" / "labextension"
GIB = 1 << 30
BUDGET_BYTES = 20 * GIB
SOFT_CAP_BYTES = int(BUDGET_BYTES * 0.95)  # the spawner's default soft_cap_ratio
BUDGET_ENV = {
    "FRACNB_PROFILE": "quarter",
    "FRACNB_PROFILE_DISPLAY_NAME": "Quarter of an A100",
    "FRACNB_CHOICE": "",
    "FRACNB_GPU_FRACTION": "0.25",
    "FRACNB_GPU_MEMORY_LIMIT": str(BUDGET_BYTES),
    "FRACNB_GPU_BACKEND": "time-slicing",
    "FRACNB_ISOLATION": "none",
    "FRACNB_SOFT_CAP_BYTES": str(SOFT_CAP_BYTES),
}
CPU_ONLY_ENV = {
    "FRACNB_PROFILE": "cpu",
    "FRACNB_PROFILE_DISPLAY_NAME": "CPU only, no GPU visible",
    "FRACNB_CHOICE": "",
    "FRACNB_GPU_FRACTION": "0",
    "FRACNB_GPU_MEMORY_LIMIT": "0",
    "FRACNB_GPU_BACKEND": "none",
    "FRACNB_ISOLATION": "none",
    "NVIDIA_VISIBLE_DEVICES": "void",
}
STARTUP_TIMEOUT_S = 90


@dataclass
class FakeGpu:
    """One simulated 80 GiB A100 and the processes on it, written to the state file."""

    state_path: Path
    library_dir: Path
    processes: dict[int, int | None] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    device_used: int | None = None  # None: what its processes use
    work: dict[int, int] = field(default_factory=dict)  # pid -> SM percent in utilisation samples

    def write(self) -> None:
        device = fakenvml.FakeDevice.a100(0)
        device.utilization_gpu = 37
        device.memory_used = self.device_used
        state = fakenvml.FakeState(
            # The first driver whose utilisation samples name a container's own pids.
            driver_version="570.86.15",
            devices=[device],
            processes=[fakenvml.FakeProcess(0, pid, mem) for pid, mem in self.processes.items()],
            errors=dict(self.errors),
            utilization=[fakenvml.FakeUtilization(0, pid, sm) for pid, sm in self.work.items()],
        )
        fakenvml.write_state(self.state_path, state)

    def set_kernel_memory(self, pid: int, memory: int | None) -> None:
        self.processes[pid] = memory
        self.write()

    def set_kernel_work(self, pid: int, sm_percent: int | None) -> None:
        """``pid`` keeps the GPU's SMs busy from now on (None: does no GPU work)."""
        if sm_percent is None:
            self.work.pop(pid, None)
        else:
            self.work[pid] = sm_percent
        self.write()

    def fail(self, call: str, code: int = 999) -> None:
        self.errors[call] = code
        self.write()

    def heal(self) -> None:
        self.errors.clear()
        self.device_used = None
        self.write()


class ApiError(Exception):
    """The server answered a REST call with an HTTP error."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


@dataclass
class LabServer:
    url: str  # base URL, ending in "/"
    token: str
    root: Path
    log: Path
    pid: int

    def api(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (our own http://127.0.0.1 server)
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                text = response.read()
        except urllib.error.HTTPError as error:
            with error:  # close the response, or its socket leaks a ResourceWarning
                raise ApiError(error.code, error.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def usage(self) -> dict:
        """GET fracnb/api/usage, checked against usage.schema.json."""
        document = self.api("GET", "fracnb/api/usage")
        assert isinstance(document, dict)
        assert problems(USAGE, document, check_formats=True) == []
        return document

    def start_notebook(self, path: str) -> dict:
        """Create an empty notebook and a session (a real python3 kernel) for it."""
        notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        self.api("PUT", f"api/contents/{path}", {"type": "notebook", "content": notebook})
        session = self.api(
            "POST",
            "api/sessions",
            {"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert isinstance(session, dict)
        return session

    def kernel_pid(self, kernel_id: str, timeout: float = 30) -> int:
        def pid() -> int | None:
            return next((int(k["pid"]) for k in self.usage()["kernels"] if k["id"] == kernel_id and k["pid"]), None)

        return wait_until(pid, what=f"kernel {kernel_id}'s pid in the usage API", timeout=timeout)


def wait_until_up(server: LabServer, process: subprocess.Popen) -> None:
    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}; see {server.log}")
        try:
            server.api("GET", "api/status")
        except (ApiError, urllib.error.URLError, ConnectionError):
            return False
        return True

    wait_until(up, what=f"jupyter lab to answer (its log: {server.log})", timeout=STARTUP_TIMEOUT_S, interval=0.3)


def labextension_path(tmp: Path) -> Path:
    """A JUPYTER_PATH entry whose labextensions/@fracnb/meter is the freshly built bundle."""
    if not (LABEXTENSION / "package.json").is_file():
        pytest.fail(
            f"the JupyterLab extension is not built ({LABEXTENSION} is missing): "
            "run `./dev setup`, or `jlpm install && jlpm build:prod` in extension/"
        )
    data = tmp / "jupyter-path"
    target = data / "labextensions" / "@fracnb" / "meter"
    target.parent.mkdir(parents=True)
    target.symlink_to(LABEXTENSION, target_is_directory=True)
    return data


def wait_for_polls(page: object, count: int) -> None:
    """Wait until the page has fetched the usage API ``count`` more times (each poll is a chance to act)."""
    for _ in range(count):
        with page.expect_response(lambda response: "fracnb/api/usage" in response.url, timeout=30_000):
            pass


def wait_for_animations(page: object) -> None:
    """Wait until no CSS animation or transition is running (toasts slide in), for a steady screenshot."""
    # Endless animations (a busy spinner) never finish; only finite ones are waited for.
    page.wait_for_function(
        """() => document.getAnimations().every(
            (a) => a.playState !== 'running' || a.effect?.getTiming().iterations === Infinity)"""
    )


@contextmanager
def running_lab(
    tmp: Path,
    environment: dict[str, str],
    log: Path,
    meter_config: dict[str, object] | None = None,
    root: Path | None = None,
) -> Iterator[LabServer]:
    """``jupyter lab`` with the meter, the fake NVML and ``environment`` (the pod's variables);
    ``meter_config``: more ``c.FracnbMeter`` settings; ``root``: an earlier server's folder of
    notebooks, as a new server of the same user finds it (default: a new one in ``tmp``)."""
    config = tmp / "config"
    if root is None:
        root = tmp / "root"
        root.mkdir()
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {"jpserver_extensions": {"fracnb_meter": True}},
                # Test latency, not production advice: re-read NVML at most every 0.2 s, ask the
                # hub's service on every sample, and count GPU-unused time in 1 s windows.
                "FracnbMeter": {
                    "sample_interval_floor": 0.2,
                    "service_interval": 0.0,
                    "gpu_unused_window": 1,
                    "gpu_unused_interval": 0.25,
                    **(meter_config or {}),
                },
            }
        )
    )
    # The news prompt is a notification too; keep the toast area for the meter's own.
    (config / "labconfig").mkdir()
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        **environment,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_PATH": str(labextension_path(tmp)),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
    }
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root"]
    command += [f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1"]
    command += [f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}"]
    with log.open("w") as log_stream:
        process = subprocess.Popen(command, env=env, stdout=log_stream, stderr=subprocess.STDOUT)
    server = LabServer(url=f"http://127.0.0.1:{port}/", token=token, root=root, log=log, pid=process.pid)
    try:
        wait_until_up(server, process)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def gpu_environment(fake_gpu: FakeGpu) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(fake_gpu.library_dir), "FAKE_NVML_STATE": str(fake_gpu.state_path)}
