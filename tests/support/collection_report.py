"""Writes what a pytest run selected, with each test's markers, as JSON to the file named by
``PITWALL_COLLECTION_REPORT`` (a plugin, loaded with ``-p``, by the test of the Makefile's
targets: it runs each target's own pytest arguments with ``--collect-only``)."""

from __future__ import annotations

import json
import os

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get("PITWALL_COLLECTION_REPORT")
    if not path:
        return
    selected = {item.nodeid: sorted({mark.name for mark in item.iter_markers()})
                for item in session.items}
    with open(path, "w") as out:
        json.dump(selected, out)
