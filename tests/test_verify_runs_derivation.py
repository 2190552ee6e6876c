"""`evstore verify` re-derives the runs index in its own scan of the log (``projections.runs.IndexCheck``,
a sink of the chain walk): its rows must be exactly the ones the index's own code upserts when it is
given each stream's events in batches (``RunsIndex.apply``, merged as the upsert merges them), on
demo runs of every demo dialect, on the real histories of tests/data, with a lens that fails on some
events, with batches of any size and a checkpoint anywhere in the log."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import DATA, exec_sql, migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import verify
from eventstore.dialects import Dialect, get_dialect
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections.demo import run_demo
from projections.runs import IndexCheck, IndexedEventStore, RunsIndex, _Capture, _merge, check_index, rebuild

REAL = DATA / "real"


def _reference(store: EventStore, upto: int, batch: int) -> dict[str, tuple[Any, ...]]:
    """The rows the index's own code gives: RunsIndex.apply on each stream's events (up to ``upto``)
    in batches of ``batch``, each batch's rows merged as the upsert merges them."""
    index = RunsIndex(cache_size=2, trust_cache=False)
    rows: dict[str, tuple[Any, ...]] = {}
    for info in store.list_streams():
        events = [e for e in store.read_stream(info.stream_id) if e.position <= upto]
        for i in range(0, len(events), batch):
            with store.reading() as cur:
                capture = _Capture(cur)
                index.apply(capture, store.backend, events[i:i + batch])
            for r in capture.rows:
                rows[r[0]] = _merge(rows.get(r[0]), r)
    return rows


class _Keeping(IndexCheck):
    """An :class:`IndexCheck` that also keeps each row it hands to the comparison (which holds a chunk)."""

    def __init__(self, store: EventStore, *, batch: int = 1000) -> None:
        super().__init__(store, batch=batch)
        self.rows: dict[str, tuple[Any, ...]] = {}

    def _derived(self, cur: Any, row: tuple[Any, ...]) -> None:
        assert row[0] not in self.rows  # a stream's row is handed on once, complete
        self.rows[row[0]] = row
        super()._derived(cur, row)


def _derived(store: EventStore, *, upto: int | None = None, batch: int = 1000) -> dict[str, tuple[Any, ...]]:
    check = _Keeping(store, batch=batch)
    if upto is not None:
        check.upto = upto
    assert verify.verify(store, sink=check).ok
    assert check.scanned
    return check.rows


def _fill(url: str) -> None:
    store = IndexedEventStore(url)
    try:
        run_demo(store, runs=10, seed=11, workers=1)
        for history in sorted(p for p in REAL.iterdir() if p.is_dir()):
            dialect = get_dialect("friday" if history.name.startswith("friday") else "generic")
            ing = Ingestor(store, dialect, stream=f"real-{history.name}")
            for f in sorted(p for p in history.iterdir() if p.is_file() and not p.name.startswith(".")):
                for snap in dialect.load(f):
                    ing.ingest(snap)
        friday = get_dialect("friday")
        ing = Ingestor(store, friday, stream="friday-history")
        for f in sorted((DATA / "friday" / "history").iterdir()):
            for snap in friday.load(f):
                ing.ingest(snap)
    finally:
        store.close()


@pytest.fixture
def filled(store_url: str) -> str:
    _fill(store_url)
    return store_url


def test_the_scan_derives_the_rows_the_index_code_gives_on_each_backend(filled: str) -> None:
    with IndexedEventStore(filled) as store:
        last = store.max_position()
        derived = _derived(store)
        assert len(derived) >= 10 + 7 and {"real-codeharness-sprint-state", "friday-history"} <= set(derived)
        assert derived == _reference(store, last, 1000)
        assert check_index(store) == []  # and the stored index is what the log gives
        middle = last // 2  # a checkpoint inside runs: every run's row as of it
        assert _derived(store, upto=middle, batch=7) == _reference(store, middle, 7)


@pytest.fixture(scope="module")
def sqlite_filled(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = migrated(f"sqlite:///{tmp_path_factory.mktemp('derive')}/events.db")
    _fill(url)
    return url


class _Failing:
    """Makes every dialect's lens raise on the events whose CRC-32 of their encoding is 0 mod ``m``
    (the same events whoever folds them): the run is then not described from that event on."""

    def __init__(self, m: int) -> None:
        self.m = m

    def __enter__(self) -> None:
        m, original = self.m, Dialect.evolve

        def evolve(dialect: Dialect, doc: Any, event: Any) -> Any:
            if zlib.crc32(msgspec.json.encode(event)) % m == 0:
                raise ValueError("a lens bug")
            return original(dialect, doc, event)

        self.original = original
        Dialect.evolve = evolve  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        Dialect.evolve = self.original  # type: ignore[method-assign]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(min_value=1, max_value=60), fail=st.sampled_from([0, 5, 23, 97]),
       cut=st.floats(min_value=0.0, max_value=1.0))
def test_the_rows_are_the_index_codes_for_any_batch_failure_and_checkpoint(
        sqlite_filled: str, batch: int, fail: int, cut: float) -> None:
    with EventStore(sqlite_filled) as store:
        upto = int(store.max_position() * cut)
        if fail:
            with _Failing(fail):
                derived, reference = _derived(store, upto=upto, batch=batch), _reference(store, upto, batch)
            described = [r for r in derived.values() if r[-3] == 1]
            if upto == store.max_position() and fail == 5:
                assert len(described) < len(derived)  # the failing lens did leave runs undescribed
        else:
            derived, reference = _derived(store, upto=upto, batch=batch), _reference(store, upto, batch)
    assert derived == reference


def test_a_failing_lens_is_seen_by_the_derivation(sqlite_filled: str) -> None:
    """The comparison above can fail: rows derived with a lens that fails differ from the index's."""
    with EventStore(sqlite_filled) as store:
        with _Failing(5):
            failing = _derived(store)
        assert failing != _derived(store)
        assert sum(r[-3] for r in failing.values()) < sum(r[-3] for r in _derived(store).values())


def test_real_histories_are_in_the_repository() -> None:
    assert {p.name for p in REAL.iterdir() if p.is_dir()} >= {"codeharness-sprint-state", "friday-temper-ai-full"}
    assert any(Path(DATA / "friday" / "history").iterdir())


def test_a_forked_process_derives_the_same_rows_on_each_backend(filled: str) -> None:
    """`evstore verify` derives the index in a forked process beside its own scan where it can: the
    child finds what the in-scan derivation finds (nothing on an index its appends kept, the same
    streams on one damaged), and a row changed by hand differs."""
    from projections.runs import fork_index_check

    def both() -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
        forked = fork_index_check(store)
        assert forked is not None  # two cores, a file or a server, no thread: the fork is taken
        try:
            found = forked._found()
        finally:
            forked.close()
        assert forked.cpu > 0
        check = IndexCheck(store)
        assert verify.verify(store, sink=check).ok
        return found, check.found

    with IndexedEventStore(filled) as store:
        assert both() == ([], [])
        rows = _derived(store)
        ids = sorted(rows)
        exec_sql(store, "UPDATE proj_runs SET status = 'by hand' WHERE stream_id = :s", s=ids[1])
        exec_sql(store, "DELETE FROM proj_runs WHERE stream_id = :s", s=ids[-1])
        exec_sql(store, "INSERT INTO proj_runs (stream_id, events, version, described, unreadable, lens_failures) "
                        "VALUES ('~forged', 1, 1, 0, 0, 0)")
        in_child, in_scan = both()
        assert in_child == in_scan and [p[0] for p in in_child] == [ids[1], ids[-1], "~forged"]
        rebuild(store)  # the log's rows again
        sid = ids[0]
        exec_sql(store, "UPDATE proj_runs SET title = 'by hand' WHERE stream_id = :s", s=sid)
        forked = fork_index_check(store)
        assert forked is not None
        try:
            problems = forked.problems()
        finally:
            forked.close()
        assert [p[0] for p in problems] == [sid] and "title 'by hand'" in problems[0][2]


@pytest.mark.parametrize("fork", ["0", "1"])
def test_verify_names_a_row_written_by_hand_with_and_without_the_fork(
        sqlite_filled: str, fork: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import shutil

    from click.testing import CliRunner

    from eventstore.cli import register

    copy = tmp_path / "copy.db"
    shutil.copy(sqlite_filled.removeprefix("sqlite:///"), copy)
    url = f"sqlite:///{copy}"
    monkeypatch.setenv("EVSTORE_VERIFY_FORK", fork)
    monkeypatch.setenv("EVSTORE_PROGRESS", "0")
    assert CliRunner().invoke(register(), ["--url", url, "verify"]).exit_code == 0
    with EventStore(url) as store:
        exec_sql(store, "UPDATE proj_runs SET events = events + 1 WHERE stream_id = 'friday-history'")
    r = CliRunner().invoke(register(), ["--url", url, "verify"])
    assert r.exit_code == 1 and 'FAIL stream "friday-history"' in r.output and "events" in r.output, r.output


def test_the_forked_process_failing_is_reported_and_an_unread_one_is_stopped(
        sqlite_filled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from eventstore.errors import EvstoreError
    from projections.runs import fork_index_check

    def broken(self: IndexCheck, cur: Any, e: Any) -> None:
        raise RuntimeError("the fold broke")

    with EventStore(sqlite_filled) as store:
        monkeypatch.setattr(IndexCheck, "event", broken)  # the child inherits it
        forked = fork_index_check(store)
        assert forked is not None
        with pytest.raises(EvstoreError, match="Could not derive the runs index from the log: RuntimeError: the fold"):
            forked.problems()
        monkeypatch.undo()
        forked = fork_index_check(store)
        assert forked is not None
        pid = forked.pid
        forked.close()  # its rows never read (a damaged file, a failed scan): stopped and reaped
        assert forked.pid == 0
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, 0)
