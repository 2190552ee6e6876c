"""`evstore metrics` says something about every store with runs in it (issue 31, part 2): the shared
sections on state histories (versions per stream, write intervals, unreadable versions, the top-level
keys that change most), the generic dialect's own section, and the sections without data on one
line, in the text, the HTML report and the web page; durations read as durations everywhere."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from projections.metrics import Report, Section
from projections.report import to_html, to_table
from projections.serve import ServeConfig, create_app

DATA = Path(__file__).parent / "data" / "real"


def _written(path: Path, doc: dict, at: str) -> Path:
    """``doc`` in ``path``, its modification time ``at`` (ingest's time for a file without its own)."""
    path.write_text(json.dumps(doc))
    when = datetime.fromisoformat(at).timestamp()
    os.utime(path, (when, when))
    return path


def _histories(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Three real histories as a new user ingests them: generic, one folder each; and one written
    at known times (a minute, then an hour apart) whose status changes."""
    for name in ("codeharness-ralph-status", "codeharness-circuit-breaker", "claudeflow-ruvnet-memory"):
        r = run("ingest", "generic", str(DATA / name), "--stream", name)
        assert r.exit_code == 0, r.output
    for i, (at, status) in enumerate([("2026-01-01T00:00:00+00:00", "running"),
                                      ("2026-01-01T00:01:00+00:00", "running"), ("2026-01-01T01:01:00+00:00", "done")]):
        f = _written(tmp_path / f"t-{i}.json", {"taskId": "TIMED", "status": status, "n": i}, at)
        assert run("ingest", "generic", str(f)).exit_code == 0


def test_metrics_of_real_generic_histories(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _histories(run, tmp_path)
    data = json.loads(run("metrics", "--format", "json").stdout)
    sections = {s["name"]: s for s in data["sections"]}
    [hist] = sections["histories"]["rows"]
    ralph = len(list((DATA / "codeharness-ralph-status").iterdir()))
    breaker = len(list((DATA / "codeharness-circuit-breaker").iterdir()))
    memory = len(list((DATA / "claudeflow-ruvnet-memory").iterdir()))
    assert hist["dialect"] == "generic" and hist["streams"] == 4
    assert hist["unreadable"] == 1 and hist["lens_failures"] == 0  # ralph's version 43
    assert hist["versions_max"] == ralph
    assert hist["versions"] <= ralph + breaker + memory + 3
    timed = json.loads(run("metrics", "TIMED", "--format", "json").stdout)
    assert timed["scope"]["stream"] == "TIMED"
    keys = {r["key"]: r["changes"] for r in sections["changing_keys"]["rows"]}
    assert keys and max(keys.values()) == sections["changing_keys"]["rows"][0]["changes"]
    assert keys["timestamp"] >= 100  # ralph's status file rewrites its timestamp at (nearly) every write
    status = {r["status"]: r["runs"] for r in sections["generic_status"]["rows"]}
    assert status.get("done") == 1  # TIMED's last status, from its patches

    text = run("metrics").stdout
    assert "## State histories" in text and "## Top-level keys that change most" in text
    assert "(no data)" not in text
    [no_data] = [line for line in text.splitlines() if line.startswith("No data: ")]
    assert "Reviewer acceptance per model" in no_data and "Gates" in no_data
    names = no_data.removeprefix("No data: ").split("; ")
    assert len(names) == len(set(names)), no_data  # a dialect's sections are told apart, never "task-master" four times
    assert "task-master: planning changes" in names
    assert text.count("\n## ") == sum(1 for s in data["sections"] if s["rows"])


def test_write_intervals_are_durations(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """TIMED was written at 00:00, 00:01 and 01:01: intervals of 1 minute and 1 hour."""
    for i, at in enumerate(["2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00", "2026-01-01T01:01:00+00:00"]):
        f = _written(tmp_path / f"t-{i}.json", {"taskId": "TIMED", "n": i}, at)
        assert run("ingest", "generic", str(f)).exit_code == 0
    data = json.loads(run("metrics", "--format", "json").stdout)
    [hist] = next(s for s in data["sections"] if s["name"] == "histories")["rows"]
    assert (hist["versions"], hist["interval_max_s"]) == (3, 3600.0)
    assert hist["interval_p50_s"] == 1830.0
    text = run("metrics").stdout
    line = next(x for x in text.splitlines() if x.startswith("generic "))
    assert "30m 30s" in line and "1h" in line.split()


def _report() -> Report:
    return Report("evstore metrics", {"runs": 2}, [
        Section("phases", "Phase durations", ["phase", "p50_s"], [{"phase": "build", "p50_s": 8833.0}],
                {"p50_s": 8833.0, "runs": 7187}),
        Section("empty_one", "Reviewer acceptance per model (Wilson 95 %)", ["model"], [], {"raised": 0}),
        Section("empty_two", "Gates: verdicts", ["gate"], []),
    ])


def test_durations_and_empty_sections_in_text_and_html() -> None:
    text = to_table(_report())
    assert "p50=2h 27m" in text and "2h 27m" in text.split("## Phase durations")[1]
    assert text.rstrip().endswith("No data: Reviewer acceptance per model; Gates")
    assert "(no data)" not in text and "raised=0" not in text
    html = to_html(_report())
    assert "p50: <b>2h 27m</b>" in html and "<td>2h 27m</td>" in html and "8,833" not in html
    assert '<p class="note" id="no-data">No data: Reviewer acceptance per model; Gates</p>' in html
    assert 'id="empty_one"' not in html


def test_a_duration_chart_reads_durations() -> None:
    """A chart of ``*_s`` columns labels its axis and its bars as the tables do (2h 27m), not as minutes."""
    from eventstore.dialects.analytics import Chart
    from projections.report import chart

    rows = [{"phase": "build", "p50_s": 8833.0, "p90_s": 30360.0}, {"phase": "test", "p50_s": 441.0, "p90_s": 600.0}]
    svg = chart(Chart("groups", "Phase duration percentiles", "{phase}", ("p50_s", "p90_s"), series=("p50", "p90"),
                      scale=60), rows)
    assert re.findall(r"<title>([^<]*)</title>", svg) == ["p50: 2h 27m", "p90: 8h 26m", "p50: 7m 21s", "p90: 10m"]
    assert ">8h 26m</text>" in svg and "147.2" not in svg
    bars = chart(Chart("bars", "Durations", "{phase}", ("p50_s",)), rows)
    assert ">2h 27m</text>" in bars and ">7m 21s</text>" in bars and "0 … 2h 27m" in bars


def test_metrics_page_durations_and_empty_sections(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for i, at in enumerate(["2026-01-01T00:00:00+00:00", "2026-01-01T02:27:00+00:00"]):
        f = _written(tmp_path / f"t-{i}.json", {"taskId": "TIMED", "n": i}, at)
        assert run("ingest", "generic", str(f)).exit_code == 0
    app = create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "analytics")))
    with TestClient(app, base_url=LOCAL) as c:
        page = c.get("/metrics").text
    assert 'id="histories"' in page and "<th>interval_p50</th>" in page
    assert re.search(r"<td>2h 27m</td>", page), page
    assert "No data.</p>" not in page and 'id="no-data">No data: ' in page and 'id="gates"' not in page


def test_a_long_section_shows_its_first_rows_in_text_and_html_and_every_row_in_csv_and_json() -> None:
    """The text table and the HTML report show ROWS_SHOWN rows of a section (a per-task section grows with
    the store), numbered in the format of the whole column, and say how many are not shown."""
    from projections.report import ROWS_SHOWN, to_csv

    n = ROWS_SHOWN + 7
    # the last row, not shown, is the only share above 1: the column's format is still the whole column's
    rows = [{"task": f"T-{i:04d}", "share": 0.25} for i in range(n - 1)] + [{"task": "T-last", "share": 2.5}]
    report = Report("evstore metrics", {"runs": 1}, [Section("tasks", "Tasks", ["task", "share"], rows)])
    text = to_table(report)
    shown = [line for line in text.splitlines() if line.startswith("T-")]
    assert len(shown) == ROWS_SHOWN and shown[-1].split()[0] == f"T-{ROWS_SHOWN - 1:04d}"
    assert shown[0].split()[1] == "0.2"  # one decimal: the whole column is not all within [-1, 1]
    assert "(7 more rows not shown: --format csv or json holds every row)" in text
    html = to_html(report)
    assert html.count("<td>T-") == ROWS_SHOWN and "7 more rows not shown." in html
    assert to_csv(report).count("T-") == n and len(report.to_dict()["sections"][0]["rows"]) == n
    short = Report("evstore metrics", {"runs": 1}, [Section("tasks", "Tasks", ["task", "share"], rows[:3])])
    assert "not shown" not in to_table(short) and "0.250" in to_table(short)
