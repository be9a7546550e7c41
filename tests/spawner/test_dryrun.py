"""The admin dry run: same validation as the hub, readable output, z2jh values files too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fracnb_spawner.dryrun import main

from .conftest import EXAMPLE_CONFIG


def test_dry_run_lists_every_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE_CONFIG), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_key = {(r["profile"], r["choice"]): r for r in rows}
    assert set(by_key) == {
        ("cpu", ""), ("quarter", ""), ("shared", "size=eighth"), ("shared", "size=half"),
        ("mig-small", ""), ("mps-half", ""), ("kai-quarter", ""), ("full", ""),
    }  # fmt: skip
    assert by_key[("shared", "size=half")]["scheduler"] == "hami-scheduler"
    assert by_key[("quarter", "")]["node_selector"]["nvidia.com/gpu.replicas"] == "4"
    assert by_key[("mig-small", "")]["isolation"] == "hard"


def test_dry_run_prints_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE_CONFIG), "--manifest"]) == 0
    out = capsys.readouterr().out
    assert "pod manifest:" in out
    assert "nvidia.com/mig-1g.10gb" in out


def test_dry_run_refuses_bad_config_naming_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "jupyterhub_config.py"
    bad.write_text(
        "c = get_config()\n"
        "c.FractionalSpawner.profile_list = [{'display_name': 'Big', 'slug': 'big', 'gpu': {'fraction': 1.5}}]\n"
    )
    assert main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "profile 'big' ('Big')" in err
    assert "outside 0 < fraction <= 1" in err


def test_dry_run_reads_z2jh_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {
        "hub": {"config": {"JupyterHub": {"spawner_class": "fractional"}, "FractionalSpawner": {"gpu_memory": "40Gi"}}},
        "singleuser": {"profileList": [{"display_name": "Half", "slug": "half", "gpu": {"fraction": 0.5}}]},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    assert main([str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["memory_budget_bytes"] == 20 * 2**30


def test_dry_run_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/nonexistent/jupyterhub_config.py"]) == 2


def test_dry_run_refuses_an_idle_timeout_the_culler_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("c.FractionalSpawner.gpu_idle_timeout = '2m'\nc.FracnbService.warning_lead = 120\n")
    assert main([str(config)]) == 1
    err = capsys.readouterr().err
    assert "configuration refused: FractionalSpawner.gpu_idle_timeout: an idle timeout of 120 s" in err
    assert "Traceback" not in err
