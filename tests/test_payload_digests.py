"""Salted payload digests: what the digests that stay after an erasure reveal.

A new event commits to ``SHA-256(salt || data)`` and ``SHA-256(salt || meta)`` with 16 random bytes of
its own in ``events.salt``; an erasure clears the salt with the payload, so no stored value confirms
a guess of what was erased.  Events stored before salts (revision 0009 and earlier) keep their plain
digests: they verify as before, and (as docs/proofs.md says) their digests still confirm a guess.
"""

from __future__ import annotations

import hashlib
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
        for table in inspect(conn).get_table_names():
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
