"""``up`` fails clearly: missing binaries, a taken port, a component dying during start."""

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fracnb_testbed.binaries import REQUIRED_BINARIES, find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import up
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.procs import is_alive
from fracnb_testbed.state import TestbedState


def test_missing_binaries_say_how_to_build(tmp_path):
    (tmp_path / "etcd").write_text("")
    with pytest.raises(TestbedError) as error:
        find_bin_dir(tmp_path)
    message = str(error.value)
    assert "kube-apiserver" in message
    assert "testbed/go/build.sh" in message
    assert "FRACNB_TESTBED_BIN" in message


def test_up_refuses_a_missing_bin_dir_before_creating_anything(tmp_path):
    with pytest.raises(TestbedError, match=r"testbed/go/build\.sh"):
        up(load_cluster("mixed"), tmp_path / "state", bin_dir=tmp_path / "nothing-here")
    assert not (tmp_path / "state").exists()


def fake_bin_dir(path, etcd_script):
    """Executables standing in for the binaries; etcd runs ``etcd_script``."""
    path.mkdir()
    for name in REQUIRED_BINARIES:
        program = path / name
        program.write_text("#!/bin/sh\n" + (etcd_script if name == "etcd" else "exit 0\n"))
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_component_dying_during_start_shows_its_log(tmp_path):
    bin_dir = fake_bin_dir(tmp_path / "bin", "echo 'etcd: data dir is corrupt' >&2\nexit 3\n")
    state_dir = tmp_path / "state"
    with pytest.raises(TestbedError) as error:
        up(load_cluster("mixed"), state_dir, bin_dir=bin_dir)
    message = str(error.value)
    assert "etcd exited while waiting for etcd /health" in message
    assert "etcd: data dir is corrupt" in message
    assert (state_dir / "logs" / "etcd.log").is_file()
    assert not (state_dir / "state.json").exists()


def test_a_taken_apiserver_port_is_named(tmp_path):
    bin_dir = fake_bin_dir(tmp_path / "bin", "sleep 30\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TestbedError, match=f"port 127.0.0.1:{port} for kube-apiserver .* taken"):
            up(load_cluster("mixed"), tmp_path / "state", bin_dir=bin_dir, apiserver_port=port)


def test_a_failed_start_stops_what_it_started(tmp_path, monkeypatch):
    """etcd 'starts' (sleeps) but never gets healthy; the timeout path must stop it."""
    bin_dir = fake_bin_dir(tmp_path / "bin", "exec sleep 60\n")
    monkeypatch.setitem(__import__("fracnb_testbed.controlplane").controlplane.START_TIMEOUTS, "etcd", 1.0)
    saved = {}
    original_save = TestbedState.save

    def spy(self):
        saved["state"] = [*self.processes]
        original_save(self)

    monkeypatch.setattr(TestbedState, "save", spy)
    with pytest.raises(TestbedError, match="timed out after 1s waiting for etcd /health"):
        up(load_cluster("mixed"), tmp_path / "state", bin_dir=bin_dir)
    (etcd,) = saved["state"]
    assert not is_alive(etcd)


def test_the_testbed_fixture_fails_rather_than_skips_without_binaries(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["fracnb_testbed.pytest_plugin"]\n')
    (tmp_path / "test_uses_cluster.py").write_text("def test_cluster(testbed):\n    pass\n")
    env = {**os.environ, "FRACNB_TESTBED_BIN": str(tmp_path / "no-binaries")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout
    assert "skipped" not in result.stdout
    assert "the testbed cluster could not start" in result.stdout
    assert "testbed/go/build.sh" in result.stdout


def demo_on_a_full_disk(tmp_path, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The demo command with a saved notebook in ann's home, on a cluster whose etcd fails at its start."""
    bin_dir = fake_bin_dir(tmp_path / "bin", "echo 'etcd: no space left on device' >&2\nexit 1\n")
    state_dir = tmp_path / "demo"
    saved = state_dir / "homes" / "fracnb-demo" / "ann" / "work.ipynb"
    saved.parent.mkdir(parents=True)
    saved.write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "fracnb_testbed.demo", "--state-dir", str(state_dir), "--port", "1", *options],
        capture_output=True,
        text=True,
        env={**os.environ, "FRACNB_TESTBED_BIN": str(bin_dir)},
        timeout=120,
        check=False,
    )
    return result, saved


def test_a_demo_that_cannot_start_says_why_and_how_to_recover(tmp_path):
    result, saved = demo_on_a_full_disk(tmp_path)
    state_dir = tmp_path / "demo"
    assert result.returncode == 1, result.stderr
    assert "[demo] error: etcd exited while waiting for etcd /health" in result.stderr
    assert "etcd: no space left on device" in result.stderr
    assert f"logs: {state_dir / 'jupyterhub.log'} and {state_dir / 'testbed' / 'logs'}/" in result.stderr
    assert "Running the demo again stops whatever an earlier run left behind" in result.stderr
    assert f"delete {state_dir / 'testbed'} (only the cluster" in result.stderr
    assert saved.read_text() == "{}"  # a failed start never touches the users' homes
    assert not (state_dir / "testbed" / "state.json").exists()


def test_reset_homes_empties_every_home_before_the_cluster_starts(tmp_path):
    """--reset-homes, without a running demo: the homes are gone before ``up`` is tried (the server's home is
    this directory, as tests/testbed/test_demo_restart.py shows)."""
    result, saved = demo_on_a_full_disk(tmp_path, "--reset-homes")
    assert result.returncode == 1, result.stderr
    assert f"removing the users' home directories in {tmp_path / 'demo' / 'homes'} (--reset-homes)" in result.stderr
    assert "etcd: no space left on device" in result.stderr  # it went on to start the cluster
    assert not saved.parent.parent.parent.exists()
