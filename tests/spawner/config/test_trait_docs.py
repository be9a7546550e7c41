"""Every configuration trait documents itself: what it does, its default (the real one) and an example."""

from __future__ import annotations

import ast
import re

import pytest
from traitlets import HasTraits

from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.form.advice import AdviceTraits
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service.traits import ServiceTraits

# Defaults computed at run time; their help says where they come from instead of a value.
DYNAMIC = {
    ("ServiceTraits", "namespace"),
    ("ServiceTraits", "all_namespaces"),
    ("ServiceTraits", "db_url"),
    ("ServiceTraits", "kept_reports_file"),
    ("AdviceTraits", "right_sizing_db_url"),
}
DEFAULT = re.compile(r'\bDefault: ("[^"]*"|[^\s(]+?)(?=[.,]?(?:\s|$)| \()')


def config_traits() -> list[tuple[type[HasTraits], str]]:
    owners = (FractionalTraits, AdviceTraits, FracnbQuotas, ServiceTraits)
    return [
        (owner, name)
        for owner in owners
        for name, trait in owner.class_traits(config=True).items()
        if trait.this_class is owner  # traits of traitlets' own Application are not ours to document
    ]


def stated_default(text: str) -> object:
    if text in {"None", "none"}:
        return None
    if text in {"True", "False"}:
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word such as time-slicing


@pytest.mark.parametrize(("owner", "name"), config_traits(), ids=lambda v: getattr(v, "__name__", v))
def test_help_states_the_real_default_and_an_example(owner: type[HasTraits], name: str) -> None:
    trait = owner.class_traits()[name]
    help_text = " ".join(trait.help.split())
    assert len(help_text) > 40, f"{owner.__name__}.{name}: the help text says too little"
    assert "Example:" in help_text or "Example, " in help_text, f"{owner.__name__}.{name}: no example"
    if (owner.__name__, name) in DYNAMIC:
        return
    match = DEFAULT.search(help_text)
    assert match, f"{owner.__name__}.{name}: the help text states no default"
    assert stated_default(match[1]) == trait.default(), (
        f"{owner.__name__}.{name}: help says Default: {match[1]}, the trait's default is {trait.default()!r}"
    )
