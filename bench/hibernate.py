"""Hibernation's save and restore against a plain sequential write and read of the same bytes.

For each size (1 and 4 GiB of numpy arrays, four arrays each), in a home-like folder on the disk
that holds the home (``--dir``, default a hidden folder in $HOME), side by side in one run:

- **save**: ``fracnb_meter.hibernation.saver.save_namespace``, the function a kernel runs when the
  server asks (dry pass, write, fsync, commit), against writing the arrays' buffers to one file
  in 64 MiB writes and one fsync;
- **restore**: ``restorer.restore_namespace`` into a fresh namespace, against ``readinto`` of the
  same bytes into new buffers. Before every read the files' pages are dropped from the page
  cache (``posix_fadvise(DONTNEED)`` on those files only), so both read from the disk;
- **peak extra host memory during a save**: in a child process holding only the arrays, the
  peak resident size (``ru_maxrss``) during the save minus the resident size before it, as a
  ratio to the largest array.

Every measurement runs in its own child process; the order of ours and plain alternates. The
report gives medians over ``--rounds``, their ratios, and the median of each round's own ratio
(goals: throughput ≥ 0.8x plain, peak extra memory ≤ 1.2x the largest array).

    python -m bench.hibernate [--sizes 1,4] [--rounds 3] [--dir PATH]

These are the functions alone, in a process that imported them before the clock starts. A restore
as the user gets it, in a fresh kernel with its imports, is bench/hibernate_restore.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
CHUNK = 64 << 20
ARRAYS = 4


def make_arrays(size: int) -> dict:
    import numpy as np

    each = size // ARRAYS // 8
    # Real values, written page by page (np.ones would leave nothing for a lazy disk to skip, either).
    return {f"layer{i}": np.full(each, float(i + 1)) for i in range(ARRAYS)}


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def drop_cache(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


# ---- the measurements, each run in a child process (python -m bench.hibernate --child ...) -----


def child_save(size: int, folder: Path) -> dict:
    from fracnb_meter.hibernation.kernelside import package_version
    from fracnb_meter.hibernation.saver import SaveRequest, save_namespace

    namespace = make_arrays(size)
    before = rss_bytes()
    env = {"HOME": str(folder), "JUPYTERHUB_SERVER_NAME": ""}
    request = SaveRequest("bench.ipynb", str(folder / "bench.ipynb"), "bench", 64 * GIB, None)
    started = time.perf_counter()
    result = save_namespace(namespace, {}, request, env, version_of=package_version)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert result["status"] == "saved", result
    largest = max(array.nbytes for array in namespace.values())
    return {"seconds": seconds, "bytes": result["bytes"], "extra_peak": max(0, peak - before), "largest": largest}


def child_plain_write(size: int, folder: Path) -> dict:
    namespace = make_arrays(size)
    target = folder / "plain.bin"
    started = time.perf_counter()
    with open(target, "wb", buffering=0) as stream:
        for array in namespace.values():
            view = memoryview(array).cast("B")
            for start in range(0, view.nbytes, CHUNK):
                stream.write(view[start : start + CHUNK])
        os.fsync(stream.fileno())
    return {"seconds": time.perf_counter() - started, "bytes": target.stat().st_size}


def child_restore(folder: Path) -> dict:
    import numpy  # noqa: F401 - imported before the clock starts, as plain_read needs no import

    from fracnb_meter.hibernation.kernelside import current_versions
    from fracnb_meter.hibernation.placement import Placement
    from fracnb_meter.hibernation.restorer import find_entry, restore_namespace

    env = {"HOME": str(folder), "JUPYTERHUB_SERVER_NAME": ""}
    namespace: dict = {}
    started = time.perf_counter()
    report = restore_namespace(
        namespace,
        find_entry(env, str(folder / "bench.ipynb")),
        env,
        force=True,
        current_versions=current_versions,
        placement_of=lambda _devices: Placement(False, None),
    )
    seconds = time.perf_counter() - started
    assert report["status"] == "restored", report
    assert all(float(array[-1]) == i + 1 for i, array in enumerate(namespace.values()))
    return {"seconds": seconds, "bytes": report["bytes"]}


def child_plain_read(folder: Path) -> dict:
    target = folder / "plain.bin"
    size = target.stat().st_size
    started = time.perf_counter()
    with open(target, "rb", buffering=0) as stream:
        buffers = [bytearray(size // ARRAYS) for _ in range(ARRAYS)]
        for buffer in buffers:
            view, done = memoryview(buffer), 0
            while done < len(buffer):
                done += stream.readinto(view[done : done + CHUNK])
    return {"seconds": time.perf_counter() - started, "bytes": size}


def run_child(*arguments: str) -> dict:
    command = [sys.executable, "-m", "bench.hibernate", "--child", *arguments]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


# ---- the run ---------------------------------------------------------------------------------------


def measure(size: int, rounds: int, base: Path) -> dict:
    figures: dict[str, list[float]] = {"save": [], "plain_write": [], "restore": [], "plain_read": [], "extra": []}
    largest = 0
    for round_index in range(rounds):
        ours_dir, plain_dir = Path(tempfile.mkdtemp(dir=base)), Path(tempfile.mkdtemp(dir=base))
        try:
            writes = [("save", ours_dir), ("plain_write", plain_dir)]
            for name, folder in writes if round_index % 2 == 0 else reversed(writes):
                result = run_child(name, str(size), str(folder))
                figures[name].append(result["bytes"] / result["seconds"])
                if name == "save":
                    figures["extra"].append(result["extra_peak"] / result["largest"])
                    largest = result["largest"]
            drop_cache(files_under(ours_dir) + files_under(plain_dir))
            reads = [("restore", ours_dir), ("plain_read", plain_dir)]
            for name, folder in reads if round_index % 2 == 0 else reversed(reads):
                result = run_child(name, "0", str(folder))
                figures[name].append(result["bytes"] / result["seconds"])
        finally:
            shutil.rmtree(ours_dir, ignore_errors=True)
            shutil.rmtree(plain_dir, ignore_errors=True)
        print(f"  {size / GIB:g} GiB round {round_index + 1}: " + ", ".join(
            f"{name} {values[-1] / GIB:.2f}" + (" GiB/s" if name != "extra" else "x")
            for name, values in figures.items()
        ), flush=True)  # fmt: skip
    medians = {name: statistics.median(values) for name, values in figures.items()}
    # Each round's ours / plain, measured back to back: steadier than a ratio of medians on a
    # disk whose speed drifts (a shared or virtual one).
    paired = {
        "save": statistics.median(a / b for a, b in zip(figures["save"], figures["plain_write"], strict=True)),
        "restore": statistics.median(a / b for a, b in zip(figures["restore"], figures["plain_read"], strict=True)),
    }
    return {"size": size, "largest_array": largest, "medians": medians, "paired": paired, "rounds": rounds}


def report(results: list[dict]) -> str:
    lines = [
        "| arrays | save GiB/s | plain write GiB/s | save / plain | restore GiB/s | plain read GiB/s "
        "| restore / plain | peak extra memory / largest array |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    paired = ["", "median of each round's ratio (ours and plain run back to back):"]
    for result in results:
        m = result["medians"]
        lines.append(
            f"| {result['size'] / GIB:g} GiB ({ARRAYS} x {result['largest_array'] / GIB:g} GiB) "
            f"| {m['save'] / GIB:.2f} | {m['plain_write'] / GIB:.2f} | {m['save'] / m['plain_write']:.2f}x "
            f"| {m['restore'] / GIB:.2f} | {m['plain_read'] / GIB:.2f} | {m['restore'] / m['plain_read']:.2f}x "
            f"| {m['extra']:.2f}x |"
        )
        ratios = result["paired"]
        paired.append(
            f"- {result['size'] / GIB:g} GiB: save / plain write {ratios['save']:.2f}x, "
            f"restore / plain read {ratios['restore']:.2f}x ({result['rounds']} rounds)"
        )
    return "\n".join(lines + paired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4", help="GiB of arrays per case, comma-separated (default 1,4)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a hidden folder in $HOME)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        name, size, folder = arguments.child[0], int(arguments.child[1]), Path(arguments.child[2])
        functions = {
            "save": lambda: child_save(size, folder),
            "plain_write": lambda: child_plain_write(size, folder),
            "restore": lambda: child_restore(folder),
            "plain_read": lambda: child_plain_read(folder),
        }
        print(json.dumps(functions[name]()))
        return
    base = arguments.dir or Path.home()
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".fracnb-bench-hibernate-", dir=base))
    try:
        usage = shutil.disk_usage(scratch)
        print(f"writing under {scratch} ({usage.free / GIB:.0f} GiB free)", flush=True)
        results = [measure(int(float(size) * GIB), arguments.rounds, scratch) for size in arguments.sizes.split(",")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(report(results))
    print("\ngoals: save and restore at least 0.8x plain; peak extra memory at most 1.2x the largest array")


if __name__ == "__main__":
    main()
