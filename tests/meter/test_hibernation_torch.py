"""PyTorch through a save and a restore, in this process (skipped where PyTorch is not installed:
its PyPI wheel brings ~3 GB of CUDA libraries, so CI does not install it; tests/gpu and a
developer's machine with PyTorch run these).

Tensors on a GPU are saved from the host copy of each storage; where a GPU is visible, the last
test puts them back on it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fracnb_meter.hibernation.kernelside import current_versions, package_version
from fracnb_meter.hibernation.layout import find_entry
from fracnb_meter.hibernation.placement import Placement
from fracnb_meter.hibernation.restorer import restore_namespace
from fracnb_meter.hibernation.saver import SaveRequest, save_namespace
from fracnb_schemas import RESTORE_REPORT, check

torch = pytest.importorskip("torch")
NOTEBOOK = "/home/jovyan/torch.ipynb"
ON_HOST = Placement(on_gpu=False, notice=None)


def round_trip(namespace: dict, tmp_path: Path, placement: Placement = ON_HOST) -> tuple[dict, dict]:
    env = {"HOME": str(tmp_path / "home"), "JUPYTERHUB_SERVER_NAME": ""}
    request = SaveRequest("torch.ipynb", NOTEBOOK, "k", 1 << 30, time.time() + 60)
    saved = save_namespace(namespace, {}, request, env, version_of=package_version)
    assert saved["status"] == "saved", saved
    restored: dict = {}
    report = restore_namespace(
        restored,
        find_entry(env, NOTEBOOK),
        env,
        force=False,
        current_versions=current_versions,
        placement_of=lambda _devices: placement,
    )
    check(RESTORE_REPORT, report)
    return restored, report


def test_views_parameters_and_an_optimizer_keep_what_they_share(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    namespace = {
        "base": base,
        "view": base.view(3, 4)[1:],
        "again": base,
        "model": model,
        "optimizer": optimizer,
        "half": torch.ones(3, dtype=torch.bfloat16),
        "output": model(torch.ones(1, 4)),  # not a leaf: comes back detached
    }

    restored, report = round_trip(namespace, tmp_path)

    assert report["status"] == "restored"
    assert torch.equal(restored["base"], base)
    assert restored["again"] is restored["base"]
    restored["view"][0, 0] = 100.0  # still a view of the same storage
    assert restored["base"][4].item() == 100.0
    assert isinstance(restored["model"].weight, torch.nn.Parameter)
    assert torch.equal(restored["model"].weight, model.weight)
    assert restored["optimizer"].param_groups[0]["params"][0] is restored["model"].weight
    assert restored["half"].dtype == torch.bfloat16
    assert restored["output"].is_leaf


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_come_back_to_the_gpu_when_it_holds_them_else_to_host(tmp_path: Path) -> None:
    weights = torch.randn(1024, 1024, device="cuda")
    restored, report = round_trip({"weights": weights}, tmp_path / "gpu", Placement(True, None))
    assert restored["weights"].device.type == "cuda"
    assert torch.equal(restored["weights"], weights)
    notice = "GPU arrays (4 MiB) were restored to host memory: this server has no GPU."
    restored, report = round_trip({"weights": weights}, tmp_path / "host", Placement(False, notice))
    assert restored["weights"].device.type == "cpu"
    assert torch.equal(restored["weights"], weights.cpu())
    assert report["notices"] == [notice]
