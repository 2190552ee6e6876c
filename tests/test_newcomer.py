"""What a newcomer trips over in the first hour: each stumble, with the exact message it now gets."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import run_in_terminal

from eventstore.cli import register

DEMO_RUNS = 12


def invoke(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def clean_error(r: Result, message: str) -> None:
    """Exit 1, no traceback, and exactly ``message`` on stderr."""
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.stderr == f"Error: {message}\n"


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('demo')}/events.db"
    # the runs alone (--sessions 0): these tests count dialects and widths; the sessions: tests/test_timeline.py
    r = CliRunner().invoke(register(), ["demo", "--url", url, "--runs", str(DEMO_RUNS), "--seed", "3", "--json",
                                        "--sessions", "0"])
    assert r.exit_code == 0, r.output
    return url


# ---------------------------------------------------------------- 1. free-form streams


def test_replay_of_free_form_events_points_to_log(store_url: str) -> None:
    r = invoke(store_url, "append", "PROJ-1", "demo.note", "--data", '{"text":"hello"}', "--expected-version",
               "no-stream")
    assert r.exit_code == 0, r.output
    clean_error(invoke(store_url, "replay", "PROJ-1"),
                'Stream "PROJ-1" holds free-form events (recorded with `evstore append`, no dialect), so it has '
                "no state document to rebuild; `evstore log PROJ-1` shows its events.")
    log = invoke(store_url, "log", "PROJ-1")
    assert log.exit_code == 0, log.output
    assert re.fullmatch(r'    1  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  demo\.note {31}  \{"text":"hello"\}\n', log.stdout)


# ---------------------------------------------------------------- 5. help, status, log wording


def test_projections_run_help_names_follow() -> None:
    r = CliRunner().invoke(register(), ["projections", "run", "--help"])
    text = " ".join(r.output.split())
    assert "Catch every projection up to the end of the log (with --follow, keep following it)." in text


def test_projections_status_last_run_is_a_time(demo_url: str) -> None:
    assert invoke(demo_url, "query", "select 1").exit_code == 0  # builds the analytics tables
    r = CliRunner().invoke(register(), ["--url", demo_url, "projections", "status"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if "analytics" in line and "parquet" in line)
    # name, mode, version, checkpoint, lag, last run, then what catches it up (words)
    last_run = re.split(r"\s{2,}", row.strip())[5]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", last_run), row
    db = Path(demo_url.split(":///", 1)[1])
    directory = db.with_name(f"{db.name}.analytics")  # beside the store's file, named after it
    assert r.stdout.splitlines()[-1] == f"analytics tables: {directory}"
    status = json.loads(invoke(demo_url, "projections", "status", "--json").stdout)
    assert status[-1]["updated_at"] == last_run


def test_log_never_prints_python_none(demo_url: str) -> None:
    runs = [json.loads(line) for line in invoke(demo_url, "runs", "--json").stdout.splitlines()]
    assert {r["dialect"] for r in runs} == {"mapipe", "friday", "taskflow", "envelope", "taskmaster"}
    for r in runs:
        out = invoke(demo_url, "log", r["stream_id"]).stdout
        assert not re.search(r"\bNone\b", out), (r["stream_id"], [x for x in out.splitlines() if "None" in x][:3])


def test_envelope_gates_line_reads_without_none() -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.envelope.events import GatesReported

    line = get_dialect("envelope").summarize(GatesReported(gates={}, verification="green", review_pending=False))
    assert line == "gates: verification=green review_pending=no audit_pending=-"


# ---------------------------------------------------------------- 6. metrics filters that match nothing


def test_metrics_unknown_dialect_or_project_lists_what_exists(demo_url: str) -> None:
    assert invoke(demo_url, "query", "select 1").exit_code == 0  # catch the analytics up: stderr stays clean
    clean_error(invoke(demo_url, "metrics", "--dialect", "nope"),
                'No run has --dialect "nope"; the dialects are: envelope, friday, mapipe, taskflow, taskmaster.')
    runs = [json.loads(line) for line in invoke(demo_url, "runs", "--json").stdout.splitlines()]
    projects = ", ".join(sorted({r["project"] for r in runs if r["project"]}))
    clean_error(invoke(demo_url, "metrics", "--project", "nope"), f'No run has --project "nope"; the projects are: '
                                                                  f"{projects}.")
    clean_error(invoke(demo_url, "metrics", "--since", "2999-01-01", "--no-refresh"),
                "No run matches --since 2999-01-01; the latest activity is at "
                + datetime.fromisoformat(max(r["last_event_at"] for r in runs)).isoformat() + ".")
    other = sorted({r["project"] for r in runs if r["project"]}
                   - {r["project"] for r in runs if r["dialect"] == "mapipe"})[0]  # a project no mapipe run has
    clean_error(invoke(demo_url, "metrics", "--dialect", "mapipe", "--project", other),
                f"No run matches --project {other} --dialect mapipe: each value exists, but no run has them all.")
    ok = invoke(demo_url, "metrics", "--dialect", "mapipe", "--format", "json")
    report = json.loads(ok.stdout)
    assert ok.exit_code == 0 and report["scope"]["runs"] > 0
    assert list(report) == ["title", "scope", "sections"] and report["title"] == "evstore metrics"
    run_id = next(r["stream_id"] for r in runs if r["dialect"] == "mapipe")
    one = json.loads(invoke(demo_url, "metrics", run_id, "--format", "json").stdout)
    assert list(one) == ["title", "scope", "sections"] and one["scope"]["stream"] == run_id


# ---------------------------------------------------------------- 7. read commands never create a store

READ_COMMANDS = [
    ("runs",), ("log", "T"), ("replay", "T"), ("verify",), ("seal", "--out", "{tmp}/seal.json"), ("metrics",),
    ("query", "select 1"), ("export", "--jsonl", "-"), ("projections", "status"), ("projections", "run"),
    ("projections", "rebuild"), ("db", "current"), ("db", "check"), ("db", "upgrade"), ("serve", "--port", "1"),
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_read_commands_never_create_a_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    target = tmp_path / "newdir" / "x.db"
    r = invoke(f"sqlite:///{target}", *(a.replace("{tmp}", str(tmp_path)) for a in args))
    clean_error(r, f"No store at {target}: create one with `evstore init` (or `evstore demo`), "
                   "or point --url / EVSTORE_URL at an existing store.")
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("args", [("init",), ("append", "S", "t.x", "--data", "{}"),
                                  ("ingest", "generic", "{tmp}/doc.json"), ("ingest", "claude", "{tmp}/t.jsonl"),
                                  ("hook", "drain")],  # a hook's drain creates the store as ingest does
                         ids=lambda a: " ".join(a[:2]))
def test_writing_commands_create_the_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "doc.json").write_text('{"a": 1}\n')
    (tmp_path / "t.jsonl").write_text('{"type": "summary", "summary": "s", "leafUuid": "u"}\n')
    url = f"sqlite:///{tmp_path}/newdir/x.db"
    r = invoke(url, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert r.exit_code == 0, r.output
    assert invoke(url, "verify").stdout.startswith("verified ")


# ---------------------------------------------------------------- 9. integers longer than Python parses


def test_a_5001_digit_integer_is_named_as_such(store_url: str, tmp_path: Path) -> None:
    doc = tmp_path / "big.json"
    doc.write_text('{"n": ' + "9" * 5001 + "}\n")
    why = "an integer of 5001 digits; evstore accepts integers of at most 4300 digits (write it as a string)."
    clean_error(invoke(store_url, "ingest", "generic", str(doc)),
                f"{doc}: line 1, column 7: {why} No readable version to start a stream from; nothing was written.")
    clean_error(invoke(store_url, "append", "S", "t.x", "--data", f"@{doc}"), f"--data: line 1, column 7: {why}")
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"stream": "S", "type": "t.x"}\n{"stream": "S", "type": "t.x", "data": {"n": -'
                     + "1" * 5001 + "}}\n")
    clean_error(invoke(store_url, "append", "--batch", str(batch)), f"{batch}, line 2, column 46: {why}")


# ---------------------------------------------------------------- 10. batch errors name the file's line once


def _lines(path: Path, *objs: object, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs) + tail)
    return path


def test_batch_errors_name_the_line_once(store_url: str, tmp_path: Path) -> None:
    assert invoke(store_url, "append", "taken", "t.x", "--data", "{}").exit_code == 0
    ok = {"stream": "S", "type": "t.x"}
    clash = _lines(tmp_path / "clash.jsonl", ok, ok, {**ok, "stream": "taken", "expected_version": "no-stream"})
    clean_error(invoke(store_url, "append", "--batch", str(clash)),
                f'{clash}, line 3: Stream "taken" is at version 1, expected no stream; re-read and retry.')
    long_id = _lines(tmp_path / "long.jsonl", ok, {**ok, "stream": "s" * 256})
    clean_error(invoke(store_url, "append", "--batch", str(long_id)),
                f"{long_id}, line 2: stream id must be a non-empty string of at most 255 characters, got 256 "
                f"characters ({'s' * 40!r}…).")
    eid = "6f1c1f2e-7c53-4a47-9d0e-4a1f4b7d2a11"
    dup = _lines(tmp_path / "dup.jsonl", {**ok, "event_id": eid, "data": {"a": 1}}, ok,
                 {**ok, "event_id": eid, "data": {"a": 2}})
    clean_error(invoke(store_url, "append", "--batch", str(dup)),
                f"{dup}, line 3: Event id {eid} appears twice in one append with different content; "
                "give each event its own id.")
    assert invoke(store_url, "append", "--batch", str(_lines(tmp_path / "one.jsonl", {**ok, "event_id": eid}))
                  ).exit_code == 0
    again = _lines(tmp_path / "again.jsonl", ok, {**ok, "stream": "T", "event_id": eid})
    clean_error(invoke(store_url, "append", "--batch", str(again)),
                f'{again}, line 2: Event id {eid} was already recorded as "t.x" in stream "S" version 1 with '
                "different content; use a new event id.")
    cut = _lines(tmp_path / "cut.jsonl", *[ok] * 1000, tail='{"stream": "S",\n')
    clean_error(invoke(store_url, "append", "--batch", str(cut)),
                f"{cut}, line 1001, column 16: not valid JSON: Expecting property name enclosed in double quotes.")
    assert invoke(store_url, "verify", "--json").exit_code == 0
    assert json.loads(invoke(store_url, "verify", "--json").stdout)["events"] == 2  # nothing of a bad batch


def test_batch_format_is_in_help_and_docs() -> None:
    from eventstore.cli.core import BATCH_KEYS

    help_text = " ".join(CliRunner().invoke(register(), ["append", "--help"]).output.split())
    readme = (Path(__file__).parent.parent / "docs" / "capture.md").read_text()
    for key, (kind, default, _) in BATCH_KEYS.items():
        assert f"{key} ({kind}" in help_text
        assert re.search(rf"^\| `{key}` \| {re.escape(kind)} \| {re.escape(default or '-')} \|", readme, re.M), key


# ---------------------------------------------------------------- 8. output people read


def test_runs_fits_120_columns_and_wide_shows_everything(demo_url: str) -> None:
    """On a terminal `runs` fits it; piped (or with --wide) it prints every value whole."""
    runs = [json.loads(line) for line in invoke(demo_url, "runs", "--json").stdout.splitlines()]
    narrow = run_in_terminal("--url", demo_url, "runs", "--limit", "100", columns=120).splitlines()
    assert narrow[0].split() == ["stream", "dialect", "project", "title", "status", "phase", "last", "event",
                                 "events", "findings"]
    assert max(len(line) for line in narrow) <= 120
    assert any("…" in line for line in narrow)  # long titles are cut with an ellipsis, not dropped
    for r in runs:  # the stream id, what people copy, is never cut
        assert any(line.startswith(r["stream_id"] + " ") for line in narrow[2:]), r["stream_id"]
    wide = invoke(demo_url, "runs", "--wide").stdout
    assert wide.splitlines()[0].split()[:5] == ["stream", "dialect", "project", "task", "title"]
    assert "started" in wide.splitlines()[0] and "…" not in wide
    for r in runs:
        assert r["title"] is None or r["title"] in wide
    assert invoke(demo_url, "runs").stdout == wide  # stdout no terminal (a pipe, a file): as --wide


def test_metrics_numbers_read_one_way(demo_url: str) -> None:
    from projections.report import duration, table_text

    assert [duration(s) for s in (0, 45, 447.5, 3600, 9594, 70170, 200000)] == \
        ["0s", "45s", "7m 28s", "1h", "2h 39m", "19h 29m", "2d 7h"]
    text = table_text(["phase", "p50_s", "rate", "count", "mean"],
                      [{"phase": "0", "p50_s": 447.5, "rate": 0.5, "count": 9594.0, "mean": 447.5},
                       {"phase": "1", "p50_s": None, "rate": 1.0, "count": 12.0, "mean": 9594.25}])
    assert text.splitlines() == ["phase     p50   rate  count     mean",
                                 "-----  ------  -----  -----  -------",
                                 "0      7m 28s  0.500  9,594    447.5",
                                 "1           -  1.000     12  9,594.2"]
    where = table_text(["where"], [{"where": "x" * 70}]).splitlines()[2]
    assert where == "x" * 59 + "…"
    assert invoke(demo_url, "query", "select 1").exit_code == 0
    out = invoke(demo_url, "metrics").stdout
    assert "## Phase durations and retries" in out and "(seconds)" not in out
    assert not re.search(r"\d\.\d{3}\s+\d{1,3},\d{3}", out)  # no "447.500" beside "9,594" in one table


def test_demo_title_is_one_line_off_a_terminal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/d/events.db"
    r = CliRunner().invoke(register(), ["demo", "--url", url, "--runs", "3"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == f"3 runs (demo-00001 … demo-00003) in {url}"


# ---------------------------------------------------------------- 2. replay --raw on demo runs


def test_replay_raw_works_on_demo_runs(demo_url: str) -> None:
    import msgspec

    runs = [json.loads(line) for line in invoke(demo_url, "runs", "--json").stdout.splitlines()]
    by_dialect: dict[str, str] = {}
    for r in runs:
        by_dialect.setdefault(r["dialect"], r["stream_id"])
        if r["dialect"] not in ("mapipe", "friday"):
            continue
        raw = CliRunner().invoke(register(), ["--url", demo_url, "replay", r["stream_id"], "--raw"]).stdout_bytes
        doc = json.loads(invoke(demo_url, "replay", r["stream_id"], "--json").stdout)
        assert raw == msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"  # the file's bytes
    log = [json.loads(x) for x in invoke(demo_url, "log", by_dialect["mapipe"], "--json").stdout.splitlines()]
    assert log[-1]["meta"]["source"]["file"] == f"{by_dialect['mapipe']}/agent-state.json"
    sid = by_dialect["taskflow"]
    clean_error(invoke(demo_url, "replay", sid, "--raw"), f'"{sid}" records a taskflow folder, not one file: '
                f"`evstore replay {sid} --restore DIR` writes its files (or use --json).")
    sid = by_dialect["envelope"]
    clean_error(invoke(demo_url, "replay", sid, "--raw"), f'"{sid}" records envelopes parsed from turn transcripts, '
                "not a state file: there are no file bytes to give back (use --json).")


def test_chart_labels_never_overlap_each_other_or_the_legend() -> None:
    from projections.report import _CHAR_W, _W, grouped_bar_chart

    def layout(svg: str) -> tuple[list[tuple[float, float, str]], float, bool]:
        labels = [(float(x), float(y), t) for x, y, t in
                  re.findall(r'<text x="([\d.]+)" y="([\d.]+)" font-size="12" text-anchor="(?:middle|end)"[^>]*>'
                             r"([^<]*)</text>", svg)]
        legend_y = min(float(y) for y in re.findall(r'class="legend" x="[\d.]+" y="([\d.]+)"', svg))
        return labels, legend_y, "rotate(-45" in svg

    short = grouped_bar_chart("c", ["a 1", "a 2", "a 3"], {"p50": [1, 2, 3], "p90": [2, 3, 4]})
    labels, legend_y, turned = layout(short)
    assert not turned and len(labels) == 3
    for (x1, _, t1), (x2, _, t2) in zip(labels, labels[1:], strict=False):  # centred, no overlap
        assert x1 + len(t1) * _CHAR_W / 2 < x2 - len(t2) * _CHAR_W / 2
    assert legend_y > max(y for _, y, _ in labels)
    groups = [f"taskflow adversarial_bug_find {i}" for i in range(12)]
    long = grouped_bar_chart("c", groups, {"p50": [1.0] * 12, "p90": [2.0] * 12})
    labels, legend_y, turned = layout(long)
    assert turned and len(labels) == 12
    for x, y, t in labels:  # a label turned 45 degrees reaches len * 0.71 below its anchor
        assert y + len(t) * _CHAR_W * 0.71 < legend_y
        assert 0 <= x - len(t) * _CHAR_W * 0.71 and x <= _W  # and stays inside the drawing
    height = float(re.search(r'height="(\d+)"', long).group(1))  # type: ignore[union-attr]
    assert legend_y + 12 <= height
