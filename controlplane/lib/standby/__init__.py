"""Reads from a PostgreSQL streaming standby (docs/standby.md).

Off unless ``PITWALL_STANDBY_DATABASE_URL`` is set; then settings.py adds two aliases beside
``default`` (the primary): ``standby`` and ``primary`` (the primary again, under a name that
a request reading from the standby cannot take away), this package's router and its
middleware. A GET or HEAD request runs with the standby as its ``default`` connection, unless
the standby is behind or down (``watch``): the raw SQL of the series, pages, export and
efficiency (``django.db.connection``) and the ORM reads of telemetry and fleet go there, while
every write, and every read of sign-in, tokens, alerts and audit, goes to the primary
(``router``). Everything else (ingest, Celery, the alert evaluator, WebSockets, POSTs) never
enters that context and runs on the primary as it does without a standby.
"""
