"""The startup hook for frameworks without a memory-cap variable (TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fracnb_meter import softcaps

PROBE = (
    "import sys; "
    "loaded = 'fracnb_meter.softcaps' in sys.modules; "
    "from fracnb_meter import softcaps; "
    "print(loaded, softcaps._finder in sys.meta_path, sorted(softcaps._finder.callbacks))"
)


def run_probe(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRACNB_")} | extra_env
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout


def test_every_python_process_installs_the_hook_when_the_spawner_asked() -> None:
    assert run_probe({"FRACNB_SOFT_CAP_BYTES": str(19 << 30)}).split() == ["True", "True", "['tensorflow']"]


def test_nothing_is_hooked_without_a_soft_cap() -> None:
    assert run_probe({}).split() == ["True", "False", "[]"]


@pytest.mark.parametrize("value", ["", "0", "-5", "lots"])
def test_cap_bytes_needs_a_positive_number(value: str) -> None:
    assert softcaps.cap_bytes({"FRACNB_SOFT_CAP_BYTES": value}) is None


def test_callback_runs_after_the_module_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "fracnb_probe_framework"
    package.mkdir()
    (package / "__init__.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[bool] = []
    softcaps.when_imported("fracnb_probe_framework", lambda module: seen.append(module.READY))
    assert seen == []
    import fracnb_probe_framework  # noqa: F401

    assert seen == [True]
    softcaps.when_imported("fracnb_probe_framework", lambda module: seen.append(False))
    assert seen == [True, False], "an already imported module gets the callback at once"
    monkeypatch.delitem(sys.modules, "fracnb_probe_framework")
