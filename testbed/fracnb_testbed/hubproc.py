"""A real JupyterHub, with configurable-http-proxy, as a subprocess: the one launcher of the demo, the
service tests and the benchmarks.

A caller writes its own ``jupyterhub_config.py`` lines after :func:`config_head`, the lines every such hub
shares (loopback ports, the proxy, its files in its working directory). :func:`running` starts the hub,
waits until its API answers through the proxy, and stops it, with whatever it started, at the end of the
block; :func:`start`, :func:`wait_ready` and :func:`stop` are its steps, for tests that kill and restart a hub.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from fracnb_testbed.procs import LOOPBACK, ProcessRecord, descendants, free_port, start_ticks_of
from fracnb_testbed.procs import stop as stop_process

REPO = Path(__file__).resolve().parents[2]
LOCAL_TOOLS = REPO / ".tools" / "node_modules" / ".bin"  # what ./dev setup installs with npm


class HubError(RuntimeError):
    """JupyterHub could not start; the message says what to fix."""


@dataclass(frozen=True)
class HubPorts:
    """Where a hub listens on loopback: ``public`` is the proxy's (the hub's URL), ``hub`` the hub's own,
    ``proxy_api`` the proxy's REST API. Each left out is a free port."""

    public: int = field(default_factory=free_port)
    hub: int = field(default_factory=free_port)
    proxy_api: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.public}"


def config_file(workdir: Path) -> Path:
    return workdir / "jupyterhub_config.py"


def pid_file(workdir: Path) -> Path:
    return workdir / "jupyterhub.pid"


def find_proxy() -> str:
    """configurable-http-proxy from PATH or the repository's .tools (what ./dev installs)."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    if (LOCAL_TOOLS / "configurable-http-proxy").exists():
        return str(LOCAL_TOOLS / "configurable-http-proxy")
    raise HubError(
        "configurable-http-proxy is not installed: run ./dev setup, or "
        "npm install --prefix .tools configurable-http-proxy@4"
    )


def config_head(workdir: Path, ports: HubPorts, proxy: str) -> list[str]:
    """The first lines of every launched hub's config (only ``c.*`` lines: the fracnb service reads the file
    too): it listens on ``ports``, runs ``proxy``, keeps its database, cookie secret and pid file in
    ``workdir``, and lets users in with the dummy authenticator."""
    return [
        "c = get_config()  # noqa: F821",
        f"c.JupyterHub.ip = {LOOPBACK!r}\nc.JupyterHub.port = {ports.public}",
        # Pods run on 127.x.y.N addresses of this machine and reach the hub on loopback.
        f"c.JupyterHub.hub_ip = {LOOPBACK!r}\nc.JupyterHub.hub_port = {ports.hub}",
        f"c.JupyterHub.hub_connect_ip = {LOOPBACK!r}",
        f"c.ConfigurableHTTPProxy.command = [{proxy!r}]",
        f"c.ConfigurableHTTPProxy.api_url = 'http://{LOOPBACK}:{ports.proxy_api}'",
        f"c.JupyterHub.db_url = 'sqlite:///{workdir / 'jupyterhub.sqlite'}'",
        f"c.JupyterHub.cookie_secret_file = {str(workdir / 'jupyterhub_cookie_secret')!r}",
        f"c.JupyterHub.pid_file = {str(pid_file(workdir))!r}",
        "c.JupyterHub.authenticator_class = 'dummy'",
    ]


def hub_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``extra``, and this Python's scripts (``jupyterhub-singleuser``) and
    the repository's .tools first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(LOCAL_TOOLS), env.get("PATH", "")])
    env.update(extra or {})
    return env


def start(workdir: Path, config: str, log_file: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Write ``config`` to ``workdir``'s jupyterhub_config.py and start ``jupyterhub`` on it in its own session,
    in ``workdir``, with :func:`hub_environment` of ``env``; its output is appended to ``log_file``."""
    config_file(workdir).write_text(config)
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config_file(workdir))],
            cwd=workdir,
            env=hub_environment(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stop() signals its group, then what it started in sessions of their own
        )


def answers(url: str) -> bool:
    with suppress(OSError, urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2).close()  # noqa: S310
        return True
    return False


def wait_ready(url: str, hub: subprocess.Popen, log_file: Path, timeout: float = 120, since: int = 0) -> None:
    """Poll the hub's API through the proxy at ``url``; a HubError if the hub dies, with the lines of its log
    (from byte ``since``: this run's) that say why, or if it does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hub.poll() is not None:
            with open(log_file, "rb") as log:
                log.seek(since)
                text = log.read().decode(errors="replace")
            raise HubError(f"JupyterHub stopped at its start (exit code {hub.returncode}):\n{why_it_stopped(text)}")
        if answers(f"{url}/hub/api/"):
            return
        time.sleep(0.3)
    raise HubError(f"JupyterHub did not answer at {url} within {timeout:.0f}s; see {log_file}")


WHY_MARKERS = ("refusing to start", "[C ", "[E ", "Error:", "Exception:")


def why_it_stopped(log_text: str, most: int = 8) -> str:
    """The lines of a hub log that say why it stopped: its critical and error lines (fracnb's refusals
    among them), else the last few lines."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    found = [line for line in lines if any(marker in line for marker in WHY_MARKERS)]
    return "\n".join((found or lines)[-most:])


def stop(hub: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM (the hub stops its servers, services and proxy), then SIGKILL the group; then stop whatever the
    hub started that outlived it (its managed services and local servers run in sessions of their own)."""
    started = [
        ProcessRecord("hub child", pid, ticks, "") for pid in descendants(hub.pid) if (ticks := start_ticks_of(pid))
    ]
    if hub.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(hub.pid, signal.SIGTERM)
        try:
            hub.wait(grace)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(hub.pid, signal.SIGKILL)
            hub.wait()
    for child in started:
        stop_process(child)


@contextmanager
def running(
    workdir: Path,
    config: str,
    url: str,
    *,
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    progress: Callable[[str], None] = lambda _message: None,
) -> Iterator[subprocess.Popen]:
    """The hub of :func:`start` for the duration of the block, answering at ``url`` when it begins (see
    :func:`wait_ready`), stopped with what it started when it ends; each step said to ``progress``. Its log:
    ``log_file``, by default ``workdir``/jupyterhub.log."""
    log_file = log_file or workdir / "jupyterhub.log"
    progress(f"starting JupyterHub (log: {log_file})")
    since = log_file.stat().st_size if log_file.exists() else 0  # the log of earlier runs is not this one's
    hub = start(workdir, config, log_file, env)
    try:
        wait_ready(url, hub, log_file, timeout, since)
        yield hub
    finally:
        progress("stopping JupyterHub, its servers, its services and the proxy")
        stop(hub)
