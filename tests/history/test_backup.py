"""The session database's backup and restore, with the commands docs/operations.md gives: SQLite's
online backup while the service holds the database open (WAL mode), and pg_dump / pg_restore."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy.engine import make_url

from fracnb_spawner.history import db, store
from fracnb_testbed.postgres import PostgresServer, find_postgres_bin
from tests.history.conftest import new_postgres_database
from tests.history.records import GIB, report

# The command docs/operations.md gives, run in the service's working directory.
SQLITE_BACKUP = (
    "import sqlite3; sqlite3.connect('fracnb-service.sqlite').backup(sqlite3.connect('fracnb-service-backup.sqlite'))"
)


def stored_peaks(url: str) -> list[int]:
    opened = db.open_database(url)  # as the service opens it: migrations find nothing to do
    try:
        return [r["peak_bytes"] for r in store.sessions_of(opened, "ann")]
    finally:
        db.close(opened)


def test_sqlite_online_backup_while_the_service_writes(tmp_path: Path) -> None:
    live = db.open_database(f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}")
    try:
        store.store_report(live, "ann", report("1" * 32, peak_bytes=5 * GIB))
        store.store_report(live, "ann", report("2" * 32, started="2026-11-02T10:00:00Z", peak_bytes=7 * GIB))
        # The pages of the last write are still in the WAL file: a plain copy of the file would miss them.
        assert (tmp_path / "fracnb-service.sqlite-wal").stat().st_size > 0
        subprocess.run([sys.executable, "-c", SQLITE_BACKUP], cwd=tmp_path, check=True)
        store.store_report(live, "ann", report("3" * 32, started="2026-11-03T10:00:00Z"))  # after the backup
    finally:
        db.close(live)
    assert stored_peaks(f"sqlite:///{tmp_path / 'fracnb-service-backup.sqlite'}") == [7 * GIB, 5 * GIB]


def libpq_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_postgresql_dump_and_restore_into_a_new_database(postgres: PostgresServer, tmp_path: Path) -> None:
    source = new_postgres_database(postgres)
    live = db.open_database(source)
    try:
        store.store_report(live, "ann", report("1" * 32, peak_bytes=6 * GIB))
        dump = tmp_path / "fracnb.dump"
        bin_dir = find_postgres_bin()
        subprocess.run([str(bin_dir / "pg_dump"), "--format=custom", f"--file={dump}", libpq_url(source)], check=True)
    finally:
        db.close(live)
    target = new_postgres_database(postgres)
    subprocess.run([str(bin_dir / "pg_restore"), "--no-owner", f"--dbname={libpq_url(target)}", str(dump)], check=True)
    assert stored_peaks(target) == [6 * GIB]
