"""FractionalSpawner as a drop-in for KubeSpawner: the same calls give the same results.

Each test runs the same steps on a stock ``KubeSpawner`` and on ``FractionalSpawner`` where
that shows the contract (KubeSpawner ignores the ``gpu`` key). Deliberate differences are in
docs/spawner.md ("Differences from KubeSpawner").
"""

from __future__ import annotations

import contextlib
import inspect

import pytest
from jupyterhub.utils import format_exception
from kubespawner import KubeSpawner
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.common.errors import HubConfigError, InvalidRequestError
from fracnb_spawner.spawner import FractionalSpawner

PROFILES = [
    {
        "display_name": "Small",
        "slug": "small",
        "default": True,
        "kubespawner_override": {
            "cpu_limit": 1.0,
            "mem_limit": "1G",
            "environment": {"PROFILE": "small", "REMOVED_BY_PROFILE": None},
        },
    },
    {
        "display_name": "Quarter GPU",
        "slug": "quarter",
        "gpu": {"fraction": 0.25},
        "kubespawner_override": {"image": "gpu-notebook:1", "cpu_limit": 4.0},
    },
    {
        "display_name": "Images",
        "slug": "images",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "base": {"display_name": "Base", "default": True, "kubespawner_override": {"image": "base:1"}},
                    "torch": {"display_name": "Torch", "kubespawner_override": {"image": "torch:2"}},
                },
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Other image",
                    # No "$": KubeSpawner's re.match accepts any suffix, fracnb matches the whole text.
                    "validation_regex": "^registry\\.example\\.org/[a-z0-9/-]+:[a-z0-9.]+",
                    "validation_message": "Use an image from registry.example.org",
                    "kubespawner_override": {"image": "{value}"},
                },
            },
            "listed": {
                "display_name": "Listed only",
                "choices": {"one": {"display_name": "One", "kubespawner_override": {"cpu_limit": 2.0}}},
            },
        },
    },
    {
        # Its slug starts with the previous one's: form fields must not be mixed up.
        "display_name": "Images plus",
        "slug": "images-plus",
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {"big": {"display_name": "Big", "kubespawner_override": {"cpu_limit": 8.0}}},
            },
        },
    },
]

FORMS = {
    "profile": {"profile": ["quarter"]},
    "choice": {"profile": ["images"], "profile-option-images--image": ["torch"]},
    "unlisted": {"profile": ["images"], "profile-option-images--image--unlisted-choice": ["registry.example.org/a:1"]},
    "slug mix-up": {
        "profile": ["images"],
        "profile-option-images--listed": ["one"],
        "profile-option-images-plus--size": ["big"],
    },
    "no profile": {"profile-option-images--image": ["torch"]},
    "unknown keys": {"profile": ["small"], "_xsrf": ["token"], "cpu_limit": ["64"]},
    # Not valid, but options_from_form only parses (as KubeSpawner's): the refusal comes later.
    "no such profile": {"profile": ["nope"]},
    "forged choice": {"profile": ["images"], "profile-option-images--image": ["forged"]},
    "bad free text": {"profile": ["images"], "profile-option-images--image--unlisted-choice": ["evil/x:1"]},
}

# The traits a profile's overrides set, compared between the two spawners.
APPLIED = ("image", "cpu_limit", "mem_limit", "environment")


def config(section: str = "FractionalSpawner") -> Config:
    cfg = Config()
    cfg[section].profile_list = PROFILES
    cfg[section].environment = {"SITE": "configured", "REMOVED_BY_PROFILE": "configured"}
    return cfg


def spawners(cfg: Config | None = None) -> tuple[KubeSpawner, FractionalSpawner]:
    cfg = cfg or config("KubeSpawner")
    return KubeSpawner(_mock=True, config=cfg), FractionalSpawner(_mock=True, config=cfg)


def applied(spawner: KubeSpawner) -> dict:
    return {name: getattr(spawner, name) for name in APPLIED}


# ---- options_from_form -------------------------------------------------------------------------


@pytest.mark.parametrize("formdata", FORMS.values(), ids=FORMS.keys())
async def test_options_from_form_returns_kubespawners_dict_synchronously(make_spawner, formdata: dict) -> None:
    stock, ours = spawners()
    options = ours.options_from_form(formdata)
    assert not inspect.isawaitable(options)
    assert isinstance(options, dict)
    assert options == stock.options_from_form(formdata)


async def test_options_from_form_has_kubespawners_signature(make_spawner) -> None:
    stock, ours = spawners()
    assert inspect.signature(ours.options_from_form) == inspect.signature(stock.options_from_form)
    assert not inspect.iscoroutinefunction(ours.options_from_form)


async def test_profile_and_option_slugs_are_not_mixed_up(make_spawner) -> None:
    _, ours = spawners()
    options = ours.options_from_form(FORMS["slug mix-up"])
    assert options == {"profile": "images", "listed": "one"}
    ours.user_options = options
    await ours.load_user_options()
    assert ours.cpu_limit == 2.0


async def test_configured_options_from_form_is_used(make_spawner) -> None:
    cfg = config()
    cfg.FractionalSpawner.options_from_form = "simple"  # JupyterHub >= 5.3's named parser
    ours = make_spawner(cfg)
    assert ours.options_from_form({"profile": ["quarter"]}) == {"profile": "quarter"}
    assert await ours.run_options_from_form({"profile": ["quarter"]}) == {"profile": "quarter"}


# ---- from the form to the pod's settings --------------------------------------------------------


@pytest.mark.parametrize("form", ["profile", "choice", "unlisted", "no profile", "unknown keys"])
async def test_user_options_from_form_apply_as_kubespawners(make_spawner, form: str) -> None:
    stock, ours = spawners()
    for spawner in (stock, ours):
        spawner.user_options = spawner.options_from_form(FORMS[form])
        assert spawner.cpu_limit is None, "nothing is applied before load_user_options"
        await spawner.load_user_options()
    assert applied(ours) == applied(stock)


async def test_kubespawner_override_merges_into_configured_dicts(make_spawner) -> None:
    stock, ours = spawners()
    for spawner in (stock, ours):
        spawner.user_options = spawner.options_from_form({"profile": ["small"]})
        await spawner.load_user_options()
    # Merged into c.KubeSpawner.environment; None removes a configured key.
    assert ours.environment == stock.environment == {"SITE": "configured", "PROFILE": "small"}
    assert ours.mem_limit == stock.mem_limit == 2**30  # traitlets reads "1G" as GiB


async def test_user_options_from_the_rest_api_apply_as_kubespawners(make_spawner) -> None:
    stock, ours = spawners()
    for spawner in (stock, ours):
        spawner.user_options = {"profile": "images", "image": "torch", "listed": "one"}
        await spawner.load_user_options()
    assert applied(ours) == applied(stock)
    assert ours.image == "torch:2"


async def test_empty_user_options_give_the_default_profile_and_choices(make_spawner) -> None:
    stock, ours = spawners()
    for spawner in (stock, ours):
        spawner.user_options = {}
        await spawner.load_user_options()
    assert applied(ours) == applied(stock)
    assert ours.cpu_limit == 1.0


# ---- refusals are ValueErrors --------------------------------------------------------------------

# user_options KubeSpawner refuses with ValueError from load_user_options: ours does too.
KUBESPAWNER_VALUE_ERRORS = {
    "free text against the regex": {"profile": "images", "image--unlisted-choice": "evil.example.com/x:1"},
    "no such profile": {"profile": "nope"},
    "free text where none is enabled": {"profile": "images", "listed--unlisted-choice": "two"},
}
# user_options KubeSpawner accepts or fails on with another exception: ours refuses with a ValueError.
FRACNB_VALUE_ERRORS = {
    "forged choice (KeyError in KubeSpawner)": {"profile": "images", "image": "forged"},
    "list as choice (TypeError in KubeSpawner)": {"profile": "images", "image": ["torch"]},
    "free text without a profile (regex bypassed in KubeSpawner)": {"image--unlisted-choice": "evil:1"},
    "free text matching only a prefix (re.match in KubeSpawner)": {
        "profile": "images",
        "image--unlisted-choice": "registry.example.org/a:1 and more",
    },
    "unknown option": {"profile": "small", "cpu_limit": 64},
    "option of another profile": {"profile": "small", "image": "torch"},
}


@pytest.mark.parametrize("options", KUBESPAWNER_VALUE_ERRORS.values(), ids=KUBESPAWNER_VALUE_ERRORS.keys())
async def test_refused_with_value_error_as_by_kubespawner(make_spawner, options: dict) -> None:
    stock, ours = spawners()
    stock.user_options = dict(options)
    with pytest.raises(ValueError):  # noqa: PT011 - the contract is the type, KubeSpawner's messages vary
        await stock.load_user_options()
    ours.user_options = dict(options)
    with pytest.raises(ValueError) as caught:  # noqa: PT011
        await ours.load_user_options()
    assert_user_facing_refusal(caught.value, 400)


@pytest.mark.parametrize("options", FRACNB_VALUE_ERRORS.values(), ids=FRACNB_VALUE_ERRORS.keys())
async def test_refused_with_value_error_where_kubespawner_is_lax(make_spawner, options: dict) -> None:
    stock, ours = spawners()
    stock.user_options = dict(options)
    with contextlib.suppress(KeyError, TypeError):  # a ValueError here belongs in the table above
        await stock.load_user_options()
    untouched = applied(ours)
    ours.user_options = dict(options)
    with pytest.raises(ValueError) as caught:  # noqa: PT011
        await ours.load_user_options()
    assert_user_facing_refusal(caught.value, 400)
    assert applied(ours) == untouched, "nothing was applied"


def assert_user_facing_refusal(error: BaseException, status: int) -> None:
    """An HTTP error JupyterHub shows with our message (form, error page, spawn progress)."""
    assert isinstance(error, web.HTTPError)
    assert isinstance(error, InvalidRequestError)
    assert error.status_code == status
    message, _html = format_exception(error)  # what JupyterHub's pages show
    assert message.startswith("Invalid server options: ")
    assert "Traceback" not in message
    assert "HTTP 400" not in message
    assert "SpawnException" not in message


async def test_the_form_refuses_what_load_user_options_refuses(make_spawner) -> None:
    _, ours = spawners()
    with pytest.raises(ValueError) as caught:  # noqa: PT011
        await ours.run_options_from_form(FORMS["bad free text"])
    assert_user_facing_refusal(caught.value, 400)
    assert "Use an image from registry.example.org" in caught.value.jupyterhub_message
    assert await ours.run_options_from_form(FORMS["unlisted"]) == {
        "profile": "images",
        "image--unlisted-choice": "registry.example.org/a:1",
    }


async def test_query_arguments_are_checked_like_the_form(make_spawner) -> None:
    _, ours = spawners()
    with pytest.raises(InvalidRequestError):
        await ours.options_from_query({"profile": ["nope"]})
    assert await ours.options_from_query({"profile": ["quarter"]}) == {"profile": "quarter"}


async def test_failure_while_applying_overrides_is_a_refusal_not_a_traceback(make_spawner) -> None:
    def broken_image(spawner: KubeSpawner) -> str:
        raise RuntimeError("boom")

    cfg = Config()
    cfg.KubeSpawner.profile_list = [
        {"display_name": "Broken", "slug": "broken", "kubespawner_override": {"image": broken_image}}
    ]
    _, ours = spawners(cfg)
    ours.user_options = {"profile": "broken"}
    with pytest.raises(InvalidRequestError) as caught:
        await ours.load_user_options()
    assert caught.value.status_code == 400
    assert "could not apply them to profile 'broken'" in caught.value.jupyterhub_message
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_unexpected_error_on_hostile_input_is_a_refusal(make_spawner) -> None:
    cfg = Config()
    cfg.KubeSpawner.profile_list = [
        {
            "display_name": "Free text only",
            "slug": "free",
            "profile_options": {
                "image": {"display_name": "Image", "unlisted_choice": {"enabled": True, "display_name": "Image"}}
            },
        }
    ]
    _, ours = spawners(cfg)
    ours.user_options = {"profile": "free"}  # the only option left out
    with pytest.raises(InvalidRequestError) as caught:
        await ours.load_user_options()
    assert caught.value.status_code == 400
    assert caught.value.jupyterhub_message.startswith("Invalid server options: ")


async def test_broken_callable_profile_list_is_a_hub_config_error(make_spawner) -> None:
    def profiles(spawner: KubeSpawner) -> list:
        raise KeyError("missing")

    cfg = Config()
    cfg.KubeSpawner.profile_list = profiles
    _, ours = spawners(cfg)
    ours.user_options = {}
    with pytest.raises(ValueError) as caught:  # noqa: PT011
        await ours.load_user_options()
    assert isinstance(caught.value, HubConfigError)
    assert caught.value.status_code == 500
    assert "could not be read (KeyError)" in format_exception(caught.value)[0]


async def test_refusals_count_as_rejections_on_jupyterhub_6(make_spawner) -> None:
    spawner_module = pytest.importorskip("jupyterhub.spawner")
    if not hasattr(spawner_module, "SpawnException"):
        pytest.skip("JupyterHub 5.x counts every failed spawn; see docs/spawner.md")
    _, ours = spawners()
    ours.user_options = {"profile": "nope"}
    with pytest.raises(spawner_module.SpawnException) as caught:
        await ours.load_user_options()
    assert caught.value.reason == "invalid-options"


# ---- configuration under c.KubeSpawner ------------------------------------------------------------


async def test_config_under_kubespawner_is_honoured(make_spawner) -> None:
    cfg = config("KubeSpawner")
    cfg.KubeSpawner.image = "site:1"
    cfg.KubeSpawner.node_selector = {"pool": "notebooks"}
    cfg.KubeSpawner.cpu_guarantee = 0.5
    ours = make_spawner(cfg, {"profile": "quarter"})
    await ours.load_user_options()
    pod = await ours.get_pod_manifest()
    assert pod.spec.node_selector["pool"] == "notebooks"
    assert pod.spec.containers[0].resources.requests["cpu"] == 0.5
    assert pod.spec.containers[0].image == "gpu-notebook:1"  # the profile's override of c.KubeSpawner.image
    assert pod.metadata.labels["fracnb.io/profile"] == "quarter", "the gpu key of a c.KubeSpawner profile"
    default = make_spawner(cfg, {"profile": "small"})
    await default.load_user_options()
    assert default.image == "site:1"


async def test_fractional_spawner_section_overrides_kubespawner_section(make_spawner) -> None:
    cfg = config("KubeSpawner")
    cfg.KubeSpawner.image = "site:1"
    cfg.FractionalSpawner.image = "fracnb-site:1"
    assert make_spawner(cfg).image == "fracnb-site:1"


async def test_profile_list_under_kubespawner_is_validated(make_spawner) -> None:
    cfg = Config()
    cfg.KubeSpawner.profile_list = [{"display_name": "Too much", "slug": "much", "gpu": {"fraction": 3}}]
    with pytest.raises(TraitError, match="profile 'much'"):
        make_spawner(cfg)
