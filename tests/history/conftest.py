"""Fixtures for the session history: ``db_url``, a fresh empty database on SQLite and on a real
PostgreSQL server (started once per test session from Debian's binaries, stopped at its end)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.history import db
from fracnb_testbed.postgres import PostgresServer, running_postgres

DATABASES = ("sqlite", "postgresql")
_numbers = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


def new_postgres_database(server: PostgresServer) -> str:
    name = f"t{next(_numbers)}"
    engine = create_engine(server.url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database, once per kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return new_postgres_database(request.getfixturevalue("postgres"))


@pytest.fixture
def history(db_url: str) -> Iterator[sessionmaker[Session]]:
    """The database at ``db_url``, opened (and migrated) as the service opens it."""
    factory = db.open_database(db_url)
    yield factory
    db.close(factory)
