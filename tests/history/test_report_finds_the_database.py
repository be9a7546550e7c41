"""``fracnb-report --config`` finds the service's database as the service does, from any working
directory, and reading never creates a database: a missing one is an error naming where it looked."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from traitlets.config import Config, Configurable, PyFileConfigLoader

from fracnb_spawner.form.advice import AdviceTraits
from fracnb_spawner.history import db, store
from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.reportcli import main
from tests.history.records import row


def hub_config(directory: Path, extra: str = "") -> Path:
    """A hub config as the demo writes it: the hub's own SQLite database at an absolute path."""
    path = directory / "jupyterhub_config.py"
    path.write_text(f"c.JupyterHub.db_url = 'sqlite:///{directory / 'jupyterhub.sqlite'}'\n{extra}")
    return path


def test_the_report_reads_the_service_database_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir()
    elsewhere.mkdir()
    config_path = hub_config(state)
    config = PyFileConfigLoader(config_path.name, path=str(state)).load_config()
    # The service, the spawn form's advice and the report agree on one file beside the hub's database.
    service_url = FracnbService(config=config).db_url
    assert service_url == f"sqlite:///{state / 'fracnb-service.sqlite'}"
    spawner_traits = type("FractionalSpawner", (AdviceTraits, Configurable), {})
    assert spawner_traits(config=config).right_sizing_db_url == service_url
    history = db.open_database(service_url)  # the service starting
    store.insert_many(history, [row("ann", n, datetime(2026, 11, 1, 9 + n)) for n in range(3)])
    db.close(history)
    monkeypatch.chdir(elsewhere)
    assert main(["--config", str(config_path), "--format", "json"]) == 0
    (choice,) = json.loads(capsys.readouterr().out)["choices"]
    assert choice["sessions"] == 3
    assert list(elsewhere.iterdir()) == []


def test_a_missing_database_is_an_error_and_stays_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    config_path = hub_config(tmp_path)
    assert main(["--config", str(config_path)]) == 1
    err = capsys.readouterr().err
    assert f"there is no session history at {tmp_path / 'fracnb-service.sqlite'}" in err
    assert "run this where the hub runs, or give --db-url" in err
    assert main([]) == 1  # the default, relative to the working directory
    assert f"no session history at {tmp_path / 'fracnb-service.sqlite'}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jupyterhub_config.py"]


def test_without_a_hub_sqlite_database_the_default_is_relative(tmp_path: Path) -> None:
    config_path = tmp_path / "jupyterhub_config.py"
    config_path.write_text("c.JupyterHub.db_url = 'postgresql+psycopg://hub@db/jupyterhub'\n")
    config = PyFileConfigLoader(config_path.name, path=str(tmp_path)).load_config()
    assert db.default_db_url(config) == db.DEFAULT_DB_URL
    config_path.write_text("c.FracnbService.db_url = 'postgresql+psycopg://fracnb@db/fracnb'\n")
    config = PyFileConfigLoader(config_path.name, path=str(tmp_path)).load_config()
    assert db.default_db_url(config) == "postgresql+psycopg://fracnb@db/fracnb"
    assert db.default_db_url(Config()) == db.DEFAULT_DB_URL


def test_a_database_the_service_has_not_upgraded_is_not_changed(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = db.make_engine(url)
    db.upgrade(engine, "0001")
    engine.dispose()
    assert main(["--db-url", url]) == 1
    assert "is at schema 0001" in capsys.readouterr().err
    engine = db.make_engine(url)
    assert db.current_revision(engine) == "0001"
    engine.dispose()
