"""Least privilege on PostgreSQL (`evstore db roles`): connected as the writer role, appends and
ingests work but the log cannot be changed; connected as the reader role, nothing can be written
and log, replay and verify still work (replay without caching)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from conftest import PG_URL, migrated

from eventstore.cli import register
from eventstore.store import EventStore, NewEvent
from projections import replay as rp

Invoke = Callable[..., Result]


def _as(url: str, role: str) -> str:
    """``url`` with its user replaced by ``role`` (trust authentication on 127.0.0.1)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def _cli(url: str) -> Invoke:
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(register(), ["--url", url, *args])

    return invoke


def _plain(url: str) -> str:
    """A libpq URL (psycopg.connect) for a SQLAlchemy one."""
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def roles(pg_url: str) -> Iterator[tuple[str, str, str]]:
    """(admin url, writer role, reader role): unique names, dropped afterwards."""
    assert PG_URL
    url = migrated(pg_url)
    tag = uuid.uuid4().hex[:10]
    writer, reader = f"evw_{tag}", f"evr_{tag}"
    try:
        yield url, writer, reader
    finally:
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            for role in (writer, reader):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(f"DROP OWNED BY {role}")
                    conn.execute(f"DROP ROLE {role}")


def _refused(url: str, sql: str) -> str:
    with psycopg.connect(_plain(url)) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
        conn.execute(sql)
    return str(err.value)


def test_writer_and_reader_roles(roles: tuple[str, str, str], tmp_path: Path) -> None:
    url, writer, reader = roles
    admin = _cli(url)
    r = admin("db", "roles", "--writer", writer, "--reader", reader)
    assert r.exit_code == 0, r.output
    assert f"created role {writer} (LOGIN, no password)" in r.stdout and f"created role {reader}" in r.stdout
    assert f"granted {writer}: events SELECT, INSERT;" in r.stdout
    again = admin("db", "roles", "--writer", writer, "--reader", reader)  # idempotent
    assert again.exit_code == 0 and f"role {writer} exists" in again.stdout and f"role {reader} exists" in again.stdout

    # The writer appends and ingests through the CLI ...
    w_url = _as(url, writer)
    as_writer = _cli(w_url)
    assert as_writer("append", "S", "note", "--data", '{"i": 1}').exit_code == 0
    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"stream": "S", "type": "note", "data": {"i": i}}) + "\n" for i in (2, 3)))
    assert as_writer("append", "--batch", str(batch)).exit_code == 0
    # 60 events in one COPY complete the Merkle tree's first nodes: written with the stream's head in one
    # statement, which the writer's grants allow.
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"stream": "M", "type": "note", "data": {"i": i}}) + "\n" for i in range(60)))
    assert as_writer("append", "--batch", str(many)).exit_code == 0
    doc = tmp_path / "state.json"
    doc.write_text('{"taskId": "T-1", "status": "open"}\n')
    r = as_writer("ingest", "generic", str(doc))
    assert r.exit_code == 0, r.output
    # A long run's appends keep its document for the runs index (projection_states), in their transaction.
    from projections.runs import STATE_EVERY, IndexedEventStore

    with IndexedEventStore(w_url) as w:
        w.append("L", [NewEvent("document.observed", {"doc": {"n": 0}})] + [
            NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/n", "value": i}]})
            for i in range(1, STATE_EVERY + 1)], dialect="generic")
    with psycopg.connect(_plain(url)) as conn:
        assert conn.execute("SELECT version FROM projection_states").fetchall() == [(STATE_EVERY + 1,)]
    # ... but cannot change or remove what is recorded, nor disarm the triggers.
    for sql in ("UPDATE events SET type = 'x'", "DELETE FROM events", "TRUNCATE events",
                "DROP TRIGGER events_no_update_delete ON events", "UPDATE streams SET stream_id = 'X'",
                "DELETE FROM streams", "INSERT INTO replay_cache SELECT * FROM replay_cache",
                "DELETE FROM projection_states",
                "ALTER TABLE events DISABLE TRIGGER ALL"):
        assert "permission denied" in _refused(w_url, sql) or "must be owner" in _refused(w_url, sql)

    # The reader reads: log, replay, verify ...
    r_url = _as(url, reader)
    as_reader = _cli(r_url)
    r = as_reader("log", "S")
    assert r.exit_code == 0 and r.stdout.count("note") == 3, r.output
    assert json.loads(as_reader("replay", "T-1", "--json").stdout) == {"taskId": "T-1", "status": "open"}
    r = as_reader("verify")
    assert r.exit_code == 0 and f"verified 4 streams, {64 + STATE_EVERY + 1} events" in r.stdout, r.output
    # ... and cannot write anything.
    r = as_reader("append", "S", "note", "--data", "{}")
    assert r.exit_code == 1 and r.stderr.startswith("Error: The database refused the append (permission denied"), \
        r.output
    for sql in ("INSERT INTO streams (stream_id, version, head_hash, created_at) VALUES ('x', 0, '', '')",
                "UPDATE streams SET version = 0", "DELETE FROM proj_runs", "DELETE FROM replay_cache",
                "UPDATE projection_states SET version = 0"):
        assert "permission denied" in _refused(r_url, sql)
    with EventStore(url) as store:
        assert store.stream_version("S") == 3


def test_a_reader_replays_without_caching(roles: tuple[str, str, str]) -> None:
    url, writer, reader = roles
    assert _cli(url)("db", "roles", "--writer", writer, "--reader", reader).exit_code == 0
    n = rp.CACHE_EVERY + 5
    with EventStore(url) as store:
        store.append("L", [NewEvent("document.observed", {"doc": {"n": 0}})] + [
            NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/n", "value": i}]}) for i in range(1, n)])
    r = _cli(_as(url, reader))("replay", "L", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"n": n - 1}, r.output
    with psycopg.connect(_plain(url)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM replay_cache").fetchone() == (0,)
    assert json.loads(_cli(url)("replay", "L", "--json").stdout) == {"n": n - 1}  # the owner caches
    with psycopg.connect(_plain(url)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM replay_cache").fetchone() == (1,)


def test_roles_need_postgresql_and_sane_names(run: Invoke, store_url: str) -> None:
    r = run("db", "roles", "--writer", 'x"; drop table events; --')
    assert r.exit_code == 1
    if store_url.startswith("sqlite"):
        assert r.stderr.startswith("Error: Database roles are a PostgreSQL feature")
    else:
        assert r.stderr.startswith('Error: --writer "x"; drop table events; --" is not a role name')
    r = run("db", "roles", "--writer", "same", "--reader", "same")
    assert r.exit_code == 1 and r.stderr.startswith("Error: ")


def test_a_server_as_the_writer_role_checks_named_tokens_but_cannot_make_or_revive_one(
        roles: tuple[str, str, str]) -> None:
    """The writer (what `evstore serve` connects as) reads api_tokens and notes a token's use; only the owner adds
    or revokes tokens, so a compromised server cannot mint one or undo a revocation."""
    from eventstore import tokens

    url, writer, reader = roles
    assert _cli(url)("db", "roles", "--writer", writer, "--reader", reader).exit_code == 0
    with EventStore(url) as store:
        secret = tokens.add_token(store, "m1", "append")
    w_url = _as(url, writer)
    with EventStore(w_url) as store:
        found = tokens.find_token(store, secret)
        assert found is not None and found.name == "m1"
        assert tokens.get_token(store, "m1").last_used_at is not None  # type: ignore[union-attr]
    for sql in ("INSERT INTO api_tokens (name, scope, token_sha256, created_at) VALUES ('x', 'admin', 'x', 'x')",
                "UPDATE api_tokens SET revoked_at = NULL", "UPDATE api_tokens SET scope = 'admin'",
                "DELETE FROM api_tokens"):
        assert "permission denied" in _refused(w_url, sql)
