"""setup(c): selects the spawner, refuses a bad profile list at hub start, registers the service."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_spawner.configure import setup


def test_setup_registers_spawner_service_and_roles() -> None:
    c = Config()
    c.FractionalSpawner.profile_list = [{"display_name": "Q", "slug": "q", "gpu": {"fraction": 0.25}}]
    setup(c, config_file="/etc/jupyterhub/jupyterhub_config.py")
    assert c.JupyterHub.spawner_class == "fractional"
    (service,) = c.JupyterHub.services
    assert service["name"] == "fracnb"
    assert service["command"][-2:] == ["--config", "/etc/jupyterhub/jupyterhub_config.py"]
    # Its page logs users in through the hub's OAuth, without an "authorize" prompt, and gets no scopes.
    assert service["oauth_no_confirm"] is True
    assert service["oauth_client_allowed_scopes"] == []
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "delete:servers" in roles["fracnb"]["scopes"]
    assert "access:services!service=fracnb" in roles["user"]["scopes"]
    assert c.FractionalSpawner.fracnb_service_name == "fracnb"
    assert c.FractionalSpawner.fracnb_service_url == "http://127.0.0.1:10101/services/fracnb/"


def test_setup_refuses_bad_profiles_naming_them() -> None:
    c = Config()
    c.KubeSpawner.profile_list = [{"display_name": "Too much", "slug": "big", "gpu": {"fraction": 2}}]
    with pytest.raises(SystemExit, match=r"profile 'big' \('Too much'\): fraction 2 is outside"):
        setup(c, service=False)


def test_setup_refuses_bad_quotas_naming_the_key() -> None:
    c = Config()
    c.FracnbQuotas.group_quotas = {"team-a": "6 gpus"}
    with pytest.raises(SystemExit, match=r"group_quotas\['team-a'\]: '6 gpus' is not a number of GPUs"):
        setup(c, service=False)


def test_setup_accepts_the_demos_two_minute_timeout_with_a_one_minute_warning() -> None:
    # The meter reports activity within FracnbService.activity_report_lag (45 s): 120 > 60 + 45.
    c = Config()
    c.FractionalSpawner.gpu_idle_timeout = 120
    c.FracnbService.default_idle_timeout = 120
    c.FracnbService.warning_lead = 60
    setup(c, service=False)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"FractionalSpawner": {"gpu_idle_timeout": "2m"}, "FracnbService": {"warning_lead": 120}},
            r"FractionalSpawner.gpu_idle_timeout: an idle timeout of 120 s is not more than "
            r"FracnbService.warning_lead \(120 s\) plus FracnbService.activity_report_lag \(45 s",
        ),
        (
            {"FractionalSpawner": {"cpu_idle_timeout": 30}, "FracnbService": {"warning_lead": 0}},
            r"FractionalSpawner.cpu_idle_timeout: .* servers in use would be warned and stopped",
        ),
        (
            {"FracnbService": {"default_idle_timeout": 600}},  # the default warning lead is 900 s
            r"FracnbService.default_idle_timeout: an idle timeout of 600 s .* make it more than 945 s",
        ),
        (
            {"FracnbService": {"warning_lead": 30}},
            r"FracnbService.warning_lead \(30 s\) is not more than FracnbService.activity_report_lag \(45 s\)",
        ),
        (
            {
                "FractionalSpawner": {
                    "profile_list": [
                        {
                            "display_name": "Quick",
                            "slug": "quick",
                            "gpu": {"fraction": 0.25},
                            "cull": {"idle_timeout": "5m"},
                        }
                    ]
                }
            },
            r"FractionalSpawner.profile_list: profile 'quick' \('Quick'\): cull.idle_timeout: an idle timeout of 300 s",
        ),
    ],
    ids=["warning-as-long-as-timeout", "timeout-under-lag", "service-default", "warning-under-lag", "profile"],
)
def test_setup_refuses_timeouts_that_would_warn_or_stop_servers_in_use(settings: dict, expected: str) -> None:
    c = Config(settings)
    with pytest.raises(SystemExit, match=rf"^fracnb: refusing to start, {expected}"):
        setup(c, service=False)


def test_setup_names_the_choice_whose_idle_timeout_is_too_short() -> None:
    c = Config()
    c.FractionalSpawner.profile_list = [
        {
            "display_name": "Train",
            "slug": "train",
            "gpu": {"fraction": 0.5},
            "profile_options": {
                "length": {
                    "display_name": "Session",
                    "choices": {
                        "long": {"display_name": "Long"},
                        "short": {"display_name": "Short", "cull": {"idle_timeout": 60}},
                    },
                }
            },
        }
    ]
    with pytest.raises(SystemExit, match=r"profile 'train' \('Train'\), choice length=short: cull.idle_timeout"):
        setup(c, service=False)


def quarter_with(cull: dict) -> Config:
    c = Config()
    c.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25}, "cull": cull}
    ]
    return c


def test_setup_accepts_a_shorter_timeout_under_demand() -> None:
    setup(quarter_with({"idle_timeout": "1h", "idle_timeout_under_demand": "20m"}), service=False)
    # Shorter than the default GPU idle timeout (30 min) it shortens.
    setup(quarter_with({"idle_timeout_under_demand": "20m"}), service=False)


def test_setup_refuses_a_timeout_under_demand_not_shorter_than_the_default_one() -> None:
    c = quarter_with({"idle_timeout_under_demand": "45m"})
    expected = (
        r"profile 'q' \('Quarter'\): cull.idle_timeout_under_demand \(2700 s\) must be less than the idle timeout "
        r"it shortens \(1800 s, the default idle timeout\)"
    )
    with pytest.raises(SystemExit, match=expected):
        setup(c, service=False)


def test_setup_refuses_a_timeout_under_demand_that_would_warn_servers_in_use() -> None:
    # The default warning lead is 900 s: a 10-minute timeout would warn a server in use.
    c = quarter_with({"idle_timeout": "1h", "idle_timeout_under_demand": "10m"})
    expected = r"profile 'q' \('Quarter'\): cull.idle_timeout_under_demand: an idle timeout of 600 s is not more than"
    with pytest.raises(SystemExit, match=expected):
        setup(c, service=False)
    c.FracnbService.warning_lead = 300
    setup(c, service=False)


def test_setup_refuses_bad_queue_settings_naming_profile_and_key() -> None:
    c = Config()
    c.FracnbQueue.group_priorities = {"staff": "high"}
    with pytest.raises(SystemExit, match=r"FracnbQueue.group_priorities\['staff'\]: 'high' is not a priority"):
        setup(c, service=False)
    c = Config()
    c.FracnbQueue.display_timezone = "Berlin"
    with pytest.raises(SystemExit, match=r"FracnbQueue.display_timezone: 'Berlin' is not a time zone"):
        setup(c, service=False)
    c = Config()
    c.KubeSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "q", "gpu": {"fraction": 0.25}, "queue": {"max_wait": "an hour"}}
    ]
    with pytest.raises(SystemExit, match=r"profile 'q' \('Quarter'\): queue.max_wait: 'an hour'"):
        setup(c, service=False)
    c.KubeSpawner.profile_list = [
        {"display_name": "Q", "slug": "q", "profile_options": {"size": {"display_name": "Size", "choices": {
            "a": {"display_name": "A", "gpu": {"fraction": 0.25}, "queue": {"max_wait": 60}}}}}}
    ]  # fmt: skip
    with pytest.raises(SystemExit, match=r"choice size=a: 'queue' belongs on the profile"):
        setup(c, service=False)
