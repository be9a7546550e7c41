"""Bad configuration is refused when it is set, with a message naming the profile and the fix."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

BAD_PROFILES = [
    ({"gpu": {"fraction": 1.5}}, "outside 0 < fraction <= 1"),
    ({"gpu": {"fraction": 0}}, "outside 0 < fraction <= 1"),
    ({"gpu": {"fraction": "abc"}}, "is not a number"),
    ({"gpu": {"fraction": "1/0"}}, "divides by zero"),
    ({"gpu": {"fraction": 0.25, "backend": "vgpu"}}, "unknown backend 'vgpu'"),
    ({"gpu": {"fractoin": 0.25}}, "unknown gpu key(s) 'fractoin'"),
    ({"gpu": {"backend": "mig", "mig_profile": "1g.11gb"}}, "does not exist"),
    ({"gpu": {"mig_profile": "2g.10gb", "product": "NVIDIA-A100-SXM4-80GB"}}, "does not exist on the A100-80GB"),
    ({"gpu": {"fraction": 0.25, "memory": "10 gigs"}}, "memory '10 gigs' is not a size"),
    ({"gpu": {"count": 0.5}}, "must be a whole number of GPUs"),
    ({"gpu": {"count": 0}}, "must be a whole number of GPUs"),
    ({"gpu": {"fraction": 0.5, "count": 1}}, "exclude each other"),
    ({"gpu": {"fraction": 0.3}}, "must be 1/N"),
    ({"gpu": {"backend": "hami"}}, "needs 'fraction', 'count' or 'mig_profile'"),
    ({"gpu": "quarter"}, "'gpu' must be a mapping"),
    ({"gpu": {"count": 2, "backend": "mig"}}, "for a MIG slice give 'mig_profile'"),
    ({"gpu": {"fraction": 0.25}, "cull": {"idle": 5}}, "unknown cull key"),
    ({"gpu": {"fraction": 0.25}, "cull": {"idle_timeout": "soon"}}, "is not a duration"),
    (
        {"gpu": {"fraction": 0.25}, "kubespawner_override": {"environment": {"NVIDIA_VISIBLE_DEVICES": "all"}}},
        "sets NVIDIA_VISIBLE_DEVICES",
    ),
    ({"kubespawner_override": {"environment": {"FRACNB_GPU_MEMORY_LIMIT": "1"}}}, "sets FRACNB_GPU_MEMORY_LIMIT"),
]


def config_with(profile: dict) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "CPU", "slug": "cpu"},
        {"display_name": "Broken GPU", "slug": "broken", **profile},
    ]
    return config


@pytest.mark.parametrize(("profile", "message"), BAD_PROFILES)
async def test_bad_profile_refused_naming_it(make_spawner, profile: dict, message: str) -> None:
    with pytest.raises(TraitError) as caught:
        make_spawner(config_with(profile))
    text = str(caught.value)
    assert "profile 'broken' ('Broken GPU')" in text
    assert message in text


async def test_bad_choice_is_named(make_spawner) -> None:
    options = {"size": {"display_name": "Size", "choices": {"big": {"display_name": "Big", "gpu": {"fraction": 2}}}}}
    with pytest.raises(TraitError, match=r"profile 'broken' .*choice size=big: fraction 2 is outside"):
        make_spawner(config_with({"profile_options": options}))


async def test_duplicate_slugs_refused(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [{"display_name": "A", "slug": "x"}, {"display_name": "B", "slug": "x"}]
    with pytest.raises(TraitError, match="appear more than once"):
        make_spawner(config)


async def test_bad_trait_values_refused(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.gpu_memory = "lots"
    with pytest.raises(TraitError, match="gpu_memory: 'lots' is not a size"):
        make_spawner(config)
    config = Config()
    config.FractionalSpawner.gpu_idle_timeout = "later"
    with pytest.raises(TraitError, match="gpu_idle_timeout"):
        make_spawner(config)


async def test_kubespawner_section_reaches_the_subclass(make_spawner) -> None:
    """Zero-to-JupyterHub sets c.KubeSpawner.profile_list; it is validated too."""
    config = Config()
    config.KubeSpawner.profile_list = [{"display_name": "Odd", "slug": "odd", "gpu": {"fraction": 7}}]
    with pytest.raises(TraitError, match="profile 'odd'"):
        make_spawner(config)


async def test_example_config_is_valid(make_spawner, example_config: Config) -> None:
    spawner = make_spawner(example_config)
    assert len(spawner.profile_list) == 7
