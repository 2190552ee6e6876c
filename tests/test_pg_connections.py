"""PostgreSQL connections without SQLAlchemy: the backend's own psycopg connections, kept for reuse
as the engine's pool keeps them, rolled back when given back, and the engine's pool once it exists."""

from __future__ import annotations

import pytest
from conftest import migrated

from eventstore.backends.postgres import PostgresBackend, conninfo
from eventstore.store import EventStore, NewEvent


def test_the_url_reaches_libpq_as_sqlalchemy_reads_it() -> None:
    # SQLAlchemy renders a space in a query value as "+", which libpq would keep as a "+".
    assert conninfo("postgresql+psycopg://u:p%40ss@h:5433/db?options=-csearch_path%3Dt_1+-cx%3Doff&sslmode=disable") \
        == "postgresql://u:p%40ss@h:5433/db?options=-csearch_path%3Dt_1%20-cx%3Doff&sslmode=disable"
    assert conninfo("postgres://h/db") == "postgresql://h/db"
    with pytest.raises(Exception, match="Not a PostgreSQL URL"):
        conninfo("sqlite:///x.db")


def test_a_connection_given_back_is_rolled_back_and_reused(pg_url: str) -> None:
    url = migrated(pg_url)
    be = PostgresBackend(url)
    try:
        first = be.connect()
        raw = first.driver_connection
        raw.execute("CREATE TEMP TABLE left_open (n int)")  # a transaction left open by its user
        raw.execute("INSERT INTO left_open VALUES (1)")
        first.close()
        again = be.connect()
        assert again.driver_connection is raw  # kept, not reconnected
        assert raw.info.transaction_status == 0  # IDLE: the open transaction was rolled back
        assert raw.execute("SELECT to_regclass('left_open')").fetchone()[0] is None
        assert be._engine is None  # no SQLAlchemy engine was made
        again.close()
    finally:
        be.dispose()
    assert raw.closed  # dispose closes the kept connections


def test_a_store_reads_and_appends_without_an_engine_then_with_one(pg_url: str) -> None:
    url = migrated(pg_url)
    with EventStore(url) as store:
        store.append("S", [NewEvent("demo.note", {"n": 1})])
        assert [e.version for e in store.read_stream("S")] == [1]
        assert store.backend._engine is None
        handle = store.connect()  # once the engine exists, connections come from its pool
        handle.close()
        assert store.engine is not None
        other = store.connect()
        assert type(other).__name__ != "_Direct"
        other.close()
        store.append("S", [NewEvent("demo.note", {"n": 2})])
        assert store.max_position() == 2
