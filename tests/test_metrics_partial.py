"""The run views' rows are kept between metrics reports and, after new events, computed again only for the
runs those events touched (projections.analytics.kept): every declared run view is per run, a report after
any sequence of appends equals the report computed over all the facts without kept rows, and new events in
one run recompute that run's rows alone."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pytest
from analytics_fixtures import one_stream_rows
from conftest import migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.dialects import get_dialect
from eventstore.dialects.analytics import MetricSection
from eventstore.dialects.base import Snapshot
from eventstore.ingest import Ingestor
from eventstore.store import EventStore, NewEvent
from projections import metrics
from projections import report as report_module
from projections.analytics import files, kept, refresh, views
from projections.analytics.facts import catalog

START = datetime(2026, 2, 2, 9, 0, tzinfo=UTC)
#: (dialect, runs): one or two runs of each dialect with run views, small enough for a property test.
RUNS = (("taskmaster", 2), ("mapipe", 1), ("friday", 1), ("taskflow", 1), ("envelope", 1))


@cache
def simulated() -> tuple[tuple[str, tuple[Snapshot, ...]], ...]:
    """(dialect, snapshots) of each simulated run, made once per process."""
    rng, out, n = random.Random(37), [], 0
    for name, count in RUNS:
        for _ in range(count):
            n += 1
            run_rng = random.Random(rng.getrandbits(64))
            snaps = get_dialect(name).simulate(run_rng, run_id=f"P-{n:03d}", start=START + timedelta(hours=5 * n))
            out.append((name, tuple(snaps)[:8]))  # a run's first 8 versions: enough history, cheap
    return tuple(out)


def open_store(folder: Path) -> EventStore:
    return EventStore(migrated(f"sqlite:///{folder}/events.db"))


def ingest(store: EventStore, run: int, snaps: list[Snapshot], ingestors: dict[int, Ingestor]) -> str:
    name = simulated()[run][0]
    ing = ingestors.setdefault(run, Ingestor(store, get_dialect(name)))
    stream = ""
    for snap in snaps:
        stream = ing.ingest(snap).stream
    return stream


def every_run_but_its_last_two(folder: Path) -> tuple[EventStore, dict[int, Ingestor], list[str], Path]:
    """A store of every simulated run but its last two versions: (store, ingestors, streams, analytics folder)."""
    store = open_store(folder)
    ingestors: dict[int, Ingestor] = {}
    streams = [ingest(store, i, list(snaps[:-2]), ingestors) for i, (_n, snaps) in enumerate(simulated())]
    return store, ingestors, streams, folder / "analytics"


def over_the_facts(store: EventStore, directory: Path, stream: str | None = None,
                   scope: metrics.Scope | None = None) -> dict[str, Any]:
    """The report computed over every fact through the catalog's views, with no kept row."""
    with views.reading(store, directory, fresh=False) as con:
        rep = metrics.run_report(con, stream) if stream else metrics.cross_run_report(con, scope)
    return rep.to_dict()


def sections_over_the_facts(store: EventStore, directory: Path, names: list[str]) -> list[dict[str, Any]]:
    """The cross-run report's sections ``names``, computed over every fact with no kept row."""
    with views.reading(store, directory, fresh=False) as con:
        metrics.check_scope(con, metrics.Scope())
        metrics._select(con, metrics.Scope())
        return [metrics.section(con, m).to_dict() for _d, m in catalog().sections if m.name in names]


def test_every_run_view_is_per_run(tmp_path: Path) -> None:
    """Each declared run view, evaluated over one stream's facts alone, gives that stream's rows of the view
    over every fact (what lets kept.bind compute a touched run's rows from its facts), and reads no link
    table or view over several streams (kept.check)."""
    store = open_store(tmp_path)
    ingestors: dict[int, Ingestor] = {}
    streams = [ingest(store, i, list(snaps), ingestors) for i, (_n, snaps) in enumerate(simulated())]
    directory = tmp_path / "analytics"
    refresh(store, directory)
    cat = catalog()
    assert {"runs", "phases", "key_changes", "taskmaster_task_history", "taskmaster_run_changes", "review_findings",
            "friday_cycles", "friday_risk_runs"} <= set(cat.run_views)
    con = views.connect(directory)
    kept.check(cat, views._depends(con, cat, frozenset(views.table_names())))
    for stream in streams[::2]:  # a run of each dialect but one: 3 streams x 21 views
        full, narrowed = one_stream_rows(con, cat.run_views, cat.tables, stream)
        assert narrowed == full, stream
        assert any(full.values()), stream
    con.close()


#: A step of the property below that appends a note to a stream of its own: a run no run view but ``runs`` holds.
NOTE = len(RUNS) + 2


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, NOTE), st.integers(1, 6)), min_size=2, max_size=4))
def test_a_report_after_appends_equals_the_report_over_all_facts(steps: list[tuple[int, int]]) -> None:
    """Appends in a random order (each step: some versions of one run, or a note in a run of its own), then a
    report, which brings the kept rows up to date for the runs the step touched and takes from the report before
    it each section no touched run is in: each section taken is the one computed over every fact, so is the
    last report, and so is the report of the run touched last.  After a note, every section declared per run is
    the earlier report's.  About 4 s of CPU an example (a store of a few hundred events, a report a step): the
    property covers every section."""
    runs = simulated()
    per_run = {m.name for _d, m in catalog().sections if m.per_run}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp))
        directory = Path(tmp) / "analytics"
        done = [0] * len(runs)
        ingestors: dict[int, Ingestor] = {}
        updates: list[int | None] = []
        for i, (pick, count) in enumerate(steps):
            if pick == NOTE:
                store.append(f"note-{i}", [NewEvent("note.added", {"text": "a note", "step": i})])
            else:
                run = pick % len(runs)
                snaps = list(runs[run][1][done[run]:done[run] + count]) or [runs[run][1][-1]]
                done[run] += count
                stream = ingest(store, run, snaps, ingestors)
            kept.last = None
            rep = metrics.report(store, directory)
            # a snapshot already recorded (the run's last, again) appends nothing: the kept report answers
            updates.append(kept.last.streams if kept.last is not None else 0)
            if pick == NOTE and i:
                assert set(metrics.reused) == per_run
            taken = [s.to_dict() for s in rep.sections if s.name in metrics.reused]
            assert taken == sections_over_the_facts(store, directory, metrics.reused), i
        assert updates[0] is None and all(n is not None and n <= 1 for n in updates[1:])  # one run a step
        assert rep.to_dict() == over_the_facts(store, directory)
        if any(pick != NOTE for pick, _ in steps):
            assert metrics.report(store, directory, stream_id=stream).to_dict() == over_the_facts(store, directory,
                                                                                                   stream)
        store.close()


def test_new_events_in_one_run_recompute_that_run_only(tmp_path: Path) -> None:
    store, ingestors, streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None  # the first report: every run's rows
    first_rows = kept.last.rows

    metrics.report(store, directory, scope=metrics.Scope(dialect="mapipe"))  # same position: nothing computed
    assert kept.last.streams == 0 and kept.last.rows == 0

    ingest(store, 0, list(runs[0][1][-2:]), ingestors)  # two more versions of the first task-master run
    metrics.report(store, directory)
    # that run's rows of every run view that reads a fact table with new facts (the others' rows stay), from its facts
    assert {"gates", "gate_runs", "phases", "review_findings", "tool_calls"} <= kept.last.same
    assert not {"runs", "taskmaster_task_history", "stream_positions"} & kept.last.same
    # narrowed for those views: the fact tables and the kept views they read, no other
    cat = catalog()
    computed = set(cat.run_views) - kept.last.same
    with views.reading(store, directory, fresh=False) as con:
        depends = views._depends(con, cat, frozenset(views.table_names()))
    assert kept.last.narrowed == set().union(*(depends[v] for v in computed)) & (cat.tables.keys() | kept.last.same)
    assert "phase_events" not in kept.last.narrowed and "taskmaster_tasks" in kept.last.narrowed
    with views.reading(store, directory, fresh=False) as con:
        own = sum(con.execute(f"SELECT count(*) FROM {v} WHERE stream_id = ?", [streams[0]]).fetchall()[0][0]
                  for v in catalog().run_views if v not in kept.last.same)
    assert kept.last.streams == 1 and kept.last.rows == own
    assert 0 < own < first_rows
    assert metrics.report(store, directory).to_dict() == over_the_facts(store, directory)
    store.close()


def test_every_section_declared_per_run_reads_run_views_alone(tmp_path: Path) -> None:
    """A section declared ``per_run`` reads run views, ``runs`` and ``sel`` and nothing else (else a report would
    take it from an earlier one while a view over several runs, a link table or a fact had changed); the
    sections that read anything else are not declared so."""
    store = open_store(tmp_path)
    ingest(store, 2, list(simulated()[2][1][:2]), {})
    directory = tmp_path / "analytics"
    refresh(store, directory)
    con = views.connect(directory)
    declared = [m for _d, m in catalog().sections if m.per_run]
    assert {"taskmaster_tasks", "taskmaster_status_over_time", "gates", "histories"} <= {m.name for m in declared}
    for m in declared:
        assert metrics.run_views_read(con, m), m.name
    usage = next(m for _d, m in catalog().sections if m.name == "usage")
    assert not usage.per_run and metrics.run_views_read(con, usage) is None  # reads the messages of every session
    con.close()


def test_a_report_after_new_events_takes_the_sections_no_touched_run_is_in(tmp_path: Path) -> None:
    """New versions of a task-master run: the task-master sections (and those over every run's state history)
    are computed again, the other per-run sections are the report's before, on the command line and on the
    metrics page (``Computing``) alike, and the report is the one computed over every fact.  A kept file without
    the table of changes (an older evstore's) takes no section until its views have changed once since."""
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    metrics.report(store, directory)
    assert metrics.reused == []  # the first report: nothing earlier
    ingest(store, 0, list(runs[0][1][-2:]), ingestors)  # the first task-master run
    rep = metrics.report(store, directory)
    taken = set(metrics.reused)
    assert {"reviewer_acceptance", "friday_cycles", "taskflow_verdicts", "envelope_turns"} <= taken
    assert not taken & {"taskmaster_tasks", "taskmaster_throughput", "histories", "usage"}
    assert rep.to_dict() == over_the_facts(store, directory)

    ingest(store, 3, list(runs[3][1][-2:]), ingestors)  # a FRIDAY run, seen on the metrics page
    refresh(store, directory)  # as the page's request does before it computes
    parts = list(metrics.Computing(store, directory).parts())
    assert "friday_cycles" not in metrics.reused and "taskmaster_tasks" in metrics.reused
    head = parts[0]
    assert isinstance(head, metrics.Report) and head.to_dict() == over_the_facts(store, directory)

    with duckdb.connect(str(directory / kept.KEPT)) as con:  # as an older evstore left it
        con.execute(f"DROP TABLE {kept.CHANGES}")
    ingest(store, 4, list(runs[4][1][-2:]), ingestors)
    metrics.report(store, directory)
    assert metrics.reused == []  # every view counts as changed now
    store.append("note-1", [NewEvent("note.added", {"text": "a note"})])
    metrics.report(store, directory)
    assert set(metrics.reused) == {m.name for _d, m in catalog().sections if m.per_run}  # a note: all of them

    # `metrics --format json`: rendered in pieces, the text of each section taken is the earlier rendering's
    def whole(r: metrics.Report) -> str:
        return report_module.to_json(r.to_dict())

    known: dict[int, str] = {}

    def pieces(r: metrics.Report, given: Any) -> tuple[str, list[tuple[int, int]]]:
        known.update(given)
        return report_module.json_pieces(r.to_dict(), given)

    metrics.rendered(store, whole, "json-test", directory, pieces=pieces)
    assert known == {}  # the report of this position was kept without its text: nothing earlier to take it from
    store.append("note-2", [NewEvent("note.added", {"text": "another"})])
    text = metrics.rendered(store, whole, "json-test", directory, pieces=pieces)
    assert len(known) == len(metrics.reused) > 0
    assert text == report_module.to_json(over_the_facts(store, directory))
    left = {p.name.split("-")[0] for p in (directory / metrics.REPORTS).iterdir()}
    assert left == {str(store.max_position())}  # the earlier position's report and renderings are gone
    # sections taken, their rows never decoded, and no earlier rendering of this name: written from those rows
    store.append("note-3", [NewEvent("note.added", {"text": "a third"})])
    known.clear()
    text = metrics.rendered(store, whole, "json-other", directory, pieces=pieces)
    assert known == {} and metrics.reused
    assert text == report_module.to_json(over_the_facts(store, directory))
    assert metrics.report(store, directory).to_dict() == over_the_facts(store, directory)  # as kept, decoded
    store.close()


@pytest.mark.parametrize("fmt", ["html", "table"])
def test_a_rendering_after_new_events_takes_the_blocks_of_the_sections_taken(tmp_path: Path, fmt: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`metrics --format html` and the table, rendered in pieces as JSON is: after new events, the block of each
    section taken from the report before is that report's rendering's (not rendered again), and the text is the
    rendering of the report computed over every fact."""
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    block = "_html_section" if fmt == "html" else "_table_section"
    drawn: list[str] = []
    real = getattr(report_module, block)
    monkeypatch.setattr(report_module, block, lambda s, *a: drawn.append(s.name) or real(s, *a))
    made = report_module.html_pieces if fmt == "html" else report_module.table_pieces

    def whole(r: metrics.Report) -> str:
        return report_module.render(r, fmt)

    def over_the_facts_rendered() -> str:
        with views.reading(store, directory, fresh=False) as con:
            return whole(metrics.cross_run_report(con))

    metrics.rendered(store, whole, fmt, directory, pieces=made)
    ingest(store, 3, list(runs[3][1][-2:]), ingestors)  # a FRIDAY run's last two versions
    drawn.clear()
    text = metrics.rendered(store, whole, fmt, directory, pieces=made)
    taken = set(metrics.reused)
    assert "reviewer_acceptance" in taken and "friday_cycles" in drawn and not taken & set(drawn)
    assert text == over_the_facts_rendered()
    store.append("note-1", [NewEvent("note.added", {"text": "a note"})])
    drawn.clear()
    text = metrics.rendered(store, whole, fmt, directory, pieces=made)
    assert not set(metrics.reused) & set(drawn) and "friday_cycles" in metrics.reused
    assert text == over_the_facts_rendered()
    store.close()


def test_the_metrics_page_after_new_events_shows_each_section_taken_as_it_showed_it(tmp_path: Path) -> None:
    """``GET /metrics`` after new events: a section taken from the report before is not rendered again (its rows
    are not even decoded), the page shows the block it showed for that report (held in the server's memory),
    and the page is the one a server that never showed the store renders from the kept report."""
    from serve_fixtures import LOCAL
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app
    from projections.serve import app as serve_app

    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    drawn: list[str] = []  # the sections whose block was rendered (each draws its chart first)
    real = serve_app.section_chart
    cfg = ServeConfig(url=store.url, analytics_dir=str(directory))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(serve_app, "section_chart", lambda s: drawn.append(s.name) or real(s))
        with TestClient(create_app(cfg), base_url=LOCAL) as c:
            c.get("/metrics")  # computed: every section rendered
            ingest(store, 3, list(runs[3][1][-2:]), ingestors)  # a FRIDAY run's last two versions
            drawn.clear()
            page = c.get("/metrics").text
            taken = set(metrics.reused)
            assert "reviewer_acceptance" in taken and "friday_cycles" not in taken
            assert "friday_cycles" in drawn and not taken & set(drawn)
            assert c.get("/metrics").text == page  # kept
        with TestClient(create_app(cfg), base_url=LOCAL) as c:  # nothing shown before: each block rendered
            drawn.clear()
            assert c.get("/metrics").text == page
            assert taken <= set(drawn)
        store.append("note-1", [NewEvent("note.added", {"text": "a note"})])
        with TestClient(create_app(cfg), base_url=LOCAL) as c:  # every per-run section taken, from a report this
            drawn.clear()  # server never showed: decoded and rendered
            again = c.get("/metrics").text
            assert set(metrics.reused) == {m.name for _d, m in catalog().sections if m.per_run} <= set(drawn)
    with TestClient(create_app(cfg), base_url=LOCAL) as c:
        assert c.get("/metrics").text == again
    store.close()


def test_the_metrics_api_after_new_events_takes_the_text_of_the_sections_taken(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /api/metrics`` after new events: a section taken from the report before is its text in that report's
    answer (not encoded again), and the answer is the report computed over every fact."""
    from serve_fixtures import LOCAL
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app

    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    encoded: list[str] = []  # the sections written as JSON
    real = report_module.compact_json

    def spy(value: Any) -> str:
        if isinstance(value, dict) and "rows" in value:
            encoded.append(value["name"])
        return real(value)

    monkeypatch.setattr(report_module, "compact_json", spy)
    with TestClient(create_app(ServeConfig(url=store.url, analytics_dir=str(directory))), base_url=LOCAL) as c:
        c.get("/api/metrics")
        ingest(store, 3, list(simulated()[3][1][-2:]), ingestors)  # a FRIDAY run's last two versions
        encoded.clear()
        api = c.get("/api/metrics")
        taken = set(metrics.reused)
        assert "reviewer_acceptance" in taken and "friday_cycles" in encoded and not taken & set(encoded)
    assert api.content == real(over_the_facts(store, directory)).encode()
    store.close()


def test_a_report_after_new_events_reads_the_report_before_while_its_refresh_runs(tmp_path: Path) -> None:
    """While a forked child brings the tables up to date, the process reads the report kept at the tables' position
    (``Earlier.read_ahead``, the refresh's ``meanwhile``); the report computed then takes its sections from what was
    read, and is the report over every fact.  In a process of its own: a forked refresh needs one thread."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import migrated
        from analytics_fixtures import simulate_into
        from eventstore.store import EventStore, NewEvent
        from projections import metrics
        from projections.analytics import views
        views.KEPT_ROWS = 0  # a small store's rows kept, as a large one's are
        url, out = migrated("sqlite:///{tmp_path}/events.db"), "{tmp_path}/a"
        ahead, held, taken = [], [], []
        read_ahead, sections_of = metrics.Earlier.read_ahead.__func__, metrics._sections_of

        def spy_ahead(cls, folder, before):
            ahead.append(before.position)
            read_ahead(cls, folder, before)
            held.extend(metrics._read_ahead.values())

        def spy_of(path):
            got = sections_of(path)
            taken.append(any(got is h for h in held))
            return got

        metrics.Earlier.read_ahead, metrics._sections_of = classmethod(spy_ahead), spy_of
        with EventStore(url) as store:
            simulate_into(store, {{"mapipe": 1, "taskmaster": 1, "friday": 1}}, seed=5)
            metrics.report(store, out)
            at = store.max_position()
            store.append("note-1", [NewEvent("note.added", {{"text": "a note"}})])
            rep = metrics.report(store, out)
            with views.reading(store, out, fresh=False) as con:
                same = rep.to_dict() == metrics.cross_run_report(con).to_dict()
        print(json.dumps({{"ahead": ahead, "at": at, "taken": taken, "reused": len(metrics.reused), "same": same}}))
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "EVSTORE_ANALYTICS_FORK": "1"})
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["ahead"] == [got["at"]]  # the report of the tables' position before the refresh, read meanwhile
    assert got["taken"] == [False, True] and got["reused"] > 0 and got["same"], got  # ... and found in what was read


def test_a_report_over_the_kept_rows_defines_no_run_view_over_the_facts(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SERIAL_ROWS`` fact rows (here: any), a report's connection reads the run views from the kept tables
    (by their names) and never defines them over the facts (DuckDB binds each view it is given: 50 ms at 10^7 events); the kept
    update evaluates their SQL itself, the other views read the kept rows, and the report after new events is
    the report over every fact."""
    monkeypatch.setattr(views, "SERIAL_ROWS", 0)
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    metrics.report(store, directory)  # the kept rows built
    ingest(store, 3, list(runs[3][1][-2:]), ingestors)  # a FRIDAY run's last two versions: its rows updated
    store.append("note-1", [NewEvent("note.added", {"text": "a note"})])
    with views.reading(store, directory, materialize=True, memory=views.REPORT_MEMORY) as con:
        defined = con.execute("SELECT database_name, view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        beside = views._facts_beside_run_views(con, catalog())
        # no view over the facts, and of the fact tables only those the other views and the sections read
        assert {n for db, n in defined if db != "temp"} == beside
        assert "events" in beside and "phase_events" not in beside
        cat = catalog()
        # the other views over the kept rows; a run view's name is its kept table (the connection's search path)
        assert set(cat.views) - set(cat.run_views) == {n for db, n in defined if db == "temp"}
        for view in cat.run_views:
            assert con.execute(f"SELECT count(*) FROM {view}").fetchall() == \
                con.execute(f"SELECT count(*) FROM kept.main.{view}").fetchall()
        assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == len(runs) + 1
    assert metrics.report(store, directory).to_dict() == over_the_facts(store, directory)
    store.close()


def test_the_fact_tables_read_beside_the_kept_rows_are_those_views_and_sections_read(tmp_path: Path) -> None:
    """Over the kept rows a report's connection defines the fact tables read by the views that are not run views
    and by the sections, directly or through such views (not through a run view: its rows are the kept ones), and
    every one of them when a section's SQL does not say what it reads."""
    store = open_store(tmp_path)
    ingest(store, 0, list(simulated()[0][1]), {})
    directory = tmp_path / "analytics"
    refresh(store, directory)
    cat = catalog()
    con, _m, release, _only = views._connect(directory, views=False, facts=False)
    try:
        assert views._facts_beside_run_views(con, cat) == {"events"}
        direct = dataclasses.replace(cat, sections=(*cat.sections, ("", MetricSection(
            "direct", "Phase events", ("n",), "SELECT count(*) AS n FROM phase_events"))))
        assert views._facts_beside_run_views(con, direct) == {"events", "phase_events"}
        opaque = dataclasses.replace(cat, sections=(*cat.sections, ("", MetricSection(
            "opaque", "Any file", ("n",), "SELECT count(*) AS n FROM read_parquet('x.parquet')"))))
        assert views._facts_beside_run_views(con, opaque) == set(cat.tables)
        views.define_facts(con, ["phase_events", "no_such_table"])
        views.define_facts(con, ["phase_events"])  # defined once
        got = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        assert got == [("phase_events",)]
    finally:
        con.close()
        release()
        store.close()


def test_kept_rows_another_connection_holds_are_not_waited_for(tmp_path: Path) -> None:
    """While another connection (a report in another process or thread) holds the kept file, a report is
    computed over the facts, the same report."""
    store = open_store(tmp_path)
    ingestors: dict[int, Ingestor] = {}
    ingest(store, 0, list(simulated()[0][1]), ingestors)
    directory = tmp_path / "analytics"
    metrics.report(store, directory)
    ingest(store, 1, list(simulated()[1][1]), ingestors)
    refresh(store, directory)
    holder = duckdb.connect(str(directory / kept.KEPT))
    try:
        kept.last = None
        rep = metrics.report(store, directory).to_dict()
        assert kept.last is None  # not bound: computed over the facts
    finally:
        holder.close()
    assert rep == over_the_facts(store, directory)
    store.close()


def test_a_compaction_of_the_facts_keeps_the_kept_rows(tmp_path: Path) -> None:
    """A compaction merges small fact files into one (the same facts): the report after it updates the run the
    new events touched, as after any refresh, instead of every run's rows from every fact; a rebuild, a new
    build of the tables, computes them all again."""
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    runs = simulated()
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None
    build = files.Manifest.load(directory).build  # type: ignore[union-attr]
    for n in range(2):  # two refreshes, two small files a table
        ingest(store, 0, [runs[0][1][-2 + n]], ingestors)
        refresh(store, directory, compact=False)
    before = {f["file"] for f in files.Manifest.load(directory).files["events"]}  # type: ignore[union-attr]
    ingest(store, 1, list(runs[1][1][-2:]), ingestors)
    result = refresh(store, directory, compact_at=1)  # merge the small files
    assert result.compacted
    after = files.Manifest.load(directory)
    assert after is not None and after.build == build and not before <= {f["file"] for f in after.files["events"]}
    rep = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams == 2  # the runs of the new events, not every run
    assert rep == over_the_facts(store, directory)
    refresh(store, directory, rebuild=True)
    assert files.Manifest.load(directory).build != build  # type: ignore[union-attr]
    metrics.report(store, directory, scope=metrics.Scope(dialect="taskmaster"))
    assert kept.last is not None and kept.last.streams is None
    store.close()


def test_tables_of_an_older_evstore_get_a_build_at_their_next_refresh(tmp_path: Path) -> None:
    """A manifest written before builds were kept: the kept rows hold to its files (as before), the next refresh
    that lists files gives it a build, the report after it builds the kept rows once more, and from then on
    they hold to the build."""
    store = open_store(tmp_path)
    ingestors: dict[int, Ingestor] = {}
    runs = simulated()
    ingest(store, 0, list(runs[0][1][:-2]), ingestors)
    directory = tmp_path / "analytics"
    refresh(store, directory)
    manifest = directory / files.MANIFEST
    data = json.loads(manifest.read_bytes())
    manifest.write_text(json.dumps({k: v for k, v in data.items() if k != "build"}))  # as an older one
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None
    assert files.Manifest.load(directory).build == ""  # type: ignore[union-attr]
    ingest(store, 0, [runs[0][1][-2]], ingestors)
    metrics.report(store, directory)
    build = files.Manifest.load(directory).build  # type: ignore[union-attr]
    assert build and kept.last is not None and kept.last.streams is None  # its basis changed: built once more
    ingest(store, 0, [runs[0][1][-1]], ingestors)
    metrics.report(store, directory)
    assert files.Manifest.load(directory).build == build  # type: ignore[union-attr]
    assert kept.last is not None and kept.last.streams == 1
    store.close()


def test_a_kept_file_that_is_not_duckdb_is_built_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    ingest(store, 2, list(simulated()[2][1]), {})
    directory = tmp_path / "analytics"
    refresh(store, directory)
    (directory / kept.KEPT).write_bytes(b"not a database")
    rep = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams is None
    assert rep == over_the_facts(store, directory)
    store.close()


def test_rebuilt_facts_are_never_read_through_older_kept_rows(tmp_path: Path) -> None:
    """An erasure rebuilds the analytics tables (every file anew): the kept rows, computed from the facts
    before it, are not updated but replaced by a new file, so none of their values stays."""
    store = open_store(tmp_path)
    ingest(store, 0, list(simulated()[0][1]), {})
    directory = tmp_path / "analytics"
    metrics.report(store, directory)
    with duckdb.connect(str(directory / kept.KEPT)) as con:  # a value only the old file holds
        con.execute("INSERT INTO runs (stream_id, title) VALUES ('erased-run', 'ERASED-TITLE')")
    refresh(store, directory, rebuild=True)
    scope = metrics.Scope(dialect="taskmaster")  # a report not kept yet at this position
    rep = metrics.report(store, directory, scope=scope)
    assert kept.last is not None and kept.last.streams is None  # built again, from every fact
    assert b"ERASED-TITLE" not in (directory / kept.KEPT).read_bytes()
    assert rep.to_dict() == over_the_facts(store, directory, scope=scope)
    store.close()


@pytest.fixture(autouse=True)
def _no_last(monkeypatch: pytest.MonkeyPatch) -> None:
    kept.last = None
    # These stores are small (a report of theirs would compute every view in memory): keep their rows anyway.
    monkeypatch.setattr(views, "KEPT_ROWS", 0)


def test_a_report_that_does_not_fit_the_memory_bound_is_still_computed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's DuckDB connection holds at most views.REPORT_MEMORY; a section or a kept view DuckDB
    cannot spill past it (an OutOfMemoryException, made here: a small store fits any bound) runs again at
    DuckDB's own limit, and the report is the same."""
    store = open_store(tmp_path)
    ingest(store, 1, list(simulated()[1][1]), {})
    directory = tmp_path / "analytics"
    refresh(store, directory)
    failed: list[str] = []

    def once(real: Any, what: str) -> Any:
        def run(con: duckdb.DuckDBPyConnection, *args: Any) -> Any:
            limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
            if what not in failed:
                failed.append(what)
                raise duckdb.OutOfMemoryException(f"Out of Memory Error: {what} over {limit}")
            return real(con, *args)
        return run

    monkeypatch.setattr(kept, "_update", once(kept._update, "kept"))
    monkeypatch.setattr(metrics, "_section_rows", once(metrics._section_rows, "section"))
    rep = metrics.report(store, directory).to_dict()
    assert failed == ["kept", "section"] and kept.last is not None
    monkeypatch.undo()
    assert rep == over_the_facts(store, directory)
    store.close()


def _kept_rows(store: EventStore, directory: Path) -> dict[str, list[str]]:
    """Each run view's kept rows (sorted reprs)."""
    with views.reading(store, directory, fresh=False, materialize=True) as con:
        return {v: sorted(map(repr, con.execute(f"SELECT * FROM {v}").fetchall())) for v in catalog().run_views}


def _rows_over_the_facts(store: EventStore, directory: Path) -> dict[str, list[str]]:
    """Each run view's rows over every fact, nothing kept (sorted reprs)."""
    with views.reading(store, directory, fresh=False) as con:
        return {v: sorted(map(repr, con.execute(f"SELECT * FROM {v}").fetchall())) for v in catalog().run_views}


@pytest.mark.parametrize("build_rows", [kept.BUILD_ROWS, 200], ids=["at-once", "in-shares"])
def test_kept_views_that_do_not_fit_are_computed_a_range_of_the_runs_at_a_time(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              build_rows: int) -> None:
    """A run view's statement that DuckDB cannot fit (made here: a small store fits any bound) is computed a range
    of the runs at a time: at once it fails, in two ranges it fails after writing the first (what it wrote is
    not kept), in four it fits.  The kept rows are those over every fact, in a first build (at once, and a
    share of the runs at a time) and after new events, and so is the report; nothing steps the limit up."""
    monkeypatch.setattr(kept, "BUILD_ROWS", build_rows)
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    real = kept._in_ranges
    tried: list[int] = []

    def tight(con: duckdb.DuckDBPyConnection, table: str, sql: str, runs: str, ranges: int) -> int:
        tried.append(ranges)
        if ranges == 1:
            raise duckdb.OutOfMemoryException("Out of Memory Error: made not to fit at once")
        if ranges == 2:
            real(con, table, sql, runs, ranges)  # every range written, then out of memory
            raise duckdb.OutOfMemoryException("Out of Memory Error: made not to fit in two ranges")
        return real(con, table, sql, runs, ranges)

    def no_step_up(con: duckdb.DuckDBPyConnection, run: Any, *args: Any) -> Any:
        return run()

    monkeypatch.setattr(kept, "_in_ranges", tight)
    monkeypatch.setattr(kept, "fitting", no_step_up)
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None and kept.last.rows > 0
    views_computed = len(catalog().run_views) * (1 if build_rows > 1000 else 2)  # (two shares at least)
    assert len(tried) >= 3 * views_computed and set(tried) == {1, 2, 4}
    assert _kept_rows(store, directory) == _rows_over_the_facts(store, directory)
    tried.clear()
    ingest(store, 3, list(simulated()[3][1][-2:]), ingestors)
    rep = metrics.report(store, directory).to_dict()
    assert kept.last.streams == 1 and set(tried) == {1, 2, 4}
    monkeypatch.undo()
    assert _kept_rows(store, directory) == _rows_over_the_facts(store, directory)
    assert rep == over_the_facts(store, directory)
    store.close()


def test_a_run_view_that_does_not_fit_at_once_fits_a_range_of_the_runs_at_a_time(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A real DuckDB OutOfMemoryException: a median per run over 2M facts (64 runs) in Parquet does not fit 24 MB at
    once nor in two ranges of the runs; a few ranges later it does, at the same limit, with the rows of the
    statement at DuckDB's own limit (a range is a filter on the stream id, pushed into the scan)."""
    facts = tmp_path / "facts.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 's' || lpad((i % 64)::VARCHAR, 2, '0') AS stream_id, i AS v FROM range(2000000) t(i)) "
                f"TO '{facts}'")
    con.execute(f"CREATE VIEW facts AS SELECT * FROM '{facts}'")
    sql = "SELECT stream_id, quantile_cont(v, 0.5) AS median, count(*) AS n FROM facts GROUP BY stream_id"
    whole = sorted(con.execute(sql).fetchall())
    con.execute("SET memory_limit = '24MB'")
    con.execute("SET threads = 2")
    views._limits[con] = "24MB"
    real = kept._in_ranges
    tried: list[int] = []

    def recorded(*args: Any) -> int:
        tried.append(args[-1])
        return real(*args)

    def stepped_up(*_args: Any) -> Any:
        raise AssertionError("the limit was stepped up")

    monkeypatch.setattr(kept, "_in_ranges", recorded)
    monkeypatch.setattr(kept, "fitting", stepped_up)
    assert kept._created(con, "medians", sql, "SELECT DISTINCT stream_id FROM facts") == 64
    assert tried[:2] == [1, 2] and 2 < tried[-1] <= kept.RANGES[-1]
    assert sorted(con.execute("SELECT * FROM medians").fetchall()) == whole
    assert con.execute("SELECT current_setting('memory_limit')").fetchall() == [("22.8 MiB",)]  # as it was


def test_a_stream_range_is_pushed_into_each_run_views_scans(tmp_path: Path) -> None:
    """What makes a range of the runs cost less memory than all of them (kept._in_ranges): DuckDB pushes the
    filter on stream_id below each run view's aggregates and joins, into its scans, rather than filtering the
    rows the view computed over every run."""
    store = open_store(tmp_path)
    ingest(store, 1, list(simulated()[1][1]), {})
    directory = tmp_path / "analytics"
    refresh(store, directory)
    cat = catalog()
    with views.reading(store, directory, fresh=False) as con:
        for view in cat.run_views:
            plan = con.execute(f"EXPLAIN SELECT * FROM {view} WHERE stream_id >= 'a' AND stream_id < 'b'").fetchall()
            top = plan[0][1].splitlines()[0]
            assert "Filter" not in top and "FILTER" not in top, (view, plan[0][1][:400])
    store.close()


def test_kept_views_computed_again_at_a_higher_limit_keep_their_rows(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kept view's statement fails at once and in ranges short of the most (made here: a small store fits any
    bound), then through views.fitting fails once more and runs again at the next step: each view's rows are those
    it computed (the count each statement answers is fetched before the limit is set back, which would answer in
    its place), in a first build over shares of the runs and after new events, and the report is the one over
    every fact."""
    monkeypatch.setattr(kept, "BUILD_ROWS", 200)  # the first build a share of the runs at a time (_narrowed)
    store, ingestors, _streams, directory = every_run_but_its_last_two(tmp_path)
    real, real_ranges = views.fitting, kept._in_ranges
    retried: list[int] = []

    def failing_once(con: duckdb.DuckDBPyConnection, run: Any, *args: Any) -> Any:
        tried: list[bool] = []

        def first_fails() -> Any:
            if not tried:
                tried.append(True)
                retried.append(1)
                raise duckdb.OutOfMemoryException("Out of Memory Error: made to fail once")
            return run()
        return real(con, first_fails, *args)

    def in_the_most_ranges(con: duckdb.DuckDBPyConnection, table: str, sql: str, runs: str, ranges: int) -> int:
        if ranges < kept.RANGES[-1]:
            raise duckdb.OutOfMemoryException("Out of Memory Error: made to fit in the most ranges only")
        return real_ranges(con, table, sql, runs, ranges)

    monkeypatch.setattr(kept, "fitting", failing_once)
    monkeypatch.setattr(kept, "_in_ranges", in_the_most_ranges)
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None and kept.last.rows > 0
    built = len(retried)
    assert built > len(catalog().run_views)  # the update, and each view of each share
    ingest(store, 3, list(simulated()[3][1][-2:]), ingestors)
    rep = metrics.report(store, directory).to_dict()
    computed = set(catalog().run_views) - kept.last.same
    assert kept.last.streams == 1 and computed and len(retried) == built + 1 + len(computed)  # the update, each view
    monkeypatch.undo()
    assert _kept_rows(store, directory) == _rows_over_the_facts(store, directory)
    assert rep == over_the_facts(store, directory)
    store.close()


def test_a_statement_over_the_memory_bound_runs_again_a_step_higher_then_at_the_bound_again() -> None:
    """views.fitting: a real DuckDB OutOfMemoryException (a holistic aggregate over 2M numbers at 4 MB) runs the
    statement again at each step up (here 8 MB, still too little, then 64 MB), and the connection's limit is the
    one it was given afterwards, for the next section; with no step left, the exception is the caller's."""
    con = duckdb.connect()
    con.execute("SET memory_limit = '4MB'")
    views._limits[con] = "4MB"
    limits: list[str] = []
    sql = "SELECT quantile_cont(i, 0.5) FROM range(2000000) t(i)"

    def run() -> Any:
        limits.append(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
        return con.execute(sql).fetchall()

    assert views.fitting(con, run, ("8MB", "64MB", None)) == [(999999.5,)]
    assert limits == ["3.8 MiB", "7.6 MiB", "61.0 MiB"]
    assert con.execute("SELECT current_setting('memory_limit')").fetchall() == [("3.8 MiB",)]
    with pytest.raises(duckdb.OutOfMemoryException):
        views.fitting(con, run, ("8MB",))
    assert con.execute("SELECT current_setting('memory_limit')").fetchall() == [("3.8 MiB",)]


def test_a_statement_that_fits_on_one_thread_runs_there_at_the_same_bound_before_any_step_up() -> None:
    """views.fitting's first step (ONE_THREAD): a statement DuckDB cannot fit on the connection's threads runs again
    at the same limit on one (no partial state per thread), then, if it still does not fit, a step higher on the
    connection's threads again; afterwards the threads and the limit are as they were.  On a connection of one
    thread that step is skipped, not repeated."""
    con = duckdb.connect()
    con.execute("SET memory_limit = '64MB'")
    con.execute("SET threads = 3")
    views._limits[con] = "64MB"
    seen: list[tuple[str, str]] = []
    fits_on: set[str] = {"1"}

    def run() -> Any:
        threads, limit = con.execute("SELECT current_setting('threads')::VARCHAR, "
                                     "current_setting('memory_limit')").fetchall()[0]
        seen.append((threads, limit))
        if threads not in fits_on:
            raise duckdb.OutOfMemoryException("Out of Memory Error: would not fit")
        return "done"

    assert views.fitting(con, run) == "done"
    assert seen == [("3", "61.0 MiB"), ("1", "61.0 MiB")]
    assert con.execute("SELECT current_setting('threads')").fetchall() == [(3,)]
    seen.clear()
    fits_on = set()  # fits nowhere: each step once, then the caller's exception
    with pytest.raises(duckdb.OutOfMemoryException):
        views.fitting(con, run, (views.ONE_THREAD, "128MB"))
    assert seen == [("3", "61.0 MiB"), ("1", "61.0 MiB"), ("3", "122.0 MiB")]
    assert con.execute("SELECT current_setting('threads'), current_setting('memory_limit')").fetchall() == [
        (3, "61.0 MiB")]
    con.execute("SET threads = 1")
    seen.clear()
    with pytest.raises(duckdb.OutOfMemoryException):
        views.fitting(con, run, (views.ONE_THREAD,))
    assert seen == [("1", "61.0 MiB")]  # not run again as it was


def test_the_touched_streams_facts_are_read_from_their_own_stretches_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """New events in old runs read those runs' stretches (first to last position at the kept checkpoint, merged
    where they overlap) and the new events, not every fact after the oldest run's first event."""
    con = duckdb.connect()
    con.execute("ATTACH ':memory:' AS kept")
    con.execute("CREATE TABLE kept.main.stream_positions AS SELECT * FROM (VALUES ('a', 1, 10), ('b', 5, 20), "
                "('c', 100, 120), ('d', 500, 510), ('e', 21, 30)) t(stream_id, first_position, last_position)")
    con.execute("CREATE TEMP TABLE kept_touched AS SELECT * FROM (VALUES ('a'), ('b'), ('c'), ('e'), ('new')) "
                "t(stream_id)")
    spans = kept._spans_sql(kept._spans(kept._stretches_kept(con), 1000), 1000)
    assert spans == "(position BETWEEN 1 AND 30 OR position BETWEEN 100 AND 120 OR position > 1000)"
    assert con.execute(f"SELECT list(p ORDER BY p) FROM range(0, 1003) r(p) WHERE {spans.replace('position', 'p')}"
                       ).fetchall()[0][0] == [*range(1, 31), *range(100, 121), 1001, 1002]
    monkeypatch.setattr(kept, "SPANS", 1)
    assert kept._spans_sql(kept._spans(kept._stretches_kept(con), 1000), 1000) == "position >= 1"


def test_the_touched_runs_facts_are_read_from_the_files_that_can_hold_them(tmp_path: Path) -> None:
    """The kept update reads a fact table's rows at some positions from the files whose positions can reach
    them (each file's range in the manifest), not from every file of the table: the same rows."""
    store = open_store(tmp_path)
    ingestors: dict[int, Ingestor] = {}
    for i, (_name, snaps) in enumerate(simulated()):
        ingest(store, i, list(snaps), ingestors)
    refresh(store, tmp_path / "a", flush_events=20, compact=False)  # a file every 20 events
    con, m, release, _only = views._connect(tmp_path / "a", views=False)
    try:
        listed = [f for f in m.files["events"] if f["rows"]]
        assert len(listed) > 4
        cut, end = listed[1]["upto"], listed[3]["upto"]
        for spans, where in (([(cut + 1, None)], f"position > {cut}"),
                             ([(2, 3), (cut + 1, end)], f"position BETWEEN 2 AND 3 OR position BETWEEN {cut + 1} AND {end}"),
                             ([(end + 1, end + 1)], f"position = {end + 1}")):
            files = views.files_within(con, "events", spans)
            assert files is not None and 0 < len(files) < len(listed)
            assert len(files) == sum(1 for f in listed if any(f["upto"] >= a and (b is None or f["after"] < b)
                                                              for a, b in spans))
            got = con.execute(f"SELECT position FROM {views.facts_within(con, 'events', spans, 'memory')} "
                              f"WHERE {where} ORDER BY 1").fetchall()
            assert got and got == con.execute(f"SELECT position FROM events WHERE {where} ORDER BY 1").fetchall()
        assert views.files_within(con, "events", [(m.position + 1, None)]) == []
        assert con.execute(f"SELECT count(*) FROM {views.facts_within(con, 'events', [(m.position + 1, None)], 'memory')}"
                           ).fetchall() == [(0,)]
    finally:
        con.close()
        release()
    store.close()


#: Claude Code's run views (per transcript: a session's own file or a subagent's).
CLAUDE_RUN_VIEWS = ("token_usage", "tool_calls", "claude_model_tokens", "claude_model_tools", "claude_stream_messages",
                    "claude_stream_cwd", "claude_stream_stats", "claude_stream_sidechains", "claude_subagent_links")


def _transcripts(root: Path, *, whole: bool) -> None:
    """The fixture session and its subagent (``whole``: every line; else up to the middle of its first API
    message, and the subagent's prompt only), and a session whose messages name no model (one of them with a
    tool call and its failed result), in full or its first message."""
    from claude_fixtures import SESSION, records, subagent_records, write_project

    main, sub = write_project(root)
    if not whole:
        main.write_bytes(b"".join(records()[:4]))
        sub.write_bytes(b"".join(subagent_records()[:1]))
    other = "0b5e7c11-2d4f-4e55-8a0c-6d1f0e9a7b23"
    base = {"sessionId": other, "cwd": "/work/proj", "version": "2.1.3", "isSidechain": False}
    lines = [
        {**base, "type": "assistant", "uuid": "n1", "timestamp": "2026-03-02T09:00:00.000Z", "requestId": "rq_n1",
         "message": {"id": "msg_n1", "role": "assistant", "content": [{"type": "tool_use", "id": "toolu_n1",
                                                                       "name": "Bash", "input": {"command": "ls"}}],
                     "usage": {"input_tokens": 50, "output_tokens": 5}}},
        {**base, "type": "user", "uuid": "n2", "timestamp": "2026-03-02T09:00:05.000Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_n1", "is_error": True,
                                                   "content": "no such file"}]}},
        {**base, "type": "assistant", "uuid": "n3", "timestamp": "2026-03-02T09:00:09.000Z", "requestId": "rq_n2",
         "message": {"id": "msg_n2", "model": "claude-sonnet-4-5", "role": "assistant",
                     "content": [{"type": "text", "text": "Done."}], "usage": {"input_tokens": 70}}},
    ]
    (main.parent / f"{other}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines[:None if whole else 1]))
    assert SESSION in main.name


def test_claude_run_views_are_per_transcript_and_kept_after_new_lines(tmp_path: Path) -> None:
    """Claude Code has no simulated runs (the dialect contract suite cannot hold its run views to being per
    run): over transcripts of every kind of message (split over lines, without a model, with tool errors,
    a subagent's), each run view evaluated over one transcript's facts alone gives that transcript's rows;
    after new lines in the transcripts (a message's later lines among them), the kept rows of the touched
    transcripts are computed again and the report, claude_sessions included, is the one over all the facts."""
    from eventstore import capture

    store = open_store(tmp_path)
    root = tmp_path / "projects"
    _transcripts(root, whole=False)
    capture.ingest_transcripts(store, [root], scrub=False)
    directory = tmp_path / "analytics"
    first = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams is None
    assert first == over_the_facts(store, directory)

    shutil.rmtree(root)
    _transcripts(root, whole=True)
    capture.ingest_transcripts(store, [root], scrub=False)
    rep = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams == 3  # the two sessions and the subagent
    assert rep == over_the_facts(store, directory)
    rows = next(s for s in rep["sections"] if s["name"] == "claude_sessions")["rows"]
    assert [(r["model"], r["sessions"], r["api_messages"], r["tool_calls"], r["tool_errors"]) for r in rows] == [
        ("claude-haiku-4-5", 1, 1, 0, 0), ("claude-opus-4-1", 1, 1, 1, 0), ("claude-sonnet-4-5", 2, 3, 2, 1),
        (None, 1, 1, 0, 0)]  # the tool error without a model is in no model's row

    cat = catalog()
    assert set(CLAUDE_RUN_VIEWS) <= set(cat.run_views)
    con = views.connect(directory)
    kept.check(cat, views._depends(con, cat, frozenset(views.table_names())))
    streams = [r[0] for r in con.execute("SELECT DISTINCT stream_id FROM claude_events ORDER BY 1").fetchall()]
    assert len(streams) == 3
    for stream in streams:
        full, narrowed = one_stream_rows(con, CLAUDE_RUN_VIEWS, cat.tables, stream)
        assert narrowed == full, stream
        assert full["token_usage"] and full["claude_stream_stats"], stream
    con.close()
    store.close()


def test_another_price_table_at_the_same_position_prices_the_report_anew(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The report kept for a log position (and the kept run views' rows) were computed with the price table in
    force then; with another ($EVSTORE_PRICES) at the same position the report is the one computed from
    scratch with it, and back with the first table, the first report again."""
    from claude_fixtures import write_project

    from eventstore import capture

    monkeypatch.delenv("EVSTORE_PRICES", raising=False)
    store = open_store(tmp_path)
    write_project(tmp_path / "projects")
    capture.ingest_transcripts(store, [tmp_path / "projects"], scrub=False)
    directory = tmp_path / "analytics"

    def cost(rep: dict[str, Any]) -> Any:
        return next(s for s in rep["sections"] if s["name"] == "usage")["summary"]["cost_usd"]

    first = metrics.report(store, directory).to_dict()
    assert kept.last is not None and cost(first) > 0
    prices = tmp_path / "prices.toml"
    prices.write_text('[[price]]\nmodel = "claude-sonnet-4-5"\neffective = "2025-01-01"\ninput = 300\n'
                      'output = 1500\ncache_write = 375\ncache_read = 30\n')
    monkeypatch.setenv("EVSTORE_PRICES", str(prices))
    dearer = metrics.report(store, directory).to_dict()
    assert dearer == over_the_facts(store, directory) and cost(dearer) > 10 * cost(first)
    monkeypatch.delenv("EVSTORE_PRICES")
    assert metrics.report(store, directory).to_dict() == first
    store.close()


def test_a_message_in_two_transcripts_is_counted_once_with_its_latest_line_after_new_lines(tmp_path: Path) -> None:
    """A resumed session's file repeats earlier messages' lines (here msg_1's first two, and a later line of
    msg_2): api_usage counts a message once, in the transcript that recorded it first, with the usage of its
    latest line in any transcript and every line counted.  Combined from each transcript's kept part
    (claude_stream_messages) after new lines in both transcripts, it is the row over all the facts (msg_1's
    latest line is in the transcript whose part starts first, msg_2's in the other), and so is the report."""
    from claude_fixtures import records, write_project

    from eventstore import capture

    store = open_store(tmp_path)
    root = tmp_path / "projects"
    main, _sub = write_project(root)
    resumed = main.parent / "ffd1e0aa-0000-4000-8000-000000000001.jsonl"
    later = json.loads(records()[6])  # msg_2's line, again later and with more output tokens
    later = {**later, "uuid": "r9", "sessionId": resumed.stem, "timestamp": "2026-03-05T10:00:00.000Z",
             "message": {**later["message"], "usage": {"input_tokens": 1500, "output_tokens": 95}}}
    main.write_bytes(b"".join(records()[:3]))  # msg_1's first line
    resumed.write_bytes(b"".join(records()[2:4]))  # msg_1's first two lines, repeated
    capture.ingest_transcripts(store, [root], scrub=False)
    directory = tmp_path / "analytics"
    metrics.report(store, directory)
    assert kept.last is not None and kept.last.streams is None
    main.write_bytes(b"".join(records()))
    resumed.write_bytes(b"".join(records()[2:4]) + (json.dumps(later) + "\n").encode())
    capture.ingest_transcripts(store, [root], scrub=False)
    rep = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams == 2
    assert rep == over_the_facts(store, directory)
    with views.reading(store, directory, fresh=False) as con:
        msgs = con.execute("SELECT message_id, stream_id, lines, output_tokens, first_output_tokens FROM api_usage "
                           "WHERE message_id IN ('msg_1', 'msg_2') ORDER BY 1").fetchall()
    assert msgs == [("msg_1", main.stem, 3 + 2, 90, 40), ("msg_2", main.stem, 1 + 1, 95, 20)]
    store.close()


@pytest.mark.parametrize("shares_of", [1, 40])
def test_kept_rows_built_a_share_of_the_runs_at_a_time_are_those_built_at_once(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             shares_of: int) -> None:
    """Past BUILD_ROWS fact rows the first build computes the run views a share of the runs at a time (each
    share's facts read from its runs' stretches of the log): the kept rows, and so every report, are those of
    one evaluation over every fact, and later updates keep them so."""
    store = open_store(tmp_path)
    ingestors: dict[int, Ingestor] = {}
    runs = simulated()
    streams = [ingest(store, i, list(snaps[:-1]), ingestors) for i, (_n, snaps) in enumerate(runs)]
    monkeypatch.setattr(kept, "BUILD_ROWS", shares_of)  # a share of (about) one run, or a few
    directory = tmp_path / "analytics"
    shared = metrics.report(store, directory).to_dict()
    assert kept.last is not None and kept.last.streams is None
    with views.reading(store, directory, fresh=False, materialize=True) as con:
        rows = {v: sorted(map(repr, con.execute(f"SELECT * FROM {v}").fetchall())) for v in catalog().run_views}
    assert shared == over_the_facts(store, directory)
    with views.reading(store, directory, fresh=False) as con:  # every view over every fact, nothing kept
        assert rows == {v: sorted(map(repr, con.execute(f"SELECT * FROM {v}").fetchall()))
                        for v in catalog().run_views}
    ingest(store, 0, list(runs[0][1][-1:]), ingestors)  # then an update, as after any build
    assert metrics.report(store, directory, stream_id=streams[0]).to_dict() == over_the_facts(store, directory,
                                                                                           streams[0])
    store.close()
