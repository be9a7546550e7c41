"""``fracnb-report``: how sessions used the GPU share they were given, per profile and choice, and what
their users are advised (over the hub's profile list with --config, as the spawn form advises them).

fracnb-report --config /etc/jupyterhub/jupyterhub_config.py          # the service's database
fracnb-report --db-url sqlite:///fracnb-service.sqlite --format csv --since-days 30
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

from traitlets.config import PyFileConfigLoader

from fracnb_spawner.history import db
from fracnb_spawner.history.report import DEFAULT_HEADROOM, ReportMenu, as_csv, as_json, as_text, load_report

FORMATS = {"text": as_text, "json": as_json, "csv": as_csv}


def menu_from_config_file(config: Any) -> ReportMenu | None:
    """The hub's choices, as its users are advised over them; None without a fixed profile list."""
    from fracnb_spawner.form.advice import report_menu  # noqa: PLC0415 - the hub's config modules, only with --config
    from fracnb_spawner.service.advicemenu import menu_from_config  # noqa: PLC0415

    menu = menu_from_config(config)
    return None if menu is None else report_menu(menu.profiles, menu.rows, menu.headroom, menu.min_sessions)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fracnb-report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--db-url",
        help=f"SQLAlchemy URL of the service's database (default: {db.DEFAULT_DB_URL}, in the working directory)",
    )
    source.add_argument(
        "--config",
        help="the hub's config file: its c.FracnbService.db_url, else the service's default beside "
        "the hub's database (c.JupyterHub.db_url)",
    )
    parser.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default: text)")
    parser.add_argument("--since-days", type=float, default=None, help="only sessions started in the last N days")
    parser.add_argument(
        "--headroom",
        type=float,
        default=None,
        help="headroom over the peak that an advised smaller choice leaves, as a share (default: the hub's "
        f"c.FractionalSpawner.right_sizing_headroom with --config, else {DEFAULT_HEADROOM})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    config = PyFileConfigLoader(arguments.config).load_config() if arguments.config else None
    url = arguments.db_url or (db.default_db_url(config) if config is not None else db.DEFAULT_DB_URL)
    if arguments.headroom is not None and arguments.headroom < 0:
        print("fracnb-report: --headroom must be 0 or more, such as 0.2", file=sys.stderr)
        return 2
    since = None
    if arguments.since_days is not None:
        since = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=arguments.since_days)
    try:
        history = db.open_existing(url)  # reading never creates or upgrades the service's database
    except db.HistoryDatabaseError as error:
        print(f"fracnb-report: {error}", file=sys.stderr)
        return 1
    try:
        menu = menu_from_config_file(config) if config is not None else None
        report = load_report(history, since=since, menu=menu, headroom=arguments.headroom)
    finally:
        db.close(history)
    sys.stdout.write(FORMATS[arguments.format](report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
