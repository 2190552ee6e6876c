"""The analytics projection: incremental == rebuild, exactly-once files, Parquet readable by
DuckDB and pyarrow, and the ``query`` / ``metrics`` / ``export`` commands."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from analytics_fixtures import simulate_into
from click.testing import CliRunner
from conftest import migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.cli import register
from eventstore.store import EventStore
from projections import analytics
from projections.analytics import SCHEMAS, VIEWS, Manifest, views
from projections.analytics.views import reads

COUNTS = {"mapipe": 6, "friday": 2, "taskflow": 3, "envelope": 2}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, EventStore]]:
    d = tmp_path_factory.mktemp("analytics")
    url = f"sqlite:///{d}/events.db"
    migrated(url)
    store = EventStore(url)
    simulate_into(store, COUNTS, seed=5)
    yield url, store
    store.close()


def _contents(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every fact table and view, rows sorted (what a reader can observe)."""
    con = analytics.connect(directory)
    try:
        out = {}
        for name in list(SCHEMAS) + list(VIEWS):
            rows = con.execute(f"SELECT * FROM {name}").fetchall()
            out[name] = sorted(rows, key=repr)
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def rebuilt(small: tuple[str, EventStore], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("full") / "analytics"
    result = analytics.refresh(small[1], out, rebuild=True)
    assert result.rebuilt and result.events == small[1].max_position()
    return _contents(out)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=7), st.integers(2, 5),
       st.sampled_from([16, 50, 20_000]))
def test_incremental_refresh_equals_full_rebuild(small: tuple[str, EventStore], rebuilt: dict[str, Any],
                                                 tmp_path_factory: pytest.TempPathFactory, cuts: list[int],
                                                 compact_at: int, flush: int) -> None:
    store = small[1]
    high = store.max_position()
    out = tmp_path_factory.mktemp("inc") / "analytics"
    for cut in sorted({c * high // 10_000 for c in cuts}):
        analytics.refresh(store, out, upto=cut, compact_at=compact_at, flush_events=flush)
    analytics.refresh(store, out, compact_at=compact_at, flush_events=flush)
    m = Manifest.load(out)
    assert m is not None and m.position == high
    # compaction kept the number of files bounded, and every listed file exists
    for table in SCHEMAS:
        assert len(m.files[table]) <= compact_at + 1
        assert all(p.exists() for p in m.paths(out, table))
    assert _contents(out) == rebuilt


def test_a_full_build_writes_facts_in_bounded_batches(small: tuple[str, EventStore], rebuilt: dict[str, Any],
                                                      tmp_path: Path) -> None:
    """Memory does not grow with the backlog: facts are written every ``flush_events`` events
    (benchmarks/bench_analytics.py --memory measures the peak), and compaction merges them."""
    store, out = small[1], tmp_path / "a"
    high = store.max_position()
    r = analytics.refresh(store, out, flush_events=10, compact=False)
    m = Manifest.load(out)
    assert m is not None and r.position == m.position == high
    events = m.files["events"][1:]  # after the empty part the build starts with
    assert len(events) == -(-high // 10) and all(f["rows"] <= 10 for f in events)
    assert [(f["after"], f["upto"]) for f in events] == [(a["upto"], b["upto"]) for a, b in
                                                         zip([{"upto": 0}, *events], events, strict=False)]
    assert analytics.compact_tables(out, m, at=2) and len(Manifest.load(out).files["events"]) == 1  # type: ignore[union-attr]
    assert _contents(out) == rebuilt


def test_breaker_trip_places_read_in_order_however_the_facts_are_split(tmp_path: Path) -> None:
    """The ``where`` of a trigger lists each place once, by (phase, step, iteration), the same from one
    file per event as from one compacted file (it once followed the order DuckDB met the rows in)."""
    url = migrated(f"sqlite:///{tmp_path}/events.db")
    with EventStore(url) as store:
        simulate_into(store, COUNTS, seed=22)  # trips trigger 2 at two iterations of one step
        analytics.refresh(store, tmp_path / "split", flush_events=40, compact=False)  # a file per 40 events
    places = []
    for out in ("split", "whole"):
        r = CliRunner().invoke(register(), ["--url", url, "metrics", "--format", "json",
                                            "--analytics-dir", str(tmp_path / out)])
        assert r.exit_code == 0, r.output
        [section] = [s for s in json.loads(r.stdout)["sections"] if s["name"] == "breaker_trips"]
        places.append({row["trigger"]: row["where"] for row in section["rows"]})
    assert places[0] == places[1] == {2: "phase 3 / step 3.8 / iteration 3; phase 3 / step 3.8 / iteration 4"}


def test_refresh_without_new_events_writes_nothing(small: tuple[str, EventStore], tmp_path: Path) -> None:
    out = tmp_path / "a"
    analytics.refresh(small[1], out)
    before = sorted(p.name for p in out.rglob("*.parquet"))
    again = analytics.refresh(small[1], out)
    assert again.events == 0 and again.files_written == 0 and not again.rebuilt
    assert sorted(p.name for p in out.rglob("*.parquet")) == before


def test_parquet_files_are_readable_by_pyarrow_and_duckdb(small: tuple[str, EventStore], tmp_path: Path) -> None:
    out = tmp_path / "a"
    analytics.refresh(small[1], out)
    m = Manifest.load(out)
    assert m is not None
    for table, schema in SCHEMAS.items():
        paths = m.paths(out, table)
        arrow_rows = sum(pq.read_table(p).num_rows for p in paths)
        for p in paths:
            assert pq.read_schema(p).equals(schema)
        duck_rows = duckdb.sql(f"SELECT count(*) FROM read_parquet({[str(p) for p in paths]})").fetchall()[0][0]
        assert arrow_rows == duck_rows == sum(f["rows"] for f in m.files[table])
    assert sum(f["rows"] for f in m.files["events"]) == small[1].max_position()
    assert sum(f["rows"] for f in m.files["review_raised"]) > 0


def test_crash_before_the_manifest_leaves_orphans_that_are_ignored_then_removed(
        small: tuple[str, EventStore], rebuilt: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = small[1]
    out = tmp_path / "a"
    half = store.max_position() // 2
    analytics.refresh(store, out, upto=half)
    saved = Manifest.save

    def crash(self: Manifest, directory: Path) -> None:
        raise OSError("disk full (simulated crash before the commit point)")

    monkeypatch.setattr(Manifest, "save", crash)
    with pytest.raises(analytics.AnalyticsIOError, match="disk full"):
        analytics.refresh(store, out)
    monkeypatch.setattr(Manifest, "save", saved)
    orphans = [p for p in out.rglob("part-*.parquet") if f"part-{half}-" in p.name]
    assert orphans, "the crashed refresh wrote data files"
    m = Manifest.load(out)
    assert m is not None and m.position == half  # the checkpoint did not move
    # readers see only what the manifest lists: the half-written refresh is invisible
    con = analytics.connect(out)
    assert con.execute("SELECT max(position) FROM events").fetchall()[0][0] == half
    con.close()
    analytics.refresh(store, out)  # re-applies the same positions exactly once
    assert _contents(out) == rebuilt
    assert not [p for p in orphans if p.exists() and p.name not in
                {f["file"] for files in Manifest.load(out).files.values() for f in files}]  # type: ignore[union-attr]


def test_a_version_bump_rebuilds(small: tuple[str, EventStore], tmp_path: Path) -> None:
    out = tmp_path / "a"
    analytics.refresh(small[1], out)
    data = json.loads((out / "manifest.json").read_text())
    data["version"] = 0
    (out / "manifest.json").write_text(json.dumps(data))
    again = analytics.refresh(small[1], out)
    assert again.rebuilt and again.events == small[1].max_position()


def test_refresh_on_each_backend(store: EventStore, tmp_path: Path) -> None:
    simulate_into(store, {"mapipe": 2, "taskflow": 1}, seed=9)
    out = tmp_path / "a"
    result = analytics.refresh(store, out)
    assert result.events == store.max_position()
    con = analytics.connect(out)
    runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    assert runs == len(store.list_streams()) == 3


def test_a_connection_to_small_tables_runs_on_one_thread(small: tuple[str, EventStore], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under SERIAL_ROWS fact rows, one DuckDB thread (its worker threads only cost hand-offs there);
    over it, DuckDB's default; a number asked for is kept either way."""
    out = tmp_path / "a"
    analytics.refresh(small[1], out)

    def threads(**kw: Any) -> int:
        con = analytics.connect(out, **kw)
        try:
            return int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        finally:
            con.close()

    rows = Manifest.load(out).rows()  # type: ignore[union-attr]
    assert 0 < rows < views.SERIAL_ROWS
    assert threads() == 1 and threads(threads=3) == 3
    default = duckdb.connect(":memory:").execute("SELECT current_setting('threads')").fetchall()[0][0]
    monkeypatch.setattr(views, "SERIAL_ROWS", rows)  # the tables now count as large
    assert threads() == int(default) and threads(threads=1) == 1


def test_a_report_reads_the_same_rows_from_views_computed_once(small: tuple[str, EventStore], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``reading(materialize=True)`` (what ``metrics`` and the metrics pages use) shadows every view with a
    temporary table of its rows on small tables (from KEPT_ROWS rows, the run views with the rows kept
    between reports: a temporary view over ``kept.duckdb``, projections.analytics.kept), and every report
    reads what the views say; over SERIAL_ROWS rows the other views stay views."""
    from projections.metrics import cross_run_report, run_report
    from projections.report import render

    store = small[1]
    out = tmp_path / "a"
    analytics.refresh(store, out)
    streams = [s.stream_id for s in store.list_streams()][:3]

    def reports(materialize: bool) -> tuple[list[str], set[str]]:
        with analytics.reading(store, out, fresh=False, materialize=materialize) as con:
            temp = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
            got = [render(cross_run_report(con), "json")] + [render(run_report(con, s), "json") for s in streams]
            return got, temp

    plain, none = reports(False)
    once, shadowed = reports(True)
    assert none == set() and shadowed == set(VIEWS)  # under KEPT_ROWS: every view computed in memory
    assert once == plain and all(json.loads(r)["sections"] for r in plain)
    monkeypatch.setattr(views, "KEPT_ROWS", 0)  # the run views' rows kept between reports
    once, shadowed = reports(True)
    assert shadowed == set(VIEWS) - set(analytics.catalog().run_views) and once == plain
    monkeypatch.setattr(views, "SERIAL_ROWS", 1)  # the tables now count as large
    assert reports(True) == (plain, set())


def test_default_directory_is_beside_the_store_file_named_after_it(small: tuple[str, EventStore]) -> None:
    url, store = small
    db = Path(url.split(":///", 1)[1])
    assert analytics.analytics_dir(store) == db.parent / "events.db.analytics"


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli_store(small: tuple[str, EventStore], tmp_path: Path) -> str:
    """A private copy of the small store (the CLI writes analytics beside it)."""
    src = Path(small[0].split(":///", 1)[1])
    (tmp_path / "s").mkdir()
    for f in src.parent.glob("events.db*"):  # the WAL holds the latest commits
        shutil.copy(f, tmp_path / "s" / f.name)
    return f"sqlite:///{tmp_path}/s/events.db"


def test_query_prints_rows_as_table_json_and_csv(cli_store: str) -> None:
    runner = CliRunner()
    sql = "SELECT dialect, count(*) AS n FROM runs GROUP BY dialect ORDER BY dialect"
    r = runner.invoke(register(), ["--url", cli_store, "query", "--json", sql])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"dialect": d, "n": n} for d, n in sorted(COUNTS.items())]
    r = runner.invoke(register(), ["--url", cli_store, "query", "--csv", "--no-refresh", sql])
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0] == "dialect,n" and len(r.stdout.splitlines()) == 5
    r = runner.invoke(register(), ["--url", cli_store, "query", sql])
    assert r.exit_code == 0 and "mapipe" in r.stdout and "dialect" in r.stdout.splitlines()[0]


def test_query_sql_error_reports_duckdbs_message_and_exits_1(cli_store: str) -> None:
    r = CliRunner().invoke(register(), ["--url", cli_store, "query", "SELECT no_such_column FROM runs"])
    assert r.exit_code == 1
    err = r.stderr.split("Error: ", 1)[1]
    assert err.startswith("Binder Error: Referenced column \"no_such_column\" not found")
    assert "Traceback" not in r.output
    r = CliRunner().invoke(register(), ["--url", cli_store, "query", "SELEC 1"])
    assert r.exit_code == 1 and r.stderr.startswith("Error: Parser Error: syntax error")


def test_a_query_connection_defines_what_its_sql_reads_and_answers_as_a_full_one(
        small: tuple[str, EventStore], rebuilt: dict[str, Any], tmp_path: Path) -> None:
    """`evstore query` binds only the views its SQL reads (and theirs, transitively); every table and
    view read through such a connection gives the rows a connection with the whole catalog gives."""
    out = tmp_path / "a"
    analytics.refresh(small[1], out)
    for name in list(SCHEMAS) + list(VIEWS):
        with analytics.reading(small[1], out, fresh=False, sql=f"SELECT * FROM {name}") as con:
            defined = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            assert name in defined if name in VIEWS else defined == {name}, (name, defined)
            assert sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr) == rebuilt[name], name
    with analytics.reading(small[1], out, fresh=False, sql="select count(*) from EVENTS") as con:
        assert {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()} == {"events"}


@pytest.mark.parametrize("sql", [
    "SHOW TABLES", "DESCRIBE runs", "SUMMARIZE gates", "SELECT * FROM information_schema.tables",
    "SELECT * FROM duckdb_views()", "PRAGMA show_tables", "SELECT * FROM main.runs", "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM gatez", "SELEC 1", "CREATE TABLE t (a INT)",
])
def test_sql_that_does_not_name_what_it_reads_gets_the_whole_catalog(sql: str) -> None:
    con = duckdb.connect()
    try:
        assert reads(con, sql) is None
        assert reads(con, "WITH x AS (SELECT 1) SELECT * FROM x, gates") == {"gates", "gate_events"}
    finally:
        con.close()


def test_query_lists_the_whole_catalog_and_suggests_names_from_it(cli_store: str) -> None:
    runner = CliRunner()
    r = runner.invoke(register(), ["--url", cli_store, "query", "--json", "SHOW TABLES"])
    assert r.exit_code == 0, r.output
    assert {row["name"] for row in json.loads(r.stdout)} == set(analytics.table_names())
    r = runner.invoke(register(), ["--url", cli_store, "query", "SELECT * FROM gatez"])
    assert r.exit_code == 1 and 'Did you mean "gates"' in r.stderr


def test_metrics_command_formats(cli_store: str, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(register(), ["--url", cli_store, "metrics", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    names = [s["name"] for s in data["sections"]]
    # each dialect's sections (heaviest demo weight first), then the shared ones
    assert names[:3] == ["reviewer_acceptance", "review_deltas", "iterations_until_approval"]
    assert names[-4:] == ["gates", "phase_durations", "usage", "writers"]
    assert data["scope"]["runs"] == sum(COUNTS.values())
    r = runner.invoke(register(), ["--url", cli_store, "metrics", "--dialect", "mapipe", "--format", "csv"])
    assert r.exit_code == 0 and r.stdout.startswith("section,row,")
    r = runner.invoke(register(), ["--url", cli_store, "metrics"])
    assert r.exit_code == 0 and "Reviewer acceptance per model" in r.stdout
    out = tmp_path / "m.html"
    r = runner.invoke(register(), ["--url", cli_store, "metrics", "--format", "html", "--out", str(out)])
    assert r.exit_code == 0 and out.read_text().startswith("<!DOCTYPE html>")
    r = runner.invoke(register(), ["--url", cli_store, "metrics", "T-0001", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scope"]["stream"] == "T-0001"
    r = runner.invoke(register(), ["--url", cli_store, "metrics", "--since", "yesterday-ish"])
    assert r.exit_code == 1 and "--since expects an ISO date" in r.stderr


def test_export_parquet_and_jsonl(cli_store: str, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(register(), ["--url", cli_store, "export", "--parquet", str(tmp_path / "x"),
                                   "--jsonl", str(tmp_path / "e.jsonl")])
    assert r.exit_code == 0, r.output
    store = EventStore(cli_store)
    try:
        n = store.max_position()
        first = next(iter(store.iter_all()))
    finally:
        store.close()
    log = pq.read_table(tmp_path / "x" / "log.parquet")
    assert log.num_rows == n
    assert json.loads(log.column("data")[0].as_py()) == first.payload
    for name in list(SCHEMAS) + list(VIEWS):
        assert (tmp_path / "x" / f"{name}.parquet").exists()
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path}/x/runs.parquet'").fetchall()[0][0] == sum(COUNTS.values())
    lines = (tmp_path / "e.jsonl").read_text().splitlines()
    assert len(lines) == n and json.loads(lines[0])["position"] == 1
    r = runner.invoke(register(), ["--url", cli_store, "export"])
    assert r.exit_code == 2


def test_export_jsonl_of_an_analytics_table(cli_store: str, tmp_path: Path) -> None:
    """`--table NAME` writes that table's rows, one shape per file, as `query --json` prints them."""
    runner = CliRunner()
    r = runner.invoke(register(), ["--url", cli_store, "export", "--jsonl", "-", "--table", "gates"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    q = runner.invoke(register(), ["--url", cli_store, "query", "--json", "SELECT * FROM gates"])
    assert q.exit_code == 0, q.output
    expected = json.loads(q.stdout)
    assert rows and len(rows) == len(expected)
    key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, expected))
    assert f"wrote {len(rows)} gates rows to -" in r.stderr

    r = runner.invoke(register(), ["--url", cli_store, "export", "--jsonl", "-", "--table", "nope"])
    assert r.exit_code == 1 and 'No analytics table "nope"' in r.stderr and "review_deltas" in r.stderr
    r = runner.invoke(register(), ["--url", cli_store, "export", "--parquet", str(tmp_path / "p"), "--table", "gates"])
    assert r.exit_code == 2 and "--table applies to --jsonl" in r.output


def test_fact_helpers_keep_only_values_of_their_type() -> None:
    """Out-of-spec values stay in the log, exactly; the fact tables take a value only when it has
    the column's type (mutation testing: letting any value through survived)."""
    from types import SimpleNamespace

    from eventstore.dialects import analytics as an

    assert [an.i(v) for v in (3, 0, -1, True, "3", 2.0, None)] == [3, 0, -1, None, None, None, None]
    assert [an.s(v) for v in ("x", "", 1, None)] == ["x", "", None, None]
    assert [an.b(v) for v in (True, False, 1, 0, "true", None)] == [True, False, None, None, None, None]
    aware = an.ts("2026-01-05T09:00:00Z")  # a time with a zone, and nothing else, is a time
    assert aware is not None and aware.utcoffset() is not None and aware.isoformat() == "2026-01-05T09:00:00+00:00"
    assert [an.ts(v) for v in ("2026-01-05T09:00:00", "", "not a time", 1767603600, None)] == [None] * 5
    rows: dict[str, list[tuple[object, ...]]] = {"run_attrs": []}
    e = SimpleNamespace(position=7, stream_id="S")
    for v in ("t", 7, 1.5, True, False, None, {"a": 1}, ["x"]):
        an.attr(rows, e, "title", v)  # type: ignore[arg-type]
    assert rows["run_attrs"] == [(7, "S", "title", "t"), (7, "S", "title", "7"), (7, "S", "title", "1.5")]


def test_the_catalogs_sql_is_parsed_once_for_an_analytics_folder(small: tuple[str, EventStore], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What DuckDB's parser says the views and sections read is kept in the analytics folder: a later process
    (here: the module's memory emptied) parses none of that SQL again, only a user's query, which is never kept;
    a damaged file is parsed again, with the same report."""
    import hashlib

    from projections import metrics

    _url, store = small
    out = tmp_path / "analytics"
    analytics.refresh(store, out)
    parsed: list[str] = []
    real = views._parse

    def counting(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
        parsed.append(sql)
        return real(con, sql)

    def new_process() -> None:
        monkeypatch.setattr(views, "_parsed", {})
        monkeypatch.setattr(views, "_parsed_new", set())
        monkeypatch.setattr(views, "_parsed_read", set())
        monkeypatch.setattr(views, "_depends_cache", None)
        monkeypatch.setattr(metrics, "_read", {})
        parsed.clear()

    monkeypatch.setattr(views, "_parse", counting)
    monkeypatch.setattr(views, "KEPT_ROWS", 0)  # the run views kept, and the sections taken from earlier reports
    new_process()
    first = metrics.report(store, out).to_dict()
    assert len(parsed) >= len(analytics.VIEWS)
    kept = json.loads((out / views.PARSED).read_text())
    assert kept["duckdb"] == duckdb.__version__ and len(kept["sql"]) == len(set(parsed))

    new_process()
    query = "SELECT count(*) AS n FROM runs"
    with views.reading(store, out, fresh=False, sql=query) as con:
        assert con.execute(query).fetchall()[0][0] > 0
    assert parsed == [query]  # the user's query alone
    with views.reading(store, out, fresh=False, materialize=True):
        pass
    assert parsed == [query]
    assert hashlib.sha256(query.encode()).hexdigest()[:32] not in json.loads((out / views.PARSED).read_text())["sql"]

    (out / views.PARSED).write_text('{"duckdb": "' + duckdb.__version__ + '", "sql": {"x": [1]}')  # cut short
    new_process()
    shutil.rmtree(out / metrics.REPORTS)
    assert metrics.report(store, out).to_dict() == first
    assert len(parsed) >= len(analytics.VIEWS)
