"""The save and restore code in this process (the same functions a kernel runs), for the cases a
kernel makes slow to reach: a variable that fails to load and those sharing its objects, the GPU
placement rules, the version comparison, the file checks, and the orders and limits of a
hibernation across kernels."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from fracnb_meter.hibernation import frameworks, layout, serverside
from fracnb_meter.hibernation.kernelside import current_versions, package_version
from fracnb_meter.hibernation.layout import find_entry
from fracnb_meter.hibernation.magic import listing
from fracnb_meter.hibernation.namespace import made_by_user, user_variables, version_differences
from fracnb_meter.hibernation.offerwidget import discard_question
from fracnb_meter.hibernation.placement import Placement, choose_placement
from fracnb_meter.hibernation.restorer import restore_namespace
from fracnb_meter.hibernation.saver import SaveRequest, save_namespace
from fracnb_schemas import HIBERNATION_MANIFEST, HIBERNATION_REPORT, RESTORE_REPORT, check

GIB = 1 << 30
ON_HOST = Placement(on_gpu=False, notice=None)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "JUPYTERHUB_SERVER_NAME": ""}


def save(namespace: dict, env: dict[str, str], notebook: str = "/home/jovyan/nb.ipynb", limit: int = GIB) -> dict:
    request = SaveRequest("nb.ipynb", notebook, "kernel-1", limit, time.time() + 60)
    return save_namespace(namespace, {}, request, env, version_of=package_version)


def restore(into: dict, env: dict[str, str], notebook: str = "/home/jovyan/nb.ipynb", **options: object) -> dict:
    report = restore_namespace(
        into,
        find_entry(env, notebook),
        env,
        force=bool(options.get("force")),
        current_versions=current_versions,
        placement_of=lambda _devices: ON_HOST,
    )
    check(RESTORE_REPORT, report)
    return report


def manifest(env: dict[str, str], notebook: str = "/home/jovyan/nb.ipynb") -> dict:
    document = json.loads((find_entry(env, notebook) / layout.MANIFEST).read_text())
    check(HIBERNATION_MANIFEST, document, check_formats=True)
    return document


def test_a_variable_that_cannot_load_is_listed_and_the_others_still_load(env: dict, tmp_path: Path) -> None:
    """A class whose module is gone at restore: its variable fails, so does one sharing its object,
    and a later variable with objects of its own loads (the memo indices stay aligned)."""
    package = tmp_path / "vanishing"
    package.mkdir()
    (package / "vanishing_model.py").write_text("class Model:\n    def __init__(self):\n        self.layers = [1, 2]\n")
    sys.path.insert(0, str(package))
    try:
        import vanishing_model

        model = vanishing_model.Model()
        namespace = {"model": model, "layers": model.layers, "after": {"kept": [3, 4]}, "array": np.arange(5)}
        assert save(namespace, env)["status"] == "saved"
    finally:
        sys.path.remove(str(package))
        sys.modules.pop("vanishing_model", None)

    restored: dict = {}
    report = restore(restored, env)

    assert report["status"] == "partly_restored"
    failed = {item["name"]: item["reason"] for item in report["failed"]}
    assert set(failed) == {"model", "layers"}
    assert "vanishing_model" in failed["model"]
    assert "shares an object" in failed["layers"]
    assert restored["after"] == {"kept": [3, 4]}
    assert restored["array"].tolist() == [0, 1, 2, 3, 4]


def test_a_nested_unsaveable_object_is_skipped_and_shared_objects_still_count_once(env: dict) -> None:
    big = np.zeros(1 << 20, dtype=np.uint8)
    namespace = {"first": big, "broken": {"handle": open(os.devnull)}, "second": big, "third": [big]}  # noqa: SIM115
    try:
        result = save(namespace, env)
    finally:
        namespace["broken"]["handle"].close()

    assert result["status"] == "partly_saved"
    assert result["skipped"] == [{"name": "broken", "type": "builtins.dict", "reason": "it holds an open file"}]
    assert (1 << 20) <= result["bytes"] < (1 << 20) + 4096  # the megabyte once, for three names
    restored: dict = {}
    restore(restored, env)
    assert restored["first"] is restored["second"] is restored["third"][0]


def test_a_new_save_replaces_the_last_and_nothing_to_save_keeps_it(env: dict) -> None:
    save({"version": 1}, env)
    first = manifest(env)["generation"]
    save({"version": 2}, env)
    second = manifest(env)
    assert second["generation"] != first
    assert [p.name for p in layout.generations(find_entry(env, "/home/jovyan/nb.ipynb"))] == [second["generation"]]

    assert save({}, env)["status"] == "empty"  # a fresh kernel does not wipe the state out
    assert manifest(env)["generation"] == second["generation"]
    restored: dict = {}
    restore(restored, env)
    assert restored == {"version": 2}


def test_a_crash_before_the_commit_leaves_the_state_as_it_was(env: dict) -> None:
    save({"version": 1}, env)
    entry = find_entry(env, "/home/jovyan/nb.ipynb")
    committed = manifest(env)["generation"]
    (entry / "20260101T000000-deadbeef").mkdir()  # a save killed before its manifest
    (entry / "20260101T000000-deadbeef" / layout.OBJECTS).write_bytes(b"partial")

    restored: dict = {}
    assert restore(restored, env)["status"] == "restored"
    assert restored == {"version": 1}
    save({"version": 3}, env)  # the next save clears what the crash left
    assert len(layout.generations(entry)) == 1
    assert manifest(env)["generation"] != committed


def test_a_deadline_already_past_writes_nothing(env: dict) -> None:
    request = SaveRequest("nb.ipynb", "/home/jovyan/nb.ipynb", "k", GIB, time.time() - 1)
    result = save_namespace({"x": 1}, {}, request, env, version_of=package_version)
    assert result["status"] == "failed"
    assert "time limit" in result["reason"]
    assert not find_entry(env, "/home/jovyan/nb.ipynb").exists()


def test_the_limit_counts_before_writing(env: dict) -> None:
    result = save({"x": np.zeros(2 << 20, dtype=np.uint8)}, env, limit=1 << 20)
    assert result["status"] == "skipped_over_limit"
    assert result["bytes"] >= 2 << 20
    assert not find_entry(env, "/home/jovyan/nb.ipynb").exists()


def test_ipython_bookkeeping_is_not_saved() -> None:
    startup = {"exit": object(), "np": np}
    namespace = {"In": [], "Out": {}, "_": 1, "_i3": "x", "exit": startup["exit"], "np": np, "data": 1}
    assert set(user_variables(namespace, startup)) == {"data"}
    assert set(user_variables({**namespace, "np": "rebound"}, startup)) == {"data", "np"}


def test_imported_modules_come_back_but_are_never_counted_as_variables(env: dict) -> None:
    """``import numpy as np`` binds a module: saved by name and imported again at restore, but every count
    and list the user sees holds only the variables the user made."""
    result = save({"np": np, "json": json, "weights": np.arange(3), "lr": 0.1}, env)
    assert (result["status"], result["variables"]) == ("saved", 2)
    saved = manifest(env)
    assert {v["name"]: v["type"] for v in saved["variables"]}["np"] == "builtins.module"  # still saved
    assert made_by_user(saved["variables"]) == [v for v in saved["variables"] if v["name"] in ("weights", "lr")]
    (state,) = serverside.list_states(env)["states"]
    assert state["variables"] == ["weights", "lr"]
    assert listing(saved).startswith("Restore variables from ")
    assert ": weights, lr." in listing(saved)
    assert discard_question(saved, datetime.now(timezone.utc)).startswith("Delete the 2 variables saved at ")

    restored: dict = {}
    report = restore(restored, env)
    assert restored["np"] is np  # the restore behaviour is unchanged
    assert restored["json"] is json
    assert restored["lr"] == 0.1
    assert list(restored["weights"]) == [0, 1, 2]
    assert (report["status"], report["restored"]) == ("restored", ["weights", "lr"])


def test_imports_alone_are_nothing_to_save(env: dict) -> None:
    save({"kept": 1}, env)
    result = save({"np": np, "os": os}, env)
    assert (result["status"], result["variables"]) == ("empty", 0)
    assert [v["name"] for v in manifest(env)["variables"]] == ["kept"]  # the older state stays


def test_version_differences_name_each_package() -> None:
    saved = {"python": "3.11.7", "numpy": "2.4.6", "pandas": "3.1.1"}
    current = {"python": "3.11.7", "numpy": "2.5.0", "pandas": None}
    assert version_differences(saved, current) == ["numpy 2.4.6 → 2.5.0", "pandas 3.1.1 → not installed"]
    assert version_differences(saved, dict(saved)) == []


@pytest.mark.parametrize(
    ("case", "on_gpu", "words"),
    [
        ((0, None, None, None), False, None),
        ((GIB, None, 20 * GIB, 0), False, "this server has no GPU"),
        ((GIB, 70 * GIB, 0, None), False, "this server has no GPU"),
        ((GIB, 70 * GIB, 20 * GIB, 2 * GIB), True, None),
        ((5 * GIB, 70 * GIB, 4 * GIB, 0), False, "do not fit in the 4 GiB left of this server's 4 GiB GPU budget"),
        ((3 * GIB, 70 * GIB, 4 * GIB, 2 * GIB), False, "2 GiB left"),
        ((3 * GIB, 2 * GIB, None, None), False, "the GPU has only 2 GiB free"),
        ((3 * GIB, 70 * GIB, None, None), True, None),
    ],
)
def test_gpu_arrays_go_back_to_the_gpu_only_when_the_budget_holds_them(
    case: tuple[int, int | None, int | None, int | None], on_gpu: bool, words: str | None
) -> None:
    device, gpu_free, budget, used = case  # GPU arrays' bytes, free on the GPU, the budget, the server's use
    placement = choose_placement(device, gpu_free_bytes=gpu_free, budget_bytes=budget, server_used_bytes=used)
    assert placement.on_gpu is on_gpu
    if words is None:
        assert placement.notice is None
    else:
        assert words in placement.notice


def test_jax_arrays_saved_on_a_gpu_come_back_to_host_memory_with_a_notice() -> None:
    values = np.arange(6, dtype=np.float32)
    moved: list[str] = []
    token, moved_token = frameworks.TARGET.set(frameworks.Target()), frameworks.MOVED_TO_HOST.set(moved)
    try:
        array = frameworks.rebuild_jax(frameworks.HostArray(values.view(np.uint8), "gpu:0"), "float32", (2, 3))
    finally:
        frameworks.TARGET.reset(token)
        frameworks.MOVED_TO_HOST.reset(moved_token)
    assert [d.platform for d in array.devices()] == ["cpu"]
    assert array.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert moved == ["JAX arrays saved on gpu:0"]


def test_jax_arrays_round_trip_with_their_dtype(env: dict) -> None:
    import jax.numpy as jnp

    namespace = {"half": jnp.ones((2, 2), dtype=jnp.bfloat16), "ints": jnp.arange(3, dtype=jnp.int8)}
    result = save(namespace, env)
    assert result["status"] == "saved"
    assert manifest(env)["devices"] == [{"framework": "jax", "device": "cpu:0", "bytes": 11}]
    restored: dict = {}
    restore(restored, env)
    assert str(restored["half"].dtype) == "bfloat16"
    assert restored["ints"].tolist() == [0, 1, 2]


def test_state_keys_never_reach_outside_the_states_folder(env: dict) -> None:
    for key in ("../../etc", "0" * 31, "G" * 32, "/" + "0" * 31):
        with pytest.raises(ValueError, match="not the key of a saved state"):
            serverside.state_entry(env, key)


async def test_kernels_are_saved_most_recent_first_within_one_limit() -> None:
    now = datetime(2026, 11, 25, 14, 5, tzinfo=timezone.utc)

    def kernel(name: str, minutes_ago: int, state: str = "idle", language: str = "python") -> serverside.KernelView:
        return serverside.KernelView(
            name, language, f"{name}.ipynb", f"/home/u/{name}.ipynb", state, now - timedelta(minutes=minutes_ago)
        )

    asked: list[tuple[str, int]] = []

    async def call(kernel_id: str, function: str, arguments: dict, timeout: float) -> dict:
        assert function == "hibernate"
        assert timeout > 0
        asked.append((kernel_id, arguments["limit_bytes"]))
        size = {"recent": 600, "older": 600, "oldest": 300}[kernel_id]
        if size > arguments["limit_bytes"]:
            return {"status": "skipped_over_limit", "reason": "over", "bytes": size, "variables": 0, "skipped": []}
        return {"status": "saved", "reason": None, "bytes": size, "variables": 2, "skipped": [], "seconds": 0.1}

    kernels = [
        kernel("oldest", 30),
        kernel("recent", 1),
        kernel("busy", 0, state="busy"),
        kernel("orphan", 0, state="starting"),  # a session no client ever connected to
        kernel("older", 10),
        kernel("r-kernel", 5, language="R"),
    ]
    report = await serverside.hibernate(kernels, call, limit_bytes=1000, timeout_s=30)

    check(HIBERNATION_REPORT, report)
    assert asked == [("recent", 1000), ("older", 400), ("oldest", 400)]
    statuses = {entry["kernel_id"]: entry["status"] for entry in report["kernels"]}
    assert statuses == {
        "busy": "busy",
        "orphan": "empty",
        "recent": "saved",
        "r-kernel": "not_supported",
        "older": "skipped_over_limit",
        "oldest": "saved",
    }
    assert report["saved_bytes"] == 900
    assert report["totals"]["saved"] == 2


async def test_a_kernel_that_fails_or_is_not_reached_in_time_is_reported_not_raised() -> None:
    clock = [1000.0]

    async def call(kernel_id: str, function: str, arguments: dict, timeout: float) -> dict:
        clock[0] += 20  # each save takes 20 s
        if kernel_id == "b":
            raise RuntimeError("no answer within the time limit")
        return {"status": "saved", "reason": None, "bytes": 1, "variables": 1, "skipped": []}

    views = [serverside.KernelView(name, "python", f"{name}.ipynb", f"/h/{name}.ipynb", "idle", None) for name in "abc"]
    report = await serverside.hibernate(views, call, limit_bytes=GIB, timeout_s=30, clock=lambda: clock[0])

    # Without activity times, the order is by id: c, b, a.
    reasons = {entry["kernel_id"]: (entry["status"], entry["reason"]) for entry in report["kernels"]}
    assert reasons["c"] == ("saved", None)
    assert reasons["b"][0] == "failed"
    assert "no answer" in reasons["b"][1]
    assert reasons["a"][0] == "failed"
    assert "not reached within the time limit" in reasons["a"][1]


class _Slow:
    """Each pickling takes 10 s of the test's clock."""

    clock: ClassVar[list[float]] = [0.0]

    def __reduce__(self) -> tuple:
        _Slow.clock[0] += 10
        return (_Slow, ())


def test_a_save_that_ends_past_its_deadline_is_not_committed(env: dict) -> None:
    save({"version": 1}, env)
    before = manifest(env)["generation"]
    _Slow.clock[0] = 0.0
    request = SaveRequest(
        "nb.ipynb", "/home/jovyan/nb.ipynb", "k", GIB, 15.0
    )  # the dry pass ends at 10, the write at 20

    result = save_namespace(
        {"slow": _Slow()}, {}, request, env, version_of=package_version, clock=lambda: _Slow.clock[0]
    )

    assert result["status"] == "failed"
    assert "time limit" in result["reason"]
    assert manifest(env)["generation"] == before
    assert len(layout.generations(find_entry(env, "/home/jovyan/nb.ipynb"))) == 1
