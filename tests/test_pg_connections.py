"""PostgreSQL connections without SQLAlchemy: the backend's own psycopg connections, kept for reuse
as the engine's pool keeps them, rolled back when given back, and the engine's pool once it exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def test_a_read_needs_no_transaction_and_leaves_none_behind(pg_url: str) -> None:
    """A read without a snapshot runs in autocommit (no BEGIN and ROLLBACK round trips around each
    statement); once it ends the connection is transactional again, a write begun inside a read is a
    transaction all the same, and a server-side cursor (verify's streamed reads) gets one."""
    url = migrated(pg_url)
    with EventStore(url) as store:
        store.append("S", [NewEvent("demo.note", {"n": 1})])
        be = store.backend
        with store.reading() as cur:
            raw = cur.connection
            assert raw.autocommit
            assert be.stream_state(cur, "S") is not None
            assert raw.info.transaction_status == 0  # IDLE: no transaction was begun for it
        assert not raw.autocommit
        with store.reading(snapshot=True) as cur:  # a snapshot is one transaction, as before
            assert not cur.connection.autocommit
            be.stream_state(cur, "S")
            assert cur.connection.info.transaction_status == 2  # INTRANS
        assert not raw.autocommit and raw.info.transaction_status == 0
        with store.reading() as cur:
            be.begin_write(raw)  # the append lock is a transaction's: not released at once
            assert not raw.autocommit and raw.info.transaction_status == 2
        assert raw.info.transaction_status == 0  # ended by the read's end
        with store.reading() as cur:
            assert [tuple(r) for r in be._streamed(cur, "SELECT 1 UNION ALL SELECT 2", (), "two rows")] == [(1,), (2,)]
        assert not raw.autocommit and raw.info.transaction_status == 0


def test_log_and_replay_run_on_one_connection(pg_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each PostgreSQL connection is a server process started for it: a read command opens one (the
    projections' checks read on the store's connection; the runner connects only to write)."""
    import psycopg
    from click.testing import CliRunner

    from eventstore.cli import register

    url = migrated(pg_url)
    runner, cli = CliRunner(), register()
    versions = tmp_path / "versions"
    versions.mkdir()
    for i in range(3):
        (versions / f"{i:03d}.json").write_text(json.dumps({"task": "RUN-3", "step": i}) + "\n")
    r = runner.invoke(cli, ["--url", url, "ingest", "generic", "--stream", "RUN-3", str(versions)])
    assert r.exit_code == 0, r.output
    opened: list[str] = []
    real = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(str(args[0]) if args else "")
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    for args in (["log", "RUN-3"], ["replay", "RUN-3", "--json"], ["replay", "RUN-3", "--meta", "--json"]):
        opened.clear()
        r = runner.invoke(cli, ["--url", url, *args])
        assert r.exit_code == 0, r.output
        assert len(opened) == 1, (args, opened)
