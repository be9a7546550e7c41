"""Label values the apiserver accepts, made from any profile slug; label syntax checks."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_spawner.common.labels import key_problem, label_problem, label_value, value_problem

LONG_NAME = "A very long display name for the shared GPU profile of the data science team " * 2
ODD_SLUGS = ["Big GPU!", "gpu/half", "ünïcode", "-leading", "trailing.", "a" * 64, "!!!", "with space", "UPPER_ok"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("shared", "shared"),
        ("a.b_c-d", "a.b_c-d"),
        ("a" * 63, "a" * 63),
        ("Big GPU!", "Big-GPU-a211c01d"),
        ("!!!", "e84c538e"),
    ],
)
def test_label_value(text: str, expected: str) -> None:
    assert label_value(text) == expected


@pytest.mark.parametrize("text", [LONG_NAME, *ODD_SLUGS])
def test_label_value_is_always_valid_and_keeps_texts_apart(text: str) -> None:
    value = label_value(text)
    assert value_problem(value) is None
    assert len(value) <= 63
    assert label_value(text + "x") != value


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("team", "a", None),
        ("example.com/team", "", None),
        ("fracnb.io/profile", "Big GPU!", "is not a valid label value"),
        ("team", "a" * 64, "is not a valid label value"),
        ("team", 5, "is not a string"),
        ("Example.com/team", "a", "prefix must be a DNS subdomain"),
        ("example.com/", "a", "its name must be"),
        ("bad key", "a", "is not a valid label key"),
        ("a" * 64, "a", "is not a valid label key"),
    ],
)
def test_label_problem(key: str, value: object, problem: str | None) -> None:
    found = label_problem(key, value)
    assert found is None if problem is None else problem in found


def test_key_problem_refuses_non_strings() -> None:
    assert key_problem(5) == "5 is not a string"


def odd_profiles() -> list[dict]:
    profiles = [{"display_name": LONG_NAME, "gpu": {"fraction": 0.25}}]
    profiles += [
        {"display_name": f"Odd {i}", "slug": slug, "gpu": {"fraction": 0.5}} for i, slug in enumerate(ODD_SLUGS)
    ]
    return profiles


@pytest.mark.parametrize("index", range(len(ODD_SLUGS) + 1))
async def test_pods_of_long_names_and_odd_slugs_have_valid_labels(make_spawner, index: int) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = odd_profiles()
    spawner = make_spawner(config)
    slug = (await spawner.resolve_profiles())[index]["slug"]
    spawner.user_options = {"profile": slug}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    problems = [label_problem(k, v) for k, v in {**pod.metadata.labels, **pod.spec.node_selector}.items()]
    assert problems == [None] * len(problems)
    assert pod.metadata.annotations["fracnb.io/profile"] == slug
    assert pod.metadata.labels["fracnb.io/profile"] == label_value(slug)
