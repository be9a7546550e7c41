"""The GPU-unused timeout and hibernation end to end on the hub side: real single-user servers with the
meter, on the fake NVML, reporting to the real fracnb service of a real JupyterHub.

Ann's notebook holds 4 GiB of GPU memory and has done no GPU work (no utilisation samples) since it
ran a cell; her JupyterLab could be open all day and the hub would see her server active. Bob's
notebook holds 2 GiB and computes on the CPU. Cid's notebook holds 1 GiB on a node whose driver
(565) gives a container per-process memory but not per-process utilisation: his count is unknown. Both profiles stop a server after 4 s without GPU work
(``fracnb.io/gpu-unused-timeout``; windows of 1 s instead of 30 s, reports every second), and the
idle timeout is an hour. The service asks Ann's server to save its variables, then stops it, and
tells her what was saved; Bob's server is only warned; Cid's is left alone (unknown never counts). The pods are the ones FractionalSpawner would
make, pointing at the local servers (the hub spawns them as local processes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking import BlockingKernelClient
from prometheus_client.parser import text_string_to_metric_families

from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState, build
from fracnb_meter.testing.server import StateFile
from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_testbed.procs import wait_until
from tests.service.calls import ACCESS, user_token
from tests.service.conftest import RunningHub, running_hub

GIB = 1 << 30
TIMEOUT = 4  # seconds without GPU work


@pytest.fixture(scope="module")
def gpu_hub(tmp_path_factory: pytest.TempPathFactory, testbed: Any) -> Iterator[tuple[RunningHub, dict[str, Any]]]:
    workdir = tmp_path_factory.mktemp("gpu-unused-hub")
    namespace = testbed.create_namespace()
    library = build(workdir / "fakenvml")
    runtime, homes = workdir / "runtime", workdir / "homes"
    environment = {
        "LD_LIBRARY_PATH": str(library.parent),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "FRACNB_GPU_FRACTION": "0.25",
        "FRACNB_GPU_MEMORY_LIMIT": str(20 * GIB),
        "FRACNB_ISOLATION": "none",
        "FRACNB_GPU_BACKEND": "time-slicing",
        "FRACNB_PROFILE": "quarter",
    }
    meter = {"session_report_interval": 1, "gpu_unused_window": 1, "gpu_unused_interval": 0.5, "in_container": True,
             "activity_interval": 1, "sample_interval_floor": 0, "history_interval": 0}  # fmt: skip
    extra = "\n".join([
        f"c.Spawner.environment = {environment!r}",
        # As setup(c) gives FractionalSpawner's servers: the service's URL, and a token that may call it.
        "c.Spawner.environment['FRACNB_SERVICE_URL'] = c.JupyterHub.services[0]['url'] + '/services/fracnb/'",
        # Each user's server on a GPU of its own: its own fake NVML state.
        f"c.Spawner.environment['FAKE_NVML_STATE'] = lambda spawner: {str(workdir)!r} + '/nvml-' + spawner.user.name",
        "c.Spawner.server_token_scopes = ['users:activity!user', 'access:servers!server', "
        "'access:services!service=fracnb']",
        f"c.Spawner.args = ['--allow-root', *{[f'--FracnbMeter.{k}={v}' for k, v in meter.items()]!r}]",
        f"c.SimpleLocalProcessSpawner.home_dir_template = {str(homes / '{username}')!r}",
        "c.FracnbService.cull_every = 1",
        "c.FracnbService.warning_lead = 3",
        "c.FracnbService.activity_report_lag = 2",
        "c.FracnbService.session_report_interval = 1",
        "c.FracnbService.hibernation_timeout = 60",
    ])  # fmt: skip
    service_env = {"KUBECONFIG": str(testbed.kubeconfig), "POD_NAMESPACE": namespace}
    try:
        with running_hub(workdir, service_env, extra) as hub:
            yield hub, {"workdir": workdir, "runtime": runtime, "homes": homes, "namespace": namespace}
    finally:
        testbed.delete_namespace(namespace)


def open_notebook(hub: RunningHub, runtime: Path, user: str, path: str) -> BlockingKernelClient:
    """A notebook session on the user's server, through the hub's proxy; a client of its kernel."""
    token = user_token(hub, user, scopes=(f"access:servers!user={user}",))
    body = {"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}}
    status, session = hub.http("POST", f"{hub.url}/user/{user}/api/sessions", body, token=token)
    assert status == 201, session
    client = BlockingKernelClient()
    client.load_connection_file(str(runtime / f"kernel-{session['kernel']['id']}.json"))
    client.hb_channel.time_to_dead = 10.0
    client.start_channels()
    client.wait_for_ready(timeout=120)
    return client


def evaluate(client: BlockingKernelClient, code: str, expression: str) -> str:
    reply = client.execute_interactive(code, user_expressions={"v": expression}, timeout=120,
                                       output_hook=lambda _msg: None)  # fmt: skip
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply["content"]["user_expressions"]["v"]["data"]["text/plain"].strip("'")


def create_pod(testbed: Any, namespace: str, user: str, url: str) -> None:
    """The pod FractionalSpawner makes for a quarter GPU with a 4 s GPU-unused timeout, at the server's address."""
    port = int(url.split(":")[2].split("/", maxsplit=1)[0])
    name = f"jupyter-{user}"
    testbed.create_pod(namespace, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"component": "singleuser-server", "fracnb.io/profile": "quarter"},
            "annotations": {
                "hub.jupyter.org/username": user, "hub.jupyter.org/servername": "", "fracnb.io/gpu-fraction": "1/4",
                "fracnb.io/profile": "quarter", "fracnb.io/idle-timeout": "3600",
                "fracnb.io/gpu-unused-timeout": str(TIMEOUT),
            },
        },
        "spec": {
            "nodeName": "fracnb-nowhere",
            "containers": [{"name": "notebook", "image": "example.invalid/notebook",
                            "ports": [{"name": "notebook-port", "containerPort": port}]}],
        },
    })  # fmt: skip
    rest = testbed.rest()
    try:
        pod = rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")[1]
        pod["status"] = {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}
        status, answer = rest.request("PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod)
        assert status == 200, answer
    finally:
        rest.close()


def gpu_state(where: dict[str, Any], user: str, driver: str = "570.86.15", **state: Any) -> StateFile:
    """The user's fake NVML: one A100 (``driver``: 570.86.15 gives a container per-process utilisation)."""
    found = StateFile(where["workdir"] / f"nvml-{user}")
    found.write(FakeState(driver_version=driver, devices=[FakeDevice.a100(0)], **state))
    return found


def me(hub: RunningHub, user: str) -> dict[str, Any]:
    status, report = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, user))
    assert status == 200, report
    assert problems(SERVICE_REPORT, report, check_formats=True) == []
    return report


def metric(hub: RunningHub, user: str, name: str, **labels: str) -> float:
    _, text = hub.http("GET", hub.service_url + "metrics", token=user_token(hub, user, scopes=(ACCESS,)))
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def test_an_idle_notebook_with_an_unused_gpu_is_hibernated_and_stopped_and_a_busy_one_only_warned(
    gpu_hub: tuple[RunningHub, dict[str, Any]], testbed: Any
) -> None:
    hub, where = gpu_hub
    ann, bob, cid = "ann", "bob", "cid"
    clients: list[BlockingKernelClient] = []
    for user in (ann, bob, cid):
        gpu_state(where, user, driver="565.57.01" if user == cid else "570.86.15")
        assert hub.api("POST", f"users/{user}")[0] in (201, 409)
        hub.start_server(user)
    try:
        notebook = open_notebook(hub, where["runtime"], ann, "train.ipynb")
        clients.append(notebook)
        ann_pid = int(evaluate(notebook, "weights = [0.5] * 100_000\nimport os", "os.getpid()"))
        ann_url = evaluate(notebook, "", "os.environ['JUPYTERHUB_SERVICE_URL']")
        training = open_notebook(hub, where["runtime"], bob, "preprocess.ipynb")
        clients.append(training)
        bob_pid = int(evaluate(training, "import os", "os.getpid()"))
        bob_url = evaluate(training, "", "os.environ['JUPYTERHUB_SERVICE_URL']")
        training.execute("import time\nwhile True:\n    time.sleep(0.05)")  # busy on the CPU from now on
        plotting = open_notebook(hub, where["runtime"], cid, "plots.ipynb")
        clients.append(plotting)
        cid_pid = int(evaluate(plotting, "import os", "os.getpid()"))
        cid_url = evaluate(plotting, "", "os.environ['JUPYTERHUB_SERVICE_URL']")
        # All three hold GPU memory; none has a utilisation sample: unused, or for Cid unknown.
        gpu_state(where, ann, processes=[FakeProcess(0, ann_pid, 4 * GIB)])
        gpu_state(where, bob, processes=[FakeProcess(0, bob_pid, 2 * GIB)])
        gpu_state(where, cid, driver="565.57.01", processes=[FakeProcess(0, cid_pid, GIB)])
        for user, url in ((ann, ann_url), (bob, bob_url), (cid, cid_url)):
            create_pod(testbed, where["namespace"], user, url)

        warned: dict[str, Any] = {}

        def bob_warned() -> bool:
            warned.update(me(hub, bob)["culling"].get("", {}).get("gpu_unused") or {})
            return bool(warned)

        wait_until(lambda: not hub.server_running(ann), what="ann's server to be stopped", timeout=90, interval=0.5)
        # The warning names the memory of the newest report; one sent before the meter read bob's 2 GiB
        # says 0, and a slow machine can take a report or two to catch up.
        wait_until(lambda: bob_warned() and warned["gpu_memory_bytes"] == 2 * GIB,
                   what="bob's busy server to be warned with the 2 GiB it holds", timeout=60, interval=0.5)  # fmt: skip
        assert warned["seconds"] >= TIMEOUT
        assert hub.server_running(bob), "bob's busy server was stopped"
        # Unchanged after longer than the timeout again, on the CPU all along.
        seconds = warned["seconds"]
        wait_until(lambda: bob_warned() and warned["seconds"] >= seconds + TIMEOUT, what="bob's count to grow",
                   timeout=60, interval=0.5)  # fmt: skip
        assert hub.server_running(bob)
        assert me(hub, bob)["culling"][""]["deadline"]["reason"] == "idle"  # an hour after his last use
        # Cid's count was unknown all along: no GPU-unused deadline, no warning, still running.
        assert hub.server_running(cid)
        token = user_token(hub, cid, scopes=(f"access:servers!user={cid}",))
        usage = hub.http("GET", f"{hub.url}/user/{cid}/fracnb/api/usage", token=token)[1]
        assert usage["gpu_unused"]["seconds"] is None, usage["gpu_unused"]
        assert "570.86.15" in usage["gpu_unused"]["reason"]
        cid_status = me(hub, cid)["culling"][""]
        assert cid_status["deadline"]["reason"] == "idle"
        assert "gpu_unused" not in cid_status

        stopped = me(hub, ann)["stopped"][""]
        assert stopped["reason"] == "gpu-unused"
        hibernation = stopped["hibernation"]
        assert hibernation["outcome"] == "saved", hibernation
        [kernel] = hibernation["kernels"]
        assert (kernel["path"], kernel["status"]) == ("train.ipynb", "saved")
        assert kernel["variables"] >= 1
        [line] = hibernation["summary"]
        assert line.startswith("Variables of train.ipynb saved at ")
        manifests = list((where["homes"] / ann / ".local/state/fracnb/hibernation/default").glob("*/manifest.json"))
        [manifest] = manifests  # the state the notebook offers back on Ann's next start
        assert "weights" in [variable["name"] for variable in json.loads(manifest.read_text())["variables"]]
        assert metric(hub, bob, "fracnb_hibernations_total", outcome="saved") >= 1
        assert metric(hub, bob, "fracnb_culled_servers_total", reason="gpu-unused") >= 1
        assert metric(hub, bob, "fracnb_gpu_unused_gpu_hours_total", profile="quarter") > 0
    finally:
        for client in clients:
            client.stop_channels()
        for user in (ann, bob, cid):
            hub.api("DELETE", f"users/{user}/server")
