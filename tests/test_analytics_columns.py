"""The fact tables' Arrow columns (projections/analytics/columns.py) against pyarrow.array itself."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.analytics import columns
from projections.analytics.facts import arrow_types

TIMES = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.none() | st.just(UTC) | st.builds(
                         lambda m: timezone(timedelta(minutes=m)), st.integers(-23 * 60, 23 * 60)))
#: Per column type, the values both builders take (pyarrow's own leniencies included).
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "VARCHAR": st.text() | st.text().map(lambda t: t.encode("utf-8")),
    "BIGINT": st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**53), 2**53).map(float),
    "DOUBLE": st.floats() | st.integers(-(2**53), 2**53) | st.booleans(),
    "BOOLEAN": st.booleans(),
    "TIMESTAMPTZ": TIMES | st.integers(-(2**62), 2**62),
}


def _same(a: Any, b: Any) -> bool:
    """Equal, and for floats the same bits' meaning: NaN is NaN, -0.0 is not 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_every_column_type_holds_what_pyarrow_array_would(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(VALUES)))
    kind = arrow_types()[name]
    values = data.draw(st.lists(st.none() | VALUES[name], max_size=70))
    want = pa.array(values, type=kind)
    for got in _both_ways(columns.column, values, kind):  # string offsets summed here and by Arrow
        got.validate(full=True)
        assert got.type == want.type and got.null_count == want.null_count and len(got) == len(want)
        if name == "DOUBLE":  # NaN is not equal to itself in Array.equals; -0.0 equals 0.0 there
            assert all(_same(a, b) for a, b in zip(got.to_pylist(), want.to_pylist(), strict=True)), values
        else:
            assert got.equals(want), values


def _both_ways(build: Any, *args: Any) -> list[Any]:
    """``build(*args)`` as a short column is built (in Python) and as a long one is (Arrow's compute
    functions: ``columns.COMPUTE_FROM``)."""
    out = [build(*args)]
    saved, columns.COMPUTE_FROM = columns.COMPUTE_FROM, 0
    try:
        out.append(build(*args))
    finally:
        columns.COMPUTE_FROM = saved
    return out


@pytest.mark.parametrize("name", sorted(VALUES))
def test_empty_and_all_null_columns(name: str) -> None:
    kind = arrow_types()[name]
    for values in ([], [None], [None] * 9):
        got = columns.column(values, kind)
        got.validate(full=True)
        assert got.equals(pa.array(values, type=kind))
    schema = pa.schema([(n.lower(), arrow_types()[n]) for n in sorted(VALUES)])
    assert columns.empty(schema).equals(schema.empty_table())


@pytest.mark.parametrize(("name", "value", "error"), [
    ("BIGINT", True, TypeError), ("BIGINT", "1", TypeError), ("BIGINT", 2**63, OverflowError),
    ("DOUBLE", "1.0", TypeError), ("DOUBLE", 2**53 + 1, TypeError), ("BOOLEAN", 1, TypeError), ("VARCHAR", 1, TypeError),
    ("VARCHAR", b"\xff", ValueError), ("VARCHAR", "\ud800", ValueError), ("TIMESTAMPTZ", "2020-01-01", TypeError),
])
def test_a_value_the_column_cannot_take_is_refused_naming_the_column(name: str, value: Any,
                                                                    error: type[Exception]) -> None:
    with pytest.raises((pa.ArrowException, OverflowError, UnicodeError)):
        pa.array([value], type=arrow_types()[name])  # pyarrow refuses it too
    schema = pa.schema([("position", pa.int64()), ("x", arrow_types()[name])])
    with pytest.raises(error, match=r"fact column phases\.x \("):
        columns.table([[1, 2], [None, value]], schema, "phases")


def test_a_float_with_a_fraction_is_refused_where_pyarrow_would_cut_it() -> None:
    assert pa.array([1.5], type=pa.int64()).to_pylist() == [1]  # pyarrow's silent loss
    assert columns.column([1.0, None], pa.int64()).to_pylist() == [1, None]
    with pytest.raises(TypeError, match="expected an int, got float: 1.5"):
        columns.column([1.5], pa.int64())


def test_flattening_and_compacting_facts_never_imports_pandas(tmp_path: Path) -> None:
    """pyarrow.array imports pandas, when installed, the first time it runs (0.35-0.5 s): a refresh
    that writes and compacts facts does not build them through it.  A refresh of a few events (columns
    under ``columns.COMPUTE_FROM`` values) does not import ``pyarrow.compute`` either (30-70 ms)."""
    pytest.importorskip("pandas")  # installed by the test extra: without it there is nothing to show
    code = textwrap.dedent(f"""
        import random, sys
        from datetime import datetime, timezone
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import migrated
        from analytics_fixtures import simulate_into
        from eventstore.store import EventStore
        from projections import analytics
        with EventStore(migrated("sqlite:///{tmp_path}/events.db")) as store:
            simulate_into(store, {{"mapipe": 2, "friday": 1, "taskflow": 1, "envelope": 1}}, seed=3)
            r = analytics.refresh(store, "{tmp_path}/a", flush_events=20, compact=False)
            compute = "pyarrow.compute" in sys.modules
            out = Path("{tmp_path}/a")
            merged = analytics.compact_tables(out, analytics.Manifest.load(out), at=2)
        print(r.events, r.files_written, len(merged), compute, "pandas" in sys.modules)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    events, files, merged, compute, pandas = out.stdout.split()
    assert int(events) > 40 and int(files) > 0 and int(merged) > 0, out.stdout
    assert compute == "False" and pandas == "False", out.stdout


def test_the_refresh_child_writes_the_facts_without_numpy(tmp_path: Path) -> None:
    """What ``refresh_apart``'s forked child runs (``files._refresh_own``) makes numpy unimportable in it unless
    it is imported already: pyarrow imports it when installed (a third of a small refresh's time, and OpenBLAS's
    threads' CPU) and writes and compacts the facts without it."""
    pytest.importorskip("numpy")  # installed with the test extra: without it there is nothing to show
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import migrated
        from analytics_fixtures import simulate_into
        from eventstore.store import EventStore
        from projections.analytics import files
        url = migrated("sqlite:///{tmp_path}/events.db")
        with EventStore(url) as store:
            simulate_into(store, {{"mapipe": 2, "taskmaster": 1, "claude": 1}}, seed=5)
        got = files._refresh_own(url, Path("{tmp_path}/a"))
        print(got["events"], got["files_written"], "pyarrow" in sys.modules, "numpy" in sys.modules and sys.modules["numpy"] is None)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    events, files_written, arrow, numpy = out.stdout.split()
    assert int(events) > 40 and int(files_written) > 0 and arrow == numpy == "True", out.stdout


# ---------------------------------------------------------------- times as stored, a column at a time

STORED = TIMES.map(lambda t: (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).replace(tzinfo=None)
                   .isoformat(timespec="microseconds") + "Z")
#: Texts ``ts`` reads otherwise or not at all: other zones, no zone, no fraction, garbage, impossible dates.
OTHER_TIMES = st.sampled_from([
    "2025-03-03T09:05:18+02:00", "2025-03-03T09:05:18", "2025-03-03T09:05:18.5Z", "2025-03-03 09:05:18.000000Z",
    "2025-02-30T00:00:00.000000Z", "0000-01-01T00:00:00.000000Z", "2025-01-01T24:00:00.000000Z",
    "2025-01-01T23:59:60.000000Z", "2025-13-01T00:00:00.000000Z", "", "yesterday", "2025-03-03T09:05:18.000000z",
    "2025-03-03T09:05:18.000000Z ", "９９９９-01-01T00:00:00.000000Z"]) | st.text(max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.none() | STORED, max_size=20), st.lists(st.none() | STORED | OTHER_TIMES, max_size=20))
def test_stored_times_parse_a_column_at_a_time_as_ts_parses_each(stored: list[str | None],
                                                                   mixed: list[str | None]) -> None:
    from eventstore.dialects.analytics import ts

    # What the regular expression takes and Arrow reads or refuses alone: a year 0000, a 30 February
    edges = [["0000-01-01T00:00:00.000000Z"], ["2025-02-30T00:00:00.000000Z"], ["2025-02-28T23:59:59.999999Z"]]
    for values in (stored, mixed, stored + mixed, *(stored + e for e in edges)):
        for got in _both_ways(columns.iso_times, values):
            assert got.type == pa.timestamp("us", tz="UTC")
            assert got.equals(columns.column([ts(v) for v in values], pa.timestamp("us", tz="UTC"))), values


# ---------------------------------------------------------------- add_batch is add_one, faster

def _recorded(position: int, type_: str, data: bytes, meta: bytes, occurred: str | None = None,
              stream: str = "odd") -> Any:
    from eventstore.store import RecordedEvent

    return RecordedEvent(position, stream, position, f"00000000-0000-4000-8000-{position:012d}", type_, 1, data, meta,
                         occurred, "2026-01-02T03:04:05.000006Z", b"\0" * 32, b"\1" * 32)


def test_a_batch_gives_the_facts_event_by_event_gives(tmp_path: Path) -> None:
    """Flattener.add_batch (the refresh's path) against add_one (the reference), table by table, on every
    simulated dialect, Claude Code transcripts, and events whose meta or times no simulation writes."""
    sys.path.insert(0, str(Path(__file__).parent))
    from analytics_fixtures import simulate_into
    from claude_fixtures import write_project
    from conftest import migrated

    from eventstore.capture import ingest_transcripts
    from eventstore.store import EventStore
    from projections.analytics.facts import Flattener

    with EventStore(migrated(f"sqlite:///{tmp_path}/events.db")) as store:
        simulate_into(store, {"mapipe": 2, "friday": 1, "taskflow": 1, "envelope": 1, "taskmaster": 1}, seed=3)
        write_project(tmp_path / "projects")
        ingest_transcripts(store, [tmp_path / "projects"])
        events = list(store.iter_all())
    n = events[-1].position
    patch = b'{"ops":[{"op":"replace","path":"/a~1b/c","value":1},{"op":"add","path":"","value":{}}]}'
    events += [_recorded(n + k, t, data, meta, at) for k, (t, data, meta, at) in enumerate([
        ("mapipe.phase_started", b'{"phase":"plan"}', b'["not", "an", "object"]', "2025-01-01T00:00:00.000000Z"),
        ("mapipe.phase_started", b'{"phase":"plan"}', b'{"dialect":7,"source":null}', None),
        ("mapipe.phase_started", b"", b"", "2025-01-01T00:00:00+02:00"),  # erased: a row in events only
        ("document.patched", patch, b'{"dialect":"friday","source":{},"findings":[{"code":"lens-failed"}]}',
         "not a time"),
        ("document.patched", patch, b'{"source":{"a":[1,2]},"findings":"lens-failed"}', "2025-01-01T00:00:00"),
        ("document.observed", b'{"document":{}}', b'{"dialect":"","snapshot":{"x":1}}', None),
        ("nobody.knows", b"{}", b"{}", "2025-06-01T12:00:00.000000Z"),
        ("friday.state_saved", b'{"x":1}', b'{"dialect":"friday","dialect":"taskflow"}', None),
        ("nobody.knows", b"{}", b'{"sent_by":{"token":"ci","machine":"m-1"}}', None),  # the writer columns
        ("nobody.knows", b"{}", b'{"sent_by":{"token":"ci"}}', None),
        ("nobody.knows", b"{}", b'{"sent_by":"not an object"}', None),
    ], start=1)]
    one, batch = Flattener(), Flattener()
    for e in events:
        one.add_one(e)
    batch.add_batch(events[:7])
    batch.add_batch(events[7:])
    expected, got = one.tables(), batch.tables()
    assert expected.keys() == got.keys()
    for name in expected:
        assert got[name].equals(expected[name]), name
    assert got["events"].num_rows == len(events) and got["state_versions"].num_rows > 10
    with pytest.raises(ValueError, match="add_batch after add_one"):
        one.add_batch(events[:1])
