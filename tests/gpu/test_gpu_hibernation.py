"""Hibernation on a real GPU: a kernel's PyTorch and CuPy arrays saved on one server and restored
on the GPU by another, through real jupyter servers, real kernels and the real NVML.

Skipped where the frameworks are missing (CI installs neither: their wheels bring the CUDA
libraries). The second server shares only the first one's home, as a user's next server would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.testing.server import MeterServer, start_server
from fracnb_schemas import HIBERNATION_REPORT, RESTORE_REPORT, check
from fracnb_testbed.procs import wait_until

pytest.importorskip("torch")
pytest.importorskip("cupy")

MIB = 1 << 20
SERVER_NAME = "gpu-training"

# What a notebook holds on the GPU: a model with an optimizer (their tensors share storage),
# a view of a tensor, a bfloat16 tensor and a CuPy array; the checksums are taken before the save.
CELLS = """
import torch, cupy
torch.manual_seed(7)
model = torch.nn.Linear(256, 64).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.ones(8, 256, device="cuda")).sum().backward()
optimizer.step()
base = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
view = base.view(1024, 1024)[3:]
half = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
cp_array = cupy.arange(1 << 18, dtype=cupy.float64)
"""
CHECKSUM = (
    "(float(model.weight.double().sum()), float(base.sum()), float(view.sum()), float(half.float().sum()), "
    "float(cp_array.sum()), optimizer.param_groups[0]['params'][0] is model.weight, "
    "view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), "
    "str(model.weight.device), str(base.device), str(cp_array.device))"
)


def start(tmp_path: Path, home: Path) -> MeterServer:
    tmp_path.mkdir()
    return start_server(
        tmp_path,
        None,  # the real libnvidia-ml, found as the frameworks find it
        None,
        meter_config={"sample_interval_floor": 0.0, "activity_interval": 0.0, "record_sessions": False},
        extra_env={"HOME": str(home), "JUPYTERHUB_SERVER_NAME": SERVER_NAME},
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return home


@pytest.fixture
def servers() -> Iterator[list[MeterServer]]:
    started: list[MeterServer] = []
    yield started
    for server in started:
        server.stop()


def run_cell(server: MeterServer, kernel_id: str, code: str) -> None:
    client = server.client(kernel_id)
    reply = client.execute_interactive(code, timeout=300, output_hook=lambda _msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    wait_until(
        lambda: server.request(f"api/kernels/{kernel_id}")[1]["execution_state"] == "idle",
        what=f"kernel {kernel_id} to be idle",
        timeout=60,
    )


def value_of(server: MeterServer, kernel_id: str, expression: str) -> str:
    client = server.client(kernel_id)
    reply = client.execute_interactive(
        "", silent=True, store_history=False, user_expressions={"v": expression}, timeout=120,
        output_hook=lambda _msg: None,
    )  # fmt: skip
    value = reply["content"]["user_expressions"]["v"]
    assert value["status"] == "ok", value
    return value["data"]["text/plain"]


def kernel_gpu_memory(server: MeterServer, kernel_id: str) -> int:
    kernel = next(k for k in server.usage()["kernels"] if k["id"] == kernel_id)
    return kernel["gpu_memory_bytes"] or 0


def test_gpu_arrays_saved_on_one_server_come_back_on_the_gpu_of_the_next(
    tmp_path: Path, home: Path, servers: list[MeterServer]
) -> None:
    first = start(tmp_path / "first", home)
    servers.append(first)
    kernel = first.start_session("train.ipynb")
    run_cell(first, kernel, CELLS)
    before = value_of(first, kernel, CHECKSUM)
    assert "cuda" in before
    wait_until(lambda: kernel_gpu_memory(first, kernel) >= 4 * MIB, what="the kernel's GPU memory", timeout=60)

    status, report = first.request("fracnb/api/hibernate", "POST", {"timeout_seconds": 240})
    assert status == 200, report
    check(HIBERNATION_REPORT, report, check_formats=True)
    (saved,) = [entry for entry in report["kernels"] if entry["path"] == "train.ipynb"]
    assert saved["status"] == "saved", saved
    first.stop()
    servers.remove(first)

    second = start(tmp_path / "second", home)
    servers.append(second)
    status, listed = second.request("fracnb/api/hibernation/states")
    assert status == 200, listed
    (state,) = [s for s in listed["states"] if s["path"] == "train.ipynb"]
    new_kernel = second.start_session("train.ipynb")
    second.client(new_kernel)  # ready before the restore runs in it
    status, restored = second.request(
        "fracnb/api/hibernation/restore", "POST", {"key": state["key"], "kernel_id": new_kernel}
    )
    assert status == 200, restored
    check(RESTORE_REPORT, restored, check_formats=True)
    assert restored["status"] == "restored", restored
    assert {"model", "optimizer", "base", "view", "half", "cp_array"} <= set(restored["restored"])
    assert not restored.get("notices"), restored  # nothing fell back to host memory

    # The same values, on the GPU, still sharing what they shared; the meter sees the memory.
    assert value_of(second, new_kernel, CHECKSUM) == before
    wait_until(
        lambda: kernel_gpu_memory(second, new_kernel) >= 4 * MIB, what="the restored kernel's GPU memory", timeout=60
    )
