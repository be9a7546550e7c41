"""Hostile user_options: a 400 with a reason before anything is applied to the pod."""

from __future__ import annotations

import pytest
from tornado import web
from traitlets.config import Config

from fracnb_spawner.profiles import InvalidUserOptionsError, initialize_profiles, select

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "0.25 GPU", "slug": "quarter", "gpu": {"fraction": 0.25}},
    {
        "display_name": "Shared GPU",
        "slug": "shared",
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "eighth": {"display_name": "1/8 GPU", "gpu": {"fraction": "1/8"}},
                    "half": {"display_name": "1/2 GPU", "gpu": {"fraction": 0.5, "backend": "hami"}},
                },
            },
            "image": {
                "display_name": "Image",
                "choices": {"base": {"display_name": "Base", "kubespawner_override": {"image": "base:1"}}},
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Image",
                    "validation_regex": "^registry\\.example\\.org/[a-z0-9/-]+:[a-z0-9.]+",
                    "kubespawner_override": {"image": "{value}"},
                },
            },
        },
    },
]

HOSTILE = [
    {"profile": "nope"},
    {"profile": "QUARTER"},
    {"profile": ["quarter"]},
    {"profile": {"slug": "quarter"}},
    {"profile": 1},
    {"profile": True},
    {"profile": "quarter", "size": "eighth"},
    {"profile": "shared", "size": "forged"},
    {"profile": "shared", "size": ["eighth"]},
    {"profile": "shared", "size": {"fraction": 1}},
    {"profile": "shared", "size": 0.125},
    {"profile": "shared", "size": None, "size--unlisted-choice": "x"},
    {"profile": "shared", "size--unlisted-choice": "1"},
    {"profile": "shared", "image--unlisted-choice": "evil.example.com/x:1"},
    {"profile": "shared", "image--unlisted-choice": "registry.example.org/ok:1; rm -rf /"},
    {"profile": "shared", "image--unlisted-choice": "registry.example.org/ok:1\nextra"},
    {"profile": "shared", "image--unlisted-choice": ["registry.example.org/ok:1"]},
    {"profile": "shared", "image": "unlisted-choice"},
    {"profile": "shared", "image": "unlisted-choice", "image--unlisted-choice": ""},
    {"profile": "shared", "image--unlisted-choice": "registry.example.org/" + "a" * 2000 + ":1"},
    {"image--unlisted-choice": "evil:latest"},
    {"size": "half"},
    {"profile": "cpu", "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}},
    {"profile": "quarter", "NVIDIA_VISIBLE_DEVICES": "all"},
    {"profile": "quarter", "FRACNB_GPU_MEMORY_LIMIT": "999999999999"},
    {"profile": "quarter", "extra_resource_limits": {"nvidia.com/gpu": "8"}},
    {"profile": "quarter", "image": "attacker/image"},
    {"profile": "shared", "size": "eighth", "profile-option-shared--size": "half"},
    {"profile": "shared", "size": "eighth", "cpu_limit": 64},
    {"profile": "quarter", "gpu": {"fraction": 1}},
    {"profile": "shared", "size": "half ", "image": "base"},
    {"profile": "shared", "size": "__class__"},
    {"profile": "shared", "size": "default"},
    {"profile": "shared", "garbage": 1},
]


def config() -> Config:
    cfg = Config()
    cfg.FractionalSpawner.profile_list = PROFILES
    cfg.FractionalSpawner.image = "configured:1"
    return cfg


@pytest.mark.parametrize("options", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
async def test_hostile_options_rejected_with_400(make_spawner, options: dict) -> None:
    spawner = make_spawner(config(), options)
    with pytest.raises(web.HTTPError) as caught:
        await spawner.load_user_options()
    assert caught.value.status_code == 400
    message = getattr(caught.value, "message", None) or caught.value.log_message
    assert message.startswith("Invalid server options: ")
    assert "Traceback" not in message
    assert spawner.image == "configured:1"
    assert spawner.extra_resource_limits == {}
    assert spawner.fracnb_plan is None


async def test_hostile_table_is_large_enough() -> None:
    assert len(HOSTILE) >= 30


def test_non_mapping_options_rejected() -> None:
    profiles = initialize_profiles(PROFILES)
    with pytest.raises(InvalidUserOptionsError, match="JSON object"):
        select(profiles, ["profile", "quarter"])


@pytest.mark.parametrize(
    ("options", "image"),
    [
        (
            {"profile": "shared", "image--unlisted-choice": "registry.example.org/team/nb:1.2"},
            "registry.example.org/team/nb:1.2",
        ),
        ({"profile": "shared", "image": "base"}, "base:1"),
        ({"profile": "shared"}, "base:1"),
    ],
)
async def test_valid_unlisted_and_listed_choices(make_spawner, options: dict, image: str) -> None:
    spawner = make_spawner(config(), options)
    await spawner.load_user_options()
    assert spawner.image == image


async def test_missing_profile_gets_default_validated(make_spawner) -> None:
    spawner = make_spawner(config(), {})
    await spawner.load_user_options()
    assert spawner.user_options == {"profile": "cpu"}
    assert spawner.get_env()["NVIDIA_VISIBLE_DEVICES"] == "void"


async def test_form_rejects_before_any_spawn(make_spawner) -> None:
    spawner = make_spawner(config())
    with pytest.raises(web.HTTPError) as caught:
        await spawner.run_options_from_form({"profile": ["shared"], "profile-option-shared--size": ["forged"]})
    assert caught.value.status_code == 400
    assert "'forged' is not a choice for 'size'" in caught.value.log_message
    options = await spawner.run_options_from_form({"profile": ["shared"], "profile-option-shared--size": ["half"]})
    assert options == {"profile": "shared", "size": "half"}
