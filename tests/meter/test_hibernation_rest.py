"""Hibernation's endpoints and magic against what goes wrong around them, through a real jupyter_server
and real ipykernel kernels: two hibernations at once, damaged and refused states, names the new
kernel already holds, an offer a newer save replaced, and a discard through a symbolic link."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path

from fracnb_meter.hibernation import layout
from fracnb_meter.hibernation.notice import HIBERNATED_EVENT
from fracnb_meter.testing.server import MeterServer
from fracnb_schemas import HIBERNATION_REPORT, RESTORE_REPORT, check
from tests.meter import test_hibernation as base
from tests.meter.meter_helpers import evaluate
from tests.meter.test_hibernation import hibernate, open_notebook, run, start_busy_cell, states, states_dir
from tests.websockets import connected

server = base.server  # the same fixtures: a server with its own home, each test's kernels closed after it
close_notebooks = base.close_notebooks
RESTORE = "fracnb/api/hibernation/restore"


def saved_state(server: MeterServer, notebook: str, cell: str) -> tuple[str, Path]:
    """Run ``cell`` in a kernel of ``notebook``, hibernate, and open a new kernel: (its id, the entry)."""
    _, client = open_notebook(server, notebook)
    run(client, cell)
    hibernate(server)
    key = states(server)[notebook]["key"]
    return key, states_dir(server) / key


def generation_file(entry: Path, name: str) -> Path:
    return entry / json.loads((entry / layout.MANIFEST).read_text())["generation"] / name


def test_a_second_hibernation_joins_the_one_under_way(server: MeterServer) -> None:
    _, client = open_notebook(server, "twice.ipynb")
    run(client, "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(1)\n        return (int, (7,))\n"
                "slow = Slow()")  # fmt: skip
    answers: list[tuple[float, int, dict]] = []

    def ask() -> None:
        started = time.monotonic()
        status, report = server.request("fracnb/api/hibernate", "POST", {"timeout_seconds": 20})
        answers.append((time.monotonic() - started, status, report))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)  # the second arrives while the first is saving
    for thread in threads:
        thread.join(60)

    assert len(answers) == 2
    for seconds, status, report in answers:
        assert status == 200, report
        check(HIBERNATION_REPORT, report)
        (entry,) = [kernel for kernel in report["kernels"] if kernel["path"] == "twice.ipynb"]
        assert entry["status"] == "saved", entry
        assert seconds < 15  # not the time limit (20 s)


def test_a_damaged_state_restores_what_it_can_and_names_the_file(server: MeterServer) -> None:
    key, entry = saved_state(server, "damaged.ipynb", "import numpy as np\nnote = 'kept'\nbig = np.arange(100_000)")
    arrays = generation_file(entry, layout.ARRAYS)
    arrays.write_bytes(arrays.read_bytes()[:1000])
    kernel_id, fresh = open_notebook(server, "damaged.ipynb")

    status, report = server.request(RESTORE, "POST", {"key": key, "kernel_id": kernel_id})

    assert status == 200, report
    check(RESTORE_REPORT, report)
    assert report["status"] == "partly_restored"
    assert report["restored"] == ["note"]  # np is imported again, and is no variable of the user's
    assert [item["name"] for item in report["failed"]] == ["big"]
    assert report["reason"].startswith("the saved state is damaged: arrays.bin is cut short")
    assert evaluate(fresh, "note") == "'kept'"


def test_a_cut_short_manifest_is_refused_with_the_file_named(server: MeterServer) -> None:
    key, entry = saved_state(server, "cutmanifest.ipynb", "value = 1")
    (entry / layout.MANIFEST).write_bytes((entry / layout.MANIFEST).read_bytes()[:50])
    kernel_id, _ = open_notebook(server, "cutmanifest.ipynb")

    status, answer = server.request(RESTORE, "POST", {"key": key, "kernel_id": kernel_id})

    assert status == 409
    assert answer["message"].startswith("the saved state is damaged: ")
    assert "manifest.json is not complete JSON" in answer["message"]


def test_a_refused_objects_file_is_a_409_as_documented(server: MeterServer, tmp_path: Path) -> None:
    key, entry = saved_state(server, "refusedobjects.ipynb", "secret = 'kept'")
    objects = generation_file(entry, layout.OBJECTS)
    shutil.copy(objects, tmp_path / "objects.pkl")
    objects.unlink()
    objects.symlink_to(tmp_path / "objects.pkl")
    kernel_id, fresh = open_notebook(server, "refusedobjects.ipynb")

    status, answer = server.request(RESTORE, "POST", {"key": key, "kernel_id": kernel_id})

    assert status == 409
    assert "objects.pkl is a symbolic link" in answer["message"]
    assert evaluate(fresh, "'secret' in globals()") == "False"


def test_names_the_new_kernel_holds_wait_for_the_user_s_choice(server: MeterServer) -> None:
    key, _ = saved_state(server, "choice.ipynb", "lr = 0.1\nseed = 7")
    kernel_id, fresh = open_notebook(server, "choice.ipynb")
    run(fresh, "lr = 0.5")

    status, first = server.request(RESTORE, "POST", {"key": key, "kernel_id": kernel_id})
    assert status == 200, first
    assert (first["status"], first["conflicts"]) == ("conflict", ["lr"])
    assert evaluate(fresh, "('seed' in globals(), lr)") == "(False, 0.5)"

    status, kept = server.request(RESTORE, "POST", {"key": key, "kernel_id": kernel_id, "on_conflict": "keep"})
    assert status == 200, kept
    assert kept["restored"] == ["seed"]
    assert evaluate(fresh, "(seed, lr)") == "(7, 0.5)"


def test_an_offer_that_a_newer_save_replaced_restores_nothing(server: MeterServer) -> None:
    key, _ = saved_state(server, "newer.ipynb", "value = 'old'")
    offered_at = states(server)["newer.ipynb"]["saved_at"]
    key, _ = saved_state(server, "newer.ipynb", "value = 'new'")
    kernel_id, fresh = open_notebook(server, "newer.ipynb")

    body = {"key": key, "kernel_id": kernel_id, "saved_at": offered_at}
    status, answer = server.request(RESTORE, "POST", body)

    assert status == 409
    assert answer["message"] == "newer.ipynb was saved again since this offer: its newer state is offered"
    assert evaluate(fresh, "'value' in globals()") == "False"


def test_the_magic_never_discards_through_a_symbolic_link(server: MeterServer, tmp_path: Path) -> None:
    key, entry = saved_state(server, "linked.ipynb", "value = 1")
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    _, fresh = open_notebook(server, "linked.ipynb")
    printed: list[str] = []

    def keep(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    fresh.execute_interactive(
        "%load_ext fracnb_meter.hibernation\n%fracnb_restore --discard --yes", timeout=60, output_hook=keep
    )

    assert "is a symbolic link" in "".join(printed)
    assert "Nothing was deleted." in "".join(printed)
    assert (elsewhere / layout.MANIFEST).exists()
    assert server.request(f"fracnb/api/hibernation/states/{key}", "DELETE")[0] == 409
    assert (elsewhere / layout.MANIFEST).exists()


def test_a_hibernation_removes_states_older_than_the_limit(server: MeterServer) -> None:
    key, entry = saved_state(server, "aging.ipynb", "value = 1")
    manifest = json.loads((entry / layout.MANIFEST).read_text())
    manifest["saved_at"] = "2026-01-01T00:00:00+00:00"  # older than the default 30 days
    old_server = states_dir(server).parent / "deleted-server"
    old_server.mkdir(mode=0o700)
    moved = old_server / key
    entry.rename(moved)
    layout.write_private_file(moved / layout.MANIFEST, json.dumps(manifest).encode())
    _, client = open_notebook(server, "fresh.ipynb")
    run(client, "recent = 2")

    hibernate(server)

    assert not moved.exists()
    assert "fresh.ipynb" in states(server)


def test_the_hibernation_is_told_on_the_events_socket_of_open_pages(server: MeterServer) -> None:
    """A stop on request reaches no poll (JupyterHub takes the server off its proxy before the hub asks for
    the save); an open page's events socket, connected before, carries the report."""
    _, client = open_notebook(server, "event.ipynb")
    run(client, "seed = 7")

    async def scenario() -> tuple[dict, dict]:
        url = server.url.replace("http://", "ws://") + "api/events/subscribe"
        async with connected(url, server.token) as socket:
            status, report = await asyncio.to_thread(
                server.request, "fracnb/api/hibernate?stop=user", "POST", {"timeout_seconds": 20}
            )
            assert status == 200, report
            while True:
                message = json.loads(await asyncio.wait_for(socket.read_message(), timeout=30))
                if message["schema_id"] == HIBERNATED_EVENT:
                    return message, report

    event, report = asyncio.run(scenario())
    check(HIBERNATION_REPORT, event["report"])
    assert event["report"] == report
    assert event["stop"] == "user"  # why, as the hub said: the tab says "stopped on request by you or an admin"
    assert server.usage()["hibernation_stop"] == "user"  # and so does a page that polls
    [saved] = [kernel for kernel in event["report"]["kernels"] if kernel["path"] == "event.ipynb"]
    assert saved["status"] == "saved"


def test_a_stop_reason_the_meter_does_not_know_is_a_400_and_none_is_welcome(server: MeterServer) -> None:
    status, answer = server.request("fracnb/api/hibernate?stop=reboot", "POST", {"timeout_seconds": 20})
    assert status == 400
    assert "stop='reboot' is none of user, idle" in str(answer)
    assert server.request("fracnb/api/hibernate", "POST", {"timeout_seconds": 20})[0] == 200  # an older hub
    assert server.usage()["hibernation_stop"] is None


def test_a_gpu_unused_stop_the_service_calls_off_leaves_no_notice(server: MeterServer) -> None:
    """A kernel turned busy since its GPU-unused report: the service does not stop the server, so neither the
    pages nor the hub's next stop (a user's, which would take the save as made) read this hibernation."""
    busy_id, busy = open_notebook(server, "turned-busy.ipynb")
    run(busy, "kept = 1")
    start_busy_cell(server, busy_id, busy, "import time\ntime.sleep(6)")
    status, report = server.request("fracnb/api/hibernate?stop=gpu-unused", "POST", {"timeout_seconds": 20})
    assert status == 200, report
    assert any(kernel["status"] == "busy" for kernel in report["kernels"])
    usage = server.usage()
    kept = usage["hibernation"]  # an earlier test's hibernation may still be kept: not this one
    assert kept is None or kept["started_at"] != report["started_at"]
    assert usage["hibernation_stop"] != "gpu-unused"
    busy.get_shell_msg(timeout=60)
