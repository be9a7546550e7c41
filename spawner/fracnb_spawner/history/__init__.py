"""Session history: the GPU statistics notebooks report, kept in SQL for advice and admin reports.

- :mod:`.models`: the table (SQLAlchemy), changed only through Alembic migrations (``migrations/``);
- :mod:`.db`: opening a database (``c.FracnbService.db_url``) and upgrading its schema;
- :mod:`.store`: storing a report for its user and server, reading records back, retention.
"""
