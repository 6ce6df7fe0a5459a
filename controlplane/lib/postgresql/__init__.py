"""Django's PostgreSQL backend, with a pool that never hands out a connection the server closed
(base.py)."""
