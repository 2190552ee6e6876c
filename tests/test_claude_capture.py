"""Claude Code capture: transcripts archived byte for byte, incrementally, secrets scrubbed;
hooks spooled silently and drained without loss; a state file written by a tool call linked to it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eventstore import capture, spool
from eventstore.dialects.claude.secrets import Scrubber
from eventstore.store import EventStore
from tests.claude_fixtures import AGENT, SESSION, records, write_project

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def types_of(store: EventStore, stream: str) -> list[str]:
    return [e.type for e in store.read_stream(stream)]


def test_every_record_type_is_typed_and_the_file_comes_back_byte_for_byte(run, store_url: str,
                                                                          tmp_path: Path) -> None:
    main, sub = write_project(tmp_path / "projects")
    r = run("ingest", "claude", str(tmp_path / "projects"), "--json")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["file"], x["stream"]) for x in lines] == [(str(main), SESSION), (str(sub), f"{SESSION}/agent-{AGENT}")]
    assert lines[0]["lines"] == len(records()) and lines[0]["bytes"] == main.stat().st_size
    assert run("replay", SESSION, "--raw").stdout_bytes == main.read_bytes()
    assert run("replay", f"{SESSION}/agent-{AGENT}", "--raw").stdout_bytes == sub.read_bytes()
    with EventStore(store_url) as store:
        got = types_of(store, SESSION)
        # the 1.5 MB image and the 60,000-character output are blobs: no line needs parts
        assert "claude.line_part" not in got
        typed = got
        assert typed == [
            "claude.summary", "claude.user_message", "claude.assistant_message", "claude.assistant_message",
            "claude.tool_use", "claude.tool_result", "claude.tool_use", "claude.tool_result", "claude.user_message",
            "claude.compact_boundary", "claude.system", "claude.file_history_snapshot", "claude.attachment",
            "claude.queue_operation", "claude.unknown_record", "claude.unknown_record", "claude.unreadable_line",
            "claude.unreadable_line", "claude.unreadable_line", "claude.tool_use", "claude.unknown_record"]
        events = [e.payload for e in store.read_stream(SESSION)]
        error = [e for e in events if e["type"] == "claude.tool_result" and e["is_error"]]
        assert [e["tool_use_id"] for e in error] == ["toolu_02"]
        split = [e for e in events if e.get("message_id") == "msg_1"]
        assert len(split) == 3 and {e["request_id"] for e in split} == {"req_1"}
        assert split[0]["usage"]["cache_read_input_tokens"] == 800
        unreadable = [e["error"] for e in events if e["type"] == "claude.unreadable_line"]
        assert unreadable[0].startswith("column ") and unreadable[1:] == ["not valid UTF-8", "empty line"]
        meta = [e.metadata for e in store.read_stream(f"{SESSION}/agent-{AGENT}")][-1]
        assert meta["transcript"]["parent_session"] == SESSION
    doc = json.loads(run("replay", SESSION, "--json").stdout)
    assert doc["tool_calls"] == 3 and doc["tool_errors"] == 1 and doc["unreadable"] == 3
    assert doc["models"] == ["claude-sonnet-4-5", "claude-opus-4-1"]


def test_reingest_appends_only_new_lines_and_a_rewritten_prefix_is_a_finding(run, store_url: str,
                                                                            tmp_path: Path) -> None:
    f = tmp_path / f"{SESSION}.jsonl"
    lines = records()
    f.write_bytes(b"".join(lines[:5]))
    assert run("ingest", "claude", str(f)).exit_code == 0
    with EventStore(store_url) as store:
        v1 = store.stream_version(SESSION)
    again = json.loads(run("ingest", "claude", str(f), "--json").stdout)
    assert again["events"] == 0 and again["version"] == v1  # unchanged: nothing appended
    f.write_bytes(b"".join(lines[:5]) + lines[5][:100])  # a writer mid-line: not taken yet
    assert json.loads(run("ingest", "claude", str(f), "--json").stdout)["events"] == 0
    f.write_bytes(b"".join(lines[:7]))
    grown = json.loads(run("ingest", "claude", str(f), "--json").stdout)
    assert grown["lines"] == 2 and grown["version"] == v1 + 2
    assert run("replay", SESSION, "--raw").stdout_bytes == f.read_bytes()
    f.write_bytes(lines[1] + lines[0] + b"".join(lines[2:8]))  # history rewritten
    for _ in range(2):  # seen twice, recorded once
        r = run("ingest", "claude", str(f), "--json")
        assert r.exit_code == 0 and json.loads(r.output)["rewritten"] is True
    with EventStore(store_url) as store:
        assert types_of(store, SESSION)[-1] == "claude.prefix_rewritten"
        assert types_of(store, SESSION).count("claude.prefix_rewritten") == 1
        assert store.stream_version(SESSION) == v1 + 3


def test_planted_secrets_never_reach_the_store(run, store_url: str, tmp_path: Path) -> None:
    planted = {
        "AKIAIOSFODNN7EXAMPLE": "aws-access-key-id",
        "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8": "github-token",
        "sk-ant-api03-" + "Zx9" * 12: "anthropic-api-key",
        "xoxb-123456789012-abcdefABCDEF": "slack-token",
    }
    key_block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----"
    env_file = "DEBUG=1\nDATABASE_PASSWORD=hunter2hunter2\nexport STRIPE_SECRET_KEY=abc123def456\n"
    content = " ".join(planted) + " " + key_block + "\n" + env_file
    rec = {"type": "user", "uuid": "u1", "timestamp": "2026-03-01T10:00:00Z",
           "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]}}
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes((json.dumps(rec) + "\n").encode())
    r = run("ingest", "claude", str(f))
    assert r.exit_code == 0 and "secret(s) scrubbed" in r.output
    raw = run("replay", SESSION, "--raw")
    assert "replaced by [evstore-secret:...] markers" in raw.stderr
    stored = json.loads(raw.stdout_bytes)  # still valid JSON, same structure
    text = stored["message"]["content"][0]["content"]
    secrets = [*planted, "MIIEowIBAAKCAQEA7bq", "hunter2hunter2", "abc123def456"]
    for secret in secrets:
        assert secret not in raw.stdout
    for kind in [*planted.values(), "private-key", "env-assignment"]:
        assert f"[evstore-secret:{kind}:" in text
    assert "DEBUG=1" in text  # not a secret: left alone
    log = run("log", SESSION).output
    assert "secret-scrubbed" in log
    with EventStore(store_url) as store:
        dump = json.dumps([e.to_dict() for e in store.read_stream(SESSION)])
    for secret in secrets:
        assert secret not in dump
    # The same secret gives the same marker (a keyed fingerprint), another key another marker.
    a, b = Scrubber(key=b"k1"), Scrubber(key=b"k2")
    assert a.scrub("AKIAIOSFODNN7EXAMPLE")[0] == a.scrub("x AKIAIOSFODNN7EXAMPLE")[0][2:]
    assert a.scrub("AKIAIOSFODNN7EXAMPLE")[0] != b.scrub("AKIAIOSFODNN7EXAMPLE")[0]


def test_no_scrub_is_explicit_and_keeps_the_bytes(run, tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(b'{"type":"user","message":{"content":"AKIAIOSFODNN7EXAMPLE"}}\n')
    r = run("ingest", "claude", str(f), "--no-scrub")
    assert r.exit_code == 0 and "--no-scrub" in r.stderr
    assert run("replay", "s", "--raw").stdout_bytes == f.read_bytes()


def _hook(stdin: bytes, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "eventstore", "hook", "claude-code"], input=stdin,
                          capture_output=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def hooked_spool(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[subprocess.CompletedProcess[bytes]], Path]:
    """200 hook processes, 16 at a time, and the spool they wrote (no drain has read it).

    A hook only spools (eventstore/entry.py): it opens no store, so one spool serves the drain tests
    of both backends.  The drain lock is held meanwhile, as by a drain running, so the hook that
    the truncated "Stop" input reaches starts none (a drain creates the store it names) and the
    spool is left to the tests."""
    where = tmp_path_factory.mktemp("hooks")
    lock = spool.drain_lock(where / "spool")
    assert lock is not None
    env = {**os.environ, "EVSTORE_URL": f"sqlite:///{where}/no-store/events.db", "EVSTORE_SPOOL_DIR": str(where / "spool")}
    inputs = [json.dumps({"session_id": f"s-{i % 7}", "hook_event_name": name, "tool_name": "Bash",
                          "tool_use_id": f"toolu_{i}", "tool_input": {"command": "ls"}},
                         separators=(",", ":")).encode()
              for i, name in enumerate(["PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart",
                                        "SomethingNew"] * 39)]
    inputs += [b"not json", b"", b"\xff\xfe", b'{"hook_event_name":"Stop"', b"[]"]
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(lambda data: _hook(data, env), inputs))
    finally:
        os.close(lock)
    return results, where / "spool"


def test_200_concurrent_hooks_are_silent(hooked_spool: tuple[list[subprocess.CompletedProcess[bytes]], Path]) -> None:
    results, directory = hooked_spool
    assert len(results) == 200
    assert all(r.returncode == 0 and r.stdout == b"" for r in results), [r for r in results if r.returncode][:1]
    assert sorted(p.name for p in directory.iterdir()) == ["drain.lock", spool.SPOOL]  # no claim, no hook error logged
    assert len(list(spool.read(directory / spool.SPOOL))) == 200


def test_200_concurrent_hooks_are_drained_without_loss(hooked_spool: tuple[list[subprocess.CompletedProcess[bytes]], Path],
                                                       store_url: str, tmp_path: Path) -> None:
    directory = shutil.copytree(hooked_spool[1], tmp_path / "spool")  # this backend's own copy to drain
    with EventStore(store_url) as store:
        drained = capture.drain(store, directory)
        assert drained.hooks == 200 and not drained.errors
        assert sum(store.stream_version(f"s-{i}") for i in range(7)) == 195
        assert store.stream_version("claude-hooks") == 5
        assert capture.drain(store, directory).hooks == 0  # drained once


def test_a_drain_killed_half_way_records_everything_once(store_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    for i in range(5):
        spool.write(directory, json.dumps({"session_id": "S", "hook_event_name": "PreToolUse",
                                           "tool_use_id": f"t{i}"}).encode())
    with EventStore(store_url) as store:
        [claimed] = spool.claim(directory)  # a drain claimed the spool...
        for record in list(spool.read(claimed))[:2]:  # ...recorded two records, then died
            capture._drain_one(store, record, None, capture.DrainResult())
        spool.write(directory, json.dumps({"session_id": "S", "hook_event_name": "Stop"}).encode())
        result = capture.drain(store, directory)
        assert result.hooks == 6
        assert store.stream_version("S") == 6  # the two recorded before the crash are not doubled
        assert list(directory.glob("claimed-*")) == []


def test_a_hook_input_over_the_event_limit_is_kept_in_part_and_the_drain_goes_on(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call bigger than one event (a Bash output of megabytes) once stopped every drain at it.
    Its long strings are blobs (below); one still too big without them is kept in part."""
    from eventstore import config

    monkeypatch.setattr(config, "MAX_EVENT_BYTES", 5000)
    lines = ["é" * 500] * 40  # 40 strings of 3,000 bytes each (escaped), each under the blob threshold
    big = json.dumps({"session_id": "S", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                      "tool_response": {"stdout_lines": lines, "stderr": "w" * 10_000}}).encode()
    spool.write(tmp_path / "spool", big)
    spool.write(tmp_path / "spool", b'{"session_id":"S","hook_event_name":"Stop"}')
    with EventStore(store_url) as store:
        assert capture.drain(store, tmp_path / "spool").hooks == 2
        first, second = store.read_stream("S")
    kept = first.payload
    assert kept["input_bytes"] == len(big) and kept["input_sha256"] == hashlib.sha256(big).hexdigest()
    assert big.decode().startswith(kept["input"]) and 0 < len(kept["input"]) < 5000
    assert [f["code"] for f in first.metadata["findings"]] == ["hook-input-truncated"]
    assert kept["blobs"] is None and "blobs" not in first.metadata  # kept in part, its long strings too
    assert second.payload["input_bytes"] is None and second.payload["hook_event_name"] == "Stop"
    assert list((tmp_path / "spool").glob("claimed-*")) == []


def test_a_state_file_written_by_a_tool_call_is_ingested_with_its_session(run, store_url: str,
                                                                         tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    state = project / "agent-state.json"
    env = {**os.environ, "EVSTORE_URL": store_url, "EVSTORE_SPOOL_DIR": str(tmp_path / "spool")}
    for version, status in enumerate(["running", "done"]):
        state.write_text(json.dumps({"schemaVersion": 1, "taskId": "PROJ-7", "status": status}, indent=2))
        payload = {"session_id": SESSION, "cwd": str(project), "hook_event_name": "PostToolUse",
                   "tool_name": "Write", "tool_use_id": f"toolu_w{version}",
                   "tool_input": {"file_path": "agent-state.json", "content": "..."}, "tool_response": {}}
        assert _hook(json.dumps(payload).encode(), env).returncode == 0
    state.write_text("{}")  # changed after the hooks ran: the spooled bytes are what the tool wrote
    with EventStore(store_url) as store:
        result = capture.drain(store, tmp_path / "spool")
        assert len(result.states) == 2 and not result.errors
        sources = [e.metadata["source"]["claude"] for e in store.read_stream("PROJ-7")
                   if "source" in e.metadata]
    assert [(s["session_id"], s["tool_use_id"]) for s in sources] == [(SESSION, "toolu_w0"), (SESSION, "toolu_w1")]
    assert json.loads(run("replay", "PROJ-7", "--json").stdout)["status"] == "done"
    assert "toolu_w1" in run("log", "PROJ-7").output


def test_the_hook_imports_neither_click_nor_sqlalchemy(tmp_path: Path) -> None:
    env = {**os.environ, "EVSTORE_SPOOL_DIR": str(tmp_path / "spool")}

    def imports(*args: str) -> set[str]:
        r = subprocess.run([sys.executable, "-X", "importtime", *args], input=b'{"hook_event_name":"PreToolUse"}',
                           capture_output=True, env=env, timeout=60)
        assert r.returncode == 0 and r.stdout == b""
        return {line.split("|")[-1].strip() for line in r.stderr.decode().splitlines() if "|" in line}

    # What `python -m` imports by itself (site, sitecustomize, runpy) is not the hook's doing.
    imported = imports("-m", "eventstore", "hook", "claude-code") - imports("-c", "import runpy")
    assert "eventstore.spool" in imported
    assert not {m for m in imported if m.split(".")[0] in ("click", "sqlalchemy", "msgspec", "rich")}
    # Nor the standard library's slow imports (issue 14's 3x target): a call that names no file
    # needs none of them.  `re` is left out: pip's console-script wrapper imports it before us.
    assert not imported & {"pathlib", "json", "hashlib", "typing", "subprocess", "signal", "enum"}, imported


def test_spool_headers_read_back_whatever_they_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer formats a numbers-only header by hand (no json import); any header reads back."""
    monkeypatch.setattr(spool, "MAX_INPUT_BYTES", 10)
    spool.write(tmp_path / "s", b'{"a":1}', now=1764578000.5)
    spool.write(str(tmp_path / "s"), b'{"hook_event_name":"Stop"}', now=1.0)  # a str folder too
    (claimed,) = spool.claim(tmp_path / "s")
    first, second = spool.read(claimed)
    assert first.header["nonce"] != second.header["nonce"]
    assert first.header == {"received_at": 1764578000.5, "pid": os.getpid(), "bytes": 7,
                            "nonce": first.header["nonce"]} and first.stdin == b'{"a":1}'
    assert second.header == {"received_at": 1.0, "pid": os.getpid(), "bytes": 26, "truncated": True,
                             "nonce": second.header["nonce"]}
    assert second.stdin == b'{"hook_eve' and second.file_bytes is None
    assert (tmp_path / "s" / "spool.jsonl").exists() is False


def test_a_hook_whose_stdin_never_closes_exits_0_at_its_deadline(tmp_path: Path) -> None:
    env = {**os.environ, "EVSTORE_SPOOL_DIR": str(tmp_path / "spool"), "EVSTORE_HOOK_DEADLINE": "1"}
    with subprocess.Popen([sys.executable, "-m", "eventstore", "hook", "claude-code"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b'{"hook_event_name":"PreToolUse"')  # and never closed
            proc.stdin.flush()
            assert proc.wait(timeout=20) == 0
            assert proc.stdout.read() == b""
        finally:
            proc.kill()


def test_hook_install_merges_idempotently_and_uninstalls(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "my-own-check"}]}]}}
    settings.write_text(json.dumps(mine))
    assert run("hook", "install", "--project").exit_code == 0
    installed = json.loads(settings.read_text())
    assert installed["model"] == "opus"
    pre = installed["hooks"]["PreToolUse"]
    assert pre[0] == mine["hooks"]["PreToolUse"][0] and "hook claude-code" in pre[1]["hooks"][0]["command"]
    assert set(installed["hooks"]) >= {"PostToolUse", "Stop", "SubagentStop", "SessionEnd", "PreCompact"}
    assert list((tmp_path / ".claude").glob("settings.json.evstore-backup-*"))
    r = run("hook", "install", "--project")
    assert "nothing to do" in r.output and json.loads(settings.read_text()) == installed
    assert run("hook", "install", "--project", "--uninstall").exit_code == 0
    assert json.loads(settings.read_text()) == mine


def test_sessions_tool_calls_and_token_usage_views(run, tmp_path: Path) -> None:
    """Tokens count once per API message (its lines repeat the usage), tool calls pair with their
    results, subagents are sessions of their own linked by session id; evstore metrics reports them."""
    write_project(tmp_path / "projects")
    assert run("ingest", "claude", str(tmp_path / "projects")).exit_code == 0

    def query(sql: str) -> list[dict]:
        r = run("query", "--json", sql)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    usage = query("SELECT message_id, model, input_tokens, output_tokens, cache_read_tokens FROM token_usage "
                  "ORDER BY message_id")
    assert [(u["message_id"], u["input_tokens"], u["output_tokens"]) for u in usage] == [
        ("msg_1", 1200, 90), ("msg_2", 1500, 20), ("msg_4", 900, 30), ("msg_s1", 300, 12)]
    # the cache counts only msg_1's first line carries: the latest line that has each
    assert [u["cache_read_tokens"] for u in usage] == [800, None, None, None]
    calls = query("SELECT tool_use_id, tool_name, is_error, has_result FROM tool_calls ORDER BY tool_use_id")
    assert [(c["tool_use_id"], c["tool_name"], c["is_error"], c["has_result"]) for c in calls] == [
        ("toolu_01", "Read", False, True), ("toolu_02", "Bash", True, True), ("toolu_03", "Task", None, False)]
    sessions = query("SELECT session_id, is_subagent, turns, tool_calls, tool_errors, compactions, input_tokens, "
                     "output_tokens, wall_s FROM sessions ORDER BY is_subagent")
    assert [(s["session_id"], s["is_subagent"]) for s in sessions] == [(SESSION, False), (SESSION, True)]
    main = sessions[0]
    assert (main["turns"], main["tool_calls"], main["tool_errors"], main["compactions"]) == (2, 3, 1, 1)
    assert (main["input_tokens"], main["output_tokens"]) == (1200 + 1500 + 900, 90 + 20 + 30)
    assert main["wall_s"] == 14 * 60
    report = json.loads(run("metrics", "--format", "json").stdout)
    section = next(s for s in report["sections"] if s["name"] == "claude_sessions")
    by_model = {r["model"]: r for r in section["rows"]}
    assert by_model["claude-sonnet-4-5"]["input_tokens"] == 2700 and by_model["claude-sonnet-4-5"]["tool_errors"] == 1
    assert section["summary"]["subagents"] == 1 and section["summary"]["tool_calls"] == 3
