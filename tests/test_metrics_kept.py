"""`evstore metrics`, the HTML report and `GET /metrics` compute a report once per log position and keep
it (projections.metrics.report): on an unchanged store they read no event and open no DuckDB connection,
and a new event makes them compute again.  On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from eventstore.cli import register
from eventstore.store import EventStore
from projections.analytics import views
from projections.metrics import REPORTS

READS = ("read_all", "iter_all", "iter_batches", "iter_fact_batches", "read_stream", "read_payloads")


@pytest.fixture
def demo(store_url: str, tmp_path: Path) -> tuple[str, Path]:
    r = CliRunner().invoke(register(), ["--url", store_url, "demo", "--runs", "6", "--seed", "5"])
    assert r.exit_code == 0, r.output
    return store_url, tmp_path / "analytics"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the log was read (any of EventStore's event readers) and DuckDB connected."""
    calls = {name: 0 for name in (*READS, "connect")}

    def counting(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return orig(*args, **kwargs)
        return wrapper

    for name in READS:
        monkeypatch.setattr(EventStore, name, counting(name, getattr(EventStore, name)))
    monkeypatch.setattr(views, "_connect", counting("connect", views._connect))
    yield calls


def _metrics(url: str, directory: Path, *args: str) -> Any:
    r = CliRunner().invoke(register(), ["--url", url, "metrics", "--analytics-dir", str(directory), *args])
    assert r.exit_code == 0, r.output
    return r


def test_a_second_metrics_on_an_unchanged_store_reads_no_event(demo: tuple[str, Path],
                                                               counted: dict[str, int]) -> None:
    url, directory = demo
    first = {fmt: _metrics(url, directory, "--format", fmt).stdout for fmt in ("table", "json", "csv")}
    assert counted["connect"] == 1 and counted["iter_fact_batches"] >= 1  # built the facts, computed the report once
    kept = list((directory / REPORTS).iterdir())
    assert len(kept) == 1
    counted.update(dict.fromkeys(counted, 0))
    again = {fmt: _metrics(url, directory, "--format", fmt) for fmt in ("table", "json", "csv")}
    assert counted == dict.fromkeys(counted, 0), counted  # no event read, no DuckDB connection
    assert {fmt: r.stdout for fmt, r in again.items()} == first  # the same bytes as computed
    assert all(r.stderr == "" for r in again.values())  # nothing applied

    # A new event moves the checkpoint: the refresh reads what is new, the report is computed again, and
    # only the new position's report is kept.
    r = CliRunner().invoke(register(), ["--url", url, "append", "NOTES-1", "demo.note", "--data", '{"a": 1}'])
    assert r.exit_code == 0, r.output
    after = _metrics(url, directory, "--format", "json")
    assert "analytics: 1 new events applied" in after.stderr
    assert counted["connect"] == 1
    assert json.loads(after.stdout)["scope"]["runs"] == json.loads(first["json"])["scope"]["runs"] + 1
    now = list((directory / REPORTS).iterdir())
    assert len(now) == 1 and now != kept


def test_scopes_and_runs_are_kept_apart(demo: tuple[str, Path], counted: dict[str, int]) -> None:
    url, directory = demo
    runs = [json.loads(line) for line in CliRunner().invoke(register(), ["--url", url, "runs", "--json"]).stdout.splitlines()]
    run = next(r for r in runs if r["dialect"] == "mapipe")
    asked = [(), ("--dialect", "mapipe"), ("--project", run["project"]), (run["stream_id"],)]
    first = [_metrics(url, directory, *a, "--format", "json").stdout for a in asked]
    assert len({json.dumps(json.loads(f)["scope"], sort_keys=True) for f in first}) == len(asked)
    assert counted["connect"] == len(asked)
    counted.update(dict.fromkeys(counted, 0))
    assert [_metrics(url, directory, *a, "--format", "json").stdout for a in asked] == first
    assert counted == dict.fromkeys(counted, 0), counted
    # a filter that matches nothing is an error each time, never a kept empty report
    r = CliRunner().invoke(register(), ["--url", url, "metrics", "--analytics-dir", str(directory),
                                        "--dialect", "nope"])
    assert r.exit_code == 1 and "No run has --dialect" in r.stderr


def test_html_report_and_metrics_page_use_the_kept_report(demo: tuple[str, Path], counted: dict[str, int],
                                                          tmp_path: Path) -> None:
    from projections.serve import ServeConfig, create_app

    url, directory = demo
    _metrics(url, directory, "--format", "html", "--out", str(tmp_path / "a.html"))
    with TestClient(create_app(ServeConfig(url=url, analytics_dir=str(directory))), base_url=LOCAL) as c:
        counted.update(dict.fromkeys(counted, 0))
        _metrics(url, directory, "--format", "html", "--out", str(tmp_path / "b.html"))
        page = c.get("/metrics")
        api = c.get("/api/metrics")
        assert page.status_code == 200 and api.status_code == 200
        assert counted == dict.fromkeys(counted, 0), counted
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert api.json() == json.loads(_metrics(url, directory, "--format", "json").stdout)


def test_a_kept_report_that_is_not_ours_is_recomputed(demo: tuple[str, Path], counted: dict[str, int]) -> None:
    url, directory = demo
    first = _metrics(url, directory, "--format", "json").stdout
    (kept,) = (directory / REPORTS).iterdir()
    kept.write_text("{not a report")
    counted.update(dict.fromkeys(counted, 0))
    assert _metrics(url, directory, "--format", "json").stdout == first
    assert counted["connect"] == 1
