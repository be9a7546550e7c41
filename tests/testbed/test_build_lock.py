"""Two builds started together into an empty cache both succeed, and each binary is built once.

The builds are the real scripts (testbed/go/build.sh, tools/promtool/build.sh) with a stand-in
``go`` first on PATH: its ``go build`` writes the ``-o`` file, waits a moment (long enough for a
second build to write the same ``.partial`` file and move it away first, as happened without the
lock) and logs what it built. The real cache under ~/.cache is never touched.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fracnb_testbed.binaries import KWOK_STAGES

REPO = Path(__file__).resolve().parents[2]

FAKE_GO = """#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
if args[:2] == ["mod", "download"]:
    if "-json" in args:
        print(json.dumps({"Path": "sigs.k8s.io/kwok", "Dir": os.environ["FAKE_GO_MODULE"], "Sum": "h1:fake"}, indent=1))
    sys.exit(0)
if args[:1] == ["build"]:
    output = args[args.index("-o") + 1]
    with open(output, "w") as built:
        built.write("#!/bin/sh\\nexit 0\\n")
    os.chmod(output, 0o755)
    time.sleep(0.4)
    with open(os.environ["FAKE_GO_LOG"], "a") as log:
        log.write(os.path.basename(output).removesuffix(".partial") + "\\n")
    sys.exit(0)
sys.exit(f"fake go: unexpected arguments {args}")
"""


@pytest.fixture
def fake_go(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``go`` is the stand-in; its builds are logged to ``FAKE_GO_LOG``."""
    tools = tmp_path / "tools"
    tools.mkdir()
    go = tools / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    module = tmp_path / "kwok-module"
    stage_root = module / "kustomize" / "stage"
    for stage in KWOK_STAGES:  # what build.sh checks the module has
        (stage_root / stage).parent.mkdir(parents=True, exist_ok=True)
        (stage_root / stage).write_text(f"kind: Stage\nmetadata: {{name: {Path(stage).stem}}}\n")
    return {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "FAKE_GO_MODULE": str(module),
        "FAKE_GO_LOG": str(tmp_path / "built.log"),
        "FRACNB_TESTBED_CACHE": str(tmp_path / "testbed-cache"),
        "FRACNB_PROMTOOL_CACHE": str(tmp_path / "promtool-cache"),
    }


def build_twice_at_once(script: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    runs = [
        subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    return results


def test_two_testbed_builds_at_once_both_succeed_and_build_each_binary_once(fake_go):
    results = build_twice_at_once(REPO / "testbed" / "go" / "build.sh", fake_go)
    for result in results:
        assert result.returncode == 0, result.stderr
    bin_dirs = {result.stdout.strip().splitlines()[-1] for result in results}
    assert len(bin_dirs) == 1
    bin_dir = Path(bin_dirs.pop())
    assert str(bin_dir).startswith(fake_go["FRACNB_TESTBED_CACHE"])
    names = ["kube-apiserver", "kube-scheduler", "kube-controller-manager", "etcd", "kwok"]
    for name in names:
        assert os.access(bin_dir / name, os.X_OK), name
    assert not list(bin_dir.glob("*.partial"))
    assert "kind: Stage" in (bin_dir / "kwok-stages.yaml").read_text()
    assert sorted(Path(fake_go["FAKE_GO_LOG"]).read_text().split()) == sorted(names)
    assert any("waiting for it to finish" in result.stderr for result in results)


def test_two_promtool_builds_at_once_both_succeed_and_build_it_once(fake_go):
    results = build_twice_at_once(REPO / "tools" / "promtool" / "build.sh", fake_go)
    for result in results:
        assert result.returncode == 0, result.stderr
    binaries = {result.stdout.strip().splitlines()[-1] for result in results}
    assert len(binaries) == 1
    assert os.access(binaries.pop(), os.X_OK)
    assert Path(fake_go["FAKE_GO_LOG"]).read_text().split() == ["promtool"]
