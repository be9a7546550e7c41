"""The user's time zone on the notebook side: kept from the browser, read by the kernel's times."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fracnb_meter.displayzone import display_zone, save_zone, saved_zone_name, zone_named, zone_path


def env_for(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), **more}


def test_the_browsers_zone_comes_first_then_the_spawners_then_the_kernels_own(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    assert display_zone(env) is None  # the kernel's local zone
    env["FRACNB_DISPLAY_TIMEZONE"] = "Europe/Berlin"
    assert str(display_zone(env)) == "Europe/Berlin"
    save_zone(env, "America/New_York")
    assert str(display_zone(env)) == "America/New_York"
    path = zone_path(env)
    assert path == tmp_path / "home" / ".local" / "state" / "fracnb" / "display-zone.json"
    assert json.loads(path.read_text()) == {"time_zone": "America/New_York"}
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../../etc/passwd", "/etc/localtime", "x" * 80])
def test_a_name_that_is_no_zone_is_refused_saying_what_to_send(tmp_path: Path, name: str) -> None:
    env = env_for(tmp_path)
    with pytest.raises(ValueError, match="IANA"):
        save_zone(env, name)
    assert not zone_path(env).exists()
    with pytest.raises(ValueError, match="America/New_York"):
        zone_named(name)


def test_a_symlink_in_the_files_place_is_replaced_never_written_through_nor_read(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"time_zone": "Asia/Tokyo"}))
    path = zone_path(env)
    path.parent.mkdir(parents=True)
    os.symlink(target, path)
    assert saved_zone_name(env) is None
    save_zone(env, "UTC")
    assert not path.is_symlink()
    assert json.loads(target.read_text()) == {"time_zone": "Asia/Tokyo"}
    assert saved_zone_name(env) == "UTC"


def test_a_damaged_file_falls_back_to_the_spawners_zone(tmp_path: Path) -> None:
    env = env_for(tmp_path, FRACNB_DISPLAY_TIMEZONE="UTC")
    path = zone_path(env)
    path.parent.mkdir(parents=True)
    for text in ("not json", json.dumps({"time_zone": "Mars/Olympus"}), json.dumps(["UTC"])):
        path.write_text(text)
        assert saved_zone_name(env) is None
        assert str(display_zone(env)) == "UTC"
