"""The schema check every command makes, without Alembic: same head, same verdicts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


def _schema(url: str) -> dict[str, object]:
    """What a database holds besides its rows: tables, columns, indexes, constraints, triggers and their
    functions (with the private schema's name taken out), the revision, and the store identity's row."""
    from sqlalchemy import text

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                shape: object = conn.execute(text("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")).all()
            else:
                schema = conn.execute(text("SELECT current_schema()")).scalar_one()
                queries = {
                    "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default,
                                         character_maximum_length FROM information_schema.columns
                                  WHERE table_schema = current_schema() ORDER BY 1, 2""",
                    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1",
                    "constraints": """SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
                                      FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
                                      WHERE n.nspname = current_schema() ORDER BY 1, 2""",
                    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
                                   WHERE NOT tgisinternal AND tgrelid::regclass::text IN
                                   (SELECT tablename FROM pg_tables WHERE schemaname = current_schema()) ORDER BY 1, 2""",
                    "functions": """SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                                    WHERE n.nspname = current_schema() ORDER BY 1""",
                    "sequences": "SELECT sequencename, start_value, increment_by FROM pg_sequences "
                                 "WHERE schemaname = current_schema() ORDER BY 1",
                }
                shape = {k: [tuple(str(v).replace(schema, "<schema>") for v in row) for row in conn.execute(text(q))]
                         for k, q in queries.items()}
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).all()
            identity = conn.execute(text("SELECT store_id, created_at FROM store_identity")).all()
    finally:
        engine.dispose()
    return {"shape": shape, "revision": revision, "identity": identity}


@contextmanager
def _fresh_database(like: str, tmp_path: Path, name: str) -> Iterator[str]:
    """An empty database on ``like``'s backend: a new SQLite file, or a new PostgreSQL schema."""
    if not like.startswith("postgresql"):
        yield f"sqlite:///{tmp_path}/{name}.db"
        return
    from conftest import pg_schema

    with pg_schema() as url:
        yield url


def test_a_replayed_schema_is_the_one_alembic_builds(store_url: str, tmp_path: Path) -> None:
    """The suite's fresh databases (tests/conftest.py ``migrated``: Alembic's statements replayed) are the
    databases Alembic builds, down to the triggers, with a store identity of their own."""
    from conftest import _MIGRATION, migrated

    backend = "postgresql" if store_url.startswith("postgresql") else "sqlite"
    assert backend in _MIGRATION  # store_url's database came from migrated(): replays from now on
    with _fresh_database(store_url, tmp_path, "alembic") as by_alembic, \
            _fresh_database(store_url, tmp_path, "replayed") as replayed:
        engine = make_engine(by_alembic)
        try:
            migrate.upgrade(engine)  # Alembic itself
        finally:
            engine.dispose()
        migrated(replayed)
        a, b, c = _schema(by_alembic), _schema(replayed), _schema(store_url)
    assert a["shape"] == b["shape"] == c["shape"]
    assert a["revision"] == b["revision"] == c["revision"] == [(migrate.script_head(),)]
    ids = {x["identity"][0][0] for x in (a, b, c)}  # type: ignore[index]
    assert len(ids) == 3 and all(len(i) == 36 for i in ids)  # each database a store of its own
