"""A real jupyter server subprocess with the meter enabled, on simulated GPUs (tests, bench, demo).

server = start_server(workdir, library=build(workdir / "lib"), state=StateFile(path),
                      meter_config={"sample_interval_floor": 0.0})
server.usage()     # GET fracnb/api/usage with the server's token, checked against its schema
server.stop()
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient

from fracnb_schemas import USAGE, check

from .fakenvml import FakeState, write_state


@dataclass
class StateFile:
    path: Path

    def write(self, state: FakeState) -> None:
        write_state(self.path, state)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class MeterServer:
    """A jupyter server subprocess with the meter enabled, and a way to talk to it."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    runtime_dir: Path
    state: StateFile | None
    log: Path
    clients: list[BlockingKernelClient] = field(default_factory=list)

    def request(self, path: str, method: str = "GET", body: Any = None, token: str | None = "") -> tuple[int, Any]:
        """(status, decoded JSON or text); token None sends no credentials."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"token {token or self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def usage(self) -> dict[str, Any]:
        """GET fracnb/api/usage, checked against usage.schema.json (SchemaMismatchError if it departs)."""
        status, document = self.request("fracnb/api/usage")
        if status != 200:
            raise RuntimeError(f"GET fracnb/api/usage answered {status}: {document}")
        check(USAGE, document, check_formats=True)
        return document

    def start_session(self, notebook: str) -> str:
        body = {
            "path": notebook,
            "name": notebook,
            "type": "notebook",
            "kernel": {"name": "python3"},
        }
        status, session = self.request("api/sessions", "POST", body)
        if status != 201:
            raise RuntimeError(f"POST api/sessions answered {status}: {session}")
        return session["kernel"]["id"]

    def client(self, kernel_id: str) -> BlockingKernelClient:
        client = BlockingKernelClient()
        client.load_connection_file(str(self.runtime_dir / f"kernel-{kernel_id}.json"))
        # A busy machine can miss 1 s heartbeats; the client would then call the kernel dead.
        client.hb_channel.time_to_dead = 10.0
        client.start_channels()
        client.wait_for_ready(timeout=120)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.stop_channels()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(
    tmp_path: Path,
    library: Path | None,
    state: StateFile | None,
    *,
    meter_config: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
    extensions: dict[str, bool] | None = None,
) -> MeterServer:
    """Start ``jupyter server`` with the meter; ``library`` None means no NVML at all."""
    token = secrets.token_hex(16)
    port = free_port()
    runtime = tmp_path / "runtime"
    config = {
        "ServerApp": {
            # The Lab front end and LSP only cost start-up time here.
            "jpserver_extensions": {
                "fracnb_meter": True,
                "jupyterlab": False,
                "jupyter_lsp": False,
                **(extensions or {}),
            },
            "allow_root": True,
            "port": port,
            "ip": "127.0.0.1",
            "open_browser": False,
            "root_dir": str(tmp_path),
            "allow_unauthenticated_access": False,
        },
        "IdentityProvider": {"token": token},
        "FracnbMeter": meter_config or {},
    }
    config_file = tmp_path / "jupyter_server_config.json"
    config_file.write_text(json.dumps(config))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FRACNB_", "FAKE_NVML", "JUPYTER", "JPY_", "LD_LIBRARY_PATH"))
    }
    env |= {
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    if library is not None:
        env["LD_LIBRARY_PATH"] = str(library.parent)
    if state is not None:
        env["FAKE_NVML_STATE"] = str(state.path)
    env |= extra_env or {}
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "jupyter_server", f"--config={config_file}"]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    server = MeterServer(process, f"http://127.0.0.1:{port}/", token, runtime, state, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter server exited:\n{log.read_text()}")
        try:
            if server.request("api/status")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"jupyter server did not answer within 90 s:\n{log.read_text()}")
