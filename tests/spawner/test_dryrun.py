"""The admin dry run: same validation as the hub, readable output, z2jh values files too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from traitlets.config import PyFileConfigLoader

from fracnb_spawner.configure import setup
from fracnb_spawner.dryrun import main
from tests.spawner.examples import EXAMPLE_CONFIG


def test_dry_run_lists_every_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE_CONFIG), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_key = {(r["profile"], r["choice"]): r for r in rows}
    assert set(by_key) == {
        ("cpu", ""), ("quarter", ""), ("shared", "size=eighth"), ("shared", "size=half"),
        ("mig-small", ""), ("mps-half", ""), ("kai-quarter", ""), ("dra-quarter", ""), ("full", ""),
    }  # fmt: skip
    assert by_key[("shared", "size=half")]["scheduler"] == "hami-scheduler"
    assert by_key[("quarter", "")]["node_selector"]["nvidia.com/gpu.replicas"] == "4"
    assert by_key[("mig-small", "")]["isolation"] == "hard"


def test_dry_run_prints_the_dra_claim(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE_CONFIG), "--json"]) == 0
    rows = {r["profile"]: r for r in json.loads(capsys.readouterr().out)}
    (claim,) = rows["dra-quarter"]["companions"]
    assert claim["kind"] == "ResourceClaim"
    assert claim["metadata"]["name"] == "<pod name>-gpu"  # not the dry run's mock user's pod
    assert claim["metadata"]["annotations"] == {"fracnb.io/pod": "<pod name>"}
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}}}
    ]
    assert rows["quarter"]["companions"] == []
    assert main([str(EXAMPLE_CONFIG)]) == 0
    block = capsys.readouterr().out.split("dra-quarter\n", 1)[1].split("\n\n", 1)[0]
    assert "GPU resources: none requested: the pod claims its GPU through the DRA ResourceClaim below" in block
    assert "ResourceClaim (created with the pod, then owned by it, deleted at stop):" in block
    assert "deviceClassName: gpu.nvidia.com" in block
    assert "memory: 20Gi" in block
    assert "mock" not in block


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


def write_config(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "jupyterhub_config.py"
    profiles = "[{'display_name': 'Quarter', 'slug': 'quarter', 'gpu': {'fraction': 0.25}}]"
    path.write_text("\n".join(["c = get_config()", f"c.FractionalSpawner.profile_list = {profiles}", *lines]) + "\n")
    return path


def hub_refusal(path: Path) -> str:
    """What setup(c) says at hub start for the same config file."""
    config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    with pytest.raises(SystemExit) as refused:
        setup(config, service=False)
    return str(refused.value).removeprefix("fracnb: refusing to start, ")


def test_dry_run_refuses_bad_quota_as_the_hub_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {
        "hub": {"config": {"FracnbQuotas": {"default_user_quota": "lots"}}},
        "singleuser": {"profileList": [{"display_name": "Half", "slug": "half", "gpu": {"fraction": 0.5}}]},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "FracnbQuotas.default_user_quota: 'lots' is not a number of GPUs" in err
    # The same words as the hub's refusal at start.
    hub_says = hub_refusal(write_config(tmp_path, "c.FracnbQuotas.default_user_quota = 'lots'"))
    assert err.strip() == f"fracnb-dry-run: configuration refused: {hub_says}"


def test_dry_run_refuses_what_the_service_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(write_config(tmp_path, "c.FracnbService.cull_every = 'soon'"))]) == 1
    err = capsys.readouterr().err
    assert "configuration refused" in err
    assert "'cull_every' trait of a FracnbService" in err
    assert "'soon'" in err


def test_misspelled_sharing_method_names_key_value_and_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, "c.FractionalSpawner.gpu_backend = 'time-slice'")
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    expected = (
        "FractionalSpawner.gpu_backend: 'time-slice' is not a sharing method;"
        " use one of time-slicing, mps, mig, hami, kai, dra; did you mean 'time-slicing'?"
    )
    assert expected in err
    assert "expected any of" not in err  # traitlets' own words
    assert hub_refusal(path) == expected


def test_summary_of_quotas_and_idle_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(
        tmp_path,
        "c.FracnbQuotas.default_user_quota = 1",
        "c.FracnbQuotas.user_quotas = {'alice': '3/2', 'admin': None}",
        "c.FracnbQuotas.group_quotas = {'team-a': 6}",
        "c.FractionalSpawner.gpu_idle_timeout = '1h'",
        "c.FractionalSpawner.gpu_max_age = '8h'",
        "c.FracnbService.default_idle_timeout = 7200",
        "c.FracnbService.warning_lead = 600",
    )
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "  idle policy: stops after 1 h idle, and 8 h after it started\n" in out
    summary = out[out.index("quotas (FracnbQuotas):") :]
    assert "  each user: 1 GPU, unless named below\n" in summary
    assert "  users: admin no limit, alice 1.5 GPUs\n" in summary
    assert "  groups (all members together): team-a 6 GPUs\n" in summary
    assert "  GPU servers by default: stops after 1 h idle, and 8 h after it started\n" in summary
    assert "  servers without fracnb annotations: stops after 2 h idle, no maximum age\n" in summary
    assert "warning shown in the notebook 10 min before a deadline" in summary


def test_kai_and_whole_gpu_are_described_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE_CONFIG)]) == 0
    blocks = {block.split("\n", 1)[0]: block for block in capsys.readouterr().out.split("\n\n")}
    kai = blocks["kai-quarter"]
    assert "GPU resources: none requested: the KAI scheduler gives the pod its share" in kai
    assert "(gpu-fraction: 0.25)" in kai
    full = blocks["full"]
    assert "whole GPU: not shared, the whole device's memory" in full
    assert "hardware partition" not in full
    assert "hard limit (hardware partition)" in blocks["mig-small"]  # a MIG slice is one
    assert "GPU resources: none (CPU only)" in blocks["cpu"]


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out
    assert "FracnbQuotas" in out


def test_dry_run_refuses_an_idle_timeout_the_culler_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("c.FractionalSpawner.gpu_idle_timeout = '2m'\nc.FracnbService.warning_lead = 120\n")
    assert main([str(config)]) == 1
    err = capsys.readouterr().err
    assert "configuration refused: FractionalSpawner.gpu_idle_timeout: an idle timeout of 120 s" in err
    assert "Traceback" not in err


def test_the_shorter_timeout_under_demand_is_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(
        tmp_path,
        "c.FractionalSpawner.profile_list = [{'display_name': 'Quarter', 'slug': 'q', 'gpu': {'fraction': 0.25},"
        " 'cull': {'idle_timeout': '1h', 'idle_timeout_under_demand': '20m'}}]",
    )
    assert main([str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["idle_timeout_seconds"], row["idle_timeout_under_demand_seconds"]) == (3600, 1200)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "  idle policy: stops after 1 h idle, no maximum age; 20 min idle while someone waits for its GPU\n" in out
