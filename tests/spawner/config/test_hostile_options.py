"""Hostile user_options: a 400 with a reason before anything is applied to the pod."""

from __future__ import annotations

import pytest
from tornado import web
from traitlets.config import Config

from fracnb_spawner.config.profiles import InvalidUserOptionsError, initialize_profiles, select

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
    {
        "display_name": "Free text",
        "slug": "free",
        "profile_options": {
            "note": {  # free text only: no listed choice, so no default either
                "display_name": "Note",
                "unlisted_choice": {
                    "enabled": True,
                    "validation_regex": "[^\\n]{1,200}",
                    "kubespawner_override": {"environment": {"NOTE": "{value}"}},
                },
            },
            "resource": {
                "choices": {"none": {"display_name": "None"}},
                "unlisted_choice": {
                    "enabled": True,
                    "kubespawner_override": {"extra_resource_limits": {"{value}": "1"}},
                },
            },
            "team": {
                "choices": {"none": {"display_name": "None"}},
                "unlisted_choice": {"enabled": True, "kubespawner_override": {"extra_labels": {"team": "{value}"}}},
            },
            "memory": {
                "choices": {"small": {"kubespawner_override": {"mem_limit": "1G"}}},
                "unlisted_choice": {"enabled": True, "kubespawner_override": {"mem_limit": "{value}"}},
            },
        },
    },
]
NOTE = "free text"

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
    # an option with only free text, left out or left empty
    {"profile": "free"},
    {"profile": "free", "note": "unlisted-choice"},
    {"profile": "free", "note--unlisted-choice": ""},
    {"profile": "free", "note--unlisted-choice": None},
    {"profile": "free", "note--unlisted-choice": "two\nlines"},
    # free text that would ask for GPUs outside the gpu key
    {"profile": "free", "note--unlisted-choice": NOTE, "resource--unlisted-choice": "nvidia.com/gpu"},
    {"profile": "free", "note--unlisted-choice": NOTE, "resource--unlisted-choice": "nvidia.com/gpu.shared"},
    {"profile": "free", "note--unlisted-choice": NOTE, "resource--unlisted-choice": "nvidia.com/mig-7g.80gb"},
    {"profile": "free", "note--unlisted-choice": NOTE, "resource--unlisted-choice": "nvidia.com/gpumem"},
    {"profile": "free", "note--unlisted-choice": NOTE, "resource--unlisted-choice": "nvidia.com/gpucores"},
    # free text that would make a label the apiserver refuses, or a trait value of the wrong kind
    {"profile": "free", "note--unlisted-choice": NOTE, "team--unlisted-choice": "Big Team!"},
    {"profile": "free", "note--unlisted-choice": NOTE, "team--unlisted-choice": "{username}"},
    {"profile": "free", "note--unlisted-choice": NOTE, "team--unlisted-choice": "a" * 64},
    {"profile": "free", "note--unlisted-choice": NOTE, "memory--unlisted-choice": "lots"},
    {"profile": "free", "note--unlisted-choice": NOTE, "memory--unlisted-choice": "{0}"},
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
    assert spawner.extra_labels == {}
    assert spawner.environment == {}
    assert spawner.spawn_plan is None


async def test_hostile_table_is_large_enough() -> None:
    assert len(HOSTILE) >= 45


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
    env = {var.name: var.value for var in (await spawner.get_pod_manifest()).spec.containers[0].env}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


async def test_form_rejects_before_any_spawn(make_spawner) -> None:
    spawner = make_spawner(config())
    with pytest.raises(web.HTTPError) as caught:
        await spawner.run_options_from_form({"profile": ["shared"], "profile-option-shared--size": ["forged"]})
    assert caught.value.status_code == 400
    assert "'forged' is not a choice for 'size'" in caught.value.log_message
    options = await spawner.run_options_from_form({"profile": ["shared"], "profile-option-shared--size": ["half"]})
    assert options == {"profile": "shared", "size": "half"}


async def test_form_refuses_free_text_asking_for_gpus(make_spawner) -> None:
    spawner = make_spawner(config())
    form = {
        "profile": ["free"],
        "profile-option-free--note--unlisted-choice": [NOTE],
        "profile-option-free--resource": ["unlisted-choice"],
        "profile-option-free--resource--unlisted-choice": ["nvidia.com/gpu"],
    }
    with pytest.raises(web.HTTPError) as caught:
        await spawner.run_options_from_form(form)
    assert caught.value.status_code == 400
    assert "would ask for GPUs in extra_resource_limits (nvidia.com/gpu)" in caught.value.log_message


# Free text an admin routes into every trait KubeSpawner expands as a template (and one it doesn't).
ROUTED = {
    "environment": {"NOTE": "{value}", "WHO": "{username}: {value}"},
    "volumes": [{"name": "notes", "configMap": {"name": "cm", "items": [{"key": "k", "path": "{value}"}]}}],
    "volume_mounts": [{"name": "notes", "mountPath": "/notes", "subPath": "{value}"}],
    "extra_annotations": {"example.com/note": "{value}", "example.com/who": "{username}"},
    "init_containers": [{"name": "init", "image": "busybox", "args": ["{value}"]}],
    "extra_containers": [{"name": "side", "image": "busybox", "env": [{"name": "NOTE", "value": "{value}"}]}],
    "extra_pod_config": {"hostname": "nb", "subdomain": "{username}"},
    "cmd": ["jupyterhub-singleuser"],
    "args": ["--note", "{value}"],
}
ROUTING_PROFILES = [
    {
        "display_name": "Routed",
        "slug": "routed",
        "profile_options": {
            "note": {"unlisted_choice": {"enabled": True, "kubespawner_override": ROUTED}},
        },
    }
]
FORMAT_STRINGS = [
    "{username}",
    "{servername}",
    "{0}",
    "{}",
    "{nope}",
    "{value}",
    "{username:>100000}",
    "{username.__class__.__mro__}",
    "{username[0]}",
    "{username!r}",
    "{{username}}",
    "}{",
    "{",
    "100%",
    "plain text",
]


def routed_pod_fields(pod: dict) -> dict:
    """Where ROUTED puts the user's text, read back from a serialized pod."""
    spec = pod["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    notes = next(v for v in spec["volumes"] if v["name"] == "notes")
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "notes")
    side = next(c for c in spec["containers"] if c["name"] == "side")
    args = spec["containers"][0]["args"]
    return {
        "env": env["NOTE"],
        "who": env["WHO"],
        "volume": notes["configMap"]["items"][0]["path"],
        "mount": mount["subPath"],
        "annotation": pod["metadata"]["annotations"]["example.com/note"],
        "init": spec["initContainers"][0]["args"][0],
        "sidecar": side["env"][0]["value"],
        "args": args[args.index("--note") + 1],
        "admin": pod["metadata"]["annotations"]["example.com/who"],
        "subdomain": spec["subdomain"],
    }


def routing_config() -> Config:
    cfg = Config()
    cfg.KubeSpawner.profile_list = ROUTING_PROFILES
    return cfg


@pytest.mark.parametrize("text", FORMAT_STRINGS)
async def test_free_text_reaches_the_pod_literally(make_spawner, text: str) -> None:
    spawner = make_spawner(routing_config(), {"profile": "routed", "note--unlisted-choice": text})
    await spawner.load_user_options()
    pod = spawner.api.api_client.sanitize_for_serialization(await spawner.get_pod_manifest())
    fields = routed_pod_fields(pod)
    username = fields.pop("admin")
    # the admin's own templates still expand, in the same fields as the user's text
    assert username == fields.pop("subdomain") != "{username}"
    assert fields.pop("who") == f"{username}: {text}"
    assert fields == dict.fromkeys(fields, text)


async def test_admin_templates_expand_as_in_kubespawner(make_spawner) -> None:
    """The same configuration and choice give KubeSpawner's pod fields, admin templates included."""
    from kubespawner import KubeSpawner

    options = {"profile": "routed", "note--unlisted-choice": "plain-text"}
    ours = make_spawner(routing_config(), options)
    stock = KubeSpawner(_mock=True, config=routing_config())
    stock.user_options = options
    pods = []
    for spawner in (ours, stock):
        await spawner.load_user_options()
        pods.append(spawner.api.api_client.sanitize_for_serialization(await spawner.get_pod_manifest()))
    assert routed_pod_fields(pods[0]) == routed_pod_fields(pods[1])
