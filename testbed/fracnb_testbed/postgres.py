"""A throw-away PostgreSQL server for tests and benchmarks: Debian's ``postgresql`` binaries,
``initdb`` into a temporary directory, a free port on 127.0.0.1, stopped and deleted at the end.

    with running_postgres() as server:
        engine = create_engine(server.url)      # postgresql+psycopg://fracnb@127.0.0.1:PORT/fracnb

PostgreSQL refuses to run as root; as root, the server runs as the ``postgres`` user the package
creates (the directory is then made outside pytest's root-only temporary tree). ``./dev setup``
installs the package when it is missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fracnb_testbed.errors import TestbedError
from fracnb_testbed.procs import free_port

DATABASE = "fracnb"


def find_postgres_bin() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin with initdb (or $FRACNB_POSTGRES_BIN)."""
    override = os.environ.get("FRACNB_POSTGRES_BIN")
    if override:
        return Path(override)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise TestbedError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run ./dev setup, "
            "or apt-get install postgresql"
        )
    return Path(found[-1]).parent


@dataclass(frozen=True)
class PostgresServer:
    port: int
    data_dir: Path
    bin_dir: Path | None = None
    user: str | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{DATABASE}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        """Stop the server, keeping its data (fault tests: the database away for a while)."""
        _run([str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], self.user)

    def start(self) -> None:
        """Start it again on the same port and data."""
        log = self.data_dir / "server.log"
        _run(
            [
                str(self._bin / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(log),
                "-o",
                _options(self.port, self.data_dir),
                "-w",
                "start",
            ],
            self.user,
        )
        _wait_ready(self._bin, self.port, self.user)

    @property
    def _bin(self) -> Path:
        return self.bin_dir or find_postgres_bin()


def _as_owner(command: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else command


def _run(command: list[str], user: str | None) -> None:
    result = subprocess.run(_as_owner(command, user), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TestbedError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Initialise, start, yield, stop and delete a PostgreSQL server in a new temporary directory."""
    bin_dir = find_postgres_bin()
    user = "postgres" if os.geteuid() == 0 else None
    workdir = Path(tempfile.mkdtemp(prefix="fracnb-postgres-"))
    try:
        data_dir = workdir / "pgdata"
        data_dir.mkdir()
        if user:
            entry = pwd.getpwnam(user)
            for path in (workdir, data_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        with _started(bin_dir, data_dir, user) as server:
            yield server
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def _started(bin_dir: Path, data_dir: Path, user: str | None) -> Iterator[PostgresServer]:
    _run([str(bin_dir / "initdb"), "-D", str(data_dir), "-A", "trust", "-U", DATABASE, "-E", "UTF8"], user)
    port = free_port()
    log = data_dir / "server.log"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-l", str(log), "-o", _options(port, data_dir), "-w", "start"],
        user,
    )
    try:
        _wait_ready(bin_dir, port, user)
        _run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", DATABASE, DATABASE], user)
        yield PostgresServer(port, data_dir, bin_dir, user)
    finally:
        _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"], user)


def _options(port: int, data_dir: Path) -> str:
    return f"-p {port} -k {data_dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"


def _wait_ready(bin_dir: Path, port: int, user: str | None, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    command = [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
    while time.monotonic() < deadline:
        if subprocess.run(_as_owner(command, user), capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise TestbedError(f"PostgreSQL on port {port} did not become ready within {seconds:.0f}s")
