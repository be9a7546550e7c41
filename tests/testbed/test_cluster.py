"""The mixed cluster on the real apiserver and scheduler, KWOK nodes and the local runner."""

import json
import sys
import urllib.error
import urllib.request

import pytest

from fracnb_testbed.clusters import load_cluster, node_manifests
from fracnb_testbed.handle import pod_is_gone, pod_is_running_with_ip, pod_phase_is
from fracnb_testbed.procs import is_alive, wait_until_async

pytestmark = pytest.mark.k8s


def gpu_pod(name, shared, selector):
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": selector,
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook",
                    "resources": {"limits": {"nvidia.com/gpu.shared": str(shared)}},
                }
            ],
        },
    }


def local_pod(name, command, node="local-cpu-0", env=()):
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "python", "command": command, "env": list(env)}],
        },
    }


def test_nodes_carry_the_described_capacity_and_labels(testbed):
    expected = {n["metadata"]["name"]: n for n in node_manifests(load_cluster("mixed"))}
    nodes = {n["metadata"]["name"]: n for n in testbed.list_nodes()}
    assert set(nodes) == set(expected)
    for name, node in nodes.items():
        # KWOK's node stages must not have replaced what the description set.
        assert node["status"]["allocatable"] == expected[name]["status"]["allocatable"], name
        assert node["metadata"]["labels"].items() >= expected[name]["metadata"]["labels"].items()
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True", name
        # Only the described taints (the demo's one-slot node has one): none added as not ready.
        assert node["spec"].get("taints", []) == expected[name]["spec"].get("taints", []), name
    kwok_nodes = testbed.list_nodes("type=kwok")
    assert {n["metadata"]["name"] for n in kwok_nodes} == {
        name for name, n in expected.items() if n["metadata"]["labels"]["fracnb.io/runner"] == "kwok"
    }


async def test_scheduler_binds_a_shared_gpu_pod_and_kwok_runs_it(testbed, k8s_namespace):
    testbed.create_pod(k8s_namespace, gpu_pod("quarter", 1, {"nvidia.com/gpu.replicas": "4"}))
    pod = await testbed.wait_for_pod(k8s_namespace, "quarter", pod_is_running_with_ip, 30)
    node = next(n for n in testbed.list_nodes() if n["metadata"]["name"] == pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert node["metadata"]["labels"]["type"] == "kwok"
    assert pod["status"]["podIP"].startswith("10.244.")


# The two KWOK nodes time-sliced 4 ways (a100-ts4-0 and -1).
TS4_KWOK = {
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
    "fracnb.io/runner": "kwok",
}


async def test_the_z2jh_user_scheduler_profile_fills_the_busiest_node(testbed, k8s_namespace):
    """Zero-to-JupyterHub's user-scheduler (MostAllocated) puts the second notebook beside the first."""
    nodes = []
    for name in ("first", "second"):
        manifest = gpu_pod(name, 1, TS4_KWOK)
        manifest["spec"]["schedulerName"] = "user-scheduler"
        # Scores are whole percentages of the node: z2jh's 1G guarantee on a 512Gi node scores 0 like an empty
        # node, so ask for enough memory to tell the nodes apart.
        manifest["spec"]["containers"][0]["resources"]["requests"] = {"memory": "64Gi"}
        testbed.create_pod(k8s_namespace, manifest)
        pod = await testbed.wait_for_pod(k8s_namespace, name, pod_is_running_with_ip, 30)
        nodes.append(pod["spec"]["nodeName"])
    assert nodes[0].startswith("a100-ts4-")  # two such nodes: the scheduler had a choice
    assert nodes[1] == nodes[0]


async def test_with_gpus_in_its_scoring_the_user_scheduler_fills_a_node_by_gpu_shares(testbed, k8s_namespace):
    """The profile docs/spawner.md suggests: with only z2jh's 1G guarantee, the shares alone tell the nodes apart."""
    nodes = []
    for name in ("first", "second", "third"):
        manifest = gpu_pod(name, 1, TS4_KWOK)
        manifest["spec"]["schedulerName"] = "user-scheduler-gpu-packing"
        manifest["spec"]["containers"][0]["resources"]["requests"] = {"memory": "1G"}
        testbed.create_pod(k8s_namespace, manifest)
        pod = await testbed.wait_for_pod(k8s_namespace, name, pod_is_running_with_ip, 30)
        nodes.append(pod["spec"]["nodeName"])
    assert nodes[0].startswith("a100-ts4-")
    assert nodes[1:] == [nodes[0], nodes[0]]


async def test_an_over_request_stays_pending_with_failed_scheduling(testbed, k8s_namespace):
    # The 4-way nodes have 8 GPUs x 4 replicas = 32 shares at most.
    testbed.create_pod(k8s_namespace, gpu_pod("greedy", 33, {"nvidia.com/gpu.replicas": "4"}))

    def unschedulable(pod):
        conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
        return conditions.get("PodScheduled", {}).get("reason") == "Unschedulable"

    pod = await testbed.wait_for_pod(k8s_namespace, "greedy", unschedulable, 30)
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    events = testbed.events_for(k8s_namespace, "greedy")
    failed = [e for e in events if e["reason"] == "FailedScheduling"]
    assert failed
    assert "Insufficient nvidia.com/gpu.shared" in failed[0]["message"]


async def test_a_local_pod_serves_http_on_its_own_ip_and_dies_with_its_pod(testbed, k8s_namespace):
    command = [sys.executable, "-m", "http.server", "8000", "--bind", "0.0.0.0"]  # noqa: S104
    testbed.create_pod(k8s_namespace, local_pod("web", command))
    pod = await testbed.wait_for_pod(k8s_namespace, "web", pod_is_running_with_ip, 30)
    ip = pod["status"]["podIP"]
    assert ip.startswith("127.")
    assert ip != "127.0.0.1"
    assert pod["status"]["hostIP"] == "127.0.0.1"

    def fetch():
        with urllib.request.urlopen(f"http://{ip}:8000/", timeout=5) as response:
            return response.status

    def answered() -> bool:
        try:
            return fetch() == 200
        except OSError:
            return False

    # The server binds a moment after the process starts.
    await wait_until_async(answered, what=f"an answer on {ip}:8000", timeout=15, interval=0.1)
    (process,) = [p for p in testbed.local_processes() if p.name == f"{k8s_namespace}/web/main"]
    reasons = [e["reason"] for e in testbed.events_for(k8s_namespace, "web")]
    assert "Started" in reasons

    testbed.delete_pod(k8s_namespace, "web")
    await testbed.wait_for_pod(k8s_namespace, "web", pod_is_gone, 30)
    assert not is_alive(process)
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        fetch()


@pytest.mark.parametrize(("exit_code", "phase"), [(0, "Succeeded"), (3, "Failed")])
async def test_the_exit_code_shows_in_the_pod_status(testbed, k8s_namespace, exit_code, phase):
    command = [sys.executable, "-c", f"raise SystemExit({exit_code})"]
    testbed.create_pod(k8s_namespace, local_pod("job", command))
    pod = await testbed.wait_for_pod(k8s_namespace, "job", pod_phase_is("Succeeded", "Failed"), 30)
    assert pod["status"]["phase"] == phase
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == exit_code
    assert status["ready"] is False


async def test_local_pods_get_their_env_the_runner_env_and_a_private_home(testbed, k8s_namespace):
    script = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "['POD_NAME', 'SERVICE_URL', 'EXTRA', 'HOME', 'OVERRIDDEN']} | {'cwd': os.getcwd()}))"
    )
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SERVICE_URL", "value": "http://0.0.0.0:8888/user/ada/"},
        {"name": "OVERRIDDEN", "value": "from-pod"},
    ]
    testbed.set_runner_env({"EXTRA": "from-runner", "OVERRIDDEN": "from-runner"})
    try:
        testbed.create_pod(
            k8s_namespace,
            local_pod("env", [sys.executable, "-c", script], node="local-a100-ts4-0", env=env),
        )
        pod = await testbed.wait_for_pod(k8s_namespace, "env", pod_phase_is("Succeeded", "Failed"))
    finally:
        testbed.set_runner_env({})
    seen = json.loads(testbed.pod_log(k8s_namespace, "env", "main"))
    assert pod["status"]["phase"] == "Succeeded"
    assert seen["POD_NAME"] == "env"
    assert seen["SERVICE_URL"] == f"http://{pod['status']['podIP']}:8888/user/ada/"
    assert seen["EXTRA"] == "from-runner"
    assert seen["OVERRIDDEN"] == "from-pod"
    assert seen["HOME"] == seen["cwd"]
    assert str(testbed.state.pods) in seen["HOME"]


async def test_a_pod_the_runner_cannot_start_stays_pending_with_a_reason(testbed, k8s_namespace):
    manifest = local_pod("broken", [])
    testbed.create_pod(k8s_namespace, manifest)

    def waiting(pod):
        statuses = pod["status"].get("containerStatuses") or [{}]
        return "waiting" in statuses[0].get("state", {})

    pod = await testbed.wait_for_pod(k8s_namespace, "broken", waiting, 30)
    assert pod["status"]["phase"] == "Pending"
    waiting_state = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting_state["reason"] == "CreateContainerConfigError"
    assert "neither command nor args" in waiting_state["message"]


async def test_a_missing_executable_fails_the_pod_like_a_start_error(testbed, k8s_namespace):
    testbed.create_pod(k8s_namespace, local_pod("typo", ["jupyterhub-singleuserr", "--ip=0.0.0.0"]))
    pod = await testbed.wait_for_pod(k8s_namespace, "typo", pod_phase_is("Failed"), 30)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 128
    assert terminated["reason"] == "StartError"
    assert "jupyterhub-singleuserr" in terminated["message"]
    warnings = [e for e in testbed.events_for(k8s_namespace, "typo") if e["type"] == "Warning"]
    assert warnings
