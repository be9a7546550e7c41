"""``python -m fracnb_testbed.demo``: a local JupyterHub with fractional-GPU notebooks.

Brings up the testbed's ``mixed`` cluster (``kueue`` with ``--engine kueue``, fracnb_testbed.demo_kueue;
or uses ``--kubeconfig``), simulates the GPU of its local A100 node with the fake NVML library, writes a
``jupyterhub_config.py`` into the state dir and runs a real JupyterHub with ``FractionalSpawner`` and the
fracnb service.
Ctrl-C stops everything it started; every start brings up a new, empty cluster, while each
user's home persists in the state dir until ``--reset-homes``. The functions here are reused
by the end-to-end tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from fracnb_testbed import demo_kueue, hubproc
from fracnb_testbed.clusters import RUNNER_LABEL, load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.demo_options import ACTIVITY_LAG, idle_policy_words, local_zone_name, option_problem, zone_problem
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed
from fracnb_testbed.hubproc import HubError, HubPorts
from fracnb_testbed.procs import free_port
from fracnb_testbed.state import STATE_FILE, TestbedState

Progress = Callable[[str], None]
SIMULATED_GPU_NAME = "NVIDIA A100-SXM4-80GB (simulated)"
DEMO_PASSWORD = "fracnb-demo"  # noqa: S105 - a published demo password, local only

# user -> groups; admin is also a hub admin.
DEMO_USERS: dict[str, list[str]] = {"ann": ["team-a"], "bob": ["team-a"], "carol": ["team-b"], "admin": []}
# Quotas in GPUs (exact ratios as strings): team-a shares half a GPU, so ann on 0.25 and bob
# asking for 1/2 shows the refusal.
GROUP_QUOTAS: dict[str, str | int] = {"team-a": "1/2", "team-b": 1}
USER_QUOTAS: dict[str, str | int | None] = {"carol": 1, "admin": None}
DEFAULT_USER_QUOTA = "1/2"

PROFILES = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "A notebook without a GPU, for data preparation and light work.",
        "default": True,
    },
    {
        "display_name": "0.25 GPU",
        "slug": "quarter",
        "description": "A quarter of an A100 by time-slicing: 20 GiB of GPU memory, compute shared.",
        "gpu": {"fraction": 0.25},
    },
    {
        # Smaller than 0.25 GPU where it matters on a time-sliced GPU, its memory: the right-sizing
        # advice has something to suggest after a few sessions that used little (docs/right-sizing.md).
        "display_name": "Small GPU memory",
        "slug": "small",
        "description": (
            "A quarter of an A100's time by time-slicing, like 0.25 GPU, with a 10 GiB memory budget: "
            "for notebooks that use little GPU memory, leaving more of it to the others on the card."
        ),
        "gpu": {"fraction": 0.25, "memory": "10Gi"},
    },
    {
        # One slot only (the testbed's local MPS node): a second user waits in the GPU queue, and an
        # idle server is stopped sooner while someone waits (its cull key; hub_config sets the time).
        "display_name": "0.25 GPU, one slot",
        "slug": "one-slot",
        "description": (
            "A quarter of an A100 by MPS, on a GPU with a single slot for notebooks: when someone holds it, "
            "the next user waits in the GPU queue, and an idle server makes way sooner."
        ),
        "gpu": {"fraction": 0.25, "backend": "mps"},
        "kubespawner_override": {
            "tolerations": [{"key": "fracnb.io/demo-slot", "operator": "Exists", "effect": "NoSchedule"}]
        },
    },
    {
        "display_name": "1/2 GPU",
        "slug": "half",
        "description": (
            "Half an A100 by time-slicing: 40 GiB of GPU memory, compute shared. Runs on 2-way "
            "time-sliced nodes; the demo's local A100 is sliced 4 ways, so the form greys it out."
        ),
        "gpu": {"fraction": "1/2"},
    },
]


@dataclass
class DemoSettings:
    """Everything the hub configuration depends on."""

    state_dir: Path
    kubeconfig: Path
    namespace: str
    port: int = 8000
    hub_port: int = 0
    proxy_api_port: int = 0
    service_port: int = 0
    idle_timeout: int = 900
    cull_every: int = 30
    warning_lead: int = 120
    password: str = DEMO_PASSWORD
    time_zone: str = field(default_factory=local_zone_name)  # of the times the hub's pages show
    users: dict[str, list[str]] = field(default_factory=lambda: dict(DEMO_USERS))
    engine: str = "builtin"  # c.FracnbQueue.engine: "kueue" needs the kueue cluster (demo_kueue)
    kueue_visibility_url: str = ""  # with engine "kueue": c.FracnbQueue.kueue_visibility_url
    extra_config: str = ""  # jupyterhub_config.py lines added before setup(c), e.g. by tests

    def __post_init__(self) -> None:
        for name in ("hub_port", "proxy_api_port", "service_port"):
            if not getattr(self, name):
                setattr(self, name, free_port())

    @property
    def ports(self) -> HubPorts:
        return HubPorts(public=self.port, hub=self.hub_port, proxy_api=self.proxy_api_port)

    @property
    def url(self) -> str:
        return self.ports.url


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fracnb-demo"


def cluster_dir(state_dir: Path) -> Path:
    """The demo's cluster: started empty on every run, stopped on exit."""
    return state_dir / "testbed"


def homes_dir(state_dir: Path) -> Path:
    """The users' homes: outside the cluster's directory, so they outlive every restart."""
    return state_dir / "homes"


# ---- the simulated GPU ----------------------------------------------------------------------


def prepare_fake_gpu(directory: Path) -> dict[str, str]:
    """Compile the fake NVML library, write a one-A100 state file; return the runner env."""
    from fracnb_meter.testing.fakenvml import FakeDevice, FakeState, build, write_state  # noqa: PLC0415

    library = build(directory / "lib")
    state_file = directory / "nvml-state"
    write_state(state_file, FakeState(devices=[FakeDevice.a100(0, name=SIMULATED_GPU_NAME)], release_exited=True))
    return {"LD_LIBRARY_PATH": str(library.parent), "FAKE_NVML_STATE": str(state_file)}


# ---- the hub configuration ------------------------------------------------------------------


def hub_config(settings: DemoSettings, proxy: str) -> str:
    """The jupyterhub_config.py text (only ``c.*`` lines: the fracnb service reads it too)."""
    groups: dict[str, list[str]] = {}
    for user, names in settings.users.items():
        for group in names:
            groups.setdefault(group, []).append(user)
    lines = [
        "# Written by python -m fracnb_testbed.demo; rewritten on every start.",
        "import sys",
        *hubproc.config_head(settings.state_dir, settings.ports, proxy),
        f"c.DummyAuthenticator.password = {settings.password!r}",
        f"c.Authenticator.allowed_users = {set(settings.users)!r}",
        "c.Authenticator.admin_users = {'admin'}",
        f"c.JupyterHub.load_groups = {_groups_config(groups)!r}",
        f"c.KubeSpawner.namespace = {settings.namespace!r}",
        f"c.KubeSpawner.node_selector = {{{RUNNER_LABEL!r}: 'local'}}",
        "c.KubeSpawner.cmd = ['jupyterhub-singleuser']",
        # The local runner plays the image as root; jupyter_server needs to be told it is fine.
        "c.Spawner.args = ['--allow-root']",
        "c.Spawner.default_url = '/lab'",
        "c.Spawner.start_timeout = 180\nc.Spawner.http_timeout = 180",
        "c.FractionalSpawner.gpu_backend = 'time-slicing'",
        "c.FractionalSpawner.gpu_memory = '80Gi'",
        # --idle-timeout: every server of the demo, GPU and CPU-only alike.
        f"c.FractionalSpawner.gpu_idle_timeout = {settings.idle_timeout}",
        f"c.FractionalSpawner.cpu_idle_timeout = {settings.idle_timeout}",
        f"c.FractionalSpawner.profile_list = {demo_profiles(settings)!r}",
        f"c.FracnbQueue.display_timezone = {settings.time_zone!r}",
        f"c.FracnbQuotas.default_user_quota = {DEFAULT_USER_QUOTA!r}",
        f"c.FracnbQuotas.group_quotas = {group_quotas(settings)!r}",
        f"c.FracnbQuotas.user_quotas = {USER_QUOTAS!r}",
        f"c.FracnbService.cull_every = {settings.cull_every}",
        f"c.FracnbService.warning_lead = {settings.warning_lead}",
        f"c.FracnbService.default_idle_timeout = {settings.idle_timeout}",
        f"c.FracnbService.kubeconfig = {str(settings.kubeconfig)!r}",
        f"c.FracnbService.namespace = {settings.namespace!r}",
        *(demo_kueue.hub_lines(settings.kueue_visibility_url) if settings.engine == "kueue" else []),
        settings.extra_config,
        # What an admin writes last: select the spawner, check it all, register the service.
        "from fracnb_spawner import setup",
        f"setup(c, config_file=__file__, service_url='http://127.0.0.1:{settings.service_port}')",
    ]
    return "\n".join(lines) + "\n"


def demand_timeout(settings: DemoSettings) -> int:
    """The "one slot" choice's idle timeout while someone waits for it: 4 min, or as little more than the
    warning and the activity lag as the hub accepts (never longer than the usual idle timeout)."""
    shortest = settings.warning_lead + ACTIVITY_LAG + 60
    wanted = max(240, shortest)
    return min(wanted, settings.idle_timeout) if settings.idle_timeout else wanted


def group_quotas(settings: DemoSettings) -> dict[str, str | int]:
    """The hub's team quotas; on Kueue none: its ClusterQueues hold them (the hub keeps each user's cap)."""
    return {} if settings.engine == "kueue" else dict(GROUP_QUOTAS)


def demo_profiles(settings: DemoSettings) -> list[dict]:
    profiles = demo_kueue.demo_profiles(PROFILES) if settings.engine == "kueue" else [dict(p) for p in PROFILES]
    for profile in profiles:
        if profile["slug"] == "one-slot" and demand_timeout(settings) < settings.idle_timeout:
            profile["cull"] = {"idle_timeout_under_demand": demand_timeout(settings)}
    return profiles


def _groups_config(groups: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    return {name: {"users": sorted(users)} for name, users in sorted(groups.items())}


# ---- running things -------------------------------------------------------------------------


def start_testbed(
    directory: Path,
    runner_env: dict[str, str],
    progress: Progress,
    homes: Path,
    *,
    empty_homes: bool = False,
    cluster: str = "mixed",
) -> TestbedState:
    """A new ``cluster`` in ``directory`` whose hub users keep their homes in ``homes``.

    A testbed that a killed demo left running there is stopped first; ``empty_homes`` then
    deletes every home (``--reset-homes``).
    """
    if (directory / STATE_FILE).exists():
        progress("stopping the testbed a previous demo left running")
        with suppress(TestbedError):
            down(directory, keep_files=True, progress=progress)
    if empty_homes and homes.exists():
        progress(f"removing the users' home directories in {homes} (--reset-homes)")
        shutil.rmtree(homes)
    progress(f"starting the testbed cluster {cluster!r}")
    return up(load_cluster(cluster), directory, runner_env=runner_env, homes_dir=homes, progress=progress)


def cluster_env(settings: DemoSettings) -> dict[str, str]:
    """What the hub's environment adds to this one's: the cluster, for the spawner and the fracnb service."""
    return {"KUBECONFIG": str(settings.kubeconfig)}


def start_hub(settings: DemoSettings, log_file: Path) -> subprocess.Popen:
    """Write the config and start ``jupyterhub`` in its own session (logs to ``log_file``): a hub started
    again after :func:`hubproc.stop`, waited for with :func:`hubproc.wait_ready`."""
    config = hub_config(settings, hubproc.find_proxy())
    return hubproc.start(settings.state_dir, config, log_file, cluster_env(settings))


def stop_leftover_hub(state_dir: Path, progress: Progress, grace: float = 30) -> None:
    """Stop the hub of a demo that was killed before it could (the hub's pid file names it)."""
    try:
        pid = int(hubproc.pid_file(state_dir).read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return
    if str(hubproc.config_file(state_dir)).encode() not in argv:
        return  # that pid is no longer our hub
    progress(f"stopping the JupyterHub a previous demo left running (pid {pid})")
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.killpg(pid, signum)
        deadline = time.monotonic() + grace
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)


@dataclass
class RunningDemo:
    settings: DemoSettings
    hub: subprocess.Popen
    log_file: Path
    testbed: Testbed | None = None
    runner_env: dict[str, str] = field(default_factory=dict)


@contextmanager
def running_demo(
    settings: DemoSettings,
    *,
    testbed: Testbed | None = None,
    progress: Progress = lambda _m: None,
) -> Iterator[RunningDemo]:
    """A hub on ``settings`` for the duration of the block; the caller owns the cluster."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    log_file = settings.state_dir / "jupyterhub.log"
    config = hub_config(settings, hubproc.find_proxy())
    env = cluster_env(settings)
    with hubproc.running(
        settings.state_dir, config, settings.url, log_file=log_file, env=env, progress=progress
    ) as hub:
        yield RunningDemo(settings, hub, log_file, testbed)


# ---- the command ----------------------------------------------------------------------------


def say(message: str) -> None:
    # After SIGHUP the terminal is gone; the shutdown must go on without it.
    with suppress(OSError):
        print(f"[demo] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fracnb_testbed.demo", description=__doc__)
    parser.add_argument("--port", type=int, default=8000, help="public port of the hub (default 8000)")
    parser.add_argument("--kubeconfig", type=Path, help="use this existing cluster instead of starting the testbed")
    parser.add_argument(
        "--engine",
        choices=demo_kueue.ENGINES,
        default="builtin",
        help="who admits waiting GPU servers (c.FracnbQueue.engine): fracnb's own queue, or Kueue on the "
        "testbed's kueue cluster with a ClusterQueue per team (default builtin)",
    )
    parser.add_argument(
        "--namespace", help="namespace of the notebook pods (default fracnb-demo, created on the testbed)"
    )
    parser.add_argument(
        "--fake-gpu", action="store_true", help="with --kubeconfig: simulate a GPU for local pods anyway"
    )
    parser.add_argument(
        "--state-dir", type=Path, help=f"where config, logs and the users' homes go (default {default_state_dir()})"
    )
    parser.add_argument(
        "--idle-timeout",
        type=int,
        default=900,
        help="seconds a server, GPU or CPU-only, may sit idle before the fracnb service stops it; 0: never "
        "(default 900, 15 min)",
    )
    parser.add_argument("--cull-every", type=int, default=30, help="seconds between culling passes (default 30)")
    parser.add_argument(
        "--warning-lead",
        type=int,
        default=120,
        help="seconds before such a stop that the notebook warns its user; 0: no warning (default 120, 2 min)",
    )
    parser.add_argument(
        "--time-zone",
        help=f"the IANA time zone of the times the hub's pages show (default: this machine's, {local_zone_name()})",
    )
    parser.add_argument(
        "--reset-homes",
        action="store_true",
        help="delete every user's home directory (their saved notebooks and files) before starting; "
        "otherwise homes are kept across server and demo restarts",
    )
    return parser


def _interrupt_once(_signum: int, _frame: object) -> None:
    # The first Ctrl-C, SIGTERM or SIGHUP starts the shutdown; further ones must not cut it short.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt


def announce(settings: DemoSettings, runner_env: dict[str, str], homes: Path | None) -> None:
    print(f"\nfracnb demo running at {settings.url}/", flush=True)
    print(f"  log in as {', '.join(settings.users)} with password {settings.password!r}")
    groups = ", ".join(f"{g}: {q} GPU" for g, q in group_quotas(settings).items()) or "Kueue's (below)"
    users = ", ".join(f"{u}: {'no limit' if q is None else f'{q} GPU'}" for u, q in USER_QUOTAS.items())
    print(f"  GPU quotas: groups {groups}; users {users}; everyone else {DEFAULT_USER_QUOTA} GPU")
    if settings.engine == "kueue":
        print("\n".join(demo_kueue.announcement(settings.users)))
    print(f"  idle servers (GPU and CPU-only): {idle_policy_words(settings.idle_timeout, settings.warning_lead)}")
    print(f"  times on the hub's pages: {settings.time_zone} (JupyterLab shows your browser's zone)")
    if runner_env:
        print(f"  simulated GPU: {SIMULATED_GPU_NAME}; in a notebook try")
        print('    import fracnb_meter.simulate as sim; sim.allocate("6GiB")')
    if homes is not None:
        print(f"  users' homes: {homes} (kept across restarts; --reset-homes empties them)")
    print("  press Ctrl-C to stop everything\n", flush=True)


def run(args: argparse.Namespace, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    runner_env: dict[str, str] = {}
    if args.kubeconfig is None or args.fake_gpu:
        say("compiling the fake NVML library (simulated A100)")
        runner_env = prepare_fake_gpu(state_dir / "fakenvml")
    testbed_state_dir = cluster_dir(state_dir)
    homes = homes_dir(state_dir) if args.kubeconfig is None else None
    started: TestbedState | None = None
    try:
        stop_leftover_hub(state_dir, say)
        if homes is not None:
            cluster = demo_kueue.CLUSTER if args.engine == "kueue" else "mixed"
            started = start_testbed(
                testbed_state_dir, runner_env, say, homes, empty_homes=args.reset_homes, cluster=cluster
            )
            handle = Testbed(started)
            namespace = handle.create_namespace(args.namespace or "fracnb-demo")
            kubeconfig = started.kubeconfig
            if args.engine == "kueue":
                demo_kueue.install_queues(handle, DEMO_USERS, namespace, say)
        else:
            if args.reset_homes:
                say("--reset-homes does nothing with --kubeconfig: that cluster keeps the homes")
            kubeconfig, namespace = args.kubeconfig.resolve(), args.namespace or "default"
        settings = DemoSettings(
            state_dir=state_dir,
            kubeconfig=kubeconfig,
            namespace=namespace,
            port=args.port,
            idle_timeout=args.idle_timeout,
            cull_every=args.cull_every,
            warning_lead=args.warning_lead,
            engine=args.engine,
            kueue_visibility_url=demo_kueue.visibility_url(started) if started and args.engine == "kueue" else "",
            **({"time_zone": args.time_zone} if args.time_zone else {}),
        )
        with running_demo(settings, progress=say) as demo:
            announce(settings, runner_env, homes)
            while demo.hub.poll() is None:
                time.sleep(0.5)
            say(f"JupyterHub exited with code {demo.hub.returncode}; see {demo.log_file}")
    finally:
        if started is not None:
            say("stopping the testbed")
            down(testbed_state_dir, keep_files=True, progress=say)


def recovery_hint(state_dir: Path) -> str:
    """What to do when the demo does not start; following it never deletes a user's files."""
    return (
        f"logs: {state_dir / 'jupyterhub.log'} and {cluster_dir(state_dir) / 'logs'}/. Running the demo "
        "again stops whatever an earlier run left behind; if it fails the same way, delete "
        f"{cluster_dir(state_dir)} (only the cluster: the users' homes in {homes_dir(state_dir)} "
        "stay) and run it again"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = (
        option_problem(args.idle_timeout, args.warning_lead, args.cull_every)
        or zone_problem(args.time_zone)
        or demo_kueue.option_problem(args.engine, args.kubeconfig)
    )
    if problem:  # before anything starts
        say(f"error: {problem}")
        return 2
    unbuilt = demo_kueue.build_problem() if args.engine == "kueue" else None
    if unbuilt:
        say(f"error: {unbuilt}")
        return 1
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    # A closed terminal sends SIGHUP: stop everything then too, rather than leave it running.
    signal.signal(signal.SIGHUP, _interrupt_once)
    state_dir = (args.state_dir or default_state_dir()).resolve()
    try:
        run(args, state_dir)
    except KeyboardInterrupt:
        say("stopped")
    except HubError as error:  # the message says what to fix
        say(f"error: {error}")
        say(f"the whole log: {state_dir / 'jupyterhub.log'}")
        return 1
    except (TestbedError, OSError) as error:
        say(f"error: {error}")
        say(recovery_hint(state_dir))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
