"""`evstore runs` pages in the database (--limit, --page, --after; one screen on a terminal) and `--json`
streams NDJSON, one run per line, read in batches (keyset paging, constant memory).  SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

import projections.runs
from eventstore.cli import register
from eventstore.store import EventStore
from projections.cli import runs as runs_cli
from projections.runs import iter_runs, list_runs


def _runs(url: str, *args: str) -> Any:
    return CliRunner().invoke(register(), ["--url", url, "runs", *args])


def _ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def demo(store_url: str) -> str:
    r = CliRunner().invoke(register(), ["--url", store_url, "demo", "--runs", "11", "--seed", "2", "--sessions", "0"])
    assert r.exit_code == 0, r.output
    return store_url


def test_json_is_ndjson_and_pages_cover_it_once(demo: str) -> None:
    r = _runs(demo, "--json")
    assert r.exit_code == 0, r.output
    every = _ndjson(r.stdout)
    assert len(every) == 11 and all(isinstance(row, dict) for row in every)
    ids = [row["stream_id"] for row in every]
    pages = [_ndjson(_runs(demo, "--json", "--limit", "4", "--page", str(n)).stdout) for n in (1, 2, 3, 4)]
    assert [row["stream_id"] for p in pages for row in p] == ids and pages[-1] == []
    chained, after = [], None
    while True:  # --after the last stream id of each page gives the next one
        page = _ndjson(_runs(demo, "--json", "--limit", "3", *(["--after", after] if after else [])).stdout)
        if not page:
            break
        chained += [row["stream_id"] for row in page]
        after = page[-1]["stream_id"]
    assert chained == ids
    table = _runs(demo, "--limit", "4", "--page", "2")
    assert [line.split()[0] for line in table.stdout.splitlines()[2:]] == ids[4:8]
    assert f"--after {ids[7]}" in table.stderr  # where the next page starts
    dialect = every[0]["dialect"]
    assert _ndjson(_runs(demo, "--json", "--dialect", dialect).stdout) == [row for row in every
                                                                             if row["dialect"] == dialect]


def test_rows_are_read_in_batches_of_bounded_size(demo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int | None] = []
    real = projections.runs.list_runs

    def counting(*args: Any, **kwargs: Any) -> Any:
        sizes.append(kwargs.get("limit"))
        return real(*args, **kwargs)

    monkeypatch.setattr(projections.runs, "list_runs", counting)
    store = EventStore(demo)
    try:
        streamed = list(iter_runs(store, batch=2, sessions=True))
        assert streamed == real(store, sessions=True)
        assert len(sizes) == 6 and all(s == 2 for s in sizes)  # 11 rows: five full batches and a last one
        sizes.clear()
        assert list(iter_runs(store, batch=4, limit=5, offset=2)) == real(store, limit=5, offset=2)
        assert sizes == [4, 1]
    finally:
        store.close()


def test_piped_every_run_is_the_whole_table_read_twice_in_batches_never_held(demo: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped or redirected, `evstore runs` lists every run as the one table of them all (the widths of every row),
    from two streamed reads of the index (a batch at a time), not a list of every run; filtered, the same; with
    no run, nothing on stdout and the reason on stderr."""
    from projections.report import table_text

    calls: list[dict[str, Any]] = []
    real = projections.runs.iter_runs

    def reading(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **{**kwargs, "batch": 3})

    monkeypatch.setattr(projections.runs, "iter_runs", reading)
    r = _runs(demo)
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert len(calls) == 2 and all("limit" not in c for c in calls)  # every run, twice
    store = EventStore(demo)
    try:
        every = real(store, sessions=True)
        rows = [{"stream": x.stream_id, "dialect": x.dialect or "", "project": x.project or "",
                 "task": x.task_id or "", "title": x.title or "", "status": x.status or "", "phase": x.phase or "",
                 "started": (x.started_at or "")[:16].replace("T", " "),
                 "last event": (x.last_event_at or "")[:16].replace("T", " "), "events": x.events,
                 "findings": x.findings, "sessions": ", ".join(x.sessions)} for x in every]
    finally:
        store.close()
    columns = ["stream", "dialect", "project", "task", "title", "status", "phase", "started", "last event", "events",
               "findings", "sessions"]
    assert len(rows) == 11 and r.stdout == table_text(columns, rows, max_width=10_000) + "\n"
    dialect = rows[0]["dialect"]
    r = _runs(demo, "--dialect", dialect)
    assert r.stdout == table_text(columns, [x for x in rows if x["dialect"] == dialect], max_width=10_000) + "\n"
    r = _runs(demo, "--dialect", "no-such-dialect")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == "no runs match\n"


def test_a_terminal_gets_one_screen(demo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs_cli, "_screen_lines", lambda: 10)  # 10 lines: 5 runs, header, rule, room
    r = _runs(demo)
    assert len(r.stdout.splitlines()) == 2 + 5
    assert "--after" in r.stderr and "--page 2" in r.stderr
    assert len(_ndjson(_runs(demo, "--json").stdout)) == 11  # machines get every run


def test_paging_errors(demo: str) -> None:
    r = _runs(demo, "--after", "no-such-run")
    assert r.exit_code == 1 and r.stderr == ('Error: No run "no-such-run" for --after; pass a stream id '
                                             "`evstore runs` lists.\n")
    r = _runs(demo, "--page", "2", "--after", "x")
    assert r.exit_code == 2 and "--page and --after are exclusive" in r.stderr
    store = EventStore(demo)
    try:
        assert list_runs(store, limit=3) == list(iter_runs(store, limit=3))
    finally:
        store.close()


def test_keyset_batches_continue_through_runs_of_the_same_time(store_url: str) -> None:
    """Runs whose last events share a time (copies of one run, a burst of writes) are listed by stream id
    within it: batches continue after the last row's time and id, through ties and across times."""
    from datetime import UTC, datetime

    from eventstore.store import NewEvent
    from projections.runs import IndexedEventStore

    store = IndexedEventStore(store_url)
    try:
        times = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)]
        store.append_many([(f"T-{i:02d}", NewEvent("note", {"i": i}, occurred_at=times[i % 2]), None)
                           for i in range(9)])
        every = list_runs(store)
        assert [r.stream_id for r in every] == [f"T-{i:02d}" for i in (1, 3, 5, 7)] + [f"T-{i:02d}" for i in
                                                                                      (0, 2, 4, 6, 8)]
        for batch in (1, 2, 3, 4):
            assert list(iter_runs(store, batch=batch)) == every
            assert list(iter_runs(store, batch=batch, after="T-03")) == every[2:]
            assert list(iter_runs(store, batch=batch, after="T-07", limit=3)) == every[4:7]
    finally:
        store.close()
