"""The event log's guarantees, run unchanged on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter

import pytest
from conftest import drop_append_only_triggers as _drop_triggers
from conftest import exec_sql as _exec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import assert_exact, canonical
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import IntegrityError, ProgrammingError

from eventstore import chain
from eventstore.errors import ConcurrencyError, DuplicateEventId, InvalidEvent, StreamNotFound
from eventstore.store import EventStore, NewEvent, RecordedEvent
from eventstore.verify import check_seal, make_seal, verify


def ev(i: int = 0, **kw: object) -> NewEvent:
    return NewEvent("test.happened", {"i": i, "text": "x" * 20}, **kw)  # type: ignore[arg-type]


def test_append_and_read_back(store: EventStore) -> None:
    r1 = store.append("PROJ-1", [ev(1), ev(2)], expected_version="no stream")
    assert (r1.version, len(r1.positions)) == (2, 2)
    r2 = store.append("PROJ-1", [ev(3)], expected_version=2)
    assert r2.version == 3 and r2.positions[0] > r1.positions[-1]
    got = list(store.read_stream("PROJ-1"))
    assert [e.version for e in got] == [1, 2, 3]
    assert [e.payload["i"] for e in got] == [1, 2, 3]
    assert [e.version for e in store.read_stream("PROJ-1", after_version=1, upto_version=2)] == [2]
    assert got[0].prev_hash == chain.GENESIS and got[1].prev_hash == got[0].hash
    assert store.max_position() == r2.positions[-1]
    assert [e.position for e in store.read_all(after_position=0, limit=2)] == r1.positions


def test_expected_version_rules(store: EventStore) -> None:
    store.append("S", [ev()], expected_version="no stream")
    with pytest.raises(ConcurrencyError) as info:
        store.append("S", [ev()], expected_version="no stream")
    with pytest.raises(ConcurrencyError) as info:
        store.append("S", [ev()], expected_version=5)
    assert str(info.value) == 'Stream "S" is at version 1, expected 5; re-read and retry.'
    with pytest.raises(ConcurrencyError):
        store.append("NEW", [ev()], expected_version=3)
    assert store.append("S", [ev()], expected_version="any").version == 2
    assert store.stream_info("NEW") is None  # the failed append created nothing


def test_idempotent_event_ids(store: EventStore) -> None:
    eid = str(uuid.uuid4())
    first = store.append("S", [ev(1, event_id=eid)], expected_version="no stream")
    again = store.append("S", [ev(1, event_id=eid)], expected_version="no stream")
    assert again.duplicate and again.positions == first.positions
    assert len(list(store.read_stream("S"))) == 1
    with pytest.raises(DuplicateEventId, match=eid):
        store.append("S", [ev(2, event_id=eid)])
    with pytest.raises(DuplicateEventId, match=eid):  # a retry must be the same event, time included
        store.append("S", [ev(1, event_id=eid, occurred_at="2025-01-01T00:00:00Z")])


def test_unknown_stream_and_bad_input(store: EventStore) -> None:
    with pytest.raises(StreamNotFound) as info:
        list(store.read_stream("nope"))
    assert str(info.value) == 'No stream "nope"; `evstore runs` lists the streams.'
    for bad in ([1, 2], "text", None):
        with pytest.raises(InvalidEvent, match="must be a JSON object"):
            NewEvent("t.x", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match="NaN"):
        NewEvent("t.x", {"v": float("nan")})
    deep: dict[str, object] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(InvalidEvent, match="nesting deeper"):
        NewEvent("t.x", deep)
    with pytest.raises(InvalidEvent, match="exceeds the limit"):
        NewEvent("t.x", {"blob": "x" * (5 * 1024 * 1024)})
    assert store.max_position() == 0


def test_concurrent_writers_one_stream(store: EventStore) -> None:
    """N writers race for each version: exactly one wins, losers get ConcurrencyError."""
    store.append("RACE", [ev(0)], expected_version="no stream")
    wins: Counter[int] = Counter()
    errors: list[str] = []
    barrier = threading.Barrier(6)

    def writer(w: int) -> None:
        barrier.wait()
        for _ in range(15):
            v = store.stream_version("RACE")
            try:
                r = store.append("RACE", [NewEvent("race.won", {"writer": w, "at": v})], expected_version=v)
                wins[r.version] += 1
            except ConcurrencyError as exc:
                assert '"RACE"' in str(exc) and f"expected {v}" in str(exc)
                errors.append(str(exc))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = list(store.read_stream("RACE"))
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    assert all(n == 1 for n in wins.values())
    assert len(events) == 1 + sum(wins.values())
    assert len(errors) + sum(wins.values()) == 6 * 15
    for e in events[1:]:  # each winner wrote on top of the version it read
        assert e.payload["at"] == e.version - 1
    assert verify(store).ok


def test_global_order_with_concurrent_subscriber(store: EventStore) -> None:
    """Writers on many streams + a catch-up reader: every event exactly once, in order."""
    n_writers, per_writer = 4, 40
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        for e in store.subscribe(after_position=0, batch_size=7, poll_interval=0.005, stop=stop):
            seen.append(e.position)

    def writer(w: int) -> None:
        for i in range(per_writer):
            store.append(f"stream-{w}-{i % 5}", [ev(i), ev(i + 1)])

    rt = threading.Thread(target=reader)
    rt.start()
    total = n_writers * per_writer * 2
    try:
        writers = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        deadline = threading.Event()
        for _ in range(400):
            if len(seen) >= total:
                break
            deadline.wait(0.025)
    finally:  # the reader stops whatever happened, before the store fixture closes the store
        stop.set()
        rt.join()
    assert len(seen) == total
    assert all(a < b for a, b in zip(seen, seen[1:], strict=False))
    assert sorted(seen) == [e.position for e in store.iter_all()]


def test_events_are_append_only_in_the_database(store: EventStore) -> None:
    store.append("S", [ev(1)])
    for sql in ("UPDATE events SET type = 'x'", "DELETE FROM events"):
        # SQLite's RAISE(ABORT) is an IntegrityError; PostgreSQL's trigger raises insufficient_privilege
        with pytest.raises((IntegrityError, ProgrammingError), match="append-only"):
            _exec(store, sql)
    assert [e.type for e in store.read_stream("S")] == ["test.happened"]


@pytest.mark.parametrize(
    ("sql", "field_class"),
    [
        ("UPDATE events SET data = :v WHERE version = 2", "data"),
        ("UPDATE events SET meta = :v WHERE version = 2", "meta"),
        ("UPDATE events SET type = 'forged.type' WHERE version = 2", "header"),
        ("UPDATE events SET prev_hash = hash WHERE version = 2", "link"),
        ("DELETE FROM events WHERE version = 3", "head"),
    ],
)
def test_verify_names_what_was_altered(store: EventStore, sql: str, field_class: str) -> None:
    store.append("A", [ev(1), ev(2), ev(3)])
    store.append("B", [ev(1)])
    report = verify(store)
    assert report.ok and (report.streams, report.events) == (2, 4)
    _drop_triggers(store)
    _exec(store, sql.replace("WHERE", "WHERE stream_pk = (SELECT stream_pk FROM streams WHERE stream_id = 'A') AND"),
          v=b'{"i":999}')
    report = verify(store)
    assert not report.ok
    failure, *gap = report.failures
    # Deleting A@3 (position 3, B@1 is at 4) also leaves a gap in the positions, the Merkle tree's leaves.
    assert [(f.stream_id, f.field_class) for f in gap] == ([("*", "tree")] if sql.startswith("DELETE") else [])
    assert (failure.stream_id, failure.field_class) == ("A", field_class)
    assert failure.version == 2  # for "head": the last event that is still there
    assert verify(store, "B").ok


def test_seal_detects_truncation_and_recomputed_chains(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k3y")
    store.append("A", [ev(1), ev(2), ev(3)])
    store.append("B", [ev(1)])
    cp = make_seal(store)
    assert cp["event_count"] == 4 and check_seal(store, cp) == []
    store.append("A", [ev(4)])  # appending after the seal is fine
    assert check_seal(store, cp) == []
    # An attacker rewrites A's second event and recomputes the chain (and the head) without the key.
    _drop_triggers(store)
    rows = [(e.version, e) for e in store.read_stream("A")]
    prev = chain.GENESIS
    for version, e in rows:
        data = b'{"i":42}' if version == 2 else e.data
        dsha, msha = chain.digest(data), chain.digest(e.meta)
        h = chain.event_hash(prev, "A", version, e.event_id, e.type, e.schema_version, e.occurred_at,
                             e.recorded_at, dsha, msha)
        # (plain digests, the salt dropped: how events stored before salts are checked)
        _exec(store, "UPDATE events SET data = :d, data_sha256 = :ds, meta_sha256 = :ms, salt = NULL, prev_hash = :p, "
                     "hash = :h WHERE event_id = :id", d=data, ds=dsha, ms=msha, p=prev, h=h, id=e.event_id)
        prev = h
    _exec(store, "UPDATE streams SET head_hash = :h WHERE stream_id = 'A'", h=prev)
    assert verify(store).ok  # the chain alone cannot tell
    failures = check_seal(store, cp)
    assert any("rewritten" in f.detail for f in failures)
    # Truncation: events removed after the seal was made.
    _exec(store, "DELETE FROM events WHERE stream_pk = (SELECT stream_pk FROM streams WHERE stream_id = 'B')")
    assert any("truncated" in f.detail for f in check_seal(store, cp))
    # A forged seal (recomputed without the key) is rejected.
    forged = {**cp, "event_count": 3}
    assert check_seal(store, forged)[0].field_class == "seal"
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "other")
    assert "signature" in check_seal(store, cp)[0].detail


def test_append_many_is_all_or_nothing(store: EventStore) -> None:
    def items():  # type: ignore[no-untyped-def]
        yield "A", ev(1), None
        yield "B", ev(2), None
        raise InvalidEvent("line 3: broken")

    with pytest.raises(InvalidEvent):
        store.append_many(items())
    assert store.max_position() == 0 and store.list_streams() == []
    results = store.append_many([("A", ev(1), None), ("B", ev(2), None), ("A", ev(3), 1)])
    assert {r.stream_id: r.version for r in results} == {"A": 2, "B": 1}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.text(max_size=10), json_values, max_size=5))
def test_data_round_trips_exactly(store: EventStore, data: dict[str, object]) -> None:
    r = store.append("prop", [NewEvent("prop.v", data)])
    [got] = store.read_all(after_position=r.positions[0] - 1, limit=1)
    assert_exact(got.payload, json.loads(canonical(data)))


def test_large_batches_round_trip_and_verify(store: EventStore) -> None:
    """Big appends take the bulk path (COPY on PostgreSQL, multi-row INSERTs of 100 rows plus a
    partial one on SQLite); content, order and chain are the same."""
    events = [NewEvent("bulk.e", {"i": i, "blob": "é" * (i % 50), "nested": {"x": [i, None, True]}},
                       meta={"m": i}) for i in range(1234)]
    r = store.append("BULK", events, expected_version="no stream")
    assert r.version == 1234 and r.positions == list(range(r.positions[0], r.positions[0] + 1234))
    got = list(store.read_stream("BULK"))
    assert [e.payload for e in got] == [{"i": i, "blob": "é" * (i % 50), "nested": {"x": [i, None, True]}}
                                        for i in range(1234)]
    assert [e.metadata["m"] for e in got] == list(range(1234))
    assert verify(store).ok


def test_no_stream_holds_within_one_batch(store: EventStore) -> None:
    items = [("S", NewEvent("t.x", {"i": 1}), "no stream"), ("S", NewEvent("t.x", {"i": 2}), "no stream")]
    with pytest.raises(ConcurrencyError):
        store.append_many(items)  # type: ignore[arg-type]
    assert store.list_streams() == []


def test_repeated_client_id_within_one_append(store: EventStore) -> None:
    eid = str(uuid.uuid4())
    r = store.append("S", [NewEvent("t.x", {"i": 1}, event_id=eid), NewEvent("t.x", {"i": 1}, event_id=eid)])
    assert r.version == 1  # the unchanged repeat is an idempotent no-op
    with pytest.raises(DuplicateEventId, match="appears twice in one append"):
        store.append("T", [NewEvent("t.x", {"i": 1}, event_id=str(uuid.UUID(int=7))),
                           NewEvent("t.x", {"i": 2}, event_id=str(uuid.UUID(int=7)))])
    assert store.stream_info("T") is None


def test_occurred_at_is_normalised_and_checked(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {}, occurred_at="2025-01-01T12:00:00+02:00")])
    [e] = store.read_stream("S")
    assert e.occurred_at == "2025-01-01T10:00:00.000000Z"
    for bad in (123, "yesterday", "x" * 40):
        with pytest.raises(InvalidEvent, match="occurred_at"):
            NewEvent("t.x", {}, occurred_at=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match="schema_version"):
        NewEvent("t.x", {}, schema_version=0)
    with pytest.raises(InvalidEvent, match="UTF-8"):
        NewEvent("t.x", {"a": "\ud800"})


def test_a_redacted_value_does_not_hide_later_tampering(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"secret": "pw"}), NewEvent("t.x", {"i": 2}), NewEvent("t.x", {"amount": 10})])
    _drop_triggers(store)
    sid = "(SELECT stream_pk FROM streams WHERE stream_id = 'S')"
    _exec(store, f"UPDATE events SET data = :d WHERE version = 1 AND stream_pk = {sid}", d=b'{"secret":"***"}')
    forged = b'{"amount":99999}'
    _exec(store, f"UPDATE events SET data = :d, data_sha256 = :h WHERE version = 3 AND stream_pk = {sid}",
          d=forged, h=chain.digest(forged))
    failures = {(f.version, f.field_class) for f in verify(store).failures}
    assert (1, "data") in failures  # the redaction is visible, as designed
    assert (3, "header") in failures  # and the forged digest is caught behind it


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_older_schema_is_refused_until_upgraded_and_keeps_its_events(
        backend: str, request: pytest.FixtureRequest, tmp_path: object) -> None:
    """A database at revision 0001 (type index present) is refused with the command to run;
    `upgrade` takes it to head without touching the recorded events or their chains."""
    from eventstore import migrate
    from eventstore.db import make_engine
    from eventstore.errors import SchemaOutOfDate

    url = f"sqlite:///{tmp_path}/old/events.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0001")
        with EventStore(url, check_schema=False, plain_digests=True) as old:  # what a 0001-era evstore wrote
            old.append("S", [NewEvent("t.x", {"i": i}) for i in range(3)])
        with pytest.raises(SchemaOutOfDate) as err:
            EventStore(url)
        assert "0001" in str(err.value) and migrate.head_revision(engine) in str(err.value)
        assert "evstore db upgrade" in str(err.value)
        migrate.upgrade(engine)
        migrate.check(engine)  # models and database agree after the upgrade
        with engine.connect() as conn:
            indexes = {ix["name"] for ix in sa_inspect(conn).get_indexes("events")}
        assert "ix_events_type_position" not in indexes
        with EventStore(url) as store:
            assert [e.payload["i"] for e in store.read_stream("S")] == [0, 1, 2]
            assert [e.payload["i"] for e in store.read_all(types=["t.x"])] == [0, 1, 2]
            store.append("S", [NewEvent("t.y", {})], expected_version=3)
            assert verify(store).ok
    finally:
        engine.dispose()


def test_postgres_appends_stay_ordered_under_a_stricter_server_default(pg_url: str) -> None:
    """A server (or role) defaulting to SERIALIZABLE must not break position allocation:
    the store's connections run READ COMMITTED, so concurrent appends neither clash nor skip."""
    from eventstore import migrate
    from eventstore.db import make_engine

    url = pg_url.replace("options=", "options=-cdefault_transaction_isolation%3Dserializable%20", 1)
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.connect() as conn:  # the URL's setting took: a session of it defaults to SERIALIZABLE
        assert conn.exec_driver_sql("SHOW default_transaction_isolation").scalar() == "serializable"
    engine.dispose()
    with EventStore(url) as store:
        for snapshot in (False, True):  # a read in autocommit (one statement, one snapshot) and in a transaction
            with store.reading(snapshot) as cur:  # the store's own connection
                cur.execute("SHOW transaction_isolation")
                assert cur.fetchone()[0] == ("repeatable read" if snapshot else "read committed")
        with store.writing("checking") as cur:
            cur.execute("SHOW transaction_isolation")
            assert cur.fetchone()[0] == "read committed"
        barrier = threading.Barrier(4)
        failures: list[BaseException] = []

        def writer(w: int) -> None:
            barrier.wait()
            try:
                for i in range(25):
                    store.append(f"W{w}", [NewEvent("t.x", {"w": w, "i": i})])
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert [e.position for e in store.iter_all()] == list(range(1, 101))
        assert verify(store).ok


@pytest.mark.parametrize("size", [1, 2, 99, 100, 101, 250])
def test_batch_sizes_around_the_insert_chunk(store: EventStore, size: int) -> None:
    """Appends of every size around SQLite's 100-row INSERT chunk (and PostgreSQL's COPY
    threshold) store the same events in order, with a chain that verifies."""
    store.append("pre", [ev(0)])
    r = store.append("S", [NewEvent("t.x", {"i": i}, meta={"m": i} if i % 3 else None) for i in range(size)],
                     expected_version="no stream")
    assert r.version == size and r.positions == list(range(2, size + 2))
    got = list(store.read_stream("S"))
    assert [(e.version, e.position, e.payload["i"]) for e in got] == [(i + 1, i + 2, i) for i in range(size)]
    assert [e.metadata for e in got] == [{"m": i} if i % 3 else {} for i in range(size)]
    assert verify(store).ok


def test_a_new_event_can_be_appended_twice(store: EventStore) -> None:
    """An id the store generates belongs to that append: the caller's NewEvent is not changed,
    so appending the same object again records a second event with its own id."""
    e = NewEvent("t.x", {"i": 1})
    store.append("A", [e])
    store.append("B", [e])
    assert e.event_id is None
    a, b = next(iter(store.read_stream("A"))), next(iter(store.read_stream("B")))
    assert a.payload == b.payload == {"i": 1} and a.event_id != b.event_id


def test_the_recorder_translates_driver_errors(store: EventStore) -> None:
    """A driver error inside a recorder method reaches the caller as an evstore error saying what
    was being done, with the driver's error as its cause; the connection stays usable."""
    from eventstore.errors import DatabaseError, EvstoreError
    from projections.engine import EventCounts, ProjectionRunner

    store.append("S", [ev(1)])
    _exec(store, "ALTER TABLE projection_checkpoints RENAME TO moved_checkpoints")
    with ProjectionRunner(store) as runner, pytest.raises(DatabaseError) as info:
        runner.status([EventCounts()])
    assert "reading a projection checkpoint" in str(info.value) and isinstance(info.value, EvstoreError)
    assert isinstance(info.value.__cause__, store.backend.driver_errors)
    _exec(store, "ALTER TABLE replay_cache RENAME TO moved_cache")
    with pytest.raises(DatabaseError, match="reading the replay cache"):
        verify(store)  # the chain pass streamed fine; the cache pass failed and said so
    _exec(store, "ALTER TABLE moved_cache RENAME TO replay_cache")
    assert verify(store).ok and [e.version for e in store.read_stream("S")] == [1]


def test_iter_all_and_subscribe_read_every_event_in_batches_and_by_type(store: EventStore) -> None:
    """Batches that end exactly at a batch boundary, a type filter and an upper bound (mutation
    testing: stopping after the first full batch, or dropping the filter, survived)."""
    store.append("A", [NewEvent("t.a", {"i": i}) for i in range(5)])
    store.append("B", [NewEvent("t.b", {"i": i}) for i in range(3)])
    assert [e.position for e in store.iter_all(batch_size=2)] == list(range(1, 9))
    assert [e.position for e in store.iter_all(batch_size=4)] == list(range(1, 9))
    assert [e.position for e in store.iter_all(batch_size=2, types=["t.b"])] == [6, 7, 8]
    assert [e.position for e in store.iter_all(after_position=3, upto_position=6, batch_size=2)] == [4, 5, 6]
    positions = lambda **kw: [[e.position for e in b] for b in store.iter_batches(**kw)]  # noqa: E731
    assert positions(batch_size=4) == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert positions(batch_size=3) == [[1, 2, 3], [4, 5, 6], [7, 8]]
    assert positions(after_position=2, upto_position=7, batch_size=2) == [[3, 4], [5, 6], [7]]
    assert positions(after_position=2, upto_position=6, batch_size=2) == [[3, 4], [5, 6]]
    assert positions(after_position=8) == [] and positions(upto_position=0) == []
    # the analytics' lean read: the same events up to a bound, each with the fields the facts read
    facts = lambda **kw: [[e.position for e in b] for b in store.iter_fact_batches(**kw)]  # noqa: E731
    assert facts(upto_position=8, batch_size=4) == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert facts(after_position=2, upto_position=7, batch_size=2) == [[3, 4], [5, 6], [7]]
    assert facts(after_position=8, upto_position=8) == [] and facts(upto_position=0) == []
    lean = [e for b in store.iter_fact_batches(upto_position=8) for e in b]
    assert [(e.position, e.stream_id, e.version, e.type, e.data, e.meta, e.occurred_at, e.recorded_at)
            for e in lean] == [(e.position, e.stream_id, e.version, e.type, e.data, e.meta, e.occurred_at,
                                e.recorded_at) for e in store.iter_all()]
    stop = threading.Event()
    timer = threading.Timer(30, stop.set)  # a subscriber that misses an event fails, never hangs
    timer.start()
    seen = []
    try:
        for e in store.subscribe(batch_size=3, stop=stop):  # from the first event by default
            seen.append(e.position)
            if len(seen) == 8:
                stop.set()
    finally:
        timer.cancel()
    assert seen == list(range(1, 9))


class _Waits(threading.Event):
    """A stop event that records each wait (its timeout, and how many events had been seen by then)."""

    def __init__(self, seen: list[int]) -> None:
        super().__init__()
        self.seen, self.waits = seen, []  # type: list[int], list[tuple[float | None, int]]

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append((timeout, len(self.seen)))
        if len(self.waits) >= 2:
            self.set()
        return self.is_set()


def test_subscribe_catches_up_in_bounded_batches_then_polls(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catching up reads ``batch_size`` events at a time and never waits between full batches; at the
    end of the log it waits ``poll_interval`` (0.05 s unless given) on ``stop``, or sleeps without one
    (mutation testing: reading the whole log at once, waiting after a full batch, a 1.05 s default,
    sleeping through ``stop`` and ``sleep(None)`` survived)."""
    store.append("A", [NewEvent("t.a", {"i": i}) for i in range(4)])
    limits: list[int | None] = []
    real = EventStore.read_all

    def read_all(self: EventStore, *args: object, **kwargs: object) -> list[RecordedEvent]:
        limits.append(kwargs.get("limit"))  # type: ignore[arg-type]
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(EventStore, "read_all", read_all)

    class Slept(Exception):
        pass

    naps: list[float] = []

    def sleep(seconds: float) -> None:  # a subscriber given ``stop`` that sleeps instead fails here, not hangs
        naps.append(seconds)
        raise Slept

    monkeypatch.setattr("eventstore.store.time.sleep", sleep)
    seen: list[int] = []
    stop = _Waits(seen)
    for e in store.subscribe(batch_size=2, stop=stop):
        seen.append(e.position)
    assert seen == [1, 2, 3, 4] and limits == [2, 2, 2, 2]  # two full batches, then empty ones
    assert stop.waits == [(0.05, 4), (0.05, 4)]  # no wait before the log's end
    following = store.subscribe(after_position=3, poll_interval=0.2)  # no stop: it follows for ever
    assert next(following).position == 4
    with pytest.raises(Slept):
        next(following)
    assert naps == [0.2]


def test_typed_events_append_as_they_are_and_read_all_returns_1000_by_default(store: EventStore) -> None:
    """``append`` takes typed events (their own type and schema version) as well as NewEvents, and
    ``read_all`` without a limit returns the first 1,000 events (mutation testing: both survived)."""
    from eventstore.dialects.mapipe.events import PhaseStarted

    typed = PhaseStarted(phase="build", record={"status": "in_progress"})
    assert store.append("T", [typed, NewEvent("t.x", {"i": 0})]).version == 2
    first, second = store.read_stream("T")
    assert (first.type, first.schema_version) == (PhaseStarted.event_type(), PhaseStarted.schema_version)
    assert first.data == b'{"type":"mapipe.phase_started","phase":"build","record":{"status":"in_progress"}}'
    assert second.type == "t.x"
    store.append("S", [NewEvent("t.x", {"i": i}) for i in range(1000)])
    assert [e.position for e in store.read_all()] == list(range(1, 1001))
    assert len(store.read_all(after_position=1000)) == 2


def test_append_many_skips_a_recorded_event_and_goes_on(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """An item already recorded (a retried event id) is skipped, and the items after it are still
    appended; a stream's run of events is written ``chunk`` at a time (mutation testing: stopping at
    the first recorded item, and chunks one longer, survived)."""
    from eventstore.store import _Transaction

    eid = str(uuid.uuid4())
    store.append("A", [NewEvent("t.x", {"i": 0}, event_id=eid)])
    sizes: list[int] = []
    real = _Transaction.add

    def add(self: _Transaction, stream_id: str, batch: list[NewEvent], expected: object) -> object:
        sizes.append(len(batch))
        return real(self, stream_id, batch, expected)  # type: ignore[arg-type]

    monkeypatch.setattr(_Transaction, "add", add)
    items = [("A", NewEvent("t.x", {"i": 0}, event_id=eid), None)] + \
        [("A", NewEvent("t.x", {"i": i}), None) for i in range(1, 6)]
    [result] = store.append_many(items, chunk=2)
    assert (result.stream_id, result.version, result.positions) == ("A", 6, [2, 3, 4, 5, 6])
    assert sizes == [2, 2, 1]
    assert [json.loads(e.data)["i"] for e in store.read_stream("A")] == [0, 1, 2, 3, 4, 5]


def test_inline_handlers_get_the_events_as_recorded(store: EventStore) -> None:
    """What an inline handler is given inside the append transaction equals what is read back after
    commit, field by field (ids, times, hashes), and its documents (mutation testing: handing on
    None for the event id, record time or either hash survived: the built-in handlers do not read them)."""
    got: list[tuple[list[RecordedEvent], dict[int, object]]] = []
    store.add_inline(lambda cur, backend, events: got.append((list(events), dict(events.documents))))
    store.append("S", [NewEvent("t.x", {"i": 1}, occurred_at="2026-01-01T00:00:00Z")])
    later = NewEvent("t.x", {"i": 2}, event_id=uuid.uuid4())
    later.document = {"i": 2}
    store.append_many([("S", later, None), ("T", NewEvent("t.y", {}), None)])
    assert [e for events, _ in got for e in events] == store.read_all()
    assert [docs for _, docs in got] == [{}, {2: {"i": 2}}]


def test_append_many_retried_with_its_event_ids_is_a_no_op(store: EventStore) -> None:
    """A batch (``append --batch``) retried after a lost answer writes nothing twice (mutation
    testing: looking the ids up without their stream survived)."""
    ids = [str(uuid.uuid4()) for _ in range(3)]

    def items() -> list[tuple[str, NewEvent, None]]:
        return [("A", NewEvent("t.x", {"i": 0}, event_id=ids[0]), None),
                ("B", NewEvent("t.x", {"i": 1}, event_id=ids[1]), None),
                ("A", NewEvent("t.x", {"i": 2}, event_id=ids[2]), None)]

    first = store.append_many(items())
    again = store.append_many(items())
    assert [(r.stream_id, r.version) for r in first] == [("A", 2), ("B", 1)]
    assert again == [] and store.max_position() == 3


def test_streams_ending_in_a_name_are_found_by_the_database_as_python_would(store: EventStore) -> None:
    """``streams_ending(NAME)`` (how ``replay`` and ``log`` find "taskmaster/T-1" for "T-1") lists the stream ids
    ending in "/NAME" or ":NAME", case and every character as given, as ``str.endswith`` over every id would."""
    ids = ["taskmaster/T-1", "claude:T-1", "T-1", "xT-1", "a/b/T-1", "A/t-1", "p/T-10", "q/ü日-1", "r:ü日-1", "/T-1",
           "s/%T-1", "t/_-1", "u/T-1 "]
    for sid in ids:
        store.append(sid, [NewEvent("demo.note", {"n": 1})])

    def python(name: str) -> list[str]:
        return sorted(i for i in ids if i.endswith("/" + name) or i.endswith(":" + name))

    for name in ("T-1", "t-1", "ü日-1", "_-1", "1", "T-1 ", "%T-1", "nothing", "b/T-1"):
        assert sorted(store.streams_ending(name)) == python(name), name
    assert sorted(store.streams_ending("T-1")) == ["/T-1", "a/b/T-1", "claude:T-1", "taskmaster/T-1"]
