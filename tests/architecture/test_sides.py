"""The two sides never import each other (docs/architecture.md): the hub side (``fracnb_spawner``) and the
notebook side (``fracnb_meter``) agree through contracts, and the JSON Schemas among them live in the neutral
``fracnb_schemas``, which imports neither. Every import counts, deferred ones too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architecture.imports import outside_imports

REPO = Path(__file__).resolve().parents[2]
SIDES = {
    "fracnb_spawner": REPO / "spawner" / "fracnb_spawner",
    "fracnb_meter": REPO / "extension" / "fracnb_meter",
    "fracnb_schemas": REPO / "extension" / "fracnb_schemas",
}
MUST_NOT_IMPORT = {
    "fracnb_spawner": {"fracnb_meter"},
    "fracnb_meter": {"fracnb_spawner"},
    "fracnb_schemas": {"fracnb_spawner", "fracnb_meter"},
}


def crossings(package: str) -> list[str]:
    forbidden = MUST_NOT_IMPORT[package]
    return [
        f"{module} imports {', '.join(sorted(tops & forbidden))}"
        for module, tops in sorted(outside_imports(SIDES[package]).items())
        if tops & forbidden
    ]


@pytest.mark.parametrize("package", sorted(MUST_NOT_IMPORT))
def test_a_side_never_imports_the_other(package: str) -> None:
    found = crossings(package)
    assert not found, "imports across the sides:\n" + "\n".join(found)


def test_the_check_sees_deferred_imports(tmp_path: Path) -> None:
    package = tmp_path / "fracnb_spawner"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "late.py").write_text("def check():\n    from fracnb_meter.schema import load  # noqa\n")
    assert outside_imports(package) == {"fracnb_spawner": set(), "fracnb_spawner.late": {"fracnb_meter"}}


def test_both_sides_read_the_schemas_from_the_neutral_package() -> None:
    readers = {
        package
        for package in ("fracnb_spawner", "fracnb_meter")
        if any("fracnb_schemas" in tops for tops in outside_imports(SIDES[package]).values())
    }
    assert readers == {"fracnb_spawner", "fracnb_meter"}
    assert not (SIDES["fracnb_meter"] / "schemas").exists(), "the schema files live in fracnb_schemas/schemas/"
