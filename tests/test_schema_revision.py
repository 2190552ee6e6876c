"""The schema check every command makes, without Alembic: same head, same verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import migrate
from eventstore.db import make_engine
from eventstore.errors import SchemaOutOfDate
from eventstore.store import EventStore


def test_script_head_is_alembics_head(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    try:
        assert migrate.script_head() == migrate.head_revision(engine)
    finally:
        engine.dispose()


def test_stored_revision_reads_what_alembic_wrote(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        assert migrate.stored_revision(engine) == migrate.current_revision(engine) == migrate.script_head()
    finally:
        engine.dispose()


def test_an_empty_database_is_refused_without_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    with pytest.raises(SchemaOutOfDate, match="has no evstore schema.*evstore db upgrade"):
        EventStore(url)


def test_opening_a_store_does_not_import_alembic(store_url: str) -> None:
    """Opening a store (what every CLI command does) checks the revision without Alembic."""
    code = ("import sys; from eventstore.store import EventStore; s = EventStore(sys.argv[1]); s.close(); "
            "assert 'alembic' not in sys.modules, sorted(m for m in sys.modules if m.startswith('alembic'))")
    r = subprocess.run([sys.executable, "-c", code, store_url], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
