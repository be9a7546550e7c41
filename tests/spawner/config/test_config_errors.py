"""Bad configuration is refused when it is set, with a message naming the profile and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner import dryrun
from fracnb_spawner.configure import setup

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
    ({"gpu": {"fraction": 0.25, "sharing": "mps"}}, "'sharing: mps' does not apply to the time-slicing backend"),
    ({"gpu": {"fraction": 0.25, "backend": "dra", "sharing": "MPS"}}, "unknown sharing 'MPS'; choose one of: mig, mps"),
    ({"gpu": {"count": 2, "backend": "dra", "sharing": "time-slicing"}}, "whole GPUs ('count') are not shared"),
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
    # numbers that cannot work
    ({"gpu": {"fraction": [0.25]}}, "fraction [0.25] is not a number"),
    ({"gpu": {"fraction": {"num": 1}}}, "is not a number"),
    ({"gpu": {"fraction": float("nan")}}, "fraction nan is not a finite number"),
    ({"gpu": {"fraction": float("inf")}}, "fraction inf is not a finite number"),
    ({"gpu": {"fraction": 1e-9}}, "fraction 1e-09 is less than 1/64 of a GPU"),
    ({"gpu": {"fraction": "1/128", "backend": "hami"}}, "less than 1/64 of a GPU"),
    ({"gpu": {"fraction": "1" * 30}}, "is not a number"),
    ({"gpu": {"fraction": 0.5, "memory": "100Gi"}}, "memory 100 GiB is more than one GPU's memory (80 GiB)"),
    ({"gpu": {"fraction": 0.5, "memory": "100Gi", "backend": "hami"}}, "is more than one GPU's memory"),
    ({"gpu": {"count": 2, "memory": "200Gi"}}, "is more than the memory of 2 GPU(s) (160 GiB)"),
    ({"gpu": {"mig_profile": "1g.10gb", "memory": "20Gi"}}, "is more than the 1g.10gb slice's memory (10 GiB)"),
    ({"gpu": {"fraction": 0.5, "memory": "1Mi"}}, "less than 256 MiB"),
    ({"gpu": {"fraction": 0.5, "memory": ["10Gi"]}}, "memory ['10Gi'] is not a size"),
    ({"gpu": {"count": 1000}}, "count 1000 is more than 64 GPUs"),
    ({"gpu": {"count": True}}, "must be a whole number of GPUs"),
    ({"gpu": {"mig_profile": "1g.10gb", "fraction": 0.125}}, "'mig_profile' sets the amount by itself"),
    ({"gpu": {"mig_profile": ["1g.10gb"]}}, "mig_profile must be a non-empty string"),
    ({"gpu": {"backend": ["hami"], "fraction": 0.5}}, "unknown backend ['hami']"),
    ({"gpu": {"fraction": 0.5, "product": "NVIDIA A100"}}, "product 'NVIDIA A100' cannot be a node-selector value"),
    ({"gpu": {"fraction": 0.5, "product": "NVIDIA-" + "A" * 60}}, "cannot be a node-selector value"),
    ({"cull": {"idle_timeout": 1.5}}, "is not a duration"),
    (
        {"gpu": {"fraction": 0.25}, "cull": {"idle_timeout": "30m", "idle_timeout_under_demand": "30m"}},
        "cull.idle_timeout_under_demand (1800 s) must be less than the idle timeout it shortens (1800 s, "
        "cull.idle_timeout); give a shorter one, or 0 for none",
    ),
    (
        {"gpu": {"fraction": 0.25}, "cull": {"idle_timeout_under_demand": "soon"}},
        "cull.idle_timeout_under_demand: 'soon' is not a duration",
    ),
    ({"cull": {"max_age": ["1h"]}}, "is not a duration"),
    # GPUs outside the gpu key, and the gpu key inside kubespawner_override
    (
        {"kubespawner_override": {"gpu": {"count": 1}}},
        "kubespawner_override sets 'gpu', which is not a KubeSpawner trait",
    ),
    ({"kubespawner_override": {"cull": {"max_age": "1h"}}}, "kubespawner_override sets 'cull'"),
    *[
        ({"kubespawner_override": {trait: {resource: "8"}}}, f"asks for GPUs in {trait} ({resource})")
        for trait in ("extra_resource_limits", "extra_resource_guarantees")
        for resource in (
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-1g.10gb.me",
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
        )
    ],
    (
        {"kubespawner_override": {"extra_container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}},
        "asks for GPUs in extra_container_config (nvidia.com/gpu)",
    ),
    (
        {
            "kubespawner_override": {
                "extra_containers": [{"name": "x", "resources": {"requests": {"nvidia.com/gpu": 1}}}]
            }
        },
        "asks for GPUs in extra_containers (nvidia.com/gpu)",
    ),
    (
        {"kubespawner_override": {"init_containers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
        "asks for GPUs in init_containers (nvidia.com/gpu)",
    ),
    (
        {"kubespawner_override": {"extra_pod_config": {"resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}}},
        "asks for GPUs in extra_pod_config (nvidia.com/mig-3g.40gb)",
    ),
    ({"kubespawner_override": {"extra_annotations": {"gpu-fraction": "0.5"}}}, "extra_annotations (gpu-fraction)"),
    ({"kubespawner_override": {"extra_annotations": {"gpu-memory": "4096"}}}, "extra_annotations (gpu-memory)"),
    (
        {
            "profile_options": {
                "size": {
                    "choices": {"big": {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "8"}}}}
                }
            }
        },
        "choice size=big: kubespawner_override asks for GPUs in extra_resource_limits (nvidia.com/gpu)",
    ),
    (
        {
            "profile_options": {
                "n": {
                    "unlisted_choice": {
                        "enabled": True,
                        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "{value}"}},
                    }
                }
            }
        },
        "option 'n', unlisted choice: kubespawner_override asks for GPUs in extra_resource_limits (nvidia.com/gpu)",
    ),
    (
        {"profile_options": {"n": {"unlisted_choice": {"enabled": True, "gpu": {"fraction": 0.5}}}}},
        "option 'n', unlisted choice: it cannot carry 'gpu'",
    ),
    # merged gpu keys: profile and choice set different amounts
    (
        {"gpu": {"count": 1}, "profile_options": {"size": {"choices": {"half": {"gpu": {"fraction": 0.5}}}}}},
        "choice size=half: its gpu 'fraction' conflicts with the profile's gpu 'count'",
    ),
    (
        {
            "gpu": {"mig_profile": "1g.10gb"},
            "profile_options": {"size": {"choices": {"half": {"gpu": {"fraction": 0.5}}}}},
        },
        "choice size=half: its gpu 'fraction' conflicts with the profile's gpu 'mig_profile'",
    ),
    (
        {
            "gpu": {"fraction": 0.5},
            "profile_options": {"size": {"choices": {"mig": {"gpu": {"mig_profile": "1g.10gb"}}}}},
        },
        "choice size=mig: its gpu 'mig_profile' conflicts with the profile's gpu 'fraction'",
    ),
    (
        {"gpu": {"fraction": 0.5}, "profile_options": {"size": {"choices": {"two": {"gpu": {"count": 2}}}}}},
        "its gpu 'count' conflicts with the profile's gpu 'fraction'",
    ),
    (
        {"gpu": {"mig_profile": "1g.10gb"}, "profile_options": {"b": {"choices": {"h": {"gpu": {"backend": "hami"}}}}}},
        "choice b=h: 'mig_profile' needs the mig or dra backend, not 'hami'",
    ),
    # labels and selectors the apiserver would refuse
    (
        {"kubespawner_override": {"node_selector": {"gpu": "NVIDIA A100"}}},
        "node_selector['gpu']: 'NVIDIA A100' is not a valid label value",
    ),
    ({"kubespawner_override": {"node_selector": {"pool": 5}}}, "node_selector['pool']: 5 is not a string"),
    ({"kubespawner_override": {"extra_labels": {"team": "a" * 64}}}, "is not a valid label value"),
    ({"kubespawner_override": {"extra_labels": {"Bad Key": "x"}}}, "'Bad Key' is not a valid label key"),
    ({"kubespawner_override": {"extra_labels": {"Example.com/team": "x"}}}, "its prefix must be a DNS subdomain"),
    ({"kubespawner_override": {"extra_annotations": {"a b": "x"}}}, "'a b' is not a valid label key"),
    ({"kubespawner_override": {"extra_annotations": {"note": 5}}}, "annotation values must be strings"),
    # bad types: messages, not tracebacks
    ({"kubespawner_override": ["image", "x"]}, "kubespawner_override must be a mapping"),
    ({"profile_options": [{"size": {}}]}, "profile_options must be a mapping"),
    ({"profile_options": {"size": {"choices": [{"small": {}}]}}}, "profile_options['size'].choices must be a mapping"),
    (
        {"profile_options": {"size": {"choices": {"small": ["x"]}}}},
        "profile_options['size'].choices['small'] must be a mapping",
    ),
    ({"profile_options": {"size": ["small"]}}, "profile_options['size'] must be a mapping"),
    ({"profile_options": {"size": {"unlisted_choice": [True]}}}, "unlisted_choice must be a mapping"),
    (
        {"profile_options": {"size": {"unlisted_choice": {"enabled": True, "validation_regex": 5}}}},
        "unlisted_choice.validation_regex must be a string",
    ),
    (
        {"profile_options": {"size": {"unlisted_choice": {"enabled": True, "kubespawner_override": ["x"]}}}},
        "unlisted_choice.kubespawner_override must be a mapping",
    ),
    (
        {"profile_options": {"size": {"choices": {"a": {"kubespawner_override": "x"}}}}},
        "kubespawner_override must be a mapping",
    ),
    ({"cull": ["1h"]}, "cull must be a mapping"),
    ({"description": ["x"]}, "description must be a string"),
    (
        {"profile_options": {"n": {"unlisted_choice": {"enabled": True, "kubespawner_override": {"image": "{0}"}}}}},
        "its kubespawner_override cannot be formatted",
    ),
    (
        {"profile_options": {"n": {"unlisted_choice": {"enabled": True, "kubespawner_override": {"image": "{value"}}}}},
        "its kubespawner_override cannot be formatted",
    ),
]


# FractionalSpawner settings (c.FractionalSpawner.<key>) -> a fragment of the message
BAD_SETTINGS = [
    ({"gpu_memory": "lots"}, "gpu_memory: 'lots' is not a size"),
    ({"gpu_memory": "512Mi"}, "gpu_memory: '512Mi' is less than 1 GiB"),
    ({"gpu_memory": [80]}, "'gpu_memory' trait"),
    ({"gpu_memory_by_product": {"NVIDIA-A100-SXM4-40GB": "lots"}}, "gpu_memory_by_product['NVIDIA-A100-SXM4-40GB']"),
    ({"gpu_memory_by_product": {"NVIDIA-A100-SXM4-40GB": 0}}, "is not a positive size"),
    ({"gpu_memory_by_product": {"NVIDIA-A100-SXM4-40GB": ["40Gi"]}}, "'gpu_memory_by_product' trait"),
    ({"gpu_memory_by_product": ["NVIDIA-A100-SXM4-40GB"]}, "'gpu_memory_by_product' trait"),
    ({"mig_default_model": "A100"}, "mig_default_model: unknown MIG GPU model 'A100'; known models: A100-40GB"),
    ({"mig_default_model": 100}, "'mig_default_model' trait"),
    ({"soft_cap_ratio": 1.5}, "soft_cap_ratio: 1.5 is not a share of the memory budget"),
    ({"soft_cap_ratio": float("nan")}, "soft_cap_ratio: nan is not a share"),
    ({"soft_cap_ratio": float("inf")}, "soft_cap_ratio: inf is not a share"),
    ({"soft_cap_ratio": 0.0}, "soft_cap_ratio: 0.0 is not a share"),
    ({"soft_cap_ratio": "high"}, "'soft_cap_ratio' trait"),
    ({"kai_queue": "my queue"}, "kai_queue: 'my queue' is not a valid label value"),
    ({"kai_queue_label": "queue name"}, "kai_queue_label: 'queue name' is not a valid label key"),
    ({"time_slicing_resource": "shared gpu"}, "time_slicing_resource: 'shared gpu' is not a valid label key"),
    ({"gpu_idle_timeout": ["30m"]}, "'gpu_idle_timeout' trait"),
    ({"gpu_max_age": "a while"}, "gpu_max_age: 'a while' is not a duration"),
    ({"gpu_backend": "vgpu"}, "FractionalSpawner.gpu_backend: 'vgpu' is not a sharing method; use one of time-slicing"),
    ({"placement": "binpack"}, "FractionalSpawner.placement: 'binpack' is not a placement policy; use one of adaptive"),
    ({"extra_resource_limits": {"nvidia.com/gpu": "1"}}, "extra_resource_limits (nvidia.com/gpu) asks for GPUs"),
    (
        {"extra_resource_guarantees": {"nvidia.com/gpu.shared": "1"}},
        "extra_resource_guarantees (nvidia.com/gpu.shared)",
    ),
    (
        {"extra_container_config": {"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}},
        "extra_container_config (nvidia.com/mig-1g.10gb) asks for GPUs",
    ),
    ({"extra_annotations": {"gpu-fraction": "0.5"}}, "extra_annotations (gpu-fraction) asks for GPUs"),
    (
        {"time_slicing_resource": "example.com/shared", "extra_resource_limits": {"example.com/shared": "1"}},
        "extra_resource_limits (example.com/shared) asks for GPUs",
    ),
    ({"profile_list": [["CPU"]]}, "profile_list"),
    ({"profile_list": [{"display_name": "A", "slug": 5}]}, "slug"),
    ({"profile_list": [{"display_name": 5}]}, "display_name"),
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
    assert len(spawner.profile_list) == 8


def settings_config(settings: dict) -> Config:
    config = Config()
    for key, value in settings.items():
        config.FractionalSpawner[key] = value
    return config


def write_config(path: Path, config: Config) -> Path:
    """``config`` as a jupyterhub_config.py (``nan``/``inf`` defined, as repr writes them)."""
    lines = ["c = get_config()  # noqa", "nan, inf = float('nan'), float('inf')"]
    lines += [f"c.FractionalSpawner.{key} = {value!r}" for key, value in config.FractionalSpawner.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
async def test_bad_settings_refused_by_the_spawner(make_spawner, settings: dict, message: str) -> None:
    with pytest.raises(TraitError) as caught:
        make_spawner(settings_config(settings))
    assert message in str(caught.value)


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
def test_bad_settings_refused_at_hub_start(settings: dict, message: str) -> None:
    with pytest.raises(SystemExit) as caught:
        setup(settings_config(settings), service=False)
    assert str(caught.value).startswith("fracnb: refusing to start, ")
    assert message in str(caught.value)


@pytest.mark.parametrize(("profile", "message"), BAD_PROFILES)
def test_bad_profile_refused_at_hub_start(profile: dict, message: str) -> None:
    with pytest.raises(SystemExit) as caught:
        setup(config_with(profile), service=False)
    assert "FractionalSpawner.profile_list: profile 'broken' ('Broken GPU')" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [(settings_config(settings), message) for settings, message in BAD_SETTINGS]
    + [(config_with(profile), message) for profile, message in BAD_PROFILES],
)
def test_bad_config_refused_by_the_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Config, message: str
) -> None:
    assert dryrun.main([str(write_config(tmp_path / "jupyterhub_config.py", config))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fracnb-dry-run: configuration refused: ")
    assert message in err
    assert "Traceback" not in err
