"""Time from the cull decision to the GPU slot being free, with and without hibernation, side by side.

On the demo stack (testbed cluster, real JupyterHub with FractionalSpawner and the fracnb service,
pods run as local processes on the simulated GPU), a user's 0.25 GPU server holds one idle kernel
with ``--sizes`` MiB of numpy arrays. From the moment of the decision, this process runs the fracnb
service's own stop of a culled server (``fracnb_spawner.service.cullpass._stop``: the hibernation where
it applies, then the hub's stop); the slot is free when the pod object is gone (until then the
hub's form and queue count it as held). Two variants alternate in every round:

- **hibernate**: the service's default (``FracnbService.hibernation_timeout`` 120 s): the kernel's
  variables are saved to the user's home first;
- **plain**: no hibernation (``hibernation_timeout = 0``), the stop as it was before.

The report gives, per size, the median over ``--rounds`` of the decision-to-free time of each
variant, their difference and ratio, and how long the hibernation itself took.

    python -m bench.hibernate_stop [--rounds 3] [--sizes 0,1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient

from fracnb_spawner.culling import Action, CullDecision, Reason
from fracnb_spawner.hibernation.culled import Hibernator
from fracnb_spawner.hibernation.settings import HibernationSettings
from fracnb_spawner.service.cullpass import PassReport, ServerVerdict, _stop, index_pods, utcnow
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.demo import DemoSettings, RunningDemo, free_port, prepare_fake_gpu, running_demo
from fracnb_testbed.handle import Testbed

MIB = 1 << 20
USER = "carol"
TOKEN = secrets.token_hex(16)
EXTRA_CONFIG = "\n".join([
    # This process plays the fracnb service's stop: its token has the service's scopes.
    f"c.JupyterHub.services = [{{'name': 'bench', 'api_token': {TOKEN!r}}}]",
    "c.JupyterHub.load_roles = [{'name': 'bench', 'scopes': ['admin:users', 'admin:servers', 'access:servers',"
    " 'list:users', 'read:servers', 'delete:servers'], 'services': ['bench']}]",
])  # fmt: skip


async def wait_for(check: Any, what: str, timeout: float = 180, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        await asyncio.sleep(interval)


def fill_kernel(homes: Path, kernel_id: str, size: int) -> None:
    """Run the notebook's cell in the kernel (through its connection file in the user's home)."""
    [connection] = list(homes.rglob(f"kernel-{kernel_id}.json"))
    client = BlockingKernelClient()
    client.load_connection_file(str(connection))
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        code = f"import numpy as np\nweights = np.full({size // 8}, 0.5)\nnotes = {{'epoch': 7}}"
        reply = client.execute_interactive(code, timeout=300, output_hook=lambda _msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()


async def start_with_variables(hub: HubAPI, testbed: Testbed, homes: Path, size: int) -> None:
    """The user's quarter-GPU server, with an idle kernel of a notebook holding ``size`` bytes of arrays."""
    await hub.request("POST", f"users/{USER}/server", body={"profile": "quarter"})

    async def ready() -> bool:
        return bool(((await hub.user(USER))["servers"].get("") or {}).get("ready"))

    await wait_for(ready, "ready server")
    base = hub.api_url.removesuffix("/hub/api")
    body = {"path": "bench.ipynb", "name": "bench.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    answer = await hub.http.fetch(f"{base}/user/{USER}/api/sessions", method="POST", body=json.dumps(body),
                                  headers={"Authorization": f"token {TOKEN}"})  # fmt: skip
    kernel_id = json.loads(answer.body)["kernel"]["id"]
    await asyncio.to_thread(fill_kernel, homes, kernel_id, size)

    async def idle() -> bool:
        answer = await hub.http.fetch(f"{base}/user/{USER}/api/kernels/{kernel_id}",
                                      headers={"Authorization": f"token {TOKEN}"})  # fmt: skip
        return json.loads(answer.body)["execution_state"] == "idle"

    await wait_for(idle, "idle kernel")


async def cull_once(
    hub: HubAPI, testbed: Testbed, namespace: str, hibernator: Hibernator | None
) -> tuple[float, float]:
    """(seconds from the decision to the pod gone, seconds the hibernation took)."""
    pods = testbed.list_pods(namespace)
    facts = index_pods(pods)[(USER, "")]
    [pod_name] = [
        p["metadata"]["name"] for p in pods if p["metadata"]["annotations"].get("hub.jupyter.org/username") == USER
    ]
    model = (await hub.user(USER))["servers"][""]
    verdict = ServerVerdict(USER, "", model, facts, CullDecision(Action.CULL, Reason.IDLE, utcnow(), 0.0))
    report = PassReport()
    started = time.monotonic()
    await _stop(hub, CullMetrics(), report, verdict, clock=utcnow, hibernator=hibernator)
    assert report.culled, "the hub did not take the stop"

    async def gone() -> bool:
        status, _ = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
        return status == 404

    await wait_for(gone, "pod deletion")
    freed = time.monotonic() - started

    async def stopped() -> bool:
        return "" not in (await hub.user(USER))["servers"]

    await wait_for(stopped, "stopped server")
    hibernation = report.hibernations.get((USER, ""))
    if hibernator is not None:
        assert hibernation is not None, "no hibernation"
        assert hibernation.report is not None, hibernation.problem
        assert [k["status"] for k in hibernation.kernels] == ["saved"], hibernation.kernels
    return freed, hibernation.seconds if hibernation else 0.0


async def run(demo: RunningDemo, testbed: Testbed, homes: Path, sizes: list[int], rounds: int) -> None:
    hub = HubAPI(f"{demo.settings.url}/hub/api", TOKEN)
    hibernator = Hibernator(HibernationSettings(), TOKEN)
    namespace = demo.settings.namespace
    variants = [("hibernate", hibernator), ("plain", None)]
    freed: dict[tuple[int, str], list[float]] = {}
    saving: dict[int, list[float]] = {}
    try:
        for size in sizes:
            for round_ in range(rounds):
                order = variants if round_ % 2 == 0 else variants[::-1]
                for name, which in order:
                    await start_with_variables(hub, testbed, homes, size * MIB)
                    seconds, saved = await cull_once(hub, testbed, namespace, which)
                    freed.setdefault((size, name), []).append(seconds)
                    if which is not None:
                        saving.setdefault(size, []).append(saved)
                    print(f"{size:>5} MiB round {round_ + 1} {name:9}: decision to free slot {seconds:6.2f} s"
                          + (f" (hibernation {saved:.2f} s)" if which is not None else ""), flush=True)  # fmt: skip
    finally:
        hibernator.close()
        hub.close()
    print("\nmedians over", rounds, "rounds (decision to free slot):")
    for size in sizes:
        ours, plain = statistics.median(freed[(size, "hibernate")]), statistics.median(freed[(size, "plain")])
        hibernation = statistics.median(saving[size])
        print(
            f"  {size:>5} MiB: hibernate {ours:.2f} s, plain {plain:.2f} s,"
            f" +{ours - plain:.2f} s ({ours / plain:.2f}x); the hibernation itself {hibernation:.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="0,1024", help="MiB of arrays in the kernel, comma-separated")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        homes = root / "homes"
        print("starting the testbed and the demo hub ...", flush=True)
        state = up(load_cluster("mixed"), root / "testbed", runner_env=prepare_fake_gpu(root / "fakenvml"),
                   homes_dir=homes)  # fmt: skip
        try:
            testbed = Testbed(state)
            namespace = testbed.create_namespace()
            settings = DemoSettings(state_dir=root / "demo", kubeconfig=testbed.kubeconfig, namespace=namespace,
                                    port=free_port(), extra_config=EXTRA_CONFIG)  # fmt: skip
            with running_demo(settings, testbed=testbed) as demo:
                asyncio.run(run(demo, testbed, homes, sizes, args.rounds))
        finally:
            down(state.directory)


if __name__ == "__main__":
    main()
