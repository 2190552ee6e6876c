"""``POST /hooks/claude-code`` on a real uvicorn server (SQLite and PostgreSQL): Claude Code's http
hooks recorded as ``evstore hook claude-code`` + drain records them, token-guarded, idempotent,
never a traceback, and never a way to have the server read a file it should not."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner, Result
from serve_fixtures import LOCAL, http_client, serving
from starlette.testclient import TestClient

from eventstore import capture
from eventstore.cli import register
from eventstore.dialects import get_dialect
from eventstore.store import EventStore
from projections.serve import ServeConfig, create_app
from tests.claude_fixtures import SESSION, records

TOKEN = "hook-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    # The claude dialect is one instance per process and keeps the scrubber (and its key) of its first
    # http hook call: a test before this one, under another key, must not decide the ids seen here.
    monkeypatch.setattr(get_dialect("claude"), "_scrubber", None)


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    root = tmp_path / "claude" / "projects"
    (root / "-work-proj").mkdir(parents=True)
    return root


@pytest.fixture
def base(store_url: str, projects: Path) -> Iterator[str]:
    """A real server of the store that takes writes and reads transcripts under ``projects``."""
    with serving(create_app(ServeConfig(url=store_url, token=TOKEN, hook_files=(projects,)))) as url:
        yield url


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args], catch_exceptions=False)


def hook(base: str, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
    with http_client(base, timeout=60) as http:
        return http.post("/hooks/claude-code", content=body,
                         headers={"content-type": "application/json", **(AUTH if headers is None else headers)})


def write(session: str, tool_use_id: str, status: str, path: str = "/nowhere/proj/agent-state.json") -> dict[str, Any]:
    """A PostToolUse of Write, as Claude Code sends it (the file need not exist where the server runs)."""
    content = json.dumps({"schemaVersion": 1, "taskId": "PROJ-7", "status": status}, indent=2)
    return {"session_id": session, "transcript_path": f"/nowhere/{session}.jsonl", "cwd": "/nowhere/proj",
            "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": tool_use_id,
            "tool_input": {"file_path": path, "content": content},
            "tool_response": {"type": "update", "filePath": path, "content": content}}


def hook_events(store_url: str, stream: str) -> list[dict[str, Any]]:
    with EventStore(store_url) as store:
        if store.stream_version(stream) == 0:
            return []
        return [e.payload for e in store.read_stream(stream) if e.type == "claude.hook"]


# ---------------------------------------------------------------- who may write


def test_hooks_need_the_token(store_url: str) -> None:
    body = write(SESSION, "toolu_1", "running")
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as c:  # no token configured: writes are off
        r = c.post("/hooks/claude-code", json=body, headers=AUTH)
        assert r.status_code == 403 and "writes are disabled" in r.json()["error"]
    with TestClient(create_app(ServeConfig(url=store_url, token=TOKEN)), base_url=LOCAL) as c:
        r = c.post("/hooks/claude-code", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert c.post("/hooks/claude-code", json=body, headers={"Authorization": "Bearer nope"}).status_code == 403
        assert c.get("/hooks/claude-code").status_code == 405
    with EventStore(store_url) as store:
        assert store.list_streams() == []  # nothing was written


# ---------------------------------------------------------------- what a call records


def test_a_write_of_a_state_file_is_its_new_version_with_session_and_tool_call(base: str, store_url: str) -> None:
    r = hook(base, write(SESSION, "toolu_w0", "running"))
    assert r.status_code == 204 and r.content == b""  # Claude Code adds a 2xx body to the model's context
    assert r.headers["evstore-hook"] == "recorded" and r.headers["evstore-states"] == "1"
    # An Edit: the new bytes are the tool's edit applied to tool_response.originalFile.
    before = json.dumps({"schemaVersion": 1, "taskId": "PROJ-7", "status": "running"}, indent=2)
    edit = {"session_id": SESSION, "cwd": "/nowhere/proj", "hook_event_name": "PostToolUse", "tool_name": "Edit",
            "tool_use_id": "toolu_e1", "tool_input": {"file_path": "agent-state.json",
                                                       "old_string": '"running"', "new_string": '"done"'},
            "tool_response": {"filePath": "/nowhere/proj/agent-state.json", "originalFile": before}}
    assert hook(base, edit).headers["evstore-states"] == "1"
    with EventStore(store_url) as store:
        sources = [e.metadata["source"] for e in store.read_stream("PROJ-7") if "source" in e.metadata]
    assert [(s["file"], s["claude"]["session_id"], s["claude"]["tool_use_id"], s["claude"]["tool_name"])
            for s in sources] == [("/nowhere/proj/agent-state.json", SESSION, "toolu_w0", "Write"),
                                  ("/nowhere/proj/agent-state.json", SESSION, "toolu_e1", "Edit")]
    # each version's identity is its call's (the request body's HMAC-SHA256 under the local scrub key, which a
    # reader of the store cannot test a guess against): a retried request records none again
    assert [s["id"] for s in sources] == [f"http:{hmac.new(b'test-key', body, hashlib.sha256).hexdigest()}" for body in (
        json.dumps(write(SESSION, "toolu_w0", "running"), separators=(",", ":")).encode(),
        json.dumps(edit, separators=(",", ":")).encode())]
    assert json.loads(cli(store_url, "replay", "PROJ-7", "--json").stdout)["status"] == "done"
    assert cli(store_url, "replay", "PROJ-7", "--raw").stdout == before.replace('"running"', '"done"')
    log = cli(store_url, "log", "PROJ-7").output
    assert "toolu_w0" in log and "toolu_e1" in log and SESSION[:8] in log
    assert [(h["hook_event_name"], h["tool_use_id"]) for h in hook_events(store_url, SESSION)] == [
        ("PostToolUse", "toolu_w0"), ("PostToolUse", "toolu_e1")]


def test_a_stop_records_the_new_lines_of_the_sessions_transcript(base: str, store_url: str, projects: Path) -> None:
    lines = records()
    transcript = projects / "-work-proj" / f"{SESSION}.jsonl"
    transcript.write_bytes(b"".join(lines[:5]))
    stop = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": "/work/proj",
            "hook_event_name": "Stop", "stop_hook_active": False}
    r = hook(base, stop)
    assert r.status_code == 204 and r.headers["evstore-transcript-lines"] == "5"
    transcript.write_bytes(b"".join(lines))  # the session went on
    r = hook(base, {**stop, "hook_event_name": "SessionEnd", "reason": "exit"})
    assert r.headers["evstore-transcript-lines"] == str(len(lines) - 5)
    assert cli(store_url, "replay", SESSION, "--raw").stdout_bytes == transcript.read_bytes()
    r = hook(base, {**stop, "hook_event_name": "PreCompact", "trigger": "auto"})
    assert r.headers["evstore-transcript-lines"] == "0"  # nothing new: nothing appended
    assert [h["hook_event_name"] for h in hook_events(store_url, SESSION)] == ["Stop", "SessionEnd", "PreCompact"]


def test_the_server_reads_no_file_but_this_sessions_transcript(base: str, store_url: str, projects: Path,
                                                               tmp_path: Path) -> None:
    """A token holder cannot turn the endpoint into a file reader: only <session>.jsonl (or its
    subagents') under the configured projects folders is read, and no answer carries a file's bytes."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"type":"user","message":{"content":"private"}}\n')
    other = projects / "-work-proj" / "someone-else.jsonl"
    other.write_bytes(secret.read_bytes())
    link = projects / "-work-proj" / f"{SESSION}.jsonl"
    link.symlink_to(secret)  # named right, but its real path is outside the projects folder
    (projects / "-work-proj" / "x.json").write_bytes(secret.read_bytes())
    for path in [str(secret), str(other), str(link), "/etc/passwd", "../../secret.jsonl",
                 str(projects / "-work-proj" / "x.json"), str(projects / ".." / ".." / "secret.jsonl")]:
        r = hook(base, {"session_id": SESSION, "transcript_path": path, "hook_event_name": "Stop"})
        assert r.status_code == 204 and r.content == b"" and r.headers["evstore-transcript-lines"] == "0", path
        assert r.headers["evstore-warnings"] == "1", path
    # Nor is a Write of a file no dialect knows ingested, whatever its content.
    r = hook(base, write(SESSION, "toolu_x", "x", path="/etc/agent-notes.json"))
    assert r.status_code == 204 and r.headers["evstore-states"] == "0"
    with EventStore(store_url) as store:
        streams = {s.stream_id for s in store.list_streams()}
        assert streams == {SESSION}
        assert {e.type for e in store.read_stream(SESSION)} == {"claude.hook"}
        assert not any(b"private" in e.data for e in store.read_stream(SESSION))


# ---------------------------------------------------------------- retries and bad input


def test_the_same_call_delivered_again_is_recorded_once(base: str, store_url: str) -> None:
    first = write(SESSION, "toolu_a", "running")
    assert hook(base, first).headers["evstore-hook"] == "recorded"
    again = hook(base, first)
    assert again.status_code == 204 and again.headers["evstore-hook"] == "duplicate"
    assert again.headers["evstore-states"] == "0"
    # The state moved on (another Write), then the first call is delivered once more: still no new version.
    assert hook(base, write(SESSION, "toolu_b", "done")).headers["evstore-states"] == "1"
    assert hook(base, first).headers["evstore-hook"] == "duplicate"
    with EventStore(store_url) as store:
        assert store.stream_version("PROJ-7") == 2
    assert json.loads(cli(store_url, "replay", "PROJ-7", "--json").stdout)["status"] == "done"
    assert [h["tool_use_id"] for h in hook_events(store_url, SESSION)] == ["toolu_a", "toolu_b"]


BAD_BODIES = [
    (b"{not json", "hook body: not valid JSON at line 1, column 2"),
    (b"\xff\xfe", "hook body"),
    (b"[]", "must be a JSON object"),
    (b'"Stop"', "must be a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "hook body"),
    (b'{"session_id": "s"}', '"hook_event_name" must be a non-empty string'),
    (b'{"hook_event_name": "Stop"}', '"session_id" must be a non-empty string'),
    (b'{"hook_event_name": "Stop", "session_id": 7}', '"session_id" must be a non-empty string'),
    (json.dumps({"hook_event_name": "Stop", "session_id": "x" * 300}).encode(), "at most 255 characters"),
    (b'{"hook_event_name": "Stop", "session_id": "a", "x": NaN}', "hook body"),
]


def test_a_body_that_is_no_hook_call_is_a_400_naming_why_and_writes_nothing(sqlite_url: str) -> None:
    from conftest import migrated

    url = migrated(sqlite_url)
    with TestClient(create_app(ServeConfig(url=url, token=TOKEN, max_body=1_000_000)), base_url=LOCAL) as c:
        for body, message in BAD_BODIES:
            r = c.post("/hooks/claude-code", content=body, headers={**AUTH, "content-type": "application/json"})
            assert r.status_code == 400 and message in r.json()["error"], (body[:40], r.text)
            assert r.json()["status"] == 400
        r = c.post("/hooks/claude-code", content=b'{"a": "' + b"x" * 1_000_001 + b'"}', headers=AUTH)
        assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]
        # An event type evstore does not know yet is a hook call all the same.
        r = c.post("/hooks/claude-code", json={"session_id": "S-1", "hook_event_name": "SomethingNew", "x": [1]},
                   headers=AUTH)
        assert r.status_code == 204
    with EventStore(url) as store:
        assert [s.stream_id for s in store.list_streams()] == ["S-1"]


def test_a_failure_inside_is_a_json_503_never_a_traceback(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import migrated

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(capture, "record_hook", broken)
    with TestClient(create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN)), raise_server_exceptions=False, base_url=LOCAL) as c:
        r = c.post("/hooks/claude-code", json={"session_id": "S", "hook_event_name": "Stop"}, headers=AUTH)
    assert r.status_code == 503 and r.json()["status"] == 503 and "Traceback" not in r.text
    assert "disk on fire" not in r.text and r.headers["retry-after"] == "1"


# ---------------------------------------------------------------- many at once


def test_concurrent_hook_calls_lose_nothing(base: str, store_url: str, projects: Path) -> None:
    """Three sessions at once, each with tool calls, Stops of its transcript and Writes of the same
    state file: every call recorded once, every Write a version, every transcript line once."""
    sessions = [f"{SESSION[:-1]}{n}" for n in range(3)]
    transcripts = {}
    for n, session in enumerate(sessions):
        transcripts[session] = projects / "-work-proj" / f"{session}.jsonl"
        transcripts[session].write_bytes(b"".join(records(seed=n + 1)))
    calls: list[dict[str, Any]] = []
    for i in range(4):
        for session in sessions:
            calls.append({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                          "tool_use_id": f"toolu_p{i}-{session[-1]}", "tool_input": {"command": f"echo {i}"}})
            calls.append(write(session, f"toolu_w{i}-{session[-1]}", f"step-{i}-{session[-1]}"))
            calls.append({"session_id": session, "transcript_path": str(transcripts[session]), "n": i,
                          "hook_event_name": "SubagentStop" if i % 2 else "Stop", "stop_hook_active": False})
    errors: list[str] = []

    def post(chunk: list[dict[str, Any]]) -> None:
        for payload in chunk:
            r = hook(base, payload)
            if r.status_code != 204 or r.headers["evstore-warnings"] != "0":
                errors.append(f"{r.status_code} {r.headers.get('evstore-warnings')} {r.text}")

    threads = [threading.Thread(target=post, args=(calls[i::12],)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for session in sessions:
        got = hook_events(store_url, session)
        mine = [c for c in calls if c["session_id"] == session]
        assert sorted(h["tool_use_id"] or "" for h in got) == sorted(c.get("tool_use_id", "") for c in mine)
        # Every transcript line once, in order, however the Stops raced.
        assert cli(store_url, "replay", session, "--raw").stdout_bytes == transcripts[session].read_bytes()
    with EventStore(store_url) as store:
        written = [e.metadata["source"]["claude"]["tool_use_id"] for e in store.read_stream("PROJ-7")
                   if "source" in e.metadata]
        assert sorted(written) == sorted(c["tool_use_id"] for c in calls if c.get("tool_name") == "Write")
        for session in sessions:
            versions = [e.version for e in store.read_stream(session)]
            assert versions == list(range(1, len(versions) + 1))


# ---------------------------------------------------------------- the bytes a tool wrote, from its hook body


@pytest.mark.parametrize("payload, expected", [
    ({"tool_name": "Write", "tool_input": {"content": "é\r\n"}}, "é\r\n".encode()),
    ({"tool_name": "Edit", "tool_input": {"old_string": "a", "new_string": "b"},
      "tool_response": {"originalFile": "a a"}}, b"b a"),
    ({"tool_name": "Edit", "tool_input": {"old_string": "a", "new_string": "b", "replace_all": True},
      "tool_response": {"originalFile": "a a"}}, b"b b"),
    ({"tool_name": "MultiEdit", "tool_input": {"edits": [{"old_string": "a", "new_string": "bc"},
                                                         {"old_string": "c", "new_string": "d"}]},
      "tool_response": {"originalFile": "xa"}}, b"xbd"),
    ({"tool_name": "Edit", "tool_input": {"old_string": "", "new_string": "new file"}, "tool_response": {}},
     b"new file"),
    ({"tool_name": "Edit", "tool_input": {"old_string": "zz", "new_string": "b"},
      "tool_response": {"originalFile": "a"}}, None),  # does not apply: unknown, never guessed
    ({"tool_name": "Edit", "tool_input": {"old_string": "a", "new_string": "b"}}, None),
    ({"tool_name": "Write", "tool_input": {"content": 7}}, None),
    ({"tool_name": "Write", "tool_input": {"content": "\ud800"}}, b"\xed\xa0\x80"),  # kept; ingest: unreadable
    ({"tool_name": "MultiEdit", "tool_input": {"edits": [{"old_string": "a", "new_string": "b"}]},
      "tool_response": {"originalFileContents": "a"}}, b"b"),
    ({"tool_name": "NotebookEdit", "tool_input": {"new_source": "x"}}, None),
])
def test_written_by_tool(payload: dict[str, Any], expected: bytes | None) -> None:
    assert capture.written_by_tool(payload) == expected


def test_transcript_allowed_only_for_this_session_under_a_root(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    sub = root / "p" / SESSION / "subagents"
    sub.mkdir(parents=True)
    ok = [root / "p" / f"{SESSION}.jsonl", sub / "agent-a1.jsonl"]
    refused = [root / "p" / "other.jsonl", root / "p" / f"{SESSION}.json", sub / "notes.jsonl",
               tmp_path / f"{SESSION}.jsonl"]
    for path in ok:
        assert capture.transcript_allowed(str(path), SESSION, [root]) == path.resolve()
    for path in refused:
        assert capture.transcript_allowed(str(path), SESSION, [root]) is None, path
    assert capture.transcript_allowed(f"p/{SESSION}.jsonl", SESSION, [root]) is None  # relative: whose cwd?
    assert capture.transcript_allowed(str(ok[0]), None, [root]) is None
    assert capture.transcript_allowed(str(tmp_path / "x"), SESSION, None) == tmp_path / "x"  # the spool trusts


def test_hook_install_http_points_claude_code_at_serve(sqlite_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / ".claude" / "settings.json"
    assert cli(sqlite_url, "hook", "install", "--project").exit_code == 0  # the spooling command first
    r = cli(sqlite_url, "hook", "install", "--project", "--http", "http://127.0.0.1:8765/")
    assert r.exit_code == 0, r.output
    hooks = json.loads(settings.read_text())["hooks"]
    for name in ("PreToolUse", "PostToolUse", "Stop", "SubagentStop", "SessionEnd", "PreCompact"):
        assert [h for e in hooks[name] for h in e["hooks"]] == [{
            "type": "http", "url": "http://127.0.0.1:8765/hooks/claude-code", "timeout": 15,
            "headers": {"Authorization": "Bearer $EVSTORE_SERVE_TOKEN"}, "allowedEnvVars": ["EVSTORE_SERVE_TOKEN"]}]
    again = cli(sqlite_url, "hook", "install", "--project", "--http", "http://127.0.0.1:8765")
    assert "nothing to do" in again.output
    assert cli(sqlite_url, "hook", "install", "--project", "--uninstall").exit_code == 0
    assert json.loads(settings.read_text()) == {}
    bad = CliRunner().invoke(register(), ["hook", "install", "--http", "127.0.0.1:8765"])
    assert bad.exit_code == 2 and "is not an http(s) URL" in bad.output
