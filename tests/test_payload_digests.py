"""Salted payload digests: what the digests that stay after an erasure reveal.

A new event commits to ``SHA-256(salt || data)`` and ``SHA-256(salt || meta)`` with 16 random bytes of
its own in ``events.salt``; an erasure clears the salt with the payload, so no stored value confirms
a guess of what was erased.  Events stored before salts (revision 0009 and earlier) keep their plain
digests: they verify as before, and (as docs/proofs.md says) their digests still confirm a guess.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from eventstore import chain
from eventstore.erasure import erase
from eventstore.store import EventStore, NewEvent
from eventstore.verify import verify

SECRET = {"password": "hunter2", "email": "alice.w@example.org"}
META = {"note": "login form"}


def _rows(store: EventStore) -> dict[int, tuple[bytes, bytes, bytes | None, bytes, bytes]]:
    """position -> (data_sha256, meta_sha256, salt, data, meta) as stored."""
    with store.reading() as cur:
        cur.execute("SELECT position, data_sha256, meta_sha256, salt, data, meta FROM events")
        return {int(r[0]): (bytes(r[1]), bytes(r[2]), None if r[3] is None else bytes(r[3]), bytes(r[4]), bytes(r[5]))
                for r in cur.fetchall()}


def _every_stored_value(store: EventStore) -> list[bytes]:
    """Every value of every column of every table of the store, as bytes (text as UTF-8)."""
    out: list[bytes] = []
    with store.engine.connect() as conn:
        # An FTS5 virtual table holds nothing itself (contentless, without a size table: it cannot even
        # be scanned); its index is in its shadow tables (proj_search_fts_data, _idx, ...), read here.
        virtual = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL%'"))} \
            if conn.dialect.name == "sqlite" else set()
        for table in inspect(conn).get_table_names():
            if table in virtual:
                continue
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                for v in row:
                    if isinstance(v, (bytes, bytearray, memoryview)):
                        out.append(bytes(v))
                    elif isinstance(v, str):
                        out.append(v.encode())
    return out


def test_a_new_event_commits_to_salted_digests(store: EventStore) -> None:
    store.append("S", [NewEvent("login.tried", SECRET, meta=META), NewEvent("login.tried", SECRET, meta=META)])
    (d1, m1, s1, data, meta), (d2, m2, s2, data2, _) = _rows(store)[1], _rows(store)[2]
    assert data == data2 and s1 is not None and s2 is not None and len(s1) == len(s2) == chain.SALT_BYTES
    assert d1 != hashlib.sha256(data).digest() and m1 != hashlib.sha256(meta).digest()  # not the plain SHA-256
    assert d1 != d2 and m1 != m2 and s1 != s2  # equal payloads, different digests
    assert (d1, m1) == (hashlib.sha256(s1 + data).digest(), hashlib.sha256(s1 + meta).digest())
    assert verify(store).ok


def test_after_an_erasure_no_stored_value_confirms_a_guess(store: EventStore, run: Callable[..., Any]) -> None:
    """Whoever holds the database guesses the erased payload exactly (as the store encodes it) and
    finds no column holding its SHA-256, nor its SHA-256 salted with any salt left in the store, nor a
    chain hash recomputed from it."""
    target = NewEvent("login.tried", SECRET, meta=META, event_id="0190f5a4-0000-7000-8000-000000000001")
    store.append("S", [NewEvent("t.x", {"i": 1}), target, NewEvent("t.x", {"i": 2})])
    store.append("T", [NewEvent("login.tried", {"password": "other"})])
    before = _rows(store)[2]
    assert verify(store).ok
    guesses = [target.data, target.meta]

    def forms() -> set[bytes]:
        salts = [r[2] for r in _rows(store).values() if r[2] is not None]
        out = {hashlib.sha256(g).digest() for g in guesses}
        out |= {hashlib.sha256(s + g).digest() for s in salts for g in guesses}
        out |= {hashlib.sha256(g + s).digest() for s in salts for g in guesses}
        return out | {d.hex().encode() for d in out}

    assert forms().intersection(_every_stored_value(store))  # before: the event's own salt confirms it
    erase(store, reason="GDPR request", event_id=target.event_id)
    after = _rows(store)[2]
    assert after[2:] == (None, b"", b"")  # the salt went with data and meta
    assert after[:2] == before[:2]  # the committed digests stay (the chain and every proof hold)
    stored, found = _every_stored_value(store), forms()
    assert stored and not found.intersection(stored)
    assert not any(f in v for v in stored for f in found if len(v) > len(f))  # nor inside a longer value
    [e] = [e for e in store.read_stream("S") if e.version == 2]
    plain = chain.event_hash(e.prev_hash, "S", 2, e.event_id, e.type, e.schema_version, e.occurred_at,
                             e.recorded_at, hashlib.sha256(target.data).digest(), hashlib.sha256(target.meta).digest())
    assert plain != e.hash
    report = verify(store)
    assert report.ok and report.erased == 1, report.failures
    r = run("verify")
    assert r.exit_code == 0, r.stderr


def test_a_retry_of_an_erased_event_is_a_duplicate_and_records_nothing(store: EventStore) -> None:
    """Its content can no longer be compared (the salt is gone): the header decides, and the erased
    payload is never written again."""
    event_id = "0190f5a4-0000-7000-8000-000000000002"
    store.append("S", [NewEvent("login.tried", SECRET, event_id=event_id)])
    erase(store, reason="request", event_id=event_id)
    again = store.append("S", [NewEvent("login.tried", SECRET, event_id=event_id)])
    assert again.duplicate and store.stream_version("S") == 1 and _rows(store)[1][3] == b""
    with pytest.raises(Exception, match="different content"):  # another type under that id is still refused
        store.append("S", [NewEvent("login.other", SECRET, event_id=event_id)])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_events_stored_before_salts_still_verify(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A store written at revision 0009 (plain SHA-256 digests), upgraded: its old events verify, new
    ones are salted, both can be erased, and verify passes after; an old erased event's digest still
    confirms a guess (what docs/proofs.md says holds for events stored before)."""
    from eventstore import migrate
    from eventstore.db import make_engine

    url = f"sqlite:///{tmp_path}/old/events.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0009")
        with EventStore(url, check_schema=False, plain_digests=True) as old:  # what evstore wrote at 0009
            old.append("S", [NewEvent("login.tried", SECRET, meta=META), NewEvent("t.x", {"i": 1})])
            old.append("T", [NewEvent("t.x", {"i": 2}, event_id="0190f5a4-0000-7000-8000-000000000003")])
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:
        rows = _rows(store)
        for d, m, salt, data, meta in rows.values():
            assert salt is None and (d, m) == (hashlib.sha256(data).digest(), hashlib.sha256(meta).digest())
        assert verify(store).ok
        again = store.append("T", [NewEvent("t.x", {"i": 2}, event_id="0190f5a4-0000-7000-8000-000000000003")])
        assert again.duplicate  # an old event's idempotent retry compares its plain digests
        store.append("S", [NewEvent("login.tried", SECRET, meta=META)])
        new = _rows(store)[4]
        assert new[2] is not None and new[0] == hashlib.sha256(new[2] + new[3]).digest()
        guess = rows[1][3]
        erase(store, reason="request", stream_ids=["S"])
        report = verify(store)
        assert report.ok and report.erased == 3, report.failures
        after = _rows(store)
        assert after[1][0] == hashlib.sha256(guess).digest()  # old scheme: the guess is confirmed
        assert after[4][0] != hashlib.sha256(guess).digest() and after[4][2] is None  # new scheme: it is not


FRIDAY = Path(__file__).resolve().parent / "data" / "friday" / "history"


def test_an_erased_versions_identity_keeps_where_it_was_not_its_bytes(store: EventStore, run: Callable[..., Any],
                                                                      tmp_path: Path) -> None:
    """Capture-once keeps each source version's identity (``file:NAME@SHA-256 of its bytes``); once the
    version is erased no stored value holds that digest, and capturing the same files again (a history
    by place and order, a live file by place) still records nothing new."""
    history = tmp_path / "hist"
    history.mkdir()
    files = sorted(FRIDAY.iterdir())[:3]
    for f in files:
        (history / f.name).write_bytes(f.read_bytes())
    live = tmp_path / "friday-state.json"
    live.write_bytes(files[0].read_bytes())
    assert run("ingest", "friday", str(history), "--stream", "F2").exit_code == 0
    assert run("ingest", "friday", str(live), "--stream", "F1").exit_code == 0
    digests = [hashlib.sha256(f.read_bytes()).hexdigest().encode() for f in files]
    assert any(d in v for v in _every_stored_value(store) for d in digests)  # before: the identities hold them
    for stream in ("F1", "F2"):
        r = run("erase", "--stream", stream, "--reason", "request 7")
        assert r.exit_code == 0, r.output
    stored = _every_stored_value(store)
    assert not [d for d in digests if any(d in v for v in stored)]
    again = run("ingest", "friday", str(history), "--stream", "F2")
    assert again.exit_code == 0 and "3 version(s) already recorded, 0 new" in again.stderr, again.output
    assert "erased since" in again.stdout
    again = run("ingest", "friday", str(live), "--stream", "F1")
    assert again.exit_code == 0 and "1 version(s) already recorded, 0 new" in again.stderr, again.output
    assert (store.stream_version("F1"), store.stream_version("F2")) == (1, 13)
    report = verify(store)
    assert report.ok and report.erased == 14, report.failures


def test_an_erased_transcript_line_leaves_no_digest_of_a_prefix_holding_it(store: EventStore, run: Callable[..., Any],
                                                                            tmp_path: Path) -> None:
    """A transcript captured in two batches: each batch's bookkeeping (``meta.transcript``) records the
    prefix read so far, the later one's covering the earlier lines.  Once a line of the first batch and
    the last line are erased, no stored value is the SHA-256 of a prefix holding them (that would confirm
    a guess of the line): the prefixes are keyed with the local key, and what an erasure keeps holds none.
    Captured again, the transcript still records nothing new."""
    from tests.claude_fixtures import SESSION, records

    lines = records(1)
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes(b"".join(lines[:4]))
    assert run("ingest", "claude", str(f)).exit_code == 0
    f.write_bytes(b"".join(lines))
    assert run("ingest", "claude", str(f)).exit_code == 0
    prefixes = [hashlib.sha256(b"".join(lines[:n])).hexdigest().encode() for n in (4, len(lines))]
    last = max(store.read_stream(SESSION), key=lambda e: e.version)
    assert run("erase", "--match", "Look at the test first.", "--reason", "a line").exit_code == 0
    assert run("erase", "--event", last.event_id, "--reason", "the last line").exit_code == 0
    assert not [p for p in prefixes if any(p in v for v in _every_stored_value(store))]
    assert run("ingest", "claude", str(f)).exit_code == 0 and store.stream_version(SESSION) == last.version
    assert verify(store).ok


def _downgrade(url: str, revision: str) -> None:
    from alembic import command

    from eventstore import migrate
    from eventstore.db import make_engine

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.downgrade(migrate._config(engine, conn), revision)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_salts_and_erased_identities_migrate_down_and_up_again(backend: str, tmp_path: Path,
                                                               request: pytest.FixtureRequest) -> None:
    """0009 -> 0010 -> 0011 -> 0009 -> head.  0011 replaces what erasures made before it left (a version's
    file digest, a transcript prefix digest); downgrading drops the salts and the relaxed source_versions
    trigger, upgrading brings both back; a store of plain-digest events verifies throughout, and a
    salted event, as 0010's downgrade says, no longer does once its salt was dropped."""
    from conftest import exec_sql

    from eventstore import migrate
    from eventstore.db import make_engine

    url = f"sqlite:///{tmp_path}/old/events.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    sha = hashlib.sha256(b"the state file's bytes").hexdigest()
    meta = {"source": {"file": "state.json", "id": f"file:state.json@{sha}"},
            "transcript": {"file": "t.jsonl", "end": 10, "lines": 1, "prefix_sha256": sha}}
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0009")
        with EventStore(url, check_schema=False, plain_digests=True) as old:
            old.append("S", [NewEvent("t.x", {"i": 1}, meta=meta), NewEvent("t.x", {"i": 2})])
        migrate.upgrade(engine, "0010")
        with EventStore(url, check_schema=False) as at10:  # an erasure as evstore made it at 0010
            exec_sql(at10, "INSERT INTO erasures (position, kind, reason, admin_event_id, erased_at, kept) VALUES "
                           "(1, 'erased', 'r', 'a', '2026-12-03T00:00:00Z', :k)",
                     k=json.dumps({"transcript": {"end": 10, "file": "t.jsonl", "lines": 1, "prefix_sha256": sha}}))
            exec_sql(at10, "UPDATE events SET data = :e, meta = :e, salt = NULL WHERE position = 1", e=b"")
            assert any(sha.encode() in v for v in _every_stored_value(at10))
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:
        assert not any(sha.encode() in v for v in _every_stored_value(store))
        with store.reading() as cur:
            assert [i for _, _, i in store.backend.source_rows(cur)] == ["file:state.json@erased"]
        assert verify(store).ok
    _downgrade(url, "0009")
    with EventStore(url, check_schema=False, plain_digests=True) as at9:
        assert "salt" not in {c["name"] for c in inspect(at9.engine).get_columns("events")}
        with pytest.raises(Exception, match="append-only"):  # 0006's trigger again: no UPDATE at all
            exec_sql(at9, "UPDATE source_versions SET source_id = 'file:state.json@erased' WHERE version = 1")
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:
        assert verify(store).ok
        store.append("S", [NewEvent("t.x", {"i": 3}, meta={"source": {"file": "b.json", "id": f"file:b.json@{sha}"}})])
        assert _rows(store)[3][2] is not None  # salted again
        erase(store, reason="r", stream_ids=["S"])
        with store.reading() as cur:
            assert sorted(i for _, _, i in store.backend.source_rows(cur)) == ["file:b.json@erased",
                                                                              "file:state.json@erased"]
        report = verify(store)
        assert report.ok and report.erased == 3, report.failures
        store.append("T", [NewEvent("t.x", {"i": 4})])
    _downgrade(url, "0009")
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:  # the salted events (T's, the erasure's admin event) no longer recompute
        report = verify(store)
        assert {(f.stream_id, f.field_class) for f in report.failures} == {
            (s, f) for s in ("T", "evstore.admin") for f in ("data", "meta")}


def test_a_hook_calls_event_id_confirms_no_guess_of_the_erased_call(store: EventStore, tmp_path: Path) -> None:
    """A hook event's id stays in the chain after an erasure.  A spooled call's derives from its record,
    which holds 128 random bits besides what the event's header shows (the time received, the pid);
    an http call's from its body keyed with the local scrub key: rebuilding either from a guess of
    the call does not give the id."""
    import base64

    from eventstore import capture, spool
    from eventstore.dialects.claude.secrets import Scrubber

    call = json.dumps({"session_id": "sess-h", "hook_event_name": "UserPromptSubmit",
                       "prompt": "my password is hunter2"}).encode()
    spool.write(tmp_path, call, now=1764578000.25)
    assert capture.drain(store, tmp_path).hooks == 1
    capture.record_hook(store, call.replace(b"sess-h", b"sess-i"), scrubber=Scrubber(key=b"local key"), via="http")
    erase(store, reason="request", stream_ids=["sess-h", "sess-i"])
    ids = {e.event_id for s in ("sess-h", "sess-i") for e in store.read_stream(s)}
    header = json.dumps({"received_at": 1764578000.25, "pid": os.getpid(), "bytes": len(call)},
                        separators=(",", ":")).encode()
    line = base64.b64encode(header) + b"\t" + base64.b64encode(call) + b"\n"
    guesses = {capture.hook_event_id(hashlib.sha256(line).hexdigest()),
               capture.hook_event_id(hashlib.sha256(call.replace(b"sess-h", b"sess-i")).hexdigest())}
    assert len(ids) == 2 and not ids & guesses


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_blobs_erased_before_0012_lose_their_key_on_upgrade(backend: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    """0011 -> head: a blob an erasure emptied at 0011 (row kept, erased_blobs keyed by the SHA-256 of its
    bytes) loses its row and its key becomes random bytes; verify still counts it.  Downgrading to 0011
    brings back the trigger that refuses any DELETE of a blob."""
    from conftest import exec_sql

    from eventstore import migrate
    from eventstore.db import make_engine

    url = f"sqlite:///{tmp_path}/old/events.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    data = b"an image of a session erased at 0011"
    key = hashlib.sha256(data).digest()
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0011")
        with EventStore(url, check_schema=False) as at11:  # an erasure of the blob as evstore made it at 0011
            at11.append("S", [NewEvent("t.x", {"i": 1}, meta={"blobs": [key.hex()]})], blobs={key.hex(): data})
            exec_sql(at11, "INSERT INTO erasures (position, kind, reason, admin_event_id, erased_at) VALUES "
                           "(1, 'erased', 'r', 'a', '2026-12-03T00:00:00Z')")
            exec_sql(at11, "UPDATE events SET data = :e, meta = :e, salt = NULL WHERE position = 1", e=b"")
            exec_sql(at11, "INSERT INTO erased_blobs (sha256, admin_event_id, erased_at) VALUES "
                           "(:k, 'a', '2026-12-03T00:00:00Z')", k=key)
            exec_sql(at11, "UPDATE blobs SET data = :e WHERE sha256 = :k", e=b"", k=key)
            assert any(key in v for v in _every_stored_value(at11))
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:
        assert not any(key in v for v in _every_stored_value(store))
        report = verify(store)
        assert report.ok and report.erased_blobs == 1, report.failures
    _downgrade(url, "0011")
    with EventStore(url, check_schema=False) as at11:
        at11.append("T", [NewEvent("t.x", {"j": 1}, meta={"blobs": [key.hex()]})], blobs={key.hex(): data})
        with pytest.raises(Exception, match="append-only"):
            exec_sql(at11, "DELETE FROM blobs")
