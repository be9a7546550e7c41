"""Opening the history database and bringing its schema to the newest migration (the JupyterHub way).

``c.FracnbService.db_url`` is any SQLAlchemy URL: ``sqlite:///fracnb-service.sqlite`` (relative to
the service's working directory, the default) or ``postgresql+psycopg://user:pass@host/db``.
:func:`open_database` runs Alembic's ``upgrade head`` every time: an empty database gets the whole
schema, an older one the migrations it lacks, a current one nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import sessionmaker

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
# The service's default (c.FracnbService.db_url); the hub's advice and fracnb-report read it too.
DEFAULT_DB_URL = "sqlite:///fracnb-service.sqlite"


class HistoryDatabaseError(RuntimeError):
    """The history database cannot be opened or migrated; the message says which URL and why."""


# Alembic is imported only to migrate: the hub imports this module for the spawn form's advice,
# and the service starts listening before it migrates.


def alembic_config() -> Config:
    from alembic.config import Config  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    # WAL lets the report command read while the service writes; the busy timeout waits for a lock.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def make_engine(url: str, **kwargs: Any) -> Engine:
    engine = create_engine(url, future=True, pool_pre_ping=True, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply every migration the database lacks, up to ``revision`` (tests and benchmarks stop earlier)."""
    from alembic import command  # noqa: PLC0415

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Undo migrations down to ``revision`` (the benchmark times a backfill this way)."""
    from alembic import command  # noqa: PLC0415

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def open_database(url: str, **kwargs: Any) -> sessionmaker[Any]:
    """A session factory on ``url``, its schema upgraded; :class:`HistoryDatabaseError` if that fails."""
    engine = None
    try:
        engine = make_engine(url, **kwargs)
        upgrade(engine)
    except Exception as error:
        if engine is not None:
            engine.dispose()
        raise HistoryDatabaseError(f"cannot open the session history database {_safe(url)}: {error}") from error
    return sessionmaker(engine, expire_on_commit=False)


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(an unparseable URL)"


def close(factory: sessionmaker[Any]) -> None:
    """Close every pooled connection of a factory from :func:`open_database`."""
    factory.kw["bind"].dispose()
