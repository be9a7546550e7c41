"""hubproc.stop also stops what the hub started in process groups of their own (JupyterHub's managed services),
which a SIGTERM or SIGKILL of the hub's group does not reach."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from fracnb_testbed import hubproc
from fracnb_testbed.procs import ProcessRecord, is_alive, start_ticks_of, wait_until

# A stand-in hub: starts a "service" in a session of its own (as JupyterHub's LocalProcessSpawner does), writes
# its pid, and exits on SIGTERM without stopping it, as a hub that could not finish its cleanup.
HUB = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    service = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open(sys.argv[1], "w").write(str(service.pid))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(600)
    """
)


def test_a_service_in_its_own_session_is_stopped_with_the_hub(tmp_path: Path) -> None:
    pid_file = tmp_path / "service.pid"
    hub = subprocess.Popen([sys.executable, "-c", HUB, str(pid_file)], start_new_session=True)
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the service started", timeout=30)
        pid = int(pid_file.read_text())
        service = ProcessRecord("service", pid, start_ticks_of(pid) or 0, "")
        assert is_alive(service)
        hubproc.stop(hub, grace=10)
        assert hub.poll() is not None
        wait_until(lambda: not is_alive(service), what="the service stopped", timeout=20)
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait()
