"""Who wrote this state?  State versions linked to the session, message and tool call that wrote
them (hook, content match, path+time), in either ingest order; runs list their sessions; per-run
metrics sum the linked sessions.  Expected values are the fixture's, counted by hand."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import migrated, run_in_terminal
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventstore import capture, spool
from eventstore.dialects.claude.dialect import events_for_line, written_file
from eventstore.dialects.claude.secrets import Scrubber
from eventstore.store import EventStore
from projections import writers
from tests import claude_fixtures
from tests import claude_link_fixtures as F


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def _ingest_states(run: Any, project: Path, written: Any = F.VERSIONS) -> list[int]:
    """Each state version (text, when) written to the file as it is (mtime = when it was written)
    and ingested on its own; returns the stream version each became."""
    state = project / "agent-state.json"
    versions = []
    for data, at in written:
        state.write_bytes(data.encode())
        t = datetime.fromisoformat(at).timestamp()
        os.utime(state, (t, t))
        r = run("ingest", "mapipe", str(state), "--json")
        assert r.exit_code == 0, r.output
        versions.append(json.loads(r.stdout)["version"])
    return versions


def _ingest_session(run: Any, tmp_path: Path, project: Path) -> None:
    main, _ = F.write_session(tmp_path / "projects", project)
    r = run("ingest", "claude", str(main.parent))
    assert r.exit_code == 0, r.output


def _expected(versions: list[int]) -> dict[int, dict[str, Any] | None]:
    out: dict[int, dict[str, Any] | None] = {}
    for i, version in enumerate(versions, 1):
        exp = F.EXPECTED[i]
        out[version] = None if exp is None else {
            "session_id": F.SESSION, "stream": F.SESSION, "message": exp[1], "tool_use_id": exp[0],
            "tool_name": exp[2], "established_by": exp[3], "line_endings_normalised": False}
    return out


@pytest.mark.parametrize("order", ["transcript first", "state first"])
def test_log_and_replay_meta_name_who_wrote_each_version(run, tmp_path: Path, order: str) -> None:
    project = tmp_path / "orch"
    project.mkdir()
    if order == "transcript first":
        _ingest_session(run, tmp_path, project)
        versions = _ingest_states(run, project)
    else:
        versions = _ingest_states(run, project)
        _ingest_session(run, tmp_path, project)
    expected = _expected(versions)
    assert versions == [1, 2, 3, 5]  # version 4 of the stream is the status event of the last snapshot

    meta = json.loads(run("replay", F.TASK, "--json", "--meta").stdout)
    assert meta["stream"] == F.TASK and meta["version"] == 5 and meta["document"]["status"] == "complete"
    assert {v["version"]: v["written_by"] for v in meta["versions"]} == expected
    assert [v["sha256"] for v in meta["versions"]] == [hashlib.sha256(d.encode()).hexdigest() for d, _ in F.VERSIONS]
    upto = json.loads(run("replay", F.TASK, "--json", "--meta", "--upto", "2").stdout)
    assert [v["version"] for v in upto["versions"]] == [1, 2] and upto["document"]["currentPhase"] == 2

    logged = [json.loads(x) for x in run("log", F.TASK, "--json").stdout.splitlines()]
    assert {e["version"]: e.get("written_by") for e in logged} == {**expected, 4: None}

    text = run("log", F.TASK, "--no-findings").stdout.splitlines()
    lines = [x.strip() for x in text if "written by" in x]
    assert lines == [
        f"written by session {F.SESSION}, message a1, tool call toolu_w1 (Write; content match)",
        f"written by session {F.SESSION}, message a2, tool call toolu_e1 (Edit; content match)",
        f"written by session {F.SESSION}, message a3, tool call toolu_e2 (Edit; path and time only)"]
    # The draft Write (toolu_x1) came right before version 4 (5 in the stream) on the same path, but
    # the bytes it wrote are known and are not version 4's: never attributed.
    assert "toolu_x1" not in run("log", F.TASK).stdout

    # The other way round: the session's log says which state version each call wrote, once, under the call.
    session = run("log", F.SESSION).stdout.splitlines()
    made = [(session[i - 1].split()[-1], x.strip()) for i, x in enumerate(session) if x.strip().startswith("wrote ")]
    assert made == [("(toolu_w1)", f"wrote {F.TASK} version 1 (content match)"),
                    ("(toolu_e1)", f"wrote {F.TASK} version 2 (content match)"),
                    ("(toolu_e2)", f"wrote {F.TASK} version 3 (path and time only)")]


def test_a_hook_version_gets_its_message_once_the_transcript_is_in(run, store_url: str, tmp_path: Path) -> None:
    project = tmp_path / "orch"
    project.mkdir()
    state = project / "agent-state.json"
    state.write_text(F.V1)
    payload = {"session_id": F.SESSION, "cwd": str(project), "hook_event_name": "PostToolUse", "tool_name": "Write",
               "tool_use_id": "toolu_w1", "tool_input": {"file_path": str(state), "content": F.V1},
               "tool_response": {}}
    spool.write(tmp_path / "spool", json.dumps(payload).encode())
    with EventStore(store_url) as store:
        assert len(capture.drain(store, tmp_path / "spool").states) == 1
    before = json.loads(run("replay", F.TASK, "--json", "--meta").stdout)["versions"]
    assert before[0]["written_by"] == {"session_id": F.SESSION, "stream": F.SESSION, "message": None,
                                       "tool_use_id": "toolu_w1", "tool_name": "Write", "established_by": "hook",
                                       "line_endings_normalised": False}
    _ingest_session(run, tmp_path, project)
    after = json.loads(run("replay", F.TASK, "--json", "--meta").stdout)["versions"]
    assert after[0]["written_by"] == {**before[0]["written_by"], "message": "a1"}
    assert "message a1, tool call toolu_w1 (Write; from the hook)" in run("log", F.TASK).stdout


def test_runs_list_the_sessions_that_wrote_them(run, store_url: str, tmp_path: Path) -> None:
    project = tmp_path / "orch"
    project.mkdir()
    _ingest_session(run, tmp_path, project)
    _ingest_states(run, project)
    claude_fixtures.write_project(tmp_path / "other")  # a session that wrote no state
    assert run("ingest", "claude", str(tmp_path / "other")).exit_code == 0
    assert run("append", "PLAIN-1", "note", "--data", "{}").exit_code == 0
    rows = {r["stream_id"]: r for r in [json.loads(line) for line in run("runs", "--json").stdout.splitlines()]}
    assert rows[F.TASK]["sessions"] == [F.SESSION]
    assert rows["PLAIN-1"]["sessions"] == [] and rows[claude_fixtures.SESSION]["sessions"] == []
    wide = run("runs", "--wide").stdout.splitlines()
    assert wide[0].split()[-1] == "sessions"
    assert [x for x in wide if x.startswith(F.TASK + " ")][0].rstrip().endswith(F.SESSION)
    # piped, runs prints whole values as --wide does; at a terminal the narrow table keeps its columns
    assert run("runs").stdout.splitlines()[0].split()[-1] == "sessions"
    assert "sessions" not in run_in_terminal("--url", store_url, "runs").splitlines()[0]


def test_run_metrics_sum_the_linked_sessions(run, tmp_path: Path) -> None:
    project = tmp_path / "orch"
    project.mkdir()
    _ingest_states(run, project)
    _ingest_session(run, tmp_path, project)
    claude_fixtures.write_project(tmp_path / "other")  # not linked: must not be summed
    assert run("ingest", "claude", str(tmp_path / "other")).exit_code == 0
    r = run("query", "--json", "SELECT * FROM run_claude")
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.stdout)
    assert row["stream_id"] == F.TASK
    assert {k: row[k] for k in F.RUN_TOTALS} == F.RUN_TOTALS
    assert json.loads(run("query", "--json", "SELECT * FROM run_sessions").stdout) == [
        {"stream_id": F.TASK, "session_id": F.SESSION}]
    report = json.loads(run("metrics", "--format", "json").stdout)
    section = next(s for s in report["sections"] if s["name"] == "claude_runs")
    assert [(x["stream_id"], x["input_tokens"], x["tool_errors"]) for x in section["rows"]] == [
        (F.TASK, F.RUN_TOTALS["input_tokens"], 1)]
    assert section["summary"]["runs_with_sessions"] == 1 and section["summary"]["turns"] == F.RUN_TOTALS["turns"]
    html = run("metrics", "--format", "html").stdout
    assert "Claude Code sessions per orchestrator run" in html and ">7700<" in html.replace(",", "")
    one = json.loads(run("metrics", F.TASK, "--format", "json").stdout)
    assert next(s for s in one["sections"] if s["name"] == "claude_runs")["rows"][0]["wall_s"] == 600.0


# ---------------------------------------------------------------- the rules, one by one


def test_edit_and_multiedit_results_give_the_file_they_left() -> None:
    original = "a = 1\nb = 1\na = 1\n"
    edit = {"filePath": "/p/agent-state.json", "originalFile": original, "oldString": "a = 1",
            "newString": "a = 2", "replaceAll": False}
    assert written_file(edit) == ("/p/agent-state.json", hashlib.sha256(b"a = 2\nb = 1\na = 1\n").hexdigest(), "edit")
    every = {**edit, "replaceAll": True}
    assert written_file(every)[1] == hashlib.sha256(b"a = 2\nb = 1\na = 2\n").hexdigest()
    multi = {"filePath": "/p/agent-state.json", "originalFileContents": original,
             "edits": [{"old_string": "b = 1", "new_string": "b = 3"},
                       {"old_string": "a = 1", "new_string": "c = 0", "replace_all": True}]}
    assert written_file(multi)[1] == hashlib.sha256(b"c = 0\nb = 3\nc = 0\n").hexdigest()
    created = {"filePath": "/p/x.json", "originalFile": "", "oldString": "", "newString": "{}"}
    assert written_file(created)[1] == hashlib.sha256(b"{}").hexdigest()
    # What cannot be derived is unknown, never guessed.
    assert written_file({**edit, "oldString": "not there"}) == ("/p/agent-state.json", None, None)
    assert written_file({k: v for k, v in edit.items() if k != "originalFile"}) == ("/p/agent-state.json", None, None)
    assert written_file("Error: file not found") == (None, None, None)
    write = {"type": "update", "filePath": "/p/agent-state.json", "content": "é\n"}
    assert written_file(write) == ("/p/agent-state.json", hashlib.sha256("é\n".encode()).hexdigest(), "content")


def test_a_line_whose_secrets_were_replaced_gives_no_hash() -> None:
    content = '{"token": "AKIAIOSFODNN7EXAMPLE"}\n'
    rec = {"type": "assistant", "uuid": "a1", "timestamp": "2026-03-02T09:00:00Z",
           "message": {"id": "m", "content": [{"type": "tool_use", "id": "t1", "name": "Write",
                                               "input": {"file_path": "/p/agent-state.json", "content": content}}]}}
    line = (json.dumps(rec) + "\n").encode()
    scrubbed = events_for_line(line, 1, 0, Scrubber(key=b"k")).events[-1]
    assert scrubbed.secrets == 1 and scrubbed.content_sha256 is None and scrubbed.file_path == "/p/agent-state.json"
    kept = events_for_line(line, 1, 0, None).events[-1]
    assert kept.content_sha256 == hashlib.sha256(content.encode()).hexdigest()


def _version(version: int, sha: str | None, at: str, path: str = "/w/p/agent-state.json") -> Any:
    return writers._Version("RUN", version, path, sha, datetime.fromisoformat(at), None, None, None)


def _call(call: str, sha: str | None, at: str, path: str = "/w/p/agent-state.json", failed: bool = False) -> Any:
    return writers._Call("S", call, path, sha, "Write", f"m-{call}", datetime.fromisoformat(at), failed)


def test_matching_rules() -> None:
    v = [_version(1, "h1", "2026-01-01T10:00:10+00:00"), _version(2, "h2", "2026-01-01T10:05:00+00:00"),
         _version(3, "h3", "2026-01-01T10:09:00+00:00")]
    calls = [
        _call("same-bytes-other-file", "h1", "2026-01-01T10:00:00+00:00", path="/w/q/agent-state.json"),
        _call("failed", None, "2026-01-01T10:04:00+00:00", failed=True),
        _call("unknown-result", None, "2026-01-01T10:04:30+00:00"),
        _call("before-v1", None, "2026-01-01T10:00:05+00:00"),  # version 1's window, not version 3's
        _call("other-bytes", "zz", "2026-01-01T10:08:00+00:00"),
    ]
    got = writers.match(v, calls)
    # Same bytes, but another project's file: version 1 is only linked by path and time.
    assert (got[("RUN", 1)].tool_use_id, got[("RUN", 1)].established_by) == ("before-v1", "path+time")
    assert got[("RUN", 2)].tool_use_id == "unknown-result" and got[("RUN", 2)].established_by == "path+time"
    assert ("RUN", 3) not in got  # the only call in its window wrote other bytes; the failed one wrote nothing
    # A relative path recorded at ingest names the same file as the absolute one the tool used.
    rel = [_version(1, "h1", "2026-01-01T10:00:10+00:00", path="p/agent-state.json")]
    assert writers.match(rel, [_call("w", "h1", "2026-01-01T10:00:00+00:00")])[("RUN", 1)].established_by == "content"
    # Identical bytes written twice: each version takes the call made before it.
    twice = [_version(1, "h", "2026-01-01T10:00:10+00:00"), _version(2, "h", "2026-01-01T10:02:10+00:00")]
    pair = [_call("first", "h", "2026-01-01T10:00:00+00:00"), _call("second", "h", "2026-01-01T10:02:00+00:00")]
    assert [writers.match(twice, pair)[("RUN", i)].tool_use_id for i in (1, 2)] == ["first", "second"]


def test_same_file() -> None:
    assert writers.same_file("/w/p/agent-state.json", "p/agent-state.json")
    assert writers.same_file("/w/p/agent-state.json", "./agent-state.json")
    assert writers.same_file("/w/p/./agent-state.json", "/w/p/agent-state.json")
    assert not writers.same_file("/w/p/agent-state.json", "/w/q/agent-state.json")
    assert not writers.same_file("/w/p/agent-state.json", "xp/agent-state.json")
    assert not writers.same_file(None, "agent-state.json")


def test_an_ingest_of_state_files_loads_no_session_dialect(tmp_path: Path) -> None:
    """The writers index runs on every append: it loads a dialect only for that dialect's own events."""
    import subprocess
    import sys

    state = tmp_path / "agent-state.json"
    state.write_text(F.V1)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "eventstore", "--url",
                        f"sqlite:///{tmp_path}/events.db", "ingest", "mapipe", str(state)],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.decode().splitlines() if "|" in line}
    assert "projections.writers" in imported and "eventstore.dialects.mapipe.lens" in imported
    assert not {m for m in imported if m.startswith(("eventstore.dialects.claude", "eventstore.dialects.friday"))}


def test_the_run_page_and_its_events_api_say_who_wrote_each_version(run, store_url: str, tmp_path: Path) -> None:
    from serve_fixtures import LOCAL
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app

    project = tmp_path / "orch"
    project.mkdir()
    _ingest_session(run, tmp_path, project)
    versions = _ingest_states(run, project)
    with TestClient(create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "analytics"))), base_url=LOCAL) as client:
        page = client.get(f"/runs/{F.TASK}")
        assert page.status_code == 200
        assert f"written by session {F.SESSION}, message a2, tool call toolu_e1 (Edit; content match)" in page.text
        assert "toolu_x1" not in page.text
        events = client.get(f"/api/runs/{F.TASK}/events").json()
        assert {e["version"]: e.get("written_by") for e in events} == {**_expected(versions), 4: None}
        metrics = client.get(f"/runs/{F.TASK}/metrics")
        assert metrics.status_code == 200 and "Claude Code sessions per orchestrator run" in metrics.text


# ---------------------------------------------------------------- line endings


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


#: (bytes on disk, when written) of a CRLF project's state versions, and what each must be linked to.
CRLF_VERSIONS = [
    (_crlf(F.V1), "2026-03-02T09:00:05Z"),  # Write of LF content, kept CRLF by the tool
    (_crlf(F.V2), "2026-03-02T09:02:05Z"),  # Edit of the file read as LF (originalFile), written back CRLF
    (F.V3, "2026-03-02T09:04:05Z"),  # the reverse: Write of CRLF content, the file LF
    (F.V4.replace("\n", "\r"), "2026-03-02T09:06:05Z"),  # CR only: more than CRLF/LF, never linked
    (_crlf(F.text(F.state("complete", 4))), "2026-03-02T09:08:05Z"),  # CRLF, but other bytes too
]
CRLF_EXPECTED = {1: ("toolu_w1", "Write"), 2: ("toolu_e1", "Edit"), 3: ("toolu_w2", "Write"), 4: None, 5: None}


def _crlf_session(tmp_path: Path, project: Path) -> Path:
    path = str(project / "agent-state.json")
    base = {"sessionId": F.SESSION, "cwd": str(project), "version": "2.1.3", "isSidechain": False}
    usage = {"input_tokens": 10, "output_tokens": 1}
    calls: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
        ("toolu_w1", "Write", {"file_path": path, "content": F.V1},
         {"type": "create", "filePath": path, "content": F.V1, "structuredPatch": []}),
        ("toolu_e1", "Edit", {"file_path": path, "old_string": '"currentPhase": 1', "new_string": '"currentPhase": 2'},
         {"filePath": path, "oldString": '"currentPhase": 1', "newString": '"currentPhase": 2', "originalFile": F.V1,
          "structuredPatch": [], "userModified": False, "replaceAll": False}),
        ("toolu_w2", "Write", {"file_path": path, "content": _crlf(F.V3)},
         {"type": "update", "filePath": path, "content": _crlf(F.V3), "structuredPatch": []}),
        ("toolu_w3", "Write", {"file_path": path, "content": F.V4},
         {"type": "update", "filePath": path, "content": F.V4, "structuredPatch": []}),
    ]
    lines = []
    for i, (call, tool, tool_input, result) in enumerate(calls):
        at = f"2026-03-02T09:0{2 * i}:0"
        lines.append(F._assistant(f"a{i}", f"r{i - 1}", f"{at}1.000Z", f"msg_{i}", usage,
                                  {"type": "tool_use", "id": call, "name": tool, "input": tool_input}, base))
        lines.append(F._result(f"r{i}", f"a{i}", f"{at}2.000Z", call, result, base))
    f = tmp_path / "projects" / "-orch" / f"{F.SESSION}.jsonl"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"".join(lines))
    return f


@pytest.mark.parametrize("order", ["transcript first", "state first"])
def test_a_crlf_state_written_by_an_lf_write_is_linked_by_content_after_normalising(run, tmp_path: Path,
                                                                                  order: str) -> None:
    project = tmp_path / "orch"
    project.mkdir()

    def ingest_states() -> list[int]:
        return _ingest_states(run, project, CRLF_VERSIONS)

    def ingest_session() -> None:
        assert run("ingest", "claude", str(_crlf_session(tmp_path, project))).exit_code == 0

    if order == "transcript first":
        ingest_session()
        versions = ingest_states()
    else:
        versions = ingest_states()
        ingest_session()
    assert run("replay", F.TASK, "--raw", "--upto", str(versions[0])).stdout_bytes == _crlf(F.V1).encode()
    meta = json.loads(run("replay", F.TASK, "--json", "--meta").stdout)
    got = {v["version"]: v["written_by"] for v in meta["versions"]}
    expected = {}
    for i, version in enumerate(versions, 1):
        exp = CRLF_EXPECTED[i]
        expected[version] = None if exp is None else {
            "session_id": F.SESSION, "stream": F.SESSION, "message": f"a{i - 1}", "tool_use_id": exp[0],
            "tool_name": exp[1], "established_by": "content", "line_endings_normalised": True}
    assert got == expected
    log = run("log", F.TASK).stdout
    assert "tool call toolu_w1 (Write; content match, line endings normalised)" in log
    assert "tool call toolu_e1 (Edit; content match, line endings normalised)" in log
    assert "toolu_w3" not in log  # its content is known and is no version's, even but for line endings
    made = [x.strip() for x in run("log", F.SESSION).stdout.splitlines() if x.strip().startswith("wrote ")]
    assert made == [f"wrote {F.TASK} version {v} (content match, line endings normalised)" for v in versions[:3]]


def test_a_byte_exact_match_comes_before_a_normalised_one() -> None:
    """A call whose bytes are one version's exactly serves that one, even when an earlier version
    has them but for line endings."""
    crlf = writers._Version("RUN", 1, "/w/p/agent-state.json", "crlf-h", datetime.fromisoformat(
        "2026-01-01T10:00:10+00:00"), None, None, None, lf_sha256="h")
    exact = _version(2, "h", "2026-01-01T10:01:10+00:00")
    got = writers.match([crlf, exact], [_call("only", "h", "2026-01-01T10:00:00+00:00")])
    assert ("RUN", 1) not in got
    assert (got[("RUN", 2)].tool_use_id, got[("RUN", 2)].line_endings_normalised) == ("only", False)
    lf_call = writers._Call("S", "lf", "/w/p/agent-state.json", "crlf-c", "Write", "m", datetime.fromisoformat(
        "2026-01-01T10:00:00+00:00"), False, lf_sha256="h")
    assert writers.match([exact], [lf_call])[("RUN", 2)].line_endings_normalised is True


def _writers_store(run: Any, tmp_path: Path) -> None:
    """The fixture's run and session, a second project's session, and a plain run."""
    project = tmp_path / "orch"
    project.mkdir()
    _ingest_session(run, tmp_path, project)
    _ingest_states(run, project)
    claude_fixtures.write_project(tmp_path / "other")
    assert run("ingest", "claude", str(tmp_path / "other")).exit_code == 0
    assert run("append", "PLAIN-1", "note", "--data", "{}").exit_code == 0


def _recorded_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements and parameters of the writers index's reads from here on (a list that grows)."""
    sent: list[tuple[str, tuple[Any, ...]]] = []
    real = writers._rows

    def recording(s: EventStore, sql: str, params: Any) -> list[Any]:
        sent.append((sql, tuple(params)))
        return real(s, sql, params)

    monkeypatch.setattr(writers, "_rows", recording)
    return sent


def test_one_runs_writers_are_looked_up_by_index_not_by_reading_every_call(run, store_url: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``log RUN`` reads the calls its versions can match (indexed look-ups), not the whole
    ``proj_file_writes`` table, which grows with every session of the store; and finds the same writers."""
    _writers_store(run, tmp_path)
    with EventStore(store_url) as store:
        writers.refresh(store)
        everything = writers.match(*writers._load(store, None))  # every call against every version
        sent = _recorded_reads(monkeypatch)
        found = writers.writers(store, F.TASK, fresh=False)
        assert found == {version: w for (sid, version), w in everything.items() if sid == F.TASK}
        assert sorted(found) == [1, 2, 3]  # the fixture's three linked versions
        assert writers.writers(store, "PLAIN-1", fresh=False) == {}
        on_writes = [(sql, params) for sql, params in sent if "proj_file_writes" in sql]
        assert on_writes and all(" WHERE " in sql for sql, _ in on_writes)
        if store.backend.name == "sqlite":  # and each is a search of an index, never a scan of the table
            with store.reading() as cur:
                for sql, params in on_writes:
                    cur.execute("EXPLAIN QUERY PLAN " + sql, params)
                    plan = [str(r[-1]) for r in cur.fetchall()]
                    assert not [step for step in plan if step.startswith("SCAN") and "proj_file_writes" in step
                                or step in ("SCAN f", "SCAN proj_file_writes")], (sql, plan)
                    assert any("INDEX ix_proj_file_writes_" in step for step in plan), (sql, plan)


def _writes_indexes(store: EventStore, table: str = "proj_file_writes") -> dict[str, bool]:
    """``table``'s indexes, each with whether it is partial (has a WHERE)."""
    with store.reading() as cur:
        if store.backend.name == "sqlite":
            cur.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,))
        else:
            cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                        "AND tablename = %s", (table,))
        return {r[0]: " WHERE " in r[1].upper() for r in cur.fetchall() if r[0].startswith("ix_")}


_VERSIONS_INDEXES = {"ix_proj_state_versions_name": False, "ix_proj_state_versions_hook_session": True,
                     "ix_proj_state_versions_sha256_name": False, "ix_proj_state_versions_lf_sha256_name": True}


@pytest.mark.parametrize("old", [2, 3])
def test_an_older_writers_index_gets_its_indexes_in_place(run, store_url: str, tmp_path: Path, old: int) -> None:
    """Versions 3 and 4 of the writers index only add indexes: a store built at version 2 or 3 keeps its rows
    and its checkpoint (no rebuild from the first event) and gains them."""
    _writers_store(run, tmp_path)
    with EventStore(store_url) as store:
        writers.refresh(store)
        new = _writes_indexes(store)
        assert new == dict.fromkeys({"ix_proj_file_writes_name_sha256", "ix_proj_file_writes_call_id",
                                     "ix_proj_file_writes_sha256", "ix_proj_file_writes_lf_sha256"}, False)
        assert _writes_indexes(store, "proj_state_versions") == _VERSIONS_INDEXES
        before = writers.writers(store, F.TASK)
        with store.writing(f"making it version {old}") as cur:  # as that version left it
            if old == 2:
                for name in new:
                    cur.execute(f"DROP INDEX {name}")
                cur.execute("CREATE INDEX ix_proj_file_writes_name ON proj_file_writes (name)")
            for name in ("ix_proj_state_versions_hook_session", "ix_proj_state_versions_sha256_name",
                         "ix_proj_state_versions_lf_sha256_name"):
                cur.execute(f"DROP INDEX {name}")
            cur.execute("CREATE INDEX ix_proj_state_versions_hook_session ON proj_state_versions (hook_session)")
            cur.execute(f"UPDATE projection_checkpoints SET version = {old} WHERE name = 'writers'")
            cur.execute("DELETE FROM proj_state_versions WHERE version = 1")  # a rebuild would bring it back
        with store.reading() as cur:
            position = store.backend.read_checkpoint(cur, "writers").position
        assert writers.refresh(store) == 0  # nothing re-applied
        assert _writes_indexes(store) == new
        assert _writes_indexes(store, "proj_state_versions") == _VERSIONS_INDEXES
        with store.reading() as cur:
            cp = store.backend.read_checkpoint(cur, "writers")
            cur.execute("SELECT COUNT(*) FROM proj_state_versions WHERE version = 1")
            kept_out = cur.fetchone()[0]
        assert (cp.version, cp.position) == (writers.WritersIndex.version, position) == (4, position)
        assert kept_out == 0  # the rows were kept as they were, not rebuilt
        assert writers.writers(store, F.TASK) == {v: w for v, w in before.items() if v != 1}


def test_every_streams_writers_are_looked_up_by_index_not_by_reading_every_version(
        run, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The versions every stream's writers can take (a report's run sessions) are found by searching indexes
    from the calls' keys, not by reading every state version of the store (which grows with every run); and
    the selection matches what every version of the calls' names gives."""
    _writers_store(run, tmp_path)
    with EventStore(store_url) as store:
        writers.refresh(store)
        sent = _recorded_reads(monkeypatch)
        selected, calls = writers._load(store, None)
        on_versions = [(sql, params) for sql, params in sent if "FROM proj_state_versions" in sql]
        names = sorted({writers._name(c.path) for c in calls if c.path})
        p = store.backend.p
        every = writers._rows(store, f"{writers._VERSION_SELECT} WHERE hook_session IS NOT NULL OR name IN "
                                     f"({', '.join([p] * len(names))})", names)
        assert selected and writers.match(selected, calls) == writers.match([writers._version(r) for r in every], calls)
        assert len(on_versions) >= 4
        with store.reading() as cur:
            if store.backend.name == "postgresql":  # a table this small is read whole when it can be: ask for
                cur.execute("SET enable_seqscan = off")  # the plan that does not (which index: its statistics)
            try:
                for sql, params in on_versions:
                    if store.backend.name == "sqlite":
                        cur.execute("EXPLAIN QUERY PLAN " + sql, params)
                        plan = [str(r[-1]) for r in cur.fetchall()]
                        assert not [s for s in plan if s.startswith("SCAN proj_state_versions")], (sql, plan)
                        assert any("INDEX" in s and "proj_state_versions" in s for s in plan), (sql, plan)
                    else:
                        cur.execute("EXPLAIN " + sql, params)
                        plan = [str(r[0]) for r in cur.fetchall()]
                        assert not [s for s in plan if "Seq Scan on proj_state_versions" in s], (sql, plan)
            finally:
                if store.backend.name == "postgresql":
                    cur.execute("RESET enable_seqscan")


_NAMES = ("agent-state.json", "tasks.json")
_row_text = st.sampled_from([None, "x", "y"])
_when = st.sampled_from([None, "2026-01-01T00:00:01+00:00", "2026-01-01T00:00:02+00:00", "2026-01-01T00:00:03+00:00"])
_written_versions = st.lists(st.tuples(st.sampled_from(["R1", "R2", "R3"]), st.sampled_from(_NAMES), _row_text, _row_text,
                                       _when.filter(bool), st.sampled_from([None, "S1"]),
                                       st.sampled_from([None, "c1", "c9"])),
                             max_size=10)
_made_calls = st.lists(st.tuples(st.sampled_from(["S1", "S2/agent-1"]), st.sampled_from(["c1", "c2", "c3", "c4"]),
                                 st.sampled_from([*_NAMES, "notes.md"]), _row_text, _row_text, _when, st.booleans()),
                       max_size=8)


_T = ["2026-01-01T00:00:01+00:00", "2026-01-01T00:00:02+00:00", "2026-01-01T00:00:03+00:00"]


@settings(max_examples=60, deadline=None)
@given(versions=_written_versions, calls=_made_calls)
# A version of another name between two of a name a call of unknown result wrote: read, as the previous
# version of the second, it keeps the call (made before it) from being that version's writer.
@example(versions=[("R1", "tasks.json", None, None, _T[0], None, None),
                   ("R1", "agent-state.json", None, None, _T[1], None, None),
                   ("R1", "tasks.json", None, None, _T[2], None, None)],
         calls=[("S1", "c1", "tasks.json", None, None, _T[1], False),
                ("S1", "c2", "agent-state.json", "y", None, _T[0], False)])
def test_every_streams_writers_read_only_the_versions_a_call_can_take(versions: list[Any], calls: list[Any]) -> None:
    """Reading every stream's writers selects, in the database, the versions a call can be matched to; matching
    them gives what matching every version of every state file name gives (the selection before), whatever the
    hooks, bytes, line endings, names, times and failures."""
    store = _fill_property_store(versions, calls)
    selected, every_call = writers._load(store, None)
    names = sorted({writers._name(c.path) for c in every_call if c.path})
    marks = ", ".join("?" * len(names))
    before = writers._rows(store, f"{writers._VERSION_SELECT} WHERE hook_session IS NOT NULL"
                                  + (f" OR name IN ({marks})" if names else ""), names)
    before.sort(key=lambda r: (r[0], r[1]))
    assert writers.match(selected, every_call) == writers.match([writers._version(r) for r in before], every_call)
    assert {(v.stream_id, v.version) for v in selected} <= {(r[0], r[1]) for r in before}


def _fill_property_store(versions: list[Any], calls: list[Any]) -> EventStore:
    """The property store with the writers index's rows replaced by ``versions`` and ``calls``."""
    store = _property_store()
    with store.connect() as handle:
        cur = handle.driver_connection.cursor()
        cur.execute("DELETE FROM proj_state_versions")
        cur.execute("DELETE FROM proj_file_writes")
        seen: set[tuple[str, str]] = set()
        for i, (sid, name, sha, lf, at, hook_session, hook_call) in enumerate(versions):
            cur.execute("INSERT INTO proj_state_versions (stream_id, version, name, path, sha256, lf_sha256, at, "
                        "hook_session, hook_call, hook_tool, position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (sid, i + 1, name, f"/w/{name}", sha, lf if sha else None, at, hook_session,
                         hook_call if hook_session else None, "Write" if hook_session else None, i + 1))
        for i, (sid, call, name, sha, lf, at, failed) in enumerate(calls):
            if (sid, call) in seen:
                continue
            seen.add((sid, call))
            cur.execute("INSERT INTO proj_file_writes (stream_id, call_id, name, path, sha256, lf_sha256, how, tool, "
                        "message, at, failed, position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (sid, call, name, f"/w/{name}", sha, lf if sha else None, "write", "Write", f"m{i}", at,
                         int(failed), 100 + i))
        handle.driver_connection.commit()
    return store


@settings(max_examples=60, deadline=None)
@given(versions=_written_versions, calls=_made_calls)
# found only by the bytes (rule 2)
@example(versions=[("R1", "agent-state.json", "x", None, _T[1], None, None)],
         calls=[("S1", "c1", "agent-state.json", "x", None, _T[0], False)])
# found only by the name of a call of unknown result (rule 3, by time)
@example(versions=[("R1", "agent-state.json", "x", None, _T[1], None, None)],
         calls=[("S1", "c1", "agent-state.json", None, None, _T[0], False)])
# found only by the bytes with CRLF as LF (the version's lf_sha256 is the call's SHA-256)
@example(versions=[("R1", "agent-state.json", "y", "x", _T[1], None, None)],
         calls=[("S1", "c1", "agent-state.json", "x", None, _T[0], False)])
def test_what_a_session_wrote_is_found_from_its_own_calls(versions: list[Any], calls: list[Any]) -> None:
    """``wrote`` (a session's ``log``) looks up the streams its calls can have written by their keys; it
    finds what it found from every stream with a version of a name the session wrote (before: a read that
    grew with the store), whatever the hooks, bytes, line endings, names, times and failures."""
    store = _fill_property_store(versions, calls)
    for session in ("S1", "S2/agent-1"):
        names = [r[0] for r in writers._rows(store, "SELECT DISTINCT name FROM proj_file_writes WHERE stream_id = ?",
                                             (session,)) if r[0]]
        where = "hook_session = ?" + (f" OR name IN ({', '.join('?' * len(names))})" if names else "")
        every = [r[0] for r in writers._rows(store, f"SELECT DISTINCT stream_id FROM proj_state_versions WHERE {where}",
                                             (writers.session_of(session), *names))]
        before: dict[str, list[tuple[str, int, writers.Writer]]] = {}
        for (sid, version), found in sorted(writers.attribute(store, every, fresh=False).items()) if every else ():
            if found.stream == session and found.tool_use_id:
                before.setdefault(found.tool_use_id, []).append((sid, version, found))
        assert writers.wrote(store, session, fresh=False) == before
        assert set(writers._streams_written(store, session)) <= set(every)


@functools.cache
def _property_store() -> EventStore:
    """One migrated SQLite store for the property's examples (each replaces the writers index's rows)."""
    import tempfile

    url = migrated(f"sqlite:///{tempfile.mkdtemp(prefix='evstore-writers-')}/events.db")
    store = EventStore(url)
    writers.refresh(store)  # creates the index's tables
    return store
