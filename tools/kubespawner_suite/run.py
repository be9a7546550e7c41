"""KubeSpawner's own test suite on the testbed, once with KubeSpawner and once with FractionalSpawner.

Run through ``./dev kubespawner-suite PATH [pytest args...]``, which prepares the suite's
virtual environment (``.venv-kubespawner-suite``: that checkout of KubeSpawner, the hub's
JupyterHub, and the test pins KubeSpawner's suite needs) and calls::

    python tools/kubespawner_suite/run.py --python .venv-kubespawner-suite/bin/python PATH [pytest args]

PATH is a checkout of https://github.com/jupyterhub/kubespawner at the tag of the installed
KubeSpawner (its tests are not in the sdist; they are read from the checkout, never copied
here). Each variant gets a fresh testbed of simulated nodes (``cluster.yaml``) with the suite's
two namespaces and their ``default`` ServiceAccounts made in advance (no controller-manager
makes them). Results go to ``test-artifacts/kubespawner-suite/``: a log and a JUnit file per
variant, and ``summary.md``. The exit status is 1 when a test passes with KubeSpawner and does
not with FractionalSpawner.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.kubeapi import KubeRest, ensure_namespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLUSTER = HERE / "cluster.yaml"
ARTIFACTS = REPO / "test-artifacts" / "kubespawner-suite"
# The namespaces KubeSpawner's conftest uses (KUBESPAWNER_TEST_NAMESPACE, KUBESPAWNER_ANOTHER_NAMESPACE).
NAMESPACES = ("kubespawner-test", "kubespawner-another")
VARIANTS = {"stock": (), "fractional": ("-p", "swap_fractional")}
PER_TEST_TIMEOUT = 300  # seconds; a test waiting on a kubelet that never answers ends here


@dataclass(frozen=True)
class Outcome:
    status: str  # passed, failed or skipped
    message: str = ""


@dataclass(frozen=True)
class Comparison:
    stock: dict[str, Outcome]
    ours: dict[str, Outcome]

    @property
    def regressions(self) -> list[str]:
        """Tests that pass with KubeSpawner and not with FractionalSpawner."""
        return sorted(t for t, o in self.stock.items() if o.status == "passed" and self._ours(t) != "passed")

    @property
    def failing_for_both(self) -> list[str]:
        return sorted(t for t, o in self.stock.items() if o.status == "failed" and self._ours(t) == "failed")

    @property
    def only_ours_passes(self) -> list[str]:
        return sorted(t for t, o in self.stock.items() if o.status == "failed" and self._ours(t) == "passed")

    def _ours(self, test: str) -> str:
        return self.ours.get(test, Outcome("missing")).status


def read_junit(path: Path) -> dict[str, Outcome]:
    """Test id -> outcome from a pytest JUnit XML file (a teardown error counts as a failure)."""
    results: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):  # noqa: S314 - our own pytest's output
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome = Outcome("passed")
        for child in case:
            first_line = (child.get("message") or child.text or "").strip().splitlines()[:1]
            message = first_line[0][:200] if first_line else ""
            if child.tag in ("failure", "error"):
                outcome = Outcome("failed", message)
                break
            if child.tag == "skipped":
                outcome = Outcome("skipped", message)
        results[test] = outcome
    return results


def checkout_version(checkout: Path) -> str:
    found = re.search(r'__version__ = "([^"]+)"', (checkout / "kubespawner" / "_version.py").read_text())
    return found.group(1) if found else "unknown version"


def summary(comparison: Comparison, checkout: Path) -> str:
    """The figures as Markdown."""
    title = f"KubeSpawner {checkout_version(checkout)}'s test suite: KubeSpawner vs FractionalSpawner"
    lines = [f"# {title}", ""]
    lines += ["| spawner | passed | failed | skipped |", "|---|---|---|---|"]
    for name, results in (("KubeSpawner", comparison.stock), ("FractionalSpawner", comparison.ours)):
        counts = Counter(o.status for o in results.values())
        lines.append(f"| {name} | {counts['passed']} | {counts['failed']} | {counts['skipped']} |")
    lines += ["", f"## Pass with KubeSpawner, not with FractionalSpawner: {len(comparison.regressions)}", ""]
    lines += [f"- `{t}`: {comparison.ours.get(t, Outcome('missing')).message}" for t in comparison.regressions]
    lines += ["", f"## Fail with both: {len(comparison.failing_for_both)}", ""]
    lines += [f"- `{t}`: {comparison.stock[t].message}" for t in comparison.failing_for_both]
    if comparison.only_ours_passes:
        lines += ["", f"## Fail with KubeSpawner, pass with FractionalSpawner: {len(comparison.only_ours_passes)}", ""]
        lines += [f"- `{t}`: {comparison.stock[t].message}" for t in comparison.only_ours_passes]
    return "\n".join(lines) + "\n"


def run_variant(name: str, python: str, checkout: Path, pytest_args: list[str]) -> dict[str, Outcome]:
    """One run of the suite on a fresh testbed; the outcomes from its JUnit file."""
    junit, log = ARTIFACTS / f"{name}.xml", ARTIFACTS / f"{name}.log"
    with tempfile.TemporaryDirectory(prefix="kubespawner-suite-") as state_dir:
        say(f"{name}: starting a testbed")
        state = up(load_cluster(CLUSTER), Path(state_dir) / "testbed")
        try:
            rest = KubeRest("127.0.0.1", state.ports["apiserver"], state.pki)
            try:
                for namespace in NAMESPACES:
                    ensure_namespace(rest, namespace)
            finally:
                rest.close()
            env = {
                **os.environ,
                "KUBECONFIG": str(state.kubeconfig),
                "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO / "spawner")]),
            }
            command = [
                python, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-o", "addopts=", "-rA",
                f"--junitxml={junit}", f"--timeout={PER_TEST_TIMEOUT}", *VARIANTS[name], *pytest_args,
            ]  # fmt: skip
            say(f"{name}: running KubeSpawner's tests (log: {log.relative_to(REPO)})")
            with log.open("w") as out:
                subprocess.run(command, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        finally:
            down(Path(state_dir) / "testbed")
    if not junit.exists():
        raise SystemExit(f"the {name} run wrote no results; see {log}")
    return read_junit(junit)


def say(message: str) -> None:
    sys.stderr.write(f"[kubespawner-suite] {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the suite environment's python")
    parser.add_argument("checkout", type=Path, help="a checkout of jupyterhub/kubespawner")
    args, pytest_args = parser.parse_known_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "tests" / "conftest.py").exists():
        parser.error(f"{checkout} has no tests/conftest.py: pass a checkout of jupyterhub/kubespawner")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stock = run_variant("stock", args.python, checkout, pytest_args)
    ours = run_variant("fractional", args.python, checkout, pytest_args)
    comparison = Comparison(stock, ours)
    text = summary(comparison, checkout)
    (ARTIFACTS / "summary.md").write_text(text)
    sys.stdout.write(text)
    return 1 if comparison.regressions else 0


if __name__ == "__main__":
    sys.exit(main())
