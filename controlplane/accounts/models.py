"""No models of its own: roles are Django's groups, tokens live in fleet. The module exists so
that migrate and flush send this app their post_migrate signal (apps.py syncs the roles)."""
