"""Opening the history database and bringing its schema to the newest migration (the JupyterHub way).

``c.FracnbService.db_url`` is any SQLAlchemy URL: an SQLite file or ``postgresql+psycopg://user:pass@host/db``.
Its default (:func:`default_db_url`) is ``fracnb-service.sqlite`` beside the hub's own SQLite
database, so that the service, the hub's advice and ``fracnb-report --config`` all find the same
file. :func:`open_database` (the service) runs Alembic's ``upgrade head`` every time: an empty
database gets the whole schema, an older one the migrations it lacks, a current one nothing.
:func:`open_existing` (readers) never creates or changes a database.
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
# The service's default (c.FracnbService.db_url) when the hub's own database is not an SQLite file:
# relative to the working directory of the hub (the service runs in it too).
DEFAULT_DB_URL = "sqlite:///fracnb-service.sqlite"
DEFAULT_FILE = "fracnb-service.sqlite"


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


def default_db_url(config: Any) -> str:
    """The service's database for a hub config (a traitlets ``Config``): ``c.FracnbService.db_url``,
    else ``fracnb-service.sqlite`` in the directory of the hub's SQLite database (``c.JupyterHub.db_url``,
    whose default ``sqlite:///jupyterhub.sqlite`` is relative to the hub's working directory), else
    :data:`DEFAULT_DB_URL`."""
    section = config.get("FracnbService", {}) if config is not None else {}
    if "db_url" in section:
        return str(section["db_url"])
    hub = config.get("JupyterHub", {}) if config is not None else {}
    try:
        hub_url = make_url(str(hub.get("db_url", "sqlite:///jupyterhub.sqlite")))
    except Exception:  # the hub refuses its own bad URL; the default stays
        return DEFAULT_DB_URL
    if hub_url.get_backend_name() != "sqlite" or not hub_url.database or hub_url.database == ":memory:":
        return DEFAULT_DB_URL
    return f"sqlite:///{Path(hub_url.database).parent / DEFAULT_FILE}".replace("sqlite:///./", "sqlite:///")


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL, as an absolute path (relative ones from the working directory); else None."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).absolute()


def open_existing(url: str) -> sessionmaker[Any]:
    """A session factory on a database the service made and migrated, for reading only: an SQLite file
    that does not exist is a :class:`HistoryDatabaseError` (nothing is created), and so is a database
    whose schema the service has not brought to this version."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise HistoryDatabaseError(
            f"there is no session history at {path}: the fracnb service creates it there when it starts "
            "(a relative path in c.FracnbService.db_url is from the hub's working directory); "
            "run this where the hub runs, or give --db-url"
        )
    try:
        engine = make_engine(url)
        found, head = current_revision(engine), head_revision()
    except Exception as error:
        raise HistoryDatabaseError(f"cannot open the session history database {_safe(url)}: {error}") from error
    if found != head:
        engine.dispose()
        raise HistoryDatabaseError(
            f"the session history database {_safe(url)} is at schema {found or 'none'}, not {head}: "
            "start the fracnb service of this version once to upgrade it"
        )
    return sessionmaker(engine, expire_on_commit=False)


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
