"""Which namespaces the quota recount lists: the configured one, those profiles name, or all."""

from __future__ import annotations

from fracnb_spawner.cluster.kube import pod_namespaces, singleuser_selector


def profile(override: dict | None = None, choice_override: dict | None = None, unlisted: dict | None = None) -> dict:
    entry: dict = {"display_name": "P", "slug": "p"}
    if override is not None:
        entry["kubespawner_override"] = override
    if choice_override is not None or unlisted is not None:
        entry["profile_options"] = {
            "where": {
                "choices": {"a": {"display_name": "A", "kubespawner_override": choice_override or {}}},
                "unlisted_choice": {"enabled": unlisted is not None, "kubespawner_override": unlisted or {}},
            }
        }
    return entry


def test_the_configured_namespace_alone() -> None:
    assert pod_namespaces([profile()], "jhub", user_namespaces=False) == ["jhub"]


def test_user_namespaces_mean_every_namespace() -> None:
    assert pod_namespaces([profile()], "jhub", user_namespaces=True) is None


def test_namespaces_named_by_profiles_and_choices_are_listed_too() -> None:
    profiles = [profile({"namespace": "gpu-team"}), profile(choice_override={"namespace": "batch", "image": "x"})]
    assert pod_namespaces(profiles, "jhub", user_namespaces=False) == ["batch", "gpu-team", "jhub"]


def test_a_namespace_from_free_text_or_a_callable_can_be_any() -> None:
    assert pod_namespaces([profile(unlisted={"namespace": "{value}"})], "jhub", user_namespaces=False) is None
    assert pod_namespaces([profile({"namespace": lambda spawner: "x"})], "jhub", user_namespaces=False) is None


def test_the_selector_follows_the_component_label() -> None:
    assert singleuser_selector() == "component=singleuser-server"
    assert singleuser_selector("notebook") == "component=notebook"
