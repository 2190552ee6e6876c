"""`evstore verify` compares the runs index it re-derives with the stored one a chunk of streams at a
time (``projections.runs.CHUNK``), as the scan hands the rows over, instead of holding every derived
and every stored row: the findings must be those of the comparison of the whole index in memory
(``_check_index_once(store, None)``, which ``check_index`` still runs) wherever the damage falls:
at chunk boundaries, on rows stored for no stream before, between and after the derived ones, on
stream ids whose order differs between Python and a database collation."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import PG_URL, exec_sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import verify
from eventstore.store import EventStore, NewEvent
from projections import runs
from projections.runs import IndexCheck, IndexedEventStore, _check_index_once, check_index, fork_index_check

#: Stream ids that sort differently by code point and by a language's collation: case, digits, '/',
#: '-', '_', '.', accents, a sharp s, Greek, CJK, a letter outside the BMP.
IDS = ["a", "A", "b", "B", "z", "Z", "0", "9", "a0", "a9", "_a", "-a", "a-b", "a_b", "a/b", "a/B", "a.b", "ab",
       "aB", "é", "E", "e", "ès", "ß", "ss", "Ω", "ω", "日本", "本", "Ä", "ä", "x/y-z_1", "X/Y-Z_1", "\U0001d400"]

COLUMNS = ", ".join(runs._COLUMNS)


class _Watched(IndexCheck):
    """An :class:`IndexCheck` that notes the order of the rows it derives and the most it holds at once."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store)
        self.order: list[str] = []
        self.most = 0

    def _derived(self, cur: Any, row: tuple[Any, ...]) -> None:
        self.order.append(row[0])
        super()._derived(cur, row)
        self.most = max(self.most, len(self._comparison.pending))


def _scan(store: EventStore) -> _Watched:
    check = _Watched(store)
    assert verify.verify(store, sink=check).ok
    return check


def _fill(store: EventStore) -> None:
    for i, sid in enumerate(IDS):
        store.append(sid, [NewEvent("demo.note", {"i": j}) for j in range(1 + i % 3)])


@pytest.fixture
def indexed(store_url: str) -> Any:
    with IndexedEventStore(store_url) as store:
        _fill(store)
        yield store


def _forge(store: EventStore, sid: str) -> None:
    exec_sql(store, "INSERT INTO proj_runs (stream_id, events, version, described, unreadable, lens_failures) "
                    "VALUES (:s, 1, 1, 0, 0, 0)", s=sid)


def _stored(store: EventStore) -> list[tuple[Any, ...]]:
    with store.reading() as cur:
        cur.execute(f"SELECT {COLUMNS} FROM proj_runs")
        return [tuple(r) for r in cur.fetchall()]


def _restore(store: EventStore, rows: list[tuple[Any, ...]]) -> None:
    from sqlalchemy import text

    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM proj_runs"))
        marks = ", ".join(f":c{i}" for i in range(len(runs._COLUMNS)))
        conn.execute(text(f"INSERT INTO proj_runs ({COLUMNS}) VALUES ({marks})"),
                     [{f"c{i}": v for i, v in enumerate(r)} for r in rows])


def test_damage_at_chunk_boundaries_is_found_as_the_whole_index_comparison_finds_it(
        indexed: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "CHUNK", 3)  # rows compared 3 at a time, stored rows read 3 at a time
    clean = _scan(indexed)
    assert clean.found == [] and clean.most <= 3 and sorted(clean.order) == sorted(IDS)
    d = clean.order  # the scan's order: chunks are d[0:3], d[3:6], ...
    for sid in (d[0], d[2], d[3], d[len(d) - 1]):  # first and last of a chunk, first of the next, the very last
        exec_sql(indexed, "UPDATE proj_runs SET events = events + 5 WHERE stream_id = :s", s=sid)
    for sid in (d[5], d[6], d[7]):  # missing across a boundary
        exec_sql(indexed, "DELETE FROM proj_runs WHERE stream_id = :s", s=sid)
    forged = [d[2] + "\x01", d[8] + "/", "\x01first"] + [f"\U0010fff0{i}" for i in range(7)]  # 7 past the end
    for sid in forged:
        _forge(indexed, sid)
    check = _scan(indexed)
    reference = _check_index_once(indexed, None)
    assert check.found == reference and check.most <= 3
    assert [p[0] for p in reference] == sorted({d[0], d[2], d[3], d[-1], d[5], d[6], d[7], *forged})
    kinds = {p[0]: p[2] for p in reference}
    assert kinds[d[6]] == "runs index: the stream's row is missing"
    assert kinds[forged[-1]] == "runs index: a row for a stream the log does not hold"
    assert "events" in kinds[d[3]] and "`evstore projections rebuild runs`" in kinds[d[3]]
    assert check.problems() == check_index(indexed) == reference  # rechecked: a row written by hand stays

    forked = fork_index_check(indexed)  # the child compares in chunks of 3 too: the parent gets its findings
    assert forked is not None
    try:
        assert forked._found() == reference
    finally:
        forked.close()


def test_a_stored_index_alone_or_a_log_alone_is_all_difference(indexed: EventStore,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "CHUNK", 4)
    exec_sql(indexed, "DELETE FROM proj_runs")  # every derived row missing, chunk after chunk
    check = _scan(indexed)
    assert check.found == _check_index_once(indexed, None) and len(check.found) == len(IDS)
    with EventStore(indexed.url) as plain:  # no stream in the log is indexed as of the checkpoint: no row derived
        check = IndexCheck(plain)
        check.upto = 0
        for sid in ("p", "q", "r", "s", "t"):
            _forge(plain, sid)
        assert verify.verify(plain, sink=check).ok
        stored = {r[0] for r in _stored(plain)}
        assert [p[0] for p in check.found] == sorted(stored)
        assert {p[2] for p in check.found} == {"runs index: a row for a stream the log does not hold"}


_ALPHABET = st.sampled_from(["a", "A", "z", "Z", "0", "9", "/", "-", "_", ".", "é", "E", "ß", "Ω", "本", "\U0001d400"])
_DAMAGE = st.sampled_from(["keep", "keep", "events", "title", "delete"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(min_value=1, max_value=6), damage=st.lists(_DAMAGE, min_size=len(IDS), max_size=len(IDS)),
       forged=st.sets(st.text(_ALPHABET, min_size=1, max_size=4), max_size=8))
def test_the_chunked_comparison_finds_what_the_whole_index_comparison_finds(
        indexed: EventStore, monkeypatch: pytest.MonkeyPatch, chunk: int, damage: list[str],
        forged: set[str]) -> None:
    good = getattr(indexed, "good_rows", None)
    if good is None:
        good = indexed.good_rows = _stored(indexed)  # type: ignore[attr-defined]
    _restore(indexed, good)
    monkeypatch.setattr(runs, "CHUNK", chunk)
    for sid, what in zip(IDS, damage, strict=True):
        if what == "delete":
            exec_sql(indexed, "DELETE FROM proj_runs WHERE stream_id = :s", s=sid)
        elif what != "keep":
            exec_sql(indexed, f"UPDATE proj_runs SET {what} = :v WHERE stream_id = :s",
                     v=7 if what == "events" else "by hand", s=sid)
    for sid in forged - set(IDS):
        _forge(indexed, sid)
    check = _scan(indexed)
    reference = _check_index_once(indexed, None)
    assert check.found == reference and check.most <= chunk
    assert len(reference) == sum(w != "keep" for w in damage) + len(forged - set(IDS))


def _collate(store: EventStore, table: str, collation: str) -> None:
    exec_sql(store, f'ALTER TABLE {table} ALTER COLUMN stream_id TYPE VARCHAR(255) COLLATE "{collation}"')


@pytest.mark.skipif(not PG_URL, reason="PostgreSQL: a collation whose order is not Python's")
def test_a_language_collation_orders_the_scan_and_the_findings_stay_the_same(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the stream ids in an ICU collation (a server made with a language's locale sorts so), the
    scan's order is not code point order; the chunks follow the database's order, the findings come
    out by stream id as before.  With ``proj_runs`` in another collation than ``streams`` the chunks
    see false differences; the recheck, a stream at a time, clears them."""
    from conftest import migrated

    monkeypatch.setattr(runs, "CHUNK", 3)
    with IndexedEventStore(migrated(pg_url)) as store:
        _fill(store)
        for table in ("streams", "proj_runs"):
            _collate(store, table, "en-x-icu")
        clean = _scan(store)
        assert clean.found == [] and clean.order != sorted(clean.order)  # the order is the collation's
        d = clean.order
        exec_sql(store, "UPDATE proj_runs SET title = 'by hand' WHERE stream_id IN (:a, :b)", a=d[2], b=d[3])
        exec_sql(store, "DELETE FROM proj_runs WHERE stream_id = :s", s=d[-1])
        for sid in ("zz-forged", "A-forged", "_forged"):
            _forge(store, sid)
        check = _scan(store)
        reference = _check_index_once(store, None)
        assert check.found == reference and [p[0] for p in reference] == sorted(
            {d[2], d[3], d[-1], "zz-forged", "A-forged", "_forged"})
        _collate(store, "proj_runs", "C")  # the two orders now disagree
        check = _scan(store)
        assert check.found != reference  # (a stream missing in one chunk and stored in another)
        assert check.problems() == check_index(store) == reference
