"""The hub stops its managed services with SIGINT: the fracnb service stops on it even when it was started with
SIGINT ignored (a hub under nohup, or a shell's background job, hands that on to the processes it starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from fracnb_testbed.procs import free_port, wait_until


def test_the_service_stops_on_sigint_though_it_inherited_sigint_ignored(tmp_path):
    env = {
        **os.environ,
        "JUPYTERHUB_API_TOKEN": "not-used",
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{free_port()}/hub/api",  # nobody answers: the passes fail and go on
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{free_port()}",
        "JUPYTERHUB_SERVICE_PREFIX": "/services/fracnb/",
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
    }
    config = tmp_path / "service_config.py"
    config.write_text(f"c.FracnbService.db_url = 'sqlite:///{tmp_path / 'history.sqlite'}'\n")
    log = tmp_path / "service.log"
    with log.open("w") as out:
        service = subprocess.Popen(
            [sys.executable, "-m", "fracnb_spawner.service", f"--config={config}"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509 - what nohup does
        )  # fmt: skip
    try:
        wait_until(lambda: "fracnb service on" in log.read_text(), what="the service to listen", timeout=60)
        service.send_signal(signal.SIGINT)
        # Without its own handler it would never end on SIGINT; 60 s is far more than a stop takes.
        wait_until(lambda: service.poll() is not None, what="the service to stop on SIGINT", timeout=60)
        assert service.returncode == 0
        assert "fracnb service stopped" in log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
