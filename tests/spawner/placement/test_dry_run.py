"""The dry run says who chooses the card of a share, backend by backend: with time-slicing it is the device
plugin's, not the hub's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fracnb_spawner.dryrun import main

PROFILES = (
    "[{'display_name': 'TS', 'slug': 'ts', 'gpu': {'fraction': 0.25}},"
    " {'display_name': 'DRA', 'slug': 'dra', 'gpu': {'fraction': 0.25, 'backend': 'dra'}},"
    " {'display_name': 'HAMi', 'slug': 'hami', 'gpu': {'fraction': 0.25, 'backend': 'hami'}}]"
)


def dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *lines: str) -> str:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("\n".join(["c = get_config()", f"c.FractionalSpawner.profile_list = {PROFILES}", *lines]) + "\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    return out[out.index("placement (") :]


def test_the_dry_run_says_card_choice_is_the_device_plugins_with_time_slicing(tmp_path, capsys) -> None:
    section = dry_run(tmp_path, capsys)
    assert section.startswith(
        "placement (FractionalSpawner.placement = 'adaptive'): new shares go beside the least busy holders while"
        " nothing waits for whole cards; onto the fullest card that fits while a whole-card start or batch pod waits\n"
    )
    assert (
        "  time-slicing: card choice is the NVIDIA device plugin's (node-wide, its sharedDevicesAllocationPolicy:"
        " distributed or packed); fracnb does not choose the card\n"
    ) in section
    assert "  dra: the hub ranks the cards in each claim (firstAvailable by uuid, then any card)" in section
    assert "  hami: the hub sets HAMi's per-pod policy (hami.io/gpu-scheduler-policy): spread while nothing" in section


def test_packed_keeps_hamis_configured_policy(tmp_path, capsys) -> None:
    section = dry_run(tmp_path, capsys, "c.FractionalSpawner.placement = 'packed'")
    assert "new shares go onto the fullest card that fits\n" in section
    assert "(hami.io/gpu-scheduler-policy): hami_gpu_scheduler_policy on every share\n" in section


def test_a_bad_policy_is_refused_naming_the_key(tmp_path, capsys) -> None:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("c = get_config()\nc.FractionalSpawner.placement = 'binpack'\n")
    assert main([str(path)]) == 1
    assert "FractionalSpawner.placement: 'binpack' is not a placement policy" in capsys.readouterr().err
