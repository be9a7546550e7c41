"""Finding the control-plane binaries and KWOK's stage definitions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from fracnb_testbed.errors import TestbedError

REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")
# Only clusters with DRA devices run it; a bin dir built before it existed still serves the others.
CONTROLLER_MANAGER = "kube-controller-manager"
BIN_DIR_ENV = "FRACNB_TESTBED_BIN"
STAGES_FILE_NAME = "kwok-stages.yaml"
DEFAULT_KWOK_VERSION = "v0.8.0"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "go" / "build.sh"
BUILD_HINT = (
    "Build them with testbed/go/build.sh (a cold build takes tens of minutes on two cores) "
    f"and export {BIN_DIR_ENV}=<the directory it prints>, or pass --bin-dir."
)
# The KWOK stages the testbed uses, relative to the kwok module's kustomize/stage directory.
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)


def missing_binaries(bin_dir: Path) -> list[str]:
    """The required binaries that are absent or not executable in ``bin_dir``."""
    return [
        name for name in REQUIRED_BINARIES if not (bin_dir / name).is_file() or not os.access(bin_dir / name, os.X_OK)
    ]


def check_bin_dir(bin_dir: Path) -> Path:
    """Return ``bin_dir`` if it holds every binary, else raise TestbedError saying how to build."""
    missing = missing_binaries(bin_dir)
    if missing:
        raise TestbedError(f"the testbed binaries {', '.join(missing)} are missing from {bin_dir}. {BUILD_HINT}")
    return bin_dir


def check_controller_manager(bin_dir: Path) -> None:
    """Raise TestbedError saying how to build kube-controller-manager when ``bin_dir`` lacks it."""
    if not os.access(bin_dir / CONTROLLER_MANAGER, os.X_OK):
        raise TestbedError(
            f"this cluster publishes DRA devices and needs {CONTROLLER_MANAGER}, which is missing from"
            f" {bin_dir}. Run testbed/go/build.sh again: it adds the missing binary to the cache."
        )


def run_build_script(script: Path = BUILD_SCRIPT) -> Path:
    """Run the build script (instant when its cache is warm) and return the bin dir it prints."""
    if not script.is_file():
        raise TestbedError(
            f"no testbed binaries: {BIN_DIR_ENV} is not set and the build script {script} is "
            f"not there (installed without the source tree?). {BUILD_HINT}"
        )
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise TestbedError(f"{script} failed with exit code {result.returncode} (output above). {BUILD_HINT}")
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise TestbedError(f"{script} printed no bin directory. {BUILD_HINT}")
    return Path(lines[-1])


def find_bin_dir(explicit: str | Path | None = None, *, build: bool = True) -> Path:
    """The bin dir: ``explicit``, else $FRACNB_TESTBED_BIN, else what the build script prints."""
    if explicit:
        return check_bin_dir(Path(explicit))
    from_env = os.environ.get(BIN_DIR_ENV)
    if from_env:
        return check_bin_dir(Path(from_env))
    if not build:
        raise TestbedError(f"{BIN_DIR_ENV} is not set. {BUILD_HINT}")
    return check_bin_dir(run_build_script())


def kwok_version_of(bin_dir: Path) -> str:
    """The KWOK version encoded in the versioned cache directory name, or the pinned default."""
    match = re.search(r"kwok-(v\d+\.\d+\.\d+)", str(bin_dir))
    return match.group(1) if match else DEFAULT_KWOK_VERSION


def concatenate_stages(stage_root: Path) -> str:
    """One multi-document YAML made of the KWOK stages the testbed uses."""
    missing = [name for name in KWOK_STAGES if not (stage_root / name).is_file()]
    if missing:
        raise TestbedError(f"KWOK stage files {missing} are missing under {stage_root}")
    return "\n---\n".join((stage_root / name).read_text() for name in KWOK_STAGES)


def kwok_stage_root_in_module_cache(version: str) -> Path | None:
    """kustomize/stage of the kwok module in the Go module cache, if Go and the module are there."""
    go = shutil.which("go")
    if go is None:
        return None
    result = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False)
    root = Path(result.stdout.strip()) / f"sigs.k8s.io/kwok@{version}/kustomize/stage"
    return root if result.returncode == 0 and root.is_dir() else None


def write_kwok_stages(bin_dir: Path, destination: Path) -> Path:
    """Write KWOK's stages to ``destination``: from next to the binaries, else the module cache."""
    prepared = bin_dir / STAGES_FILE_NAME
    if prepared.is_file():
        destination.write_text(prepared.read_text())
        return destination
    version = kwok_version_of(bin_dir)
    stage_root = kwok_stage_root_in_module_cache(version)
    if stage_root is None:
        raise TestbedError(
            f"KWOK {version} needs its stage definitions: neither {prepared} nor the kwok module "
            f"in the Go module cache exists. Run testbed/go/build.sh, which puts "
            f"{STAGES_FILE_NAME} next to the binaries."
        )
    destination.write_text(concatenate_stages(stage_root))
    return destination
