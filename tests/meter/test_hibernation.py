"""Hibernation through a real jupyter_server and real ipykernel kernels: save, list, restore, refuse.

The server runs with its own HOME, so saved states land in a folder of the test's own; every
document it answers is checked against its schema. Kernels are driven as a notebook would, and the
assertions read back what the restored kernel holds.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from jupyter_client.blocking import BlockingKernelClient

from fracnb_meter.hibernation import layout
from fracnb_meter.testing.server import MeterServer, start_server
from fracnb_schemas import HIBERNATION_MANIFEST, HIBERNATION_REPORT, HIBERNATION_STATES, RESTORE_REPORT, check
from tests.meter.meter_helpers import evaluate, wait_for_execution_state

MIB = 1 << 20
OUTPUT_TYPES = {"stream", "execute_input", "execute_result", "display_data", "error"}

# A notebook's worth of variables: arrays, a frame, shared references, code defined in the notebook,
# JAX arrays, and the things that cannot be saved.
NOTEBOOK_CELLS = """
import io, socket, threading
import numpy as np, pandas as pd, jax.numpy as jnp
weights = np.arange(3 * MIB // 8, dtype=np.float64).reshape(-1, 3)
alias = weights
frame = pd.DataFrame({"x": np.arange(1000), "city": ["Lyon", "Graz"] * 500})
shared = [1, 2, {"deep": "value"}]
config = {"layers": shared, "weights": weights, "name": "run-7"}
class Point:
    def __init__(self, x):
        self.x = x
    def norm(self):
        return abs(self.x)
origin = Point(-4)
scale = 3
def scaled(v):
    return v * scale
jx = jnp.linspace(0.0, 1.0, 1000, dtype=jnp.float32)
jx_again = jx
log_file = open("hibernation-test.log", "w")
counter = (i for i in range(10))
listener = socket.socket()
worker = threading.Thread(target=print)
holder = {"stream": io.BytesIO(b"abc")}
"""

CLIENTS: dict[int, tuple[MeterServer, str]] = {}  # a client's server and kernel, for run()
# The modules the imports bound: saved by reference and imported again at restore, never counted as variables.
IMPORTED = {"io", "socket", "threading", "np", "pd", "jnp"}
SAVED_NAMES = {
    "MIB",  # the constant, by reference
    *("weights", "alias", "frame", "shared", "config", "Point", "origin", "scale", "scaled", "jx", "jx_again"),
}


@pytest.fixture(scope="module")
def server(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeterServer]:
    tmp = tmp_path_factory.mktemp("hibernation")
    home = tmp / "home"
    home.mkdir(mode=0o700)
    server = start_server(
        tmp,
        fake_nvml_library,
        None,
        meter_config={"sample_interval_floor": 0.0, "activity_interval": 0.0, "record_sessions": False},
        extra_env={"HOME": str(home), "JUPYTERHUB_SERVER_NAME": "training", "MIB": str(MIB)},
    )
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def close_notebooks(server: MeterServer) -> Iterator[None]:
    """Each test's kernels end with it, so the next test's hibernation saves only its own."""
    yield
    for session in server.request("api/sessions")[1]:
        server.request(f"api/sessions/{session['id']}", "DELETE")


def home_of(server: MeterServer) -> Path:
    return server.runtime_dir.parent / "home"


def states_dir(server: MeterServer) -> Path:
    return home_of(server) / ".local" / "state" / "fracnb" / "hibernation" / "training"


def open_notebook(server: MeterServer, path: str) -> tuple[str, BlockingKernelClient]:
    """A new session (and so a new kernel) for ``path``, after closing any earlier one."""
    status, sessions = server.request("api/sessions")
    assert status == 200
    for session in sessions:
        if session["path"] == path:
            assert server.request(f"api/sessions/{session['id']}", "DELETE")[0] == 204
    kernel_id = server.start_session(path)
    client = server.client(kernel_id)
    CLIENTS[id(client)] = (server, kernel_id)
    return kernel_id, client


def run(client: BlockingKernelClient, code: str) -> None:
    """Run a cell, and wait until the server, too, sees the kernel idle again (as it would be when culled)."""
    reply = client.execute_interactive(code, timeout=120, output_hook=lambda _msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    wait_for_execution_state(*CLIENTS[id(client)], "idle")


def silent_value(client: BlockingKernelClient, expression: str) -> str:
    """repr(expression) without running a cell (the execution count stays as it is)."""
    reply = client.execute_interactive(
        "", silent=True, store_history=False, user_expressions={"v": expression}, timeout=60,
        output_hook=lambda _msg: None,
    )  # fmt: skip
    value = reply["content"]["user_expressions"]["v"]
    assert value["status"] == "ok", value
    wait_for_execution_state(*CLIENTS[id(client)], "idle")
    return value["data"]["text/plain"]


def start_busy_cell(server: MeterServer, kernel_id: str, client: BlockingKernelClient, code: str) -> None:
    """Send a long cell without waiting for it, and wait until the server sees the kernel busy."""
    client.execute(code)
    wait_for_execution_state(server, kernel_id, "busy")


def hibernate(server: MeterServer, timeout: float = 120, max_bytes: int | None = None) -> dict:
    body: dict = {"timeout_seconds": timeout}
    if max_bytes is not None:
        body["max_bytes"] = max_bytes
    status, report = server.request("fracnb/api/hibernate", "POST", body)
    assert status == 200, report
    check(HIBERNATION_REPORT, report, check_formats=True)
    return report


def outcome(report: dict, path: str) -> dict:
    (entry,) = [kernel for kernel in report["kernels"] if kernel["path"] == path]
    return entry


def states(server: MeterServer) -> dict[str, dict]:
    status, document = server.request("fracnb/api/hibernation/states")
    assert status == 200, document
    check(HIBERNATION_STATES, document, check_formats=True)
    return {state["path"]: state for state in document["states"] if state["path"]}


def restore(server: MeterServer, key: str, kernel_id: str, *, force: bool = False) -> dict:
    body = {"key": key, "kernel_id": kernel_id, "force": force}
    status, report = server.request("fracnb/api/hibernation/restore", "POST", body)
    assert status == 200, report
    check(RESTORE_REPORT, report, check_formats=True)
    return report


def manifest_of(server: MeterServer, path: str) -> dict:
    key = states(server)[path]["key"]
    manifest = json.loads((states_dir(server) / key / layout.MANIFEST).read_text())
    check(HIBERNATION_MANIFEST, manifest, check_formats=True)
    return manifest


def drain_outputs(client: BlockingKernelClient) -> list[str]:
    """The output messages (not status) on the notebook's IOPub since the last drain."""
    found = []
    while client.iopub_channel.msg_ready():
        message = client.get_iopub_msg(timeout=1)
        if message["msg_type"] in OUTPUT_TYPES:
            found.append(message["msg_type"])
    return found


def test_variables_survive_a_hibernation_with_shared_references_kept(server: MeterServer) -> None:
    kernel_id, client = open_notebook(server, "train.ipynb")
    run(client, f"MIB = {MIB}\n" + NOTEBOOK_CELLS)
    count_before = silent_value(client, "get_ipython().execution_count")
    drain_outputs(client)

    report = hibernate(server)

    entry = outcome(report, "train.ipynb")
    assert entry["status"] == "partly_saved"
    assert entry["kernel_id"] == kernel_id
    skipped = {item["name"]: item["reason"] for item in entry["skipped"]}
    assert skipped == {
        "log_file": "an open file",
        "counter": "a generator",
        "listener": "a socket",
        "worker": "a thread",
        "holder": "it holds an open file",
    }
    assert entry["variables"] == len(SAVED_NAMES)
    assert {v["name"] for v in manifest_of(server, "train.ipynb")["variables"]} == SAVED_NAMES | IMPORTED
    assert entry["bytes"] >= 3 * MIB  # the arrays' bytes are in it once, though two names hold them
    assert entry["bytes"] < 5 * MIB
    # Silent: no cell counted, nothing shown in the notebook.
    assert silent_value(client, "get_ipython().execution_count") == count_before
    assert drain_outputs(client) == []
    manifest = manifest_of(server, "train.ipynb")
    assert manifest["kernel_id"] == kernel_id
    assert manifest["notebook_path"] == "train.ipynb"
    assert {"python", "numpy", "pandas", "jax", "cloudpickle"} <= set(manifest["versions"])
    assert {d["framework"] for d in manifest["devices"]} == {"jax"}
    files = [p for p in states_dir(server).rglob("*") if p.is_file()]
    assert files
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o600"}
    assert {oct(p.stat().st_mode & 0o777) for p in states_dir(server).rglob("*") if p.is_dir()} == {"0o700"}

    # The user comes back: a new kernel for the same notebook.
    new_kernel, fresh = open_notebook(server, "train.ipynb")
    state = states(server)["train.ipynb"]
    assert state["restored_at"] is None
    assert state["bytes"] == entry["bytes"]
    assert evaluate(fresh, "'weights' in globals()") == "False"

    result = restore(server, state["key"], new_kernel)

    assert result["status"] == "restored", result
    assert result["warnings"] == []
    assert set(result["restored"]) == SAVED_NAMES
    assert set(state["variables"]) == SAVED_NAMES
    assert (
        evaluate(fresh, "np.__name__, pd.__name__, jnp.__name__, socket.__name__")
        == "('numpy', 'pandas', 'jax.numpy', 'socket')"
    )
    assert {item["name"] for item in result["skipped_at_save"]} == set(skipped)
    checks = {
        "bool((weights.ravel() == np.arange(3 * MIB // 8, dtype=np.float64)).all())": "True",
        "weights.shape": f"({MIB // 8}, 3)",
        "alias is weights": "True",
        "config['weights'] is weights and config['layers'] is shared": "True",
        "shared[2]['deep']": "'value'",
        "bool(frame.equals(pd.DataFrame({'x': np.arange(1000), 'city': ['Lyon', 'Graz'] * 500})))": "True",
        "type(origin).__name__, origin.norm(), type(origin) is Point": "('Point', 4, True)",
        "scaled(2)": "6",
        "type(jx).__module__.split('.')[0], float(jx[-1]), jx_again is jx": "('jaxlib', 1.0, True)",
        "bool(weights.flags.writeable)": "True",
    }
    for expression, expected in checks.items():
        assert evaluate(fresh, expression) == expected, expression
    # A function defined in the notebook sees the notebook's namespace, as before the stop.
    assert evaluate(fresh, "scaled(2)", "scale = 10") == "20"
    assert states(server)["train.ipynb"]["restored_at"] is not None


def test_a_busy_kernel_is_neither_interrupted_nor_saved(server: MeterServer) -> None:
    idle_id, idle = open_notebook(server, "idle-beside.ipynb")
    run(idle, "beside = list(range(5))")
    busy_id, busy = open_notebook(server, "busy.ipynb")
    run(busy, "before = 1")
    start_busy_cell(server, busy_id, busy, "import time\nstarted = time.time()\ntime.sleep(8)\nfinished = True")

    report = hibernate(server)

    assert outcome(report, "busy.ipynb")["status"] == "busy"
    assert outcome(report, "idle-beside.ipynb")["status"] == "saved"
    assert report["totals"]["busy"] == 1
    reply = busy.get_shell_msg(timeout=60)  # the cell runs to its end, uninterrupted
    assert reply["content"]["status"] == "ok"
    assert evaluate(busy, "finished, time.time() - started >= 8") == "(True, True)"
    assert "busy.ipynb" not in states(server)
    del idle_id


def test_over_the_limit_the_older_state_stays(server: MeterServer) -> None:
    kernel_id, client = open_notebook(server, "limit.ipynb")
    run(client, "import numpy as np\nsmall = np.ones(1000)")
    assert outcome(hibernate(server), "limit.ipynb")["status"] == "saved"
    manifest_before = (states_dir(server) / states(server)["limit.ipynb"]["key"] / layout.MANIFEST).read_bytes()

    run(client, "big = np.ones(4 * 1024 * 1024)")  # 32 MiB
    entry = outcome(hibernate(server, max_bytes=8 * MIB), "limit.ipynb")

    assert entry["status"] == "skipped_over_limit"
    assert "32 MiB" in entry["reason"]
    assert "8 MiB" in entry["reason"]
    key = states(server)["limit.ipynb"]["key"]
    assert (states_dir(server) / key / layout.MANIFEST).read_bytes() == manifest_before
    assert len(layout.generations(states_dir(server) / key)) == 1
    del kernel_id


def test_a_full_disk_leaves_the_older_state_intact(server: MeterServer) -> None:
    """RLIMIT_FSIZE in the kernel: its writes past 4 MiB fail as on a full volume (EFBIG)."""
    kernel_id, client = open_notebook(server, "full.ipynb")
    run(client, "import numpy as np\nsmall = np.ones(1000)")
    assert outcome(hibernate(server), "full.ipynb")["status"] == "saved"
    key = states(server)["full.ipynb"]["key"]
    manifest_before = (states_dir(server) / key / layout.MANIFEST).read_bytes()
    run(
        client,
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 1024 * 1024, hard))\n"
        "big = np.ones(2 * 1024 * 1024)",  # 16 MiB
    )
    try:
        entry = outcome(hibernate(server), "full.ipynb")
    finally:
        run(client, "resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))")

    assert entry["status"] == "failed"
    assert "full or over its quota" in entry["reason"]
    assert "previous saved state" in entry["reason"]
    assert (states_dir(server) / key / layout.MANIFEST).read_bytes() == manifest_before
    assert len(layout.generations(states_dir(server) / key)) == 1  # the partial one is gone
    new_kernel, fresh = open_notebook(server, "full.ipynb")
    assert restore(server, key, new_kernel)["restored"] == ["small"]
    assert evaluate(fresh, "np.__name__") == "'numpy'"  # np came back with the older state
    del kernel_id, fresh


def test_a_timeout_answers_in_time_and_leaves_the_older_state_intact(server: MeterServer) -> None:
    kernel_id, client = open_notebook(server, "slow.ipynb")
    run(client, "value = 1")
    assert outcome(hibernate(server), "slow.ipynb")["status"] == "saved"
    key = states(server)["slow.ipynb"]["key"]
    manifest_before = (states_dir(server) / key / layout.MANIFEST).read_bytes()
    run(
        client,
        "import time\n"
        "class Slow:\n"
        "    def __reduce__(self):\n"
        "        time.sleep(4)\n"
        "        return (Slow, ())\n"
        "slow = Slow()",
    )

    started = time.monotonic()
    report = hibernate(server, timeout=2)
    elapsed = time.monotonic() - started

    entry = outcome(report, "slow.ipynb")
    assert entry["status"] == "failed"
    assert "time limit" in entry["reason"]
    assert elapsed < 4
    wait_for_execution_state(server, kernel_id, "idle", timeout=60)  # the kernel finishes its abandoned save
    assert (states_dir(server) / key / layout.MANIFEST).read_bytes() == manifest_before
    assert len(layout.generations(states_dir(server) / key)) == 1


def test_other_versions_are_confirmed_before_a_restore(server: MeterServer) -> None:
    kernel_id, client = open_notebook(server, "versions.ipynb")
    run(client, "import numpy as np\nkept = np.arange(4)")
    hibernate(server)
    key = states(server)["versions.ipynb"]["key"]
    manifest_path = states_dir(server) / key / layout.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["versions"]["numpy"] = "0.0.1"
    layout.write_private_file(manifest_path, json.dumps(manifest).encode())
    new_kernel, fresh = open_notebook(server, "versions.ipynb")

    first = restore(server, key, new_kernel)

    assert first["status"] == "confirm"
    assert len(first["warnings"]) == 1
    assert first["warnings"][0].startswith("numpy 0.0.1 \N{RIGHTWARDS ARROW} ")
    assert evaluate(fresh, "'kept' in globals()") == "False"
    second = restore(server, key, new_kernel, force=True)
    assert second["status"] == "restored"
    assert evaluate(fresh, "kept.tolist()") == "[0, 1, 2, 3]"
    del kernel_id


def test_the_magic_restores_in_the_kernel_itself(server: MeterServer) -> None:
    kernel_id, client = open_notebook(server, "magic.ipynb")
    run(client, "answer = {'value': 42}")
    hibernate(server)
    new_kernel, fresh = open_notebook(server, "magic.ipynb")
    printed: list[str] = []

    def keep(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    reply = fresh.execute_interactive(
        "%load_ext fracnb_meter.hibernation\n%fracnb_restore", timeout=60, output_hook=keep
    )

    assert reply["content"]["status"] == "ok"
    assert "Restored 1 variable" in "".join(printed)
    assert evaluate(fresh, "answer['value']") == "42"
    del kernel_id, new_kernel


@pytest.mark.parametrize("damage", ["symlink", "writable-by-others", "someone-elses"])
def test_unsafe_state_files_are_refused(server: MeterServer, damage: str, tmp_path: Path) -> None:
    notebook = f"unsafe-{damage}.ipynb"
    kernel_id, client = open_notebook(server, notebook)
    run(client, "secret = 'kept'")
    hibernate(server)
    key = states(server)[notebook]["key"]
    manifest = states_dir(server) / key / layout.MANIFEST
    if damage == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        shutil.copy(manifest, elsewhere)
        manifest.unlink()
        manifest.symlink_to(elsewhere)
        expected = "is a symbolic link"
    elif damage == "writable-by-others":
        manifest.chmod(0o666)
        expected = "can be written by others"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root (CI runs as root)")
        os.chown(manifest, 4242, 4242)
        expected = "belongs to user id 4242"
    new_kernel, fresh = open_notebook(server, notebook)

    status, answer = server.request("fracnb/api/hibernation/restore", "POST", {"key": key, "kernel_id": new_kernel})

    assert status == 409
    assert expected in answer["message"]
    assert evaluate(fresh, "'secret' in globals()") == "False"
    status, document = server.request("fracnb/api/hibernation/states")
    (listed,) = [state for state in document["states"] if state["key"] == key]
    assert expected in listed["problem"]
    # In the kernel itself (the magic's path), the same refusal.
    report = json.loads(
        evaluate(fresh, "__import__('json').dumps(__import__('fracnb_meter.hibernation.kernelside', "
                 f"fromlist=['_']).restore({notebook!r}))").strip("'")
    )  # fmt: skip
    assert report["status"] == "refused"
    assert expected in report["reason"]
    # It can still be discarded.
    assert server.request(f"fracnb/api/hibernation/states/{key}", "DELETE")[0] == 204
    assert not (states_dir(server) / key).exists()
    del kernel_id


def test_requests_that_do_not_fit_are_refused_with_the_reason(server: MeterServer) -> None:
    for body, words in [
        ({}, "timeout_seconds"),
        ({"timeout_seconds": -1}, "timeout_seconds"),
        ({"timeout_seconds": 10, "max_bytes": "lots"}, "max_bytes"),
        ({"timeout_seconds": 10, "surprise": True}, "surprise"),
    ]:
        status, answer = server.request("fracnb/api/hibernate", "POST", body)
        assert status == 400, body
        assert words in answer["message"]
    status, answer = server.request("fracnb/api/hibernation/states/..%2F..%2Fetc", "DELETE")
    assert status in (400, 404)
    assert server.request("fracnb/api/hibernation/states/" + "0" * 32, "DELETE")[0] == 404
    status, answer = server.request(
        "fracnb/api/hibernation/restore", "POST", {"key": "0" * 32, "kernel_id": "not-a-kernel"}
    )
    assert status == 404
    assert "not-a-kernel" in answer["message"]


def test_the_magic_writes_the_browsers_zone_and_discards_only_when_confirmed(server: MeterServer) -> None:
    # A page tells the server its browser's zone; a forged one is refused with the reason, and kept nothing.
    for forged in ({"time_zone": "Mars/Olympus"}, {"zone": "UTC"}, {"time_zone": None}, ["UTC"]):
        status, answer = server.request("fracnb/api/display-zone", "PUT", forged)
        assert status == 400, answer
        assert "time_zone" in answer["message"] or "IANA" in answer["message"], answer
    assert server.request("fracnb/api/display-zone", "PUT", {"time_zone": "UTC"}, token=None)[0] == 403
    assert server.request("fracnb/api/display-zone") == (200, {"time_zone": None})
    assert server.request("fracnb/api/display-zone", "PUT", {"time_zone": "America/New_York"})[0] == 204
    assert server.request("fracnb/api/display-zone") == (200, {"time_zone": "America/New_York"})

    run(open_notebook(server, "zone.ipynb")[1], "kept = list(range(5))")
    saved_at = datetime.fromisoformat(outcome(hibernate(server), "zone.ipynb")["saved_at"])
    _kernel, client = open_notebook(server, "zone.ipynb")
    new_york = saved_at.astimezone(ZoneInfo("America/New_York"))
    abbreviation = new_york.tzname()

    def magic(line: str) -> str:
        printed: list[str] = []
        keep = lambda m: printed.append(m["content"]["text"]) if m["msg_type"] == "stream" else None  # noqa: E731
        reply = client.execute_interactive(line, timeout=60, output_hook=keep)
        assert reply["content"]["status"] == "ok"
        return "".join(printed)

    magic("%load_ext fracnb_meter.hibernation")
    assert f"Restore variables from {new_york:%H:%M} {abbreviation} (" in magic("%fracnb_restore --list")
    asked = magic("%fracnb_restore --discard")
    assert f"This deletes the 1 variable saved at {new_york:%H:%M} {abbreviation} (" in asked
    assert "they cannot be restored afterwards" in asked
    assert "%fracnb_restore --discard --yes" in asked
    assert "zone.ipynb" in states(server)  # nothing deleted yet
    assert "usage:" in magic("%fracnb_restore --yes")
    assert magic("%fracnb_restore --discard --yes").strip() == "The saved variables were discarded."
    assert "zone.ipynb" not in states(server)
