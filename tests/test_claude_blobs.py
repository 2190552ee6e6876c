"""Content-addressed blobs for very large tool outputs and base64 images, on SQLite and PostgreSQL:
stored once however many sessions hold them, spliced back so `replay --raw` is byte for byte, and
checked by `evstore verify` (a tampered, resized or missing blob is named)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from conftest import exec_sql

from eventstore.dialects.claude.dialect import cut_blobs, long_strings, splice_blobs
from eventstore.store import EventStore
from tests.claude_fixtures import SESSION, records, write_project

OTHER = "9d8c7b6a-0000-4000-8000-000000000002"


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def _line(rec: dict) -> bytes:
    return (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def image_line(session: str, uuid: str, data: str) -> bytes:
    return _line({"type": "user", "sessionId": session, "uuid": uuid, "parentUuid": None,
                  "timestamp": "2026-03-02T10:00:00.000Z", "message": {"role": "user", "content": [
                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}})


def output_line(session: str, uuid: str, output: str) -> bytes:
    """A Bash result as Claude Code writes it: the output in the message and again in toolUseResult."""
    return _line({"type": "user", "sessionId": session, "uuid": uuid, "parentUuid": None,
                  "timestamp": "2026-03-02T10:01:00.000Z",
                  "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                                           "content": output}]},
                  "toolUseResult": {"stdout": output, "stderr": "", "interrupted": False}})


def _rows(store: EventStore, sql: str) -> list[tuple]:
    with store.reading() as cur:
        cur.execute(sql)
        return cur.fetchall()


def blob_rows(store: EventStore) -> list[tuple[str, int]]:
    return sorted((bytes(r[0]).hex(), r[1]) for r in _rows(store, "SELECT sha256, size FROM blobs"))


def test_long_strings_finds_only_long_literals_and_respects_escapes() -> None:
    raw = b'{"a":"' + b"x" * 10 + b'","b":"q\\"uote\\\\' + b"y" * 20 + b'","c":"\\\\"}\n'
    spans = long_strings(raw, 15)
    assert [raw[s:e] for s, e in spans] == [b'q\\"uote\\\\' + b"y" * 20]
    stored, refs, blobs = cut_blobs(raw, 15)
    assert stored == b'{"a":"' + b"x" * 10 + b'","b":"","c":"\\\\"}\n' and json.loads(stored)["b"] == ""
    assert splice_blobs(stored, refs, blobs.__getitem__) == raw


def test_same_blob_in_two_sessions_is_stored_once_and_replays_exactly(run, store_url: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    image = base64.b64encode(rng.randbytes(300_000)).decode("ascii")
    output = "".join(rng.choice('abc "quoted" \\ back\tslash\n ünï ✓') for _ in range(40_000))
    first, second = tmp_path / f"{SESSION}.jsonl", tmp_path / "p2" / f"{OTHER}.jsonl"
    second.parent.mkdir()
    first.write_bytes(image_line(SESSION, "u1", image) + output_line(SESSION, "u2", output))
    second.write_bytes(output_line(OTHER, "v1", output) + image_line(OTHER, "v2", image) + b'{"type":"x"}\n')
    r = run("ingest", "claude", str(first), str(second), "--json")
    assert r.exit_code == 0, r.output
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["blobs"] for x in results] == [2, 2]  # the output appears twice per line: one blob
    with EventStore(store_url) as store:
        rows = blob_rows(store)
        assert len(rows) == 2  # two distinct blobs for four lines in two sessions
        sizes = sorted(n for _, n in rows)
        assert sizes[1] == len(image) and sizes[0] == len(json.dumps(output, ensure_ascii=False).encode()) - 2
        events = [e for e in store.read_stream(SESSION)]
        assert all(len(e.data) < 2_000 for e in events)  # the events hold references, not the bytes
        assert {h for e in events for h in e.metadata.get("blobs", [])} == {h for h, _ in rows}
    assert run("replay", SESSION, "--raw").stdout_bytes == first.read_bytes()
    assert run("replay", OTHER, "--raw").stdout_bytes == second.read_bytes()
    again = run("ingest", "claude", str(first), str(second), "--json")  # unchanged: nothing new
    assert [json.loads(x)["events"] for x in again.stdout.splitlines()] == [0, 0]
    verified = run("verify")
    assert verified.exit_code == 0 and "2 blobs" in verified.output


def test_fixture_transcripts_replay_exactly_with_blobs_off_and_on(run, store_url: str, tmp_path: Path) -> None:
    main, _ = write_project(tmp_path / "projects")
    assert run("ingest", "claude", str(main), "--stream", "off", "--blob-threshold", "0").exit_code == 0
    assert run("ingest", "claude", str(main), "--stream", "tiny", "--blob-threshold", "64").exit_code == 0
    assert run("ingest", "claude", str(main)).exit_code == 0
    with EventStore(store_url) as store:
        off = [e.type for e in store.read_stream("off")]
        assert off.count("claude.line_part") >= 2 and not _rows(store, "SELECT 1 FROM blobs WHERE size < 1000")
        assert "claude.line_part" not in [e.type for e in store.read_stream(SESSION)]
    for stream in ("off", "tiny", SESSION):
        assert run("replay", stream, "--raw").stdout_bytes == main.read_bytes() == b"".join(records())


def test_a_line_still_over_a_mebibyte_after_its_blobs_keeps_its_parts(run, store_url: str, tmp_path: Path) -> None:
    many = {f"k{i}": "z" * 20_000 + str(i) for i in range(80)}  # 1.6 MB of strings under a 64 KiB threshold
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes(_line({"type": "user", "big": "B" * 200_000, **many}))
    assert run("ingest", "claude", str(f), "--blob-threshold", "65536").exit_code == 0
    with EventStore(store_url) as store:
        assert [e.type for e in store.read_stream(SESSION)].count("claude.line_part") == 2
        assert [n for _, n in blob_rows(store)] == [200_000]
    assert run("replay", SESSION, "--raw").stdout_bytes == f.read_bytes()


def _tamper(store: EventStore, sql: str, **params: object) -> None:
    if store.engine.dialect.name == "sqlite":
        exec_sql(store, "DROP TRIGGER blobs_no_update")
        exec_sql(store, "DROP TRIGGER blobs_no_delete")
    else:
        exec_sql(store, "DROP TRIGGER blobs_no_update_delete ON blobs")
    exec_sql(store, sql, **params)


@pytest.mark.parametrize("how", ["bytes", "size", "deleted"])
def test_verify_names_a_tampered_blob(run, store_url: str, tmp_path: Path, how: str) -> None:
    rng = random.Random(3)
    image = base64.b64encode(rng.randbytes(60_000)).decode("ascii")
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes(b'{"type":"summary"}\n' + image_line(SESSION, "u1", image))
    assert run("ingest", "claude", str(f)).exit_code == 0
    with EventStore(store_url) as store:
        with pytest.raises(Exception, match="append-only"):  # the triggers hold first
            exec_sql(store, "DELETE FROM blobs")
        (digest, _), = blob_rows(store)
        forged = image[:-4].encode() + b"AAAA"
        if how == "bytes":
            _tamper(store, "UPDATE blobs SET data = :d", d=forged)
        elif how == "size":
            _tamper(store, "UPDATE blobs SET size = size + 1")
        else:
            _tamper(store, "DELETE FROM blobs")
    r = run("verify", "--json")
    assert r.exit_code == 1
    failures = json.loads(r.stdout)["failures"]
    detail = {"bytes": f"blob {digest}: stored bytes do not match their SHA-256",
              "size": f"blob {digest}: holds {len(image)} bytes, its row says {len(image) + 1}",
              "deleted": f"blob {digest} is referenced but not stored"}[how]
    assert failures == [{"stream": SESSION, "version": 2, "field": "blob", "detail": detail}]
    assert run("verify", SESSION, "--json").exit_code == 1  # one stream: its blobs are checked too
    if how != "size":  # replay refuses rather than give back other bytes
        r = run("replay", SESSION, "--raw")
        assert r.exit_code == 1 and f"Blob {digest}" in r.output


def test_a_wrong_blob_key_is_refused_and_nothing_is_written(store: EventStore) -> None:
    from eventstore.errors import InvalidEvent
    from eventstore.store import NewEvent

    with pytest.raises(InvalidEvent, match="is not the SHA-256"):
        store.append("s", [NewEvent("x.y", {})], blobs={"00" * 32: b"not this"})
    assert store.stream_info("s") is None and blob_rows(store) == []


def test_a_secret_in_a_long_string_seen_again_is_scrubbed_every_time(run, store_url: str, tmp_path: Path) -> None:
    """The scrubber looks at each distinct long string once (by digest); the string must still be
    scrubbed wherever it appears, and its blob holds the marker, never the secret."""
    key = "AKIA" + "Q" * 16
    dotenv = "x" * 20_000 + "\nDEBUG=1\nSTRIPE_SECRET_TOKEN=hunter2hunter2\n" + f"aws_access_key_id = {key}\n"
    f1, f2 = tmp_path / f"{SESSION}.jsonl", tmp_path / "b" / f"{OTHER}.jsonl"
    f2.parent.mkdir()
    f1.write_bytes(output_line(SESSION, "u1", dotenv) + output_line(SESSION, "u2", dotenv))
    f2.write_bytes(output_line(OTHER, "v1", dotenv))
    r = run("ingest", "claude", str(f1), str(f2), "--json")
    assert [json.loads(x)["findings"] for x in r.stdout.splitlines()] == [8, 4]  # 2 secrets, twice per line, per line
    with EventStore(store_url) as store:
        stored = b"".join(bytes(row[0]) for row in _rows(store, "SELECT data FROM blobs"))
        assert len(blob_rows(store)) == 1 and b"[evstore-secret:aws-access-key-id:" in stored
        assert key.encode() not in stored and b"hunter2" not in stored
    for stream in (SESSION, OTHER):
        raw = run("replay", stream, "--raw").stdout_bytes
        assert key.encode() not in raw and b"hunter2" not in raw and raw.count(b"[evstore-secret:") >= 2


# ---------------------------------------------------------------- hook calls


def _hook_write(session: str, path: str, content: str) -> bytes:
    """A PostToolUse of Write as Claude Code hands it to a hook (compact JSON, like its transcript)."""
    return json.dumps({"session_id": session, "transcript_path": f"/nowhere/{session}.jsonl", "cwd": "/nowhere",
                       "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": "toolu_big",
                       "tool_input": {"file_path": path, "content": content},
                       "tool_response": {"type": "create", "filePath": path, "content": content,
                                         "structuredPatch": []}},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _write_lines(session: str, path: str, content: str) -> bytes:
    """The same Write in the transcript: the tool use, and its result carrying the content again."""
    use = _line({"type": "assistant", "sessionId": session, "uuid": "a1", "parentUuid": None,
                 "timestamp": "2026-03-02T10:00:00.000Z",
                 "message": {"role": "assistant", "model": "claude-sonnet-4-5", "id": "msg_w", "content": [
                     {"type": "tool_use", "id": "toolu_big", "name": "Write",
                      "input": {"file_path": path, "content": content}}]}})
    result = _line({"type": "user", "sessionId": session, "uuid": "u1", "parentUuid": "a1",
                    "timestamp": "2026-03-02T10:00:01.000Z",
                    "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_big",
                                                             "content": f"File created successfully at: {path}"}]},
                    "toolUseResult": {"type": "create", "filePath": path, "content": content,
                                      "structuredPatch": []}})
    return use + result


def _big_state(rng: random.Random) -> str:
    """A 1 MB agent-state.json: quotes, backslashes, newlines, tabs and non-ASCII in its notes."""
    notes = "".join(rng.choice('abc "quoted" \\ back\tslash\n ünï ✓ ') for _ in range(1_000_000))
    return json.dumps({"schemaVersion": 1, "taskId": "PROJ-BIG", "status": "running", "notes": notes},
                      indent=2, ensure_ascii=False) + "\n"


def test_a_hook_write_is_stored_once_with_its_transcript_and_read_back_whole(run, store_url: str,
                                                                            tmp_path: Path) -> None:
    from serve_fixtures import LOCAL
    from starlette.testclient import TestClient

    from eventstore import capture, spool
    from projections.serve import ServeConfig, create_app

    path = "/nowhere/agent-state.json"
    content = _big_state(random.Random(11))
    body = _hook_write(SESSION, path, content)
    assert len(body) > 2_000_000  # the content twice
    spool.write(tmp_path / "spool", body)
    with EventStore(store_url) as store:
        drained = capture.drain(store, tmp_path / "spool")
        assert drained.hooks == 1 and not drained.errors and len(drained.states) == 1
        (hook,) = store.read_stream(SESSION)
        assert hook.type == "claude.hook" and len(hook.data) < 2_000  # the event holds references
        assert hook.payload["input_bytes"] is None and not hook.metadata.get("findings")  # nothing truncated
        (digest, size), = blob_rows(store)  # input and response hold one content: one blob
        assert hook.metadata["blobs"] == [digest]
        assert size == len(json.dumps(content, ensure_ascii=False).encode("utf-8")) - 2
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes(_write_lines(SESSION, path, content))
    r = run("ingest", "claude", str(f), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["blobs"] == 1
    with EventStore(store_url) as store:
        assert blob_rows(store) == [(digest, size)]  # the transcript's two copies are the hook's blob
        assert [e.type for e in store.read_stream(SESSION)] == ["claude.hook", "claude.tool_use", "claude.tool_result"]
    assert run("replay", SESSION, "--raw").stdout_bytes == f.read_bytes()
    # What the product shows of the hook is what was spooled, byte for byte.
    logged = [json.loads(x) for x in run("log", SESSION, "--json").stdout.splitlines()]
    shown = logged[0]["data"]
    assert shown["input"].encode("utf-8") == body and json.loads(shown["input"]) == json.loads(body)
    assert shown["blobs"] is None and shown["tool_name"] == "Write" and shown["tool_use_id"] == "toolu_big"
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as client:
        assert client.get(f"/api/runs/{SESSION}/events").json() == logged
    # The state version the hook recorded is the file written, linked to the call by the hook.
    assert run("replay", "PROJ-BIG", "--raw").stdout_bytes == content.encode("utf-8")
    versions = json.loads(run("replay", "PROJ-BIG", "--meta", "--json").stdout)["versions"]
    assert [(v["written_by"]["tool_use_id"], v["written_by"]["established_by"]) for v in versions] == [
        ("toolu_big", "hook")]
    verified = run("verify")
    assert verified.exit_code == 0 and "1 blobs" in verified.output
    with EventStore(store_url) as store:
        _tamper(store, "UPDATE blobs SET data = :d", d=content[:-5].encode() + b"evil!")  # same size, other bytes
    r = run("verify", "--json")
    assert r.exit_code == 1
    assert json.loads(r.stdout)["failures"] == [
        {"stream": SESSION, "version": 1, "field": "blob", "detail": f"blob {digest}: stored bytes do not match "
                                                                    "their SHA-256"}]
    r = run("log", SESSION, "--json")  # never other bytes than were spooled
    assert r.exit_code == 1 and f"Blob {digest}" in r.output


def test_a_hook_with_blobs_shows_as_the_same_hook_without(store_url: str, tmp_path: Path) -> None:
    """Blobs are how the input is stored, not what it is: shown, it is the event blobs-off keeps."""
    from eventstore import capture
    from eventstore.dialects import get_dialect

    rng = random.Random(5)
    output = "".join(rng.choice('x"\\\n✓') for _ in range(50_000))
    body = json.dumps({"session_id": "S", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                       "tool_use_id": "toolu_b", "tool_input": {"command": "make"},
                       "tool_response": {"stdout": output, "stderr": "", "interrupted": False}}).encode()
    claude = get_dialect("claude")
    with EventStore(store_url) as store:
        capture.record_hook(store, body, key="on")
        capture.record_hook(store, body, key="off", blob_threshold=0)
        on, off = store.read_stream("S")
        assert len(on.data) < 1_000 < len(body) < len(off.data) and len(blob_rows(store)) == 1
        assert "blobs" not in off.metadata and off.payload.get("blobs") is None
        assert claude.shown_data(on.type, on.payload, blob=store.read_blob) == \
            claude.shown_data(off.type, off.payload, blob=store.read_blob) == {**off.payload, "input": body.decode()}


def test_a_secret_in_a_hook_blob_is_scrubbed_and_the_blob_is_the_transcripts(run, store_url: str,
                                                                            tmp_path: Path) -> None:
    from eventstore import capture
    from eventstore.dialects.claude.secrets import Scrubber

    key = "AKIA" + "Q" * 16
    dotenv = "x" * 20_000 + f"\naws_access_key_id = {key}\n"
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_bytes(_write_lines(SESSION, "/p/.env", dotenv))
    assert run("ingest", "claude", str(f)).exit_code == 0
    with EventStore(store_url) as store:
        before = blob_rows(store)
        result = capture.record_hook(store, _hook_write(SESSION, "/p/.env", dotenv), scrubber=Scrubber())
        assert not result.errors and blob_rows(store) == before and len(before) == 1  # the same scrubbed bytes
        stored = b"".join(bytes(row[0]) for row in _rows(store, "SELECT data FROM blobs"))
        assert key.encode() not in stored and b"[evstore-secret:aws-access-key-id:" in stored
        hook = list(store.read_stream(SESSION))[-1]
        assert hook.payload["secrets"] == 2 and key not in hook.data.decode()
