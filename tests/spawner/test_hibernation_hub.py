"""The hub side of hibernation, pure: the notice's words (held with the notebook's front end to
extension/test-data/hibernation-notices.json), the metric outcome, the settings, the checks on the
server's answer, and the configuration's refusals and dry run."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from traitlets.config import Config

from fracnb_spawner.configure import SERVICE_SCOPES, setup
from fracnb_spawner.dryrun import main
from fracnb_spawner.hibernation.client import Hibernation, checked_report, server_url
from fracnb_spawner.hibernation.culled import metric_outcome, spares_server
from fracnb_spawner.hibernation.settings import HibernationSettings, settings_from_config, timeout_problem
from fracnb_spawner.hibernation.words import outcome, problem_line, report_lines
from tests.shared_cases import shared_cases

CASES = shared_cases("hibernation-notices.json")["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["lines"][0][:40])
def test_the_notice_says_what_each_notebook_kept(case):
    assert report_lines(case["kernels"], ZoneInfo(case["time_zone"])) == case["lines"]
    assert outcome(case["kernels"]) == case["outcome"]
    # What the service keeps of the server's answer says the same.
    kept = checked_report({"kernels": case["kernels"], "saved_bytes": 0})
    assert report_lines(kept["kernels"], ZoneInfo(case["time_zone"])) == case["lines"]


def test_no_answer_is_a_failure_and_a_server_with_hibernation_off_is_not():
    assert metric_outcome(Hibernation(None, "the server gave no answer within 135 s", 135.0)) == "failed"
    assert metric_outcome(Hibernation(None, "hibernation is turned off on this server", 0.1, turned_off=True)) is None
    assert problem_line("the server gave no answer within 135 s.") == (
        "Variables not saved: the server gave no answer within 135 s."
    )


def test_a_gpu_unused_stop_is_called_off_when_a_kernel_turned_busy():
    busy = Hibernation(
        checked_report({"kernels": [next(k for c in CASES for k in c["kernels"] if k["status"] == "busy")]}), None, 1
    )
    assert spares_server("gpu-unused", busy)
    assert not spares_server("idle", busy)  # the idle timeout: the hub heard of no use, the stop goes on
    assert not spares_server("gpu-unused", Hibernation(None, "no answer", 1))


CALLED_OFF = shared_cases("called-off-stops.json")["cases"]


@pytest.mark.parametrize("case", CALLED_OFF, ids=lambda case: f"{case['stop']}-{'-'.join(case['statuses'])}")
def test_which_stops_are_called_off_as_the_meter_reads_them(case):
    template = CASES[0]["kernels"][0]
    kernels = [{**template, "kernel_id": f"k{i}", "status": status} for i, status in enumerate(case["statuses"])]
    hibernation = Hibernation(checked_report({"kernels": kernels}), None, 1)
    assert spares_server(case["stop"] or "", hibernation) == case["called_off"]


@pytest.mark.parametrize(
    ("settings", "reason", "applies"),
    [
        (HibernationSettings(), "idle", True),
        (HibernationSettings(), "demand", True),
        (HibernationSettings(), "gpu-unused", True),
        (HibernationSettings(), "gpu-unused-busy", False),  # a busy kernel cannot be saved
        (HibernationSettings(), "max-age", False),
        (HibernationSettings(at_max_age=True), "max-age", True),
        (HibernationSettings(timeout=0), "idle", False),
    ],
)
def test_which_stops_hibernate(settings, reason, applies):
    assert settings.applies(reason) is applies


def test_the_request_and_the_bounds():
    assert HibernationSettings(timeout=120).request_body() == {"timeout_seconds": 120}
    assert HibernationSettings(timeout=60, max_bytes=1 << 30).request_body() == {
        "timeout_seconds": 60,
        "max_bytes": 1 << 30,
    }
    assert timeout_problem(3600) is None
    assert "between 0 (no hibernation) and 3600 s" in timeout_problem(3601)
    assert settings_from_config({"hibernation_timeout": 30, "hibernate_at_max_age": True}) == HibernationSettings(
        30, 0, True
    )


def test_an_answer_that_is_not_a_report_is_refused_and_long_text_is_cut():
    for document in (None, [], {"kernels": "all"}, {"kernels": [{"status": "exploded"}]},
                     {"kernels": [{"status": "saved", "bytes": -1}]}):  # fmt: skip
        with pytest.raises(ValueError, match="not a"):
            checked_report(document)
    kernel = {"status": "failed", "path": "x.ipynb", "reason": "y" * 5000, "skipped": []}
    [kept] = checked_report({"kernels": [kernel]})["kernels"]
    assert len(kept["reason"]) == 500


def test_the_server_is_reached_at_its_pods_address():
    assert server_url("10.1.2.3", 8888, "/user/ann/") == "http://10.1.2.3:8888/user/ann/"
    assert server_url("fd00::7", 8888, "/user/ann/gpu") == "http://[fd00::7]:8888/user/ann/gpu/"
    assert server_url(None, 8888, "/user/ann/") is None  # not scheduled yet
    assert server_url("10.1.2.3", None, "/user/ann/") is None


def test_setup_lets_the_service_call_the_servers_it_stops():
    c = Config()
    c.FractionalSpawner.profile_list = [{"display_name": "Q", "slug": "q", "gpu": {"fraction": 0.25}}]
    setup(c, config_file="/etc/jupyterhub/jupyterhub_config.py")
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["fracnb"]["scopes"] == SERVICE_SCOPES
    assert "access:servers" in SERVICE_SCOPES


def write_config(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "jupyterhub_config.py"
    profiles = (
        "[{'display_name': 'Quarter', 'slug': 'quarter', 'gpu': {'fraction': 0.25},"
        " 'cull': {'gpu_unused_timeout': '20m', 'gpu_unused_busy_timeout': '2h'}},"
        " {'display_name': 'MIG', 'slug': 'mig', 'gpu': {'backend': 'mig', 'mig_profile': '1g.10gb'}, 'cull': {'gpu_unused_timeout': '20m'}}]"
    )
    path.write_text("\n".join(["c = get_config()", f"c.FractionalSpawner.profile_list = {profiles}", *lines]) + "\n")
    return path


def test_the_dry_run_shows_the_gpu_unused_policy_and_hibernation(tmp_path, capsys):
    path = write_config(
        tmp_path, "c.FracnbService.hibernation_timeout = 300", "c.FractionalSpawner.hibernate_on_stop = True"
    )
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    quarter = out[out.index("quarter") : out.index("\nmig")]
    assert (
        "  GPU unused: hibernated and stopped after 20 min without GPU work while its kernels are idle; with a kernel"
        " busy, warned then, and stopped after 2 h. Measurable: yes, with NVIDIA driver 570.86.15 or newer" in quarter
    )
    assert "Measurable: no: MIG gives no per-process utilisation samples" in out[out.index("\nmig") :]
    assert (
        "its idle kernels save their variables, within the notebook's own size limit"
        " (FracnbMeter.hibernation_max_bytes, 4 GiB by default); the stop waits at most 5 min for them"
        " (FracnbService.hibernation_timeout)"
    ) in out
    assert "also before stops at the maximum age: no (FracnbService.hibernate_at_max_age)" in out
    assert "also before stops users and admins ask for: yes (FractionalSpawner.hibernate_on_stop)" in out
    assert (
        "a server that does not answer within 5 s is stopped without"
        " (FractionalSpawner.hibernate_on_stop_answer_timeout)"
    ) in out
    assert "also when Kueue preempts a server: not with the builtin engine" in out


def test_a_users_own_stop_saves_by_default(tmp_path, capsys):
    assert main([str(write_config(tmp_path))]) == 0
    assert "also before stops users and admins ask for: yes (FractionalSpawner.hibernate_on_stop)" in (
        capsys.readouterr().out
    )
    off = write_config(tmp_path, "c.FractionalSpawner.hibernate_on_stop = False")
    assert main([str(off)]) == 0
    assert "also before stops users and admins ask for: no" in capsys.readouterr().out


def test_the_dry_run_says_a_server_kueue_preempts_saves_in_its_grace_period(tmp_path, capsys):
    assert main([str(write_config(tmp_path, 'c.FracnbQueue.engine = "kueue"'))]) == 0
    assert (
        "also when Kueue preempts a server: yes, it saves on SIGTERM within 2 min of its grace period"
        " (FRACNB_STOP_HIBERNATION_TIMEOUT)"
    ) in capsys.readouterr().out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("c.FracnbService.hibernation_timeout = 7200", "FracnbService.hibernation_timeout (7200 s) must be between 0"),
        ("c.FracnbService.warning_lead = 1200", "cull.gpu_unused_timeout: a GPU-unused timeout of 1200 s is not more"),
    ],
)
def test_the_dry_run_refuses_what_the_hub_would(tmp_path, capsys, line, message):
    assert main([str(write_config(tmp_path, line))]) == 1
    assert message in capsys.readouterr().err
