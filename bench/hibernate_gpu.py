"""Hibernation of PyTorch tensors on a real GPU against ``torch.save`` / ``torch.load`` of the same
tensors, side by side in one run (needs PyTorch with CUDA and a GPU; CI has neither).

For each size (GiB of float32 tensors on the GPU, four tensors each), in a home-like folder:

- **save**: ``saver.save_namespace`` (each storage copied to host one at a time, written out of
  band, fsynced, committed) against ``torch.save`` of the same dict plus an fsync;
- **restore**: ``restorer.restore_namespace`` with the tensors placed back on the GPU against
  ``torch.load(map_location="cuda")``; the files' pages are dropped from the page cache first,
  so both read from the disk, and both end with ``torch.cuda.synchronize()``.

Every measurement runs in its own child process (a fresh CUDA context, as a restarted kernel has);
the order of ours and the peer alternates. Reports medians over ``--rounds`` and the median of each
round's own ratio (ours / peer, throughput).

    python -m bench.hibernate_gpu [--sizes 1,4] [--rounds 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.hibernate import drop_cache, files_under

GIB = 1 << 30
TENSORS = 4
NOTEBOOK = "bench.ipynb"


def make_tensors(size: int) -> dict:
    import torch

    each = size // TENSORS // 4
    return {f"layer{i}": torch.full((each,), float(i + 1), device="cuda") for i in range(TENSORS)}


def home_env(folder: Path) -> dict[str, str]:
    return {"HOME": str(folder), "JUPYTERHUB_SERVER_NAME": ""}


def child_save(size: int, folder: Path) -> dict:
    import torch

    from fracnb_meter.hibernation.kernelside import package_version
    from fracnb_meter.hibernation.saver import SaveRequest, save_namespace

    namespace = make_tensors(size)
    torch.cuda.synchronize()
    request = SaveRequest(NOTEBOOK, str(folder / NOTEBOOK), "bench", 64 * GIB, None)
    started = time.perf_counter()
    result = save_namespace(namespace, {}, request, home_env(folder), version_of=package_version)
    seconds = time.perf_counter() - started
    assert result["status"] == "saved", result
    return {"seconds": seconds, "bytes": size}


def child_peer_save(size: int, folder: Path) -> dict:
    import torch

    namespace = make_tensors(size)
    torch.cuda.synchronize()
    target = folder / "peer.pt"
    started = time.perf_counter()
    with open(target, "wb") as stream:
        torch.save(namespace, stream)
        stream.flush()
        os.fsync(stream.fileno())
    return {"seconds": time.perf_counter() - started, "bytes": size}


def child_restore(size: int, folder: Path) -> dict:
    import torch

    from fracnb_meter.hibernation.kernelside import current_versions
    from fracnb_meter.hibernation.placement import Placement
    from fracnb_meter.hibernation.restorer import find_entry, restore_namespace

    torch.cuda.init()
    namespace: dict = {}
    started = time.perf_counter()
    report = restore_namespace(
        namespace,
        find_entry(home_env(folder), str(folder / NOTEBOOK)),
        home_env(folder),
        force=True,
        current_versions=current_versions,
        placement_of=lambda _devices: Placement(True, None),
    )
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    assert report["status"] == "restored", report
    assert all(t.is_cuda and float(t[-1]) == i + 1 for i, t in enumerate(namespace.values()))
    return {"seconds": seconds, "bytes": size}


def child_peer_restore(size: int, folder: Path) -> dict:
    import torch

    torch.cuda.init()
    started = time.perf_counter()
    namespace = torch.load(folder / "peer.pt", map_location="cuda")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    assert all(t.is_cuda and float(t[-1]) == i + 1 for i, t in enumerate(namespace.values()))
    return {"seconds": seconds, "bytes": size}


CHILDREN = {
    "save": child_save,
    "peer_save": child_peer_save,
    "restore": child_restore,
    "peer_restore": child_peer_restore,
}


def run_child(name: str, size: int, folder: Path) -> float:
    command = [sys.executable, "-m", "bench.hibernate_gpu", "--child", name, str(size), str(folder)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    return result["bytes"] / result["seconds"]


def measure(size: int, rounds: int, base: Path) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {name: [] for name in CHILDREN}
    for round_index in range(rounds):
        folder = Path(tempfile.mkdtemp(dir=base))
        try:
            for pair in (("save", "peer_save"), ("restore", "peer_restore")):
                if pair[0] == "restore":
                    drop_cache(files_under(folder))
                for name in pair if round_index % 2 == 0 else reversed(pair):
                    figures[name].append(run_child(name, size, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"  {size / GIB:g} GiB round {round_index + 1}: " + ", ".join(
            f"{name} {values[-1] / GIB:.2f} GiB/s" for name, values in figures.items()
        ), flush=True)  # fmt: skip
    return figures


def summary(size: int, figures: dict[str, list[float]]) -> str:
    def median_ratio(ours: str, peer: str) -> float:
        return statistics.median(a / b for a, b in zip(figures[ours], figures[peer], strict=True))

    m = {name: statistics.median(values) / GIB for name, values in figures.items()}
    return (
        f"| {size / GIB:g} GiB | {m['save']:.2f} | {m['peer_save']:.2f} | {median_ratio('save', 'peer_save'):.2f}x "
        f"| {m['restore']:.2f} | {m['peer_restore']:.2f} | {median_ratio('restore', 'peer_restore'):.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4", help="GiB of tensors per case, comma-separated (default 1,4)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a hidden folder in $HOME)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, size, folder = args.child
        print(json.dumps(CHILDREN[name](int(size), Path(folder))))
        return
    base = args.dir or Path.home() / ".fracnb-bench-hibernate-gpu"
    base.mkdir(parents=True, exist_ok=True)
    try:
        rows = [
            summary(int(float(s) * GIB), measure(int(float(s) * GIB), args.rounds, base)) for s in args.sizes.split(",")
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("| tensors on the GPU | save GiB/s | torch.save GiB/s | save / peer | restore GiB/s | torch.load GiB/s "
          "| restore / peer |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print(f"(throughput; ratios are the median of each round's ours / peer; {args.rounds} rounds; {TENSORS} tensors)")


if __name__ == "__main__":
    main()
