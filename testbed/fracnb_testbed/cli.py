"""``fracnb-testbed``: bring a local testbed cluster up, inspect it, tear it down."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fracnb_testbed.clusters import builtin_cluster_names, load_cluster
from fracnb_testbed.controlplane import down, status_lines, up
from fracnb_testbed.errors import TestbedError

STATE_DIR_ENV = "FRACNB_TESTBED_STATE"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(os.environ.get(STATE_DIR_ENV) or Path(base) / "fracnb-testbed" / "default")


def parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    """``NAME=value`` strings to a dict; a clear error for anything else."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise TestbedError(f"--runner-env {pair!r} must look like NAME=value")
        env[name] = value
    return env


def say(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fracnb-testbed", description=__doc__)
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where state, certificates and logs live (default ${STATE_DIR_ENV} or "
        "$XDG_STATE_HOME/fracnb-testbed/default)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start the control plane, the nodes and the runner")
    start.add_argument(
        "--cluster",
        default="mixed",
        help=f"built-in description ({', '.join(builtin_cluster_names())}) or a YAML path",
    )
    start.add_argument("--bin-dir", help="control-plane binaries (default $FRACNB_TESTBED_BIN or build.sh)")
    start.add_argument("--apiserver-port", type=int, help="fixed kube-apiserver port (default: a free one)")
    start.add_argument(
        "--runner-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for every local pod process, e.g. LD_LIBRARY_PATH=/opt/fake-nvml",
    )
    start.add_argument(
        "--homes-dir",
        type=Path,
        help="where hub users' servers keep their homes across restarts (default: homes/ in the state dir)",
    )
    stop = commands.add_parser("down", help="stop what `up` started and remove the state dir")
    stop.add_argument("--keep-files", action="store_true", help="keep logs, certificates and homes")
    commands.add_parser("status", help="show what runs")
    check = commands.add_parser("validate", help="check a cluster description and count its nodes")
    check.add_argument("cluster", help="built-in name or YAML path")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    state_dir = args.state_dir or default_state_dir()
    try:
        if args.command == "up":
            spec = load_cluster(args.cluster)
            state = up(
                spec,
                state_dir,
                bin_dir=args.bin_dir,
                runner_env=parse_env_pairs(args.runner_env),
                apiserver_port=args.apiserver_port,
                homes_dir=args.homes_dir,
                progress=say,
            )
            print(f"export KUBECONFIG={state.kubeconfig}")
        elif args.command == "down":
            stopped = down(state_dir, keep_files=args.keep_files, progress=say)
            say(f"stopped {len(stopped)} processes")
        elif args.command == "status":
            print("\n".join(status_lines(state_dir)))
        else:
            spec = load_cluster(args.cluster)
            print(f"{spec.name}: {len(spec.groups)} node groups, {spec.node_count} nodes")
    except TestbedError as error:
        say(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
