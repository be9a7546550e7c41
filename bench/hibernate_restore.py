"""A restore as the user gets it: in a fresh kernel, through the kernel's own messages, beside the
plain load of the same values in another fresh kernel, in the same run.

Two cases: a small state (two variables, a few bytes) against ``pickle.load`` of the same values,
and one numpy array (``--mib``, default 200 MiB) against ``numpy.load`` of it. Each measurement
starts a new ipykernel (jupyter_client's KernelManager, the server's way), waits until it is
ready, drops the files from the page cache, and times one cell from its request to its reply:

- ours: ``%load_ext fracnb_meter.hibernation`` and ``%fracnb_restore <notebook>``, what a user
  types (the JupyterLab button sends the same call, silently, to the same function);
- plain: ``import pickle`` / ``import numpy`` and the load.

Kernel start-up is not counted for either. Ours and plain alternate in order each round; the
report gives medians and the median of each round's ratio.

    python -m bench.hibernate_restore [--rounds 5] [--mib 200] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

from bench.hibernate import drop_cache, files_under

NOTEBOOK = "bench.ipynb"
SMALL = {"learning_rate": 0.001, "run_name": "run-7"}


def save_cases(folder: Path, mib: int) -> dict[str, dict[str, str]]:
    """Save both states (as a hibernation would) and the plain files; the cells that load each."""
    import numpy as np

    from fracnb_meter.hibernation.kernelside import package_version
    from fracnb_meter.hibernation.saver import SaveRequest, save_namespace

    cells = {}
    for case, values in [("small", dict(SMALL)), ("array", {"weights": np.full(mib << 17, 1.5)})]:
        home = folder / case
        home.mkdir()
        notebook = str(home / NOTEBOOK)
        request = SaveRequest(NOTEBOOK, notebook, "bench", 1 << 40, None)
        env = {"HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
        assert save_namespace(values, {}, request, env, version_of=package_version)["status"] == "saved"
        if case == "small":
            (home / "plain.pkl").write_bytes(pickle.dumps(values, protocol=5))
            plain = f"import pickle\nwith open({str(home / 'plain.pkl')!r}, 'rb') as f:\n    values = pickle.load(f)"
        else:
            np.save(home / "plain.npy", values["weights"])
            plain = f"import numpy\nweights = numpy.load({str(home / 'plain.npy')!r})"
        ours = f"%load_ext fracnb_meter.hibernation\n%fracnb_restore {notebook}"
        cells[case] = {"home": str(home), "ours": ours, "plain": plain}
    return cells


def timed_cell(home: str, code: str, check: str) -> float:
    """Seconds from the request of ``code`` to its reply in a new kernel; ``check`` must then be True."""
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ, "HOME": home, "JUPYTERHUB_SERVER_NAME": ""})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        drop_cache(files_under(Path(home)))
        started = time.perf_counter()
        reply = client.execute_interactive(code, timeout=300, output_hook=lambda _msg: None)
        seconds = time.perf_counter() - started
        assert reply["content"]["status"] == "ok", reply["content"]
        answer = client.execute_interactive(
            "", user_expressions={"ok": check}, timeout=60, output_hook=lambda _msg: None
        )["content"]["user_expressions"]["ok"]
        assert answer.get("data", {}).get("text/plain") == "True", answer
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return seconds


CHECKS = {
    "small": {"ours": "run_name == 'run-7'", "plain": "values['run_name'] == 'run-7'"},
    "array": {"ours": "float(weights[-1]) == 1.5", "plain": "float(weights[-1]) == 1.5"},
}


def measure(cells: dict[str, dict[str, str]], rounds: int) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {case: {"ours": [], "plain": []} for case in cells}
    for round_index in range(rounds):
        for case, cell in cells.items():
            order = ["ours", "plain"] if round_index % 2 == 0 else ["plain", "ours"]
            for side in order:
                figures[case][side].append(timed_cell(cell["home"], cell[side], CHECKS[case][side]))
            print(f"  round {round_index + 1} {case}: ours {figures[case]['ours'][-1]:.3f} s, "
                  f"plain {figures[case]['plain'][-1]:.3f} s", flush=True)  # fmt: skip
    return figures


def report(figures: dict[str, dict[str, list[float]]], mib: int) -> str:
    names = {"small": ("two variables (a few bytes)", "pickle.load"), "array": (f"one {mib} MiB array", "numpy.load")}
    lines = [
        "| state | restore in a fresh kernel | plain load | peer | restore / plain | median of each round's ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case, sides in figures.items():
        ours, plain = statistics.median(sides["ours"]), statistics.median(sides["plain"])
        paired = statistics.median(a / b for a, b in zip(sides["ours"], sides["plain"], strict=True))
        what, peer = names[case]
        lines.append(f"| {what} | {ours:.3f} s | {plain:.3f} s | {peer} | {ours / plain:.2f}x | {paired:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=200, help="the array's size in MiB (default 200)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a hidden folder in $HOME)")
    arguments = parser.parse_args()
    base = arguments.dir or Path.home()
    scratch = Path(tempfile.mkdtemp(prefix=".fracnb-bench-restore-", dir=base))
    try:
        cells = save_cases(scratch, arguments.mib)
        figures = measure(cells, arguments.rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(report(figures, arguments.mib))
    print("\ngoals: the small state in at most 0.3 s; the array within 1.5x of numpy.load")


if __name__ == "__main__":
    main()
