"""The schema files themselves: valid, closed, resolvable, and the same as docs/contract.md says."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import fracnb_schemas as schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


def walk(node: object, path: str = "#") -> Iterator[tuple[str, dict]]:
    """Every subschema (every mapping) with its JSON pointer."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}/{index}")


@pytest.mark.parametrize("name", schema.NAMES)
def test_each_schema_is_valid_draft_2020_12(name: str) -> None:
    Draft202012Validator.check_schema(schema.load(name))


@pytest.mark.parametrize("name", schema.NAMES)
def test_every_reference_resolves(name: str) -> None:
    resolver = schema.registry().resolver(base_uri=name)
    references = [node["$ref"] for _, node in walk(schema.load(name)) if isinstance(node.get("$ref"), str)]
    assert references
    for reference in references:
        assert resolver.lookup(reference).contents is not None, reference


@pytest.mark.parametrize("name", schema.NAMES)
def test_every_object_is_closed(name: str) -> None:
    """A field a producer adds must be added to the schema first (and so to the TypeScript types)."""
    open_objects = [
        path
        for path, node in walk(schema.load(name))
        if node.get("type") == "object" and "additionalProperties" not in node
    ]
    assert open_objects == []


def test_the_docs_list_exactly_the_environment_of_the_schema() -> None:
    documented = set(re.findall(r"^\| `(FRACNB_[A-Z_]+)` \|", DOCS.read_text(), flags=re.MULTILINE))
    assert documented == set(schema.load(schema.POD_ENVIRONMENT)["properties"])


def test_the_docs_name_every_schema() -> None:
    text = DOCS.read_text()
    assert [name for name in schema.NAMES if name not in text] == []
