"""The append path word for word: refusals name what and where, results carry exact versions and
positions, the chain links each event to the one before (test_store_contract.py holds the rules)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from eventstore import chain
from eventstore.errors import ConcurrencyError, DuplicateEventId, EvstoreError, InvalidEvent
from eventstore.store import EventStore, NewEvent


def ev(i: int = 0, **kw: object) -> NewEvent:
    return NewEvent("t.x", {"i": i}, **kw)  # type: ignore[arg-type]


def test_refusals_say_what_and_where(store: EventStore) -> None:
    with pytest.raises(InvalidEvent) as info:
        store.append("S", [])
    assert str(info.value) == 'Nothing to append to stream "S".'
    with pytest.raises(InvalidEvent) as info:
        store.append("S", [ev()], expected_version=-1)  # type: ignore[arg-type]
    assert str(info.value) == 'expected_version must be "any", "no stream" or an int >= 0, got -1.'
    with pytest.raises(InvalidEvent) as info:
        store.append("S", [ev()], expected_version=True)  # type: ignore[arg-type]
    assert str(info.value) == 'expected_version must be "any", "no stream" or an int >= 0, got True.'
    with pytest.raises(InvalidEvent) as info:
        store.append("x" * 256, [ev()])
    assert str(info.value) == ("stream id must be a non-empty string of at most 255 characters, got 256 characters "
                               f"({'x' * 40!r}…).")
    with pytest.raises(InvalidEvent) as info:
        store.append("", [ev()])
    assert str(info.value) == "stream id must be a non-empty string of at most 255 characters, got ''."
    with pytest.raises(ConcurrencyError) as cinfo:
        store.append("NEW", [ev()], expected_version=1)
    assert (cinfo.value.stream_id, cinfo.value.expected, cinfo.value.actual) == ("NEW", 1, 0)
    assert str(cinfo.value) == 'Stream "NEW" is at version 0, expected 1; re-read and retry.'
    assert store.list_streams() == []
    store.append("x" * 255, [ev()])  # the longest id is accepted


def test_versions_positions_and_links(store: EventStore) -> None:
    r1 = store.append("A", [ev(1), ev(2)], expected_version=0)  # 0 on a new stream = "no stream"
    r2 = store.append("B", [ev(3)], expected_version="no stream")
    r3 = store.append("A", [ev(4), ev(5), ev(6)], expected_version=2)
    assert (r1.stream_id, r1.version, r1.positions) == ("A", 2, [1, 2])
    assert (r2.stream_id, r2.version, r2.positions) == ("B", 1, [3])
    assert (r3.stream_id, r3.version, r3.positions) == ("A", 5, [4, 5, 6])
    assert not (r1.duplicate or r2.duplicate or r3.duplicate)
    events = list(store.read_stream("A"))
    assert [(e.version, e.position, e.payload["i"]) for e in events] == \
        [(1, 1, 1), (2, 2, 2), (3, 4, 4), (4, 5, 5), (5, 6, 6)]
    with store.reading() as cur:
        cur.execute("SELECT position, salt FROM events")
        salts = {int(p): bytes(s) for p, s in cur.fetchall()}
    assert all(len(s) == chain.SALT_BYTES for s in salts.values()) and len(set(salts.values())) == 6
    prev = chain.GENESIS
    for e in events:  # each hash recomputes from the row (salted digests) and links to the previous one
        assert e.prev_hash == prev
        salt = salts[e.position]
        assert e.hash == chain.event_hash(prev, "A", e.version, e.event_id, e.type, e.schema_version,
                                          e.occurred_at, e.recorded_at, chain.digest(salt + e.data),
                                          chain.digest(salt + e.meta))
        prev = e.hash
    info = store.stream_info("A")
    assert info is not None and (info.version, info.head_hash) == (5, prev)
    assert len({e.event_id for e in events}) == 5  # generated ids are distinct
    assert store.max_position() == 6


def test_a_new_event_appended_twice_gets_two_ids(store: EventStore) -> None:
    e = ev(1)
    store.append("S", [e])
    store.append("S", [e])
    a, b = store.read_stream("S")
    assert a.event_id != b.event_id and e.event_id is None


def test_idempotent_retry_and_its_refusals(store: EventStore) -> None:
    ids = [str(uuid.UUID(int=i + 1)) for i in range(3)]
    first = store.append("S", [ev(i, event_id=ids[i]) for i in range(2)])
    again = store.append("S", [ev(i, event_id=ids[i]) for i in range(2)])
    assert (again.stream_id, again.version, again.positions, again.duplicate) == ("S", 2, first.positions, True)
    with pytest.raises(DuplicateEventId) as info:
        store.append("S", [ev(0, event_id=ids[0]), ev(2, event_id=ids[2])])
    assert str(info.value) == ('Batch for "S" mixes new events with already-recorded event ids; retry the original '
                               "batch unchanged.")
    for changed in (ev(9, event_id=ids[1]), NewEvent("t.y", {"i": 1}, event_id=ids[1]),
                    ev(1, event_id=ids[1], meta={"m": 1}), ev(1, event_id=ids[1], schema_version=2),
                    ev(1, event_id=ids[1], occurred_at="2025-01-01T00:00:00Z")):
        with pytest.raises(DuplicateEventId) as info:
            store.append("S", [changed])
        assert str(info.value) == (f'Event id {ids[1]} was already recorded as "t.x" in stream "S" version 2 '
                                   "with different content; use a new event id.")
    with pytest.raises(DuplicateEventId) as info:
        store.append("T", [ev(1, event_id=ids[1])])  # same content, other stream
    assert "already recorded" in str(info.value)
    with pytest.raises(DuplicateEventId) as info:
        store.append("U", [ev(1, event_id=ids[2]), ev(2, event_id=ids[2])])
    assert str(info.value) == (f"Event id {ids[2]} appears twice in one append with different content; give each "
                               "event its own id.")
    assert getattr(info.value, "item", None) == 1
    assert store.stream_version("S") == 2 and store.stream_info("U") is None


def test_append_many_expected_versions(store: EventStore) -> None:
    results = store.append_many([("A", ev(1), 0), ("A", ev(2), None), ("B", ev(3), "no stream"), ("A", ev(4), 2)])
    # one result per stream, in first-seen order, with every position it got
    assert [(r.stream_id, r.version, r.positions) for r in results] == [("A", 3, [1, 2, 4]), ("B", 1, [3])]
    assert store.stream_version("A") == 3 and store.stream_version("B") == 1
    with pytest.raises(ConcurrencyError) as info:
        store.append_many([("B", ev(5), None), ("A", ev(6), 2)])
    assert str(info.value) == 'Stream "A" is at version 3, expected 2; re-read and retry.'
    assert store.stream_version("B") == 1  # all or nothing


def test_one_client_id_in_two_streams_of_one_append_is_refused(store: EventStore) -> None:
    """The same id and content in another stream is another event, not a repeat to drop: append_many
    writes the first stream's events before it looks the next stream's ids up, and finds the clash."""
    eid = str(uuid.UUID(int=7))
    with pytest.raises(DuplicateEventId) as info:
        store.append_many([("A", ev(1, event_id=eid), None), ("B", ev(1, event_id=eid), None)])
    assert str(info.value) == (f'Event id {eid} was already recorded as "t.x" in stream "A" version 1 with '
                               "different content; use a new event id.")
    assert getattr(info.value, "item", None) == 1
    assert store.list_streams() == []  # all or nothing
    # within one stream the repeat is dropped: one event, as an idempotent retry would be
    [result] = store.append_many([("A", ev(1, event_id=eid), None), ("A", ev(1, event_id=eid), None)])
    assert (result.stream_id, result.version, result.positions) == ("A", 1, [1])


def test_generated_event_ids_are_version_7_uuids_of_the_current_millisecond() -> None:
    """RFC 9562 UUIDv7: 48-bit Unix milliseconds, version 7, variant 10, the rest random."""
    import time

    from eventstore.store import new_event_ids

    before = time.time_ns() // 1_000_000
    made = new_event_ids(200)
    ids = [uuid.UUID(i) for i in made]
    after = time.time_ns() // 1_000_000
    assert made == [str(u) for u in ids]  # canonical text (uuid.UUID also reads misplaced hyphens)
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)
    assert all(before <= u.int >> 80 <= after for u in ids)
    assert len(set(ids)) == 200 and len({u.int & (2**62 - 1) for u in ids}) == 200


def test_new_event_errors_name_the_event_type_on_either_path() -> None:
    """Validation names the type whether data comes as a dict (the fast path) or as JSON bytes, and
    a type is at most 200 characters on both (mutation testing: each survived)."""
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("x.y", {"v": float("nan")})
    assert str(exc.value) == 'data of "x.y": nan at $.v is not valid JSON (NaN/Infinity).'
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("x.y", b"[1]")
    assert str(exc.value) == 'data of "x.y": must be a JSON object, got array.'
    with pytest.raises(InvalidEvent) as exc:  # the meta is named as the meta, of that type
        NewEvent("x.y", {}, meta={"v": float("nan")})
    assert str(exc.value) == 'meta of "x.y": nan at $.v is not valid JSON (NaN/Infinity).'
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("x.y", b'{"a":')
    assert str(exc.value) == 'data of "x.y": not valid JSON at line 1, column 6: Expecting value.'
    assert (NewEvent("x.y", b"{}").schema_version, NewEvent("x.y", b"{}", schema_version=5).schema_version) == (1, 5)
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("x.y", {}, event_id="nope")
    assert str(exc.value) == "event_id 'nope' is not a UUID."
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("a\x00b", b"{}")
    assert str(exc.value) == "event type 'a\\x00b' contains a NUL character (U+0000), which PostgreSQL cannot store."
    e = NewEvent("x.y", b'{"a": 1}')
    assert (e.type, e.data) == ("x.y", b'{"a":1}')
    assert NewEvent("a" * 200, b"{}").type == "a" * 200 == NewEvent("a" * 200, {}).type
    for bad in ("", "a" * 201, None, 5):  # a dict takes the fast path, bytes the other: the same refusal
        for data in ({}, b"{}"):
            with pytest.raises(InvalidEvent) as exc:
                NewEvent(bad, data)
            assert str(exc.value) == f"event type must be a non-empty string of at most 200 characters, got {bad!r}."
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("a" * 201, b"{}")
    assert str(exc.value) == f"event type must be a non-empty string of at most 200 characters, got {'a' * 201!r}."
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("t\udcff", {})  # a byte that was not UTF-8 on the command line (surrogateescape)
    assert str(exc.value) == ("event type 't\\udcff' is not valid UTF-8 text (character 2 stands for a byte that is "
                              "not UTF-8, e.g. an argument in another encoding).")


@pytest.mark.parametrize("words", ["no room", ""])
def test_a_failure_to_begin_an_append_is_reported_as_itself(store: EventStore, monkeypatch: pytest.MonkeyPatch,
                                                           words: str) -> None:
    """The transaction is rolled back on its own connection when taking the append lock fails, and
    the driver's error comes through translated, in the driver's words (its class when it has none), naming
    the database file or server (mutation testing: a rollback on nothing, the file named for a server, and
    the error's own words lost survived)."""
    from eventstore import config
    from eventstore.errors import StorageFull

    backend = type(store.backend)
    real = backend.begin_locked_append
    if store.url.startswith("sqlite"):
        import sqlite3

        full: Exception = sqlite3.OperationalError(words)
        full.sqlite_errorcode = 13  # type: ignore[attr-defined]  # SQLITE_FULL, as the driver sets it
        where = f"the disk holding {config.sqlite_file(store.url)}"
        reason = words or "OperationalError"
    else:
        import psycopg.errors

        full = psycopg.errors.DiskFull(words)
        where = f"the database server ({store.backend.display_url()})"
        reason = words or "DiskFull"

    def failing(self, raw, cur, stream_id):  # type: ignore[no-untyped-def]
        self.begin_write(raw)  # the transaction began and holds the lock: the failure must roll it back
        raise full

    monkeypatch.setattr(backend, "begin_locked_append", failing)
    with pytest.raises(StorageFull) as info:
        store.append("S", [NewEvent("x.y", {})])
    assert str(info.value) == (f"No space left on {where} ({reason}); nothing of this append was written. "
                               "The disk is full: free space and retry.")
    assert info.value.__cause__ is full
    monkeypatch.setattr(backend, "begin_locked_append", real)
    assert store.append("S", [NewEvent("x.y", {})]).version == 1  # the connection is usable again


@pytest.fixture
def local_time_not_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is Tokyo's (UTC+9) while the test runs."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


def test_times_are_stored_in_utc_whatever_the_local_zone(store: EventStore, local_time_not_utc: None) -> None:
    """Naive times are UTC, aware ones are converted, the record time is UTC now; the machine's own
    zone never leaks in (mutation testing: local time for any of them survived on a UTC machine)."""
    from eventstore.store import iso, utcnow

    assert iso(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000000Z"
    assert iso(datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-02T01:04:05.000007Z"
    assert iso("2026-01-02T03:04:05Z") == iso("2026-01-02T05:04:05+02:00") == "2026-01-02T03:04:05.000000Z"
    assert iso("2026-01-02T03:04:05") == "2026-01-02T03:04:05.000000Z"
    before = datetime.now(UTC).replace(tzinfo=None)
    store.append("S", [NewEvent("t.x", {}, occurred_at=datetime(2026, 1, 2, 3, 4, 5))])
    after = datetime.now(UTC).replace(tzinfo=None)
    [e] = store.read_stream("S")
    assert e.occurred_at == "2026-01-02T03:04:05.000000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e.recorded_at), e.recorded_at
    assert before <= datetime.fromisoformat(e.recorded_at[:-1]) <= after
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", utcnow())


def test_time_and_schema_version_refusals_name_the_value() -> None:
    from eventstore.store import iso

    with pytest.raises(InvalidEvent) as info:
        NewEvent("t.x", {}, occurred_at=123)  # type: ignore[arg-type]
    assert str(info.value) == "occurred_at must be an ISO-8601 string, got int."
    with pytest.raises(InvalidEvent) as info:
        iso(b"2026-01-01", what="answeredAt")  # type: ignore[arg-type]
    assert str(info.value) == "answeredAt must be an ISO-8601 string, got bytes."
    assert NewEvent("t.x", {}, schema_version=1).schema_version == 1
    from eventstore.dialects.mapipe.events import PhaseStarted

    typed = PhaseStarted(phase="build", record={})
    assert NewEvent(None, typed).schema_version == PhaseStarted.schema_version
    assert NewEvent(None, typed, schema_version=3).schema_version == 3  # given, it wins over the class's
    from eventstore.store import UNKNOWN

    assert repr(UNKNOWN) == "UNKNOWN" and NewEvent("t.x", {}).document is UNKNOWN  # as it shows in a debugger
    assert NewEvent("t.x", {}, schema_version=32767).schema_version == 32767
    for bad in (0, 32768, True, 2.0):
        with pytest.raises(InvalidEvent) as info:
            NewEvent("t.x", {}, schema_version=bad)  # type: ignore[arg-type]
        assert str(info.value) == f"schema_version must be an integer from 1 to 32767, got {bad!r}."


def test_an_append_to_a_stream_is_five_statements(sqlite_url: str) -> None:
    """The stream's head is read with the log's end in one statement, the events go in one INSERT and
    the head moves in one UPDATE: the round trips of the hot path (mutation testing: looking the
    stream up a second time survived, as it changes no result)."""
    from conftest import migrated

    with EventStore(migrated(sqlite_url)) as store:
        store.append("S", [NewEvent("t.x", {})])
        sent: list[str] = []
        store._raw().set_trace_callback(sent.append)
        store.append("S", [NewEvent("t.x", {"i": 1}), NewEvent("t.x", {"i": 2})])
        store._raw().set_trace_callback(None)
    assert [s.split()[0] for s in sent] == ["BEGIN", "SELECT", "INSERT", "UPDATE", "COMMIT"], sent


def test_a_failed_commit_step_is_rolled_back_and_said_in_the_stores_words(store: EventStore,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A unique violation while committing is a concurrent writer (retry); on PostgreSQL a missing
    privilege is a role that may not append, in the first line of the database's words (SQLite has no
    roles).  Mutation testing: both messages survived (the role tests reach them through a subprocess)."""
    backend = type(store.backend)
    if store.url.startswith("sqlite"):
        import sqlite3

        clash: Exception = sqlite3.IntegrityError("UNIQUE constraint failed: events.position")
        cases = [(clash, f"Append clashed with a concurrent write ({clash}); retry.")]
    else:
        import psycopg.errors

        clash = psycopg.errors.UniqueViolation("duplicate key value violates unique constraint")
        refused = psycopg.errors.InsufficientPrivilege("  permission denied for table events\nDETAIL: the role")
        cases = [(clash, f"Append clashed with a concurrent write ({clash}); retry."),
                 (refused, "The database refused the append (permission denied for table events); this database "
                           "role may not append (`evstore db roles` creates one that may).")]
    real = backend.move_stream_heads
    for error, expected in cases:
        def failing(self, cur, heads, error=error):  # type: ignore[no-untyped-def]
            list(heads)
            raise error

        monkeypatch.setattr(backend, "move_stream_heads", failing)
        with pytest.raises(EvstoreError) as info:
            store.append("S", [NewEvent("t.x", {})])
        assert str(info.value) == expected and info.value.__cause__ is error
        monkeypatch.setattr(backend, "move_stream_heads", real)
        assert store.list_streams() == [] and store.max_position() == 0  # nothing of it was written
    assert store.append("S", [NewEvent("t.x", {})]).positions == [1]


def test_close_closes_each_threads_connection_and_the_store_opens_again(store: EventStore) -> None:
    """close() closes the connection a thread held (not only forgets it), and the store may be used
    after it: a new connection is made (mutation testing: both survived)."""
    store.append("S", [NewEvent("t.x", {})])
    held = store._raw()
    store.close()
    with pytest.raises(store.backend.driver_errors) as info:  # sqlite3.ProgrammingError / psycopg.OperationalError
        held.execute("SELECT 1")
    assert "closed" in str(info.value)
    assert store.append("S", [NewEvent("t.x", {})]).version == 2 and store.max_position() == 2


def test_the_synchronous_setting_reaches_the_sqlite_connection(sqlite_url: str) -> None:
    """``EventStore(url, synchronous="FULL")`` is what the connection runs with (mutation testing: the
    argument dropped survived; NORMAL is the default)."""
    from conftest import migrated

    url = migrated(sqlite_url)
    for given, pragma in ((None, 1), ("FULL", 2), ("NORMAL", 1)):
        with EventStore(url, synchronous=given) as store:
            assert store._raw().execute("PRAGMA synchronous").fetchone()[0] == pragma, given
