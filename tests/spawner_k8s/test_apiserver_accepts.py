"""Every pod of a broad configuration that setup(c) accepts is accepted by the real kube-apiserver.

Each combination of choices (free text included, with format-string characters) is built by
FractionalSpawner and sent with ``dryRun=All`` and strict field validation: the apiserver runs
its validation and admission without storing anything.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ResourceV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from traitlets.config import Config

from fracnb_spawner.config.profiles import UNLISTED, UNLISTED_SUFFIX, initialize_profiles, iter_combinations
from fracnb_spawner.configure import check_config

pytestmark = pytest.mark.k8s

A100 = "NVIDIA-A100-SXM4-80GB"
FREE_TEXT = "{username.__class__} {0} {nope} {username:>99} ünï 100%"
USERS = ["alice", "Ünïcode.User@example.com", "x" * 70]

BROAD_PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "cull": {"idle_timeout": "1h", "max_age": "8h"}},
    {
        "display_name": "A very long display name for the shared GPU profile of the data science team " * 2,
        "gpu": {"fraction": 0.25},
    },
    {"display_name": "Big GPU!", "slug": "Big GPU!", "gpu": {"count": 1, "product": A100}},
    {"display_name": "Odd", "slug": "ünïcode/x y", "gpu": {"fraction": "1/8", "product": A100}},
    {"display_name": "Smallest", "slug": "-smallest-", "gpu": {"fraction": "1/64"}},
    {"display_name": "MPS", "gpu": {"fraction": 0.5, "backend": "mps", "product": A100}},
    {"display_name": "HAMi", "gpu": {"fraction": 0.5, "backend": "hami", "memory": "30Gi", "product": A100}},
    {"display_name": "HAMi whole", "gpu": {"count": 2, "backend": "hami", "product": A100}},
    {"display_name": "KAI", "gpu": {"fraction": "1/64", "backend": "kai", "product": A100}},
    {"display_name": "KAI whole", "gpu": {"count": 1, "backend": "kai"}},
    {"display_name": "Many", "gpu": {"count": 64}},
    {"display_name": "DRA MPS", "gpu": {"fraction": "1/3", "backend": "dra", "product": A100, "sharing": "mps"}},
    {
        "display_name": "DRA slice",
        "gpu": {"fraction": 0.25, "backend": "dra", "memory": "10.5Gi", "sharing": "time-slicing"},
    },
    {"display_name": "DRA MIG", "gpu": {"backend": "dra", "mig_profile": "1g.10gb+me", "product": A100}},
    {"display_name": "DRA MIG fraction", "gpu": {"fraction": 0.5, "backend": "dra", "sharing": "mig"}},
    {"display_name": "DRA whole", "gpu": {"count": 2, "backend": "dra", "product": "NVIDIA-H100-80GB-HBM3"}},
    {
        "display_name": "Choices",
        "slug": "choices",
        "gpu": {"backend": "mig"},
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "small": {"gpu": {"fraction": 0.1}},
                    "media": {"gpu": {"mig_profile": "1g.10gb+me"}},
                    "h200": {"gpu": {"mig_profile": "7g.141gb", "product": "NVIDIA-H200"}},
                },
            },
            "image": {
                "display_name": "Image",
                "choices": {
                    "base": {
                        "kubespawner_override": {
                            "image": "base:1",
                            "extra_labels": {"example.com/team": "data_science.team-1"},
                            "node_selector": {"pool": "gpu"},
                        }
                    }
                },
                "unlisted_choice": {
                    "enabled": True,
                    "validation_regex": ".{1,200}",
                    "kubespawner_override": {
                        "environment": {"NOTE": "{value}", "WHO": "{username}-{value}"},
                        "extra_annotations": {"example.com/note": "{value}"},
                        "args": ["--note", "{value}"],
                        "cmd": ["jupyterhub-singleuser"],
                        "volumes": [{"name": "notes", "emptyDir": {}}],
                        "volume_mounts": [{"name": "notes", "mountPath": "/notes", "subPath": "{value}"}],
                    },
                },
            },
        },
    },
]


def every_choice(profiles: list[dict]) -> list[dict]:
    """user_options for every combination of every profile, free text where an option has it."""
    options = []
    for profile in initialize_profiles(profiles):
        for chosen, _spec, _cull in iter_combinations(profile):
            selected = {"profile": profile["slug"]}
            for option, key in chosen:
                selected.update({option + UNLISTED_SUFFIX: FREE_TEXT} if key == UNLISTED else {option: key})
            options.append(selected)
    return options


async def test_apiserver_accepts_every_pod_of_a_broad_configuration(cluster_spawner, k8s_namespace) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = BROAD_PROFILES
    config.FractionalSpawner.gpu_memory_by_product = {"NVIDIA-H200": "141Gi"}
    # Some choices ask for GPUs the testbed has no node for; what matters here is the pod itself.
    config.FractionalSpawner.refuse_unplaceable_choices = False
    check_config(config)  # what setup(c) would accept at hub start
    refused = []
    claims = 0
    choices = every_choice(BROAD_PROFILES)
    assert len(choices) > len(BROAD_PROFILES)
    for index, options in enumerate(choices):
        spawner = cluster_spawner(options, config=Config(config), user=USERS[index % len(USERS)])
        spawner.pod_name = spawner._expand_user_properties(spawner.pod_name_template)  # KubeSpawner's own
        await spawner.load_user_options()
        pod = await spawner.get_pod_manifest()
        try:
            await spawner.api.create_namespaced_pod(k8s_namespace, pod, dry_run="All", field_validation="Strict")
            for claim in spawner.spawn_plan.pod.companions:  # a dra claim, CEL selectors compiled
                claims += 1
                await ResourceV1Api(spawner.api.api_client).create_namespaced_resource_claim(
                    k8s_namespace, claim, dry_run="All", field_validation="Strict"
                )
        except ApiException as error:  # collect every refusal, then report them together
            refused.append(f"{options}: {error.body}")
    assert refused == []
    assert claims == 5  # one per DRA profile above
