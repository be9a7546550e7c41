"""The CLI end to end on a small cluster: up, status, a local pod, down leaves nothing behind."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fracnb_testbed.handle import Testbed, pod_phase_is
from fracnb_testbed.procs import ProcessRecord, is_alive, start_ticks_of, wait_until_async
from fracnb_testbed.state import TestbedState, load_runner_children

pytestmark = pytest.mark.k8s

SMALL_CLUSTER = """
name: small
nodeGroups:
  - name: sim
    labels: {nvidia.com/gpu.replicas: "4"}
    capacity: {cpu: "4", memory: 8Gi, pods: "10", nvidia.com/gpu.shared: "4"}
  - name: here
    runner: local
    capacity: {cpu: "4", memory: 8Gi, pods: "10"}
"""


def cli(*args, state_dir):
    return subprocess.run(
        [sys.executable, "-m", "fracnb_testbed.cli", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture
def small_cluster(tmp_path):
    """A two-node description: one KWOK node, one local node."""
    description = tmp_path / "small.yaml"
    description.write_text(SMALL_CLUSTER)
    return description


async def test_up_status_down_leaves_no_process_behind(tmp_path, small_cluster):
    state_dir = tmp_path / "state"
    started = cli("up", "--cluster", str(small_cluster), state_dir=state_dir)
    assert started.returncode == 0, started.stderr
    assert f"export KUBECONFIG={state_dir / 'kubeconfig'}" in started.stdout
    state = TestbedState.load(state_dir)
    assert [p.name for p in state.processes] == [
        "etcd",
        "kube-apiserver",
        "kube-scheduler",
        "kwok",
        "runner",
    ]
    try:
        status = cli("status", state_dir=state_dir)
        assert status.returncode == 0
        assert status.stdout.count(" running ") == 5

        # A pod whose process starts a grandchild: stopping must take the whole group.
        testbed = Testbed(state)
        script = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
        testbed.create_pod(
            "default",
            {
                "metadata": {"name": "sleeper"},
                "spec": {
                    "nodeSelector": {"fracnb.io/runner": "local"},
                    "containers": [{"name": "c", "image": "x", "command": [sys.executable, "-c", script]}],
                },
            },
        )
        await testbed.wait_for_pod("default", "sleeper", lambda p: p and p["status"].get("phase") == "Running")
        (pod_process,) = load_runner_children(state_dir)
        # The grandchild appears a moment after the pod runs.
        await wait_until_async(
            lambda: len(_group_members(pod_process.pid)) == 2, what="the pod's grandchild", timeout=10, interval=0.05
        )
    finally:
        stopped = cli("down", state_dir=state_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 5 processes" in stopped.stderr
    for record in [*state.processes, pod_process]:
        assert not is_alive(record), record
    assert not _group_members(pod_process.pid)
    assert not state_dir.exists()


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def test_down_cleans_up_pod_processes_of_a_killed_runner(tmp_path):
    """If the runner died without cleaning up, ``down`` still stops its pod processes."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    TestbedState(directory=state_dir, cluster="x", ports={"apiserver": 1}).save()
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = ProcessRecord("ns/pod/c", orphan.pid, start_ticks_of(orphan.pid), "")
        (state_dir / "runner-children.json").write_text(json.dumps([record.to_dict()]))
        result = cli("down", state_dir=state_dir)
        assert result.returncode == 0, result.stderr
        assert "stopped leftover pod process ns/pod/c" in result.stderr
        orphan.wait(timeout=5)
    finally:
        if orphan.poll() is None:
            orphan.kill()
        orphan.wait()


def _hub_user_pod(name: str, script: str) -> dict:
    """A pod as KubeSpawner makes it for ann's default server, running ``script`` locally."""
    return {
        "metadata": {"name": name, "annotations": {"hub.jupyter.org/username": "ann"}},
        "spec": {
            "nodeSelector": {"fracnb.io/runner": "local"},
            "containers": [{"name": "notebook", "image": "x", "command": [sys.executable, "-c", script]}],
        },
    }


async def _run_to_completion(state_dir: Path, manifest: dict) -> str:
    """Run a pod on the local node until it succeeds; its output."""
    testbed = Testbed(TestbedState.load(state_dir))
    testbed.create_pod("default", manifest)
    name = manifest["metadata"]["name"]
    pod = await testbed.wait_for_pod("default", name, pod_phase_is("Succeeded", "Failed"), timeout=60)
    output = testbed.pod_log("default", name, "notebook")
    assert pod["status"]["phase"] == "Succeeded", output
    return output


async def test_up_after_down_keep_files_or_a_crash_starts_afresh_and_keeps_homes(tmp_path, small_cluster):
    """``up`` starts an empty cluster every time (the old nodes' etcd data once made it fail
    with 409 AlreadyExists); a hub user's home outlives both."""
    state_dir = tmp_path / "state"
    write = "import pathlib; (pathlib.Path.home() / 'saved.txt').write_text('kept')"
    read = "import pathlib; print('home has', (pathlib.Path.home() / 'saved.txt').read_text())"
    assert cli("up", "--cluster", str(small_cluster), state_dir=state_dir).returncode == 0
    try:
        await _run_to_completion(state_dir, _hub_user_pod("write", write))
        stopped = cli("down", "--keep-files", state_dir=state_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert (state_dir / "homes" / "default" / "ann" / "saved.txt").read_text() == "kept"
        assert not (state_dir / "etcd-data").exists()

        again = cli("up", "--cluster", str(small_cluster), state_dir=state_dir)
        assert again.returncode == 0, again.stderr
        assert "home has kept" in await _run_to_completion(state_dir, _hub_user_pod("read", read))

        # A testbed killed without `down` (a crash, a reboot) leaves state.json behind.
        killed = TestbedState.load(state_dir).processes
        for record in killed:
            os.kill(record.pid, signal.SIGKILL)
        # SIGKILL takes effect a moment later.
        await wait_until_async(
            lambda: not any(is_alive(record) for record in killed),
            what="the killed processes gone",
            timeout=10,
            interval=0.05,
        )
        after_crash = cli("up", "--cluster", str(small_cluster), state_dir=state_dir)
        assert after_crash.returncode == 0, after_crash.stderr
        assert "stopped without `down`" in after_crash.stderr
        assert "home has kept" in await _run_to_completion(state_dir, _hub_user_pod("read", read))
    finally:
        cli("down", state_dir=state_dir)
    # A plain `down` removes everything, homes in the state dir included (the dir itself stays
    # once a later `up` found it already there).
    assert list(state_dir.iterdir()) == []


def test_up_refuses_while_a_testbed_runs_and_says_how_to_stop_it(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    running = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = ProcessRecord("etcd", running.pid, start_ticks_of(running.pid), "")
        TestbedState(directory=state_dir, cluster="x", ports={"apiserver": 1}, processes=[record]).save()
        result = cli("up", state_dir=state_dir)
        assert result.returncode == 1
        assert f"a testbed is running in {state_dir}: etcd (pid {running.pid})" in result.stderr
        assert f"fracnb-testbed down --state-dir {state_dir}" in result.stderr
        assert running.poll() is None
    finally:
        running.kill()
        running.wait()


def test_status_and_down_without_a_testbed_explain(tmp_path):
    result = cli("status", state_dir=tmp_path)
    assert result.returncode == 1
    assert "no testbed state" in result.stderr
    assert "fracnb-testbed up" in result.stderr
