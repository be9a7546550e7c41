"""Saved states that are damaged, linked elsewhere, or meet names the kernel already holds, with the
restore and discard code in this process (the same functions a kernel runs)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fracnb_meter.hibernation import layout, serverside
from fracnb_meter.hibernation.damage import lost_in_entry, lost_variables
from fracnb_meter.hibernation.kernelside import current_versions, package_version
from fracnb_meter.hibernation.layout import find_entry
from fracnb_meter.hibernation.magic import listing
from fracnb_meter.hibernation.placement import Placement
from fracnb_meter.hibernation.restorer import brief, restore_namespace
from fracnb_meter.hibernation.saver import SaveRequest, save_namespace
from fracnb_meter.wording import restore_summary
from fracnb_schemas import HIBERNATION_STATES, RESTORE_REPORT, check

NOTEBOOK = "/home/jovyan/nb.ipynb"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "JUPYTERHUB_SERVER_NAME": ""}


def save(namespace: dict, env: dict[str, str]) -> Path:
    request = SaveRequest("nb.ipynb", NOTEBOOK, "kernel-1", 1 << 30, time.time() + 60)
    assert save_namespace(namespace, {}, request, env, version_of=package_version)["status"] == "saved"
    return find_entry(env, NOTEBOOK)


def restore(into: dict, env: dict[str, str], on_conflict: str | None = None) -> dict:
    report = restore_namespace(
        into,
        find_entry(env, NOTEBOOK),
        env,
        force=False,
        on_conflict=on_conflict,
        current_versions=current_versions,
        placement_of=lambda _devices: Placement(on_gpu=False, notice=None),
    )
    check(RESTORE_REPORT, report)
    return report


def generation_file(entry: Path, name: str) -> Path:
    manifest = json.loads((entry / layout.MANIFEST).read_text())
    return entry / manifest["generation"] / name


def cut(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def test_a_cut_short_arrays_file_costs_only_the_variables_whose_bytes_it_lost(env: dict) -> None:
    entry = save({"first": np.arange(1000), "note": "kept", "last": np.arange(50_000)}, env)
    arrays = generation_file(entry, layout.ARRAYS)
    cut(arrays, arrays.stat().st_size - 1000)  # into the last array's bytes
    restored: dict = {}

    report = restore(restored, env)

    assert report["status"] == "partly_restored"
    assert report["restored"] == ["first", "note"]
    assert restored["first"].tolist() == list(range(1000))
    assert [item["name"] for item in report["failed"]] == ["last"]
    assert "arrays.bin is cut short" in report["failed"][0]["reason"]
    assert report["reason"].startswith("the saved state is damaged: arrays.bin is cut short")
    assert "The saved state is damaged: arrays.bin" in "\n".join(restore_summary(report))


def test_a_cut_short_objects_file_restores_the_records_before_the_cut(env: dict) -> None:
    entry = save({"first": {"a": [1, 2]}, "second": "two", "third": list(range(500))}, env)
    objects = generation_file(entry, layout.OBJECTS)
    records = {v["name"]: v for v in json.loads((entry / layout.MANIFEST).read_text())["variables"]}
    cut(objects, records["third"]["offset"] + 10)
    restored: dict = {}

    report = restore(restored, env)

    assert report["status"] == "partly_restored"
    assert restored == {"first": {"a": [1, 2]}, "second": "two"}
    assert report["failed"][0]["name"] == "third"
    assert "objects.pkl is cut short" in report["failed"][0]["reason"]


def test_a_garbled_record_is_listed_and_later_ones_are_not_loaded_at_wrong_places(env: dict) -> None:
    entry = save({"first": "one", "second": [1, 2, 3], "third": {"x": 1}}, env)
    objects = generation_file(entry, layout.OBJECTS)
    records = {v["name"]: v for v in json.loads((entry / layout.MANIFEST).read_text())["variables"]}
    data = bytearray(objects.read_bytes())
    start = records["second"]["offset"]
    data[start : start + records["second"]["length"]] = b"\xff" * records["second"]["length"]
    objects.write_bytes(bytes(data))
    restored: dict = {}

    report = restore(restored, env)

    assert restored == {"first": "one"}
    assert [item["name"] for item in report["failed"]] == ["second", "third"]
    assert "objects.pkl is garbled" in report["reason"]


def test_a_cut_short_manifest_says_which_file_is_damaged(env: dict) -> None:
    entry = save({"value": 1}, env)
    cut(entry / layout.MANIFEST, 40)

    report = restore({}, env)
    listed = serverside.list_states(env)["states"]

    assert report["status"] == "failed"
    assert report["reason"].startswith(f"the saved state is damaged: {entry / layout.MANIFEST} is not complete JSON")
    assert listed[0]["problem"] == report["reason"]


def test_a_manifest_the_loader_cannot_follow_is_damaged_not_a_crash(env: dict) -> None:
    entry = save({"value": 1}, env)
    manifest = json.loads((entry / layout.MANIFEST).read_text())
    manifest["variables"][0]["buffers"] = [0, 7]
    layout.write_private_file(entry / layout.MANIFEST, json.dumps(manifest).encode())

    report = restore({}, env)

    assert report["status"] == "failed"
    assert "manifest.json has buffers for 'value' beyond the 0 it lists" in report["reason"]


def test_a_missing_file_is_named(env: dict) -> None:
    entry = save({"value": 1}, env)
    generation_file(entry, layout.ARRAYS).unlink()
    report = restore({}, env)
    assert report["reason"] == "the saved state is damaged: arrays.bin is missing; discard it"


def test_names_the_kernel_already_holds_are_replaced_only_when_the_user_says_so(env: dict) -> None:
    import math  # a module bound again to its name is no conflict

    save({"lr": 0.1, "steps": 10, "seed": 7, "math": math}, env)
    mine = {"lr": 0.5, "steps": 99, "math": math}

    asked = restore(mine, env)
    assert asked["status"] == "conflict"
    assert asked["conflicts"] == ["lr", "steps"]
    assert asked["restored"] == []
    assert mine == {"lr": 0.5, "steps": 99, "math": math}
    assert asked["conflict_values"] == [
        {"name": "lr", "kernel": "0.5", "saved": "0.1"},
        {"name": "steps", "kernel": "99", "saved": "10"},
    ]
    assert restore_summary(asked) == [
        "Nothing was restored yet: lr (yours 0.5, saved 0.1), steps (yours 99, saved 10) differ."
    ]

    kept = restore(mine, env, on_conflict="keep")
    assert kept["status"] == "restored"
    assert kept["restored"] == ["seed"]  # math is bound again, but no variable of the user's
    assert mine == {"lr": 0.5, "steps": 99, "seed": 7, "math": math}
    assert "Kept your own values of lr, steps." in restore_summary(kept)

    taken = restore(mine, env, on_conflict="take")
    assert taken["restored"] == ["lr", "steps", "seed"]
    assert (mine["lr"], mine["steps"]) == (0.1, 10)


def test_a_kept_name_still_lends_its_objects_to_later_variables(env: dict) -> None:
    shared = [1, 2]
    save({"layers": shared, "config": {"layers": shared}}, env)
    mine: dict = {"layers": "my own"}

    report = restore(mine, env, on_conflict="keep")

    assert report["restored"] == ["config"]
    assert mine == {"layers": "my own", "config": {"layers": [1, 2]}}


@pytest.mark.parametrize("linked", ["entry", "server"])
def test_a_discard_never_deletes_through_a_symbolic_link(env: dict, tmp_path: Path, linked: str) -> None:
    entry = save({"value": 1}, env)
    elsewhere = tmp_path / "elsewhere"
    moved = entry if linked == "entry" else entry.parent
    moved.rename(elsewhere)
    moved.symlink_to(elsewhere)
    target_manifest = (elsewhere / layout.MANIFEST) if linked == "entry" else (elsewhere / entry.name / layout.MANIFEST)

    with pytest.raises(layout.UnsafeStateError, match="is a symbolic link"):
        layout.discard(entry, layout.state_root(env))
    with pytest.raises(layout.UnsafeStateError, match="is a symbolic link"):
        serverside.discard_state(env, entry.name)

    assert target_manifest.exists()


def test_states_older_than_the_limit_are_removed_in_every_server_folder(env: dict, tmp_path: Path) -> None:
    from fracnb_meter.hibernation import retention

    entry = save({"value": 1}, env)
    named = {**env, "JUPYTERHUB_SERVER_NAME": "gone"}  # a named server deleted since
    request = SaveRequest("old.ipynb", "/home/jovyan/old.ipynb", "kernel-2", 1 << 30, time.time() + 60)
    assert save_namespace({"old": 2}, {}, request, named, version_of=package_version)["status"] == "saved"
    other = find_entry(named, "/home/jovyan/old.ipynb")
    crashed = layout.server_dir(env) / ("f" * 32)  # a save that crashed before its manifest
    crashed.mkdir()
    saved = retention.saved_time(entry, layout.state_root(env))
    assert abs(saved - time.time()) < 60

    assert retention.prune(env, keep_days=30, now=time.time()) == []
    assert retention.prune(env, keep_days=0, now=time.time() + 10_000 * retention.DAY_S) == []
    assert sorted(retention.prune(env, keep_days=1, now=time.time() + 2 * retention.DAY_S)) == sorted(
        [entry, other, crashed]
    )
    assert not entry.exists()
    assert not other.exists()


def test_pruning_never_follows_a_symbolic_link(env: dict, tmp_path: Path) -> None:
    from fracnb_meter.hibernation import retention

    entry = save({"value": 1}, env)
    elsewhere = tmp_path / "elsewhere"
    entry.parent.rename(elsewhere)
    entry.parent.symlink_to(elsewhere)
    assert retention.prune(env, keep_days=1, now=time.time() + 2 * retention.DAY_S) == []
    assert (elsewhere / entry.name / layout.MANIFEST).exists()


def test_a_negative_keep_days_is_refused_naming_the_key() -> None:
    from traitlets import TraitError

    from fracnb_meter.server import FracnbMeter

    with pytest.raises(TraitError, match=r"FracnbMeter.hibernation_keep_days = -1.0 must be 0"):
        FracnbMeter(hibernation_keep_days=-1)


def test_a_saved_functions_globals_never_replace_the_kernels_values_unasked(env: dict) -> None:
    main = sys.modules["__main__"].__dict__  # a notebook's functions have the kernel's namespace as globals
    added = {"lr", "step"} - main.keys()
    try:
        main["lr"] = 0.1
        exec("def step():\n    return lr * 2", main)  # noqa: S102 -- as a notebook cell defines it
        save({"lr": 0.1, "step": main["step"]}, env)
    finally:
        for name in added:
            main.pop(name, None)
    mine = {"lr": 0.5}

    asked = restore(mine, env)
    assert (asked["status"], asked["conflicts"]) == ("conflict", ["lr"])
    assert mine == {"lr": 0.5}  # loading `step` brought its saved `lr` along: it is not left behind

    kept = restore(mine, env, on_conflict="keep")
    assert kept["restored"] == ["step"]
    assert mine["lr"] == 0.5
    assert mine["step"]() == 1.0  # the restored function reads the kernel's value


@pytest.mark.parametrize(
    "damage",
    [{"bytes": "3 GiB"}, {"saved_at": 1764590400}, {"variables": ["value"]}, {"versions": ["numpy"]}],
    ids=["bytes", "saved_at", "variables", "versions"],
)
def test_a_manifest_of_the_wrong_shape_is_listed_as_damaged_not_a_crash(env: dict, damage: dict) -> None:
    entry = save({"value": 1}, env)
    manifest = json.loads((entry / layout.MANIFEST).read_text()) | damage
    layout.write_private_file(entry / layout.MANIFEST, json.dumps(manifest).encode())

    listing = serverside.list_states(env)

    check(HIBERNATION_STATES, listing)
    [state] = listing["states"]
    assert state["problem"].startswith("the saved state is damaged: ")
    assert state["problem"].endswith("discard it")


def test_a_cut_short_state_names_its_lost_variables_before_and_after_a_restore(env: dict) -> None:
    """The states listing (the panel and the offer) and %fracnb_restore --list name what a cut lost,
    and count only what can come back; the restore counts only what it restored."""
    big = np.arange(1_000_000)  # 7.6 MiB, as in the report of a damaged state
    entry = save({"lr": 0.1, "big": big, "note": "kept", "small": np.arange(10)}, env)
    manifest = json.loads((entry / layout.MANIFEST).read_text())
    arrays = generation_file(entry, layout.ARRAYS)
    cut(arrays, 1000)  # as `truncate -s 1000 arrays.bin`

    (state,) = serverside.list_states(env)["states"]
    check(HIBERNATION_STATES, {"directory": "d", "states": [state]})
    assert [item["name"] for item in state["lost"]] == ["big", "small"]
    assert state["lost"][0]["reason"] == "arrays.bin is cut short (1000 bytes)"
    assert state["variables"] == ["lr", "note"]
    assert state["bytes"] < 1000 < manifest["bytes"]["total"]
    assert listing(manifest, lost_in_entry(entry, manifest)).splitlines()[1:] == [
        "Lost: big (the saved state is damaged: arrays.bin is cut short (1000 bytes)).",
        "Lost: small (the saved state is damaged: arrays.bin is cut short (1000 bytes)).",
    ]

    report = restore({}, env)
    assert report["restored"] == ["lr", "note"]
    assert [item["name"] for item in report["failed"]] == ["big", "small"]
    assert report["bytes"] == state["bytes"]  # not the 7.6 MiB that was lost


def test_an_undamaged_state_lists_every_variable_and_loses_none(env: dict) -> None:
    entry = save({"lr": 0.1, "big": np.arange(100_000)}, env)
    manifest = json.loads((entry / layout.MANIFEST).read_text())
    (state,) = serverside.list_states(env)["states"]
    assert (state["variables"], state["lost"], state["bytes"]) == (["lr", "big"], [], manifest["bytes"]["total"])
    assert "Lost" not in listing(manifest, lost_in_entry(entry, manifest))


def test_a_cut_in_the_objects_file_loses_that_variable_and_every_later_one() -> None:
    manifest = {
        "arrays": {"out_of_band": [[0, 64], [64, 64]], "device": [[128, 32]]},
        "variables": [
            {"name": "a", "offset": 0, "length": 10, "bytes": 74, "buffers": [0, 1]},
            {"name": "b", "offset": 10, "length": 10, "bytes": 10, "buffers": [1, 0]},
            {"name": "c", "offset": 20, "length": 10, "bytes": 106, "buffers": [1, 1]},
        ],
    }
    assert lost_variables(manifest, 30, 160) == []
    assert [item["name"] for item in lost_variables(manifest, 15, 160)] == ["b", "c"]
    # c's buffers are the arrays file's last two records (a numpy buffer and a device array's copy)
    assert [item["name"] for item in lost_variables(manifest, 30, 150)] == ["c"]
    assert [item["name"] for item in lost_variables(manifest, 30, 60)] == ["a", "c"]


def test_a_conflicts_values_are_shown_short() -> None:
    assert brief("x" * 100) == repr("x" * 100)[:13] + "..." + repr("x" * 100)[-14:]
    assert len(brief(np.arange(1_000_000.0))) <= 40
    assert brief(np.arange(1_000_000.0)).startswith("array([0.0")

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert brief(Unprintable()).startswith("<Unprintable instance")  # a repr that fails is no crash
