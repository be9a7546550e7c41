"""The demo's options: a bad one is refused before anything starts, in the demo's own words, by the
rule the hub and the service apply; --idle-timeout covers every server and its duration reads
honestly; a hub that stops at its start shows only why, from this run's log."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import PyFileConfigLoader

from fracnb_spawner.culling import CullTiming, CullTimingError, check_timing
from fracnb_spawner.service.app import FracnbService
from fracnb_testbed.demo import DemoSettings, hub_config, main, running_demo
from fracnb_testbed.demo_options import ACTIVITY_LAG, idle_policy_words, option_problem
from fracnb_testbed.hubproc import HubError


def test_a_too_short_idle_timeout_is_refused_before_anything_starts(tmp_path: Path, capsys) -> None:
    state = tmp_path / "state"
    assert main(["--idle-timeout", "60", "--state-dir", str(state)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[demo] error: --idle-timeout 60 is too short for --warning-lead 120")
    assert "Use --idle-timeout 180 or more; for quick culls, e.g. --idle-timeout 120 --warning-lead 60" in err
    assert "FractionalSpawner" not in err
    assert "FracnbService" not in err
    assert "delete" not in err
    assert len(err.splitlines()) == 1
    assert not state.exists(), "nothing was started or written"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--warning-lead", "30"], "--warning-lead 30 is too short"),
        (["--cull-every", "0"], "--cull-every 0: give the seconds between culling passes"),
        (["--idle-timeout", "-5"], "--idle-timeout and --warning-lead are seconds, 0 or more"),
    ],
)
def test_other_bad_timings_are_refused_the_same_way(tmp_path: Path, capsys, options: list, said: str) -> None:
    assert main([*options, "--state-dir", str(tmp_path / "state")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_the_demo_checks_the_rule_the_hub_and_the_service_apply() -> None:
    assert FracnbService.class_traits()["activity_report_lag"].default_value == ACTIVITY_LAG
    for idle in (0, 45, 100, 105, 106, 150, 644, 645, 646, 900):
        for lead in (0, 45, 46, 60, 600):
            try:
                check_timing([("idle", idle)], CullTiming(warning_lead=lead, activity_report_lag=ACTIVITY_LAG))
                accepted = True
            except CullTimingError:
                accepted = False
            assert (option_problem(idle, lead, 30) is None) == accepted, (idle, lead)


def test_the_idle_timeout_covers_cpu_only_servers_and_reads_honestly(tmp_path: Path) -> None:
    settings = DemoSettings(
        state_dir=tmp_path, kubeconfig=tmp_path / "kubeconfig", namespace="ns", idle_timeout=150, warning_lead=60
    )
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(hub_config(settings, "/opt/chp"))
    config = PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()
    assert config.FractionalSpawner.gpu_idle_timeout == config.FractionalSpawner.cpu_idle_timeout == 150
    assert config.FracnbService.default_idle_timeout == 150
    assert idle_policy_words(150, 60) == "stopped after 2.5 min idle, with a warning in the notebook 1 min before"


def test_a_hub_that_stops_at_its_start_says_why_from_this_run_only(tmp_path: Path) -> None:
    settings = DemoSettings(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        namespace="ns",
        extra_config="c.FractionalSpawner.profile_list = [{'slug': 'x', 'display_name': 'X', 'gpu': {'fraction': 3}}]",
    )
    (tmp_path / "jupyterhub.log").write_text("[I old run] a line of yesterday's demo\n" * 40)
    with pytest.raises(HubError) as error, running_demo(settings):
        pass
    message = str(error.value)
    assert message.startswith("JupyterHub stopped at its start (exit code 1):\n")
    assert "fracnb: refusing to start, FractionalSpawner.profile_list: " in message
    assert "old run" not in message
    assert len(message.splitlines()) <= 9


def test_the_hub_shows_times_in_the_machines_zone_or_the_one_given(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    settings = DemoSettings(state_dir=tmp_path, kubeconfig=tmp_path / "kubeconfig", namespace="ns")
    assert settings.time_zone == "Europe/Berlin"
    assert "c.FracnbQueue.display_timezone = 'Europe/Berlin'" in hub_config(settings, "/opt/chp")
    assert main(["--time-zone", "Mars/Olympus", "--state-dir", str(tmp_path / "state")]) == 2
    assert "--time-zone 'Mars/Olympus' is not a time zone name" in capsys.readouterr().err
