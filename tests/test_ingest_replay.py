"""Ingest, replay, log, diff and validate through the CLI (generic and friday dialects)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import evstore_child, migrated
from oracles import exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.store import EventStore
from projections import replay as rp


def write(path: Path, doc: object, indent: int | None = 2) -> Path:
    path.write_text(json.dumps(doc, indent=indent) + "\n")
    return path


def test_ingest_replay_log_diff(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    docs = [
        {"taskId": "T-1", "status": "running", "n": 1},
        {"taskId": "T-1", "status": "running", "n": 2, "items": [1, 2]},
        {"taskId": "T-1", "n": 2.0, "items": [2], "status": "done"},
    ]
    files = [write(tmp_path / f"{i:02d}.json", d, indent=2 if i != 1 else None) for i, d in enumerate(docs)]
    r = run("ingest", "generic", *map(str, files), "--json")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.splitlines()]
    assert [x["version"] for x in lines] == [1, 2, 3] and all(x["stream"] == "T-1" for x in lines)
    # identical snapshot again: nothing appended
    r = run("ingest", "generic", str(files[-1]), "--json")
    assert json.loads(r.output) == {"file": str(files[-1]), "stream": "T-1", "version": 3, "events": 0,
                                    "lens_failures": 0, "status": "recorded",
                                    "source_id": f"file:02.json@{hashlib.sha256(files[-1].read_bytes()).hexdigest()}"}
    for v, (doc, f) in enumerate(zip(docs, files, strict=False), 1):
        out = run("replay", "T-1", "--upto", str(v), "--json").output
        assert exact(json.loads(out), doc)
        raw = run("replay", "T-1", "--upto", str(v), "--raw").stdout_bytes
        assert raw == f.read_bytes()
    patch = json.loads(run("replay", "T-1", "--diff", "1", "3").output)
    assert exact(documents.apply(documents.copy(docs[0]), patch), docs[2])
    # one line per event (version first), each followed by its detail lines (changes, source)
    log = [line for line in run("log", "T-1").output.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(log) == 3 and "document.observed" in log[0] and "document.patched" in log[2]


def test_reformatted_snapshot_keeps_its_bytes(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same document written with other bytes is history too: one empty patch records the
    new bytes, so `replay --raw` gives back both files; the same bytes again add nothing."""
    doc = {"taskId": "T-9", "status": "running", "items": [1, 2]}
    a = write(tmp_path / "a.json", doc, indent=2)
    b = write(tmp_path / "b.json", doc, indent=None)
    assert a.read_bytes() != b.read_bytes()
    assert json.loads(run("ingest", "generic", str(a), "--json").output)["version"] == 1
    r = run("ingest", "generic", str(b), "--json")
    assert json.loads(r.output) == {"file": str(b), "stream": "T-9", "version": 2, "events": 1, "lens_failures": 0,
                                    "status": "new", "source_id": f"file:b.json@{hashlib.sha256(b.read_bytes()).hexdigest()}"}
    [last] = [json.loads(line) for line in run("log", "T-9", "--json", "--after", "1").output.splitlines()]
    assert last["type"] == "document.patched" and last["data"]["ops"] == []
    assert last["meta"]["snapshot"]["sha256"] != json.loads(run("log", "T-9", "--json").output.splitlines()[0])[
        "meta"]["snapshot"]["sha256"]
    assert run("replay", "T-9", "--upto", "1", "--raw").stdout_bytes == a.read_bytes()
    assert run("replay", "T-9", "--raw").stdout_bytes == b.read_bytes()
    assert exact(json.loads(run("replay", "T-9", "--json").output), doc)
    c = tmp_path / "c.json"
    c.write_bytes(a.read_bytes())
    # b and a were recorded (capture-once: nothing); c, a new file with a's bytes, moves the stream back to them
    for again, events in ((b, 0), (a, 0), (c, 1)):
        r = run("ingest", "generic", str(again), "--json")
        assert json.loads(r.output)["events"] == events
    assert run("replay", "T-9", "--raw").stdout_bytes == a.read_bytes()


def test_directory_ingest_and_time_travel(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "snaps"
    d.mkdir()
    for i in range(3):
        write(d / f"{i}.json", {"taskId": "T-2", "i": i})
        os.utime(d / f"{i}.json", (1_700_000_000 + i * 100, 1_700_000_000 + i * 100))
    assert run("ingest", "generic", str(d)).exit_code == 0
    at = "2023-11-14T22:15:00Z"  # between the 2nd (22:14:20) and 3rd (22:16:00) snapshot
    assert json.loads(run("replay", "T-2", "--at", at, "--json").output) == {"taskId": "T-2", "i": 1}
    r = run("replay", "T-2", "--at", "yesterday")  # a bad value, not bad usage: exit 1, as for --since
    assert r.exit_code == 1 and r.stderr == "Error: --at 'yesterday' is not an ISO-8601 time.\n"


def test_ingest_bad_input_writes_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = write(tmp_path / "good.json", {"taskId": "T-3", "a": 1})
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "taskId": "T-3",\n  "a": \n}\n')
    r = run("ingest", "generic", str(good), str(broken), "--strict")  # --strict: all or nothing
    assert r.exit_code == 1
    assert f"{broken}: not valid JSON at line 4, column 1" in r.stderr and "--strict" in r.stderr
    assert run("log", "T-3").exit_code == 1  # the good file before it was not written either
    arr = write(tmp_path / "arr.json", [1, 2])
    r = run("ingest", "friday", str(arr), "--stream", "x")
    assert r.exit_code == 1 and "friday state documents are JSON objects, got array" in r.stderr
    r = run("ingest", "nosuch", str(good))
    assert r.exit_code == 1 and 'Unknown dialect "nosuch"' in r.stderr
    bad_utf8 = tmp_path / "latin1.json"
    bad_utf8.write_bytes(b'{"taskId": "caf\xe9"}')
    r = run("ingest", "generic", str(bad_utf8))
    assert r.exit_code == 1 and "not valid UTF-8 at byte 15" in r.stderr
    nan = tmp_path / "nan.json"
    nan.write_text('{"taskId": "T-9", "x": NaN}')
    assert "NaN is not valid JSON" in run("ingest", "generic", str(nan)).stderr
    # a snapshot of another task into an existing stream
    assert run("ingest", "generic", str(good)).exit_code == 0
    other = write(tmp_path / "other.json", {"taskId": "T-4", "a": 2})
    r = run("ingest", "generic", str(other), "--stream", "T-3")
    assert r.exit_code == 1 and 'the snapshot is for task "T-4" but stream "T-3" records task "T-3"' in r.stderr
    nameless = write(tmp_path / "nameless.json", {"a": 1})
    r = run("ingest", "mapipe", str(nameless))  # a dialect whose streams come from the document only
    assert r.exit_code == 1 and "not a mapipe document" in r.stderr


def test_validate_against_schema(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["taskId", "n"],
                                  "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}))
    f = write(tmp_path / "s.json", {"taskId": "T-5", "n": "one", "tags": ["a", 3]})
    run("ingest", "generic", str(f))
    r = run("replay", "T-5", "--validate", str(schema))
    assert r.exit_code == 1
    assert "$.n: 'one' is not of type 'integer'" in r.output
    assert "$.tags[1]: 3 is not of type 'string'" in r.output


def test_friday_real_history_replays_exactly(run, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    history = sorted((corpus / "friday" / "history").glob("*.friday-state.json"))
    assert len(history) == 9
    r = run("ingest", "friday", *map(str, history), "--stream", "friday:temper-ai", "--json")
    assert r.exit_code == 0, r.output
    versions = [json.loads(x)["version"] for x in r.output.splitlines()]
    assert len(versions) == 9 and versions == sorted(versions)
    for v, f in zip(versions, history, strict=False):
        assert exact(json.loads(run("replay", "friday:temper-ai", "--upto", str(v), "--json").output),
                              json.loads(f.read_text()))
        assert run("replay", "friday:temper-ai", "--upto", str(v), "--raw").stdout_bytes == f.read_bytes()
    log = run("log", "friday:temper-ai").output
    assert "friday.status_changed" in log and "risk-score-mismatch" in log
    r = run("replay", "friday:temper-ai", "--check")
    assert r.exit_code == 1 and "status-not-in-enum" in r.output


def test_replay_uses_the_cache(store: EventStore, tmp_path: Path) -> None:
    from eventstore.dialects.base import Snapshot
    from eventstore.ingest import Ingestor

    ing = Ingestor(store, get_dialect("generic"))
    for i in range(rp.CACHE_EVERY + 50):
        ing.ingest(Snapshot(doc={"taskId": "LONG", "i": i, "log": list(range(i % 7))}))
    full = rp.replay(store, "LONG", use_cache=False)
    first = rp.replay(store, "LONG")  # folds everything, then caches the document
    from eventstore import replay_cache

    assert replay_cache.latest(store, "LONG", "replay.generic.v1") is not None
    second = rp.replay(store, "LONG")
    assert exact(first.doc, full.doc) and exact(second.doc, full.doc)
    mid = rp.replay(store, "LONG", upto_version=10)
    assert mid.doc["i"] == 9


def test_git_history_ingest(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for i in range(3):
        write(repo / "state.json", {"taskId": "G-1", "step": i})
        subprocess.run(["git", "-C", str(repo), "add", "state.json"], check=True, env=env)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"step {i}"], check=True, env=env)
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    assert [json.loads(x)["version"] for x in r.output.splitlines()] == [1, 2, 3]
    events = [json.loads(x) for x in run("log", "G-1", "--json").output.splitlines()]
    assert all(len(e["meta"]["source"]["git"]["commit"]) == 40 for e in events)
    assert exact(json.loads(run("replay", "G-1", "--json").output), {"taskId": "G-1", "step": 2})


def test_watch_follows_atomic_and_in_place_writes(sqlite_url: str, tmp_path: Path) -> None:
    migrated(sqlite_url)
    state = write(tmp_path / "state.json", {"taskId": "W-1", "n": 0})
    with evstore_child("--url", sqlite_url, "watch", "generic", str(state), "--interval", "0.05", "--json") as child:
        lines = [child.readline()]  # the first snapshot is ingested
        tmp = tmp_path / "state.json.tmp"
        write(tmp, {"taskId": "W-1", "n": 1})
        os.replace(tmp, state)  # atomic rename
        lines.append(child.readline())
        time.sleep(0.1)  # a distinct mtime for the in-place write
        with state.open("w") as fh:  # in-place write
            fh.write(json.dumps({"taskId": "W-1", "n": 2}))
        lines.append(child.readline())
        out, err = child.interrupt()
    assert child.proc.returncode == 0, err
    assert "stopped" in err
    assert [json.loads(x)["version"] for x in lines + out] == [1, 2, 3]
    with EventStore(sqlite_url) as s:
        assert exact(rp.replay(s, "W-1").doc, {"taskId": "W-1", "n": 2})


def test_ambiguous_task_id_lists_candidates(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = write(tmp_path / "a.json", {"taskId": "T-7", "attempt": 1})
    b = write(tmp_path / "b.json", {"taskId": "T-7", "attempt": 2})
    assert run("ingest", "generic", str(a), "--stream", "T-7#1").exit_code == 0
    assert run("ingest", "generic", str(b), "--stream", "T-7#2").exit_code == 0
    r = run("replay", "T-7")
    assert r.exit_code == 1
    assert 'Task "T-7" is ambiguous; it names 2 streams' in r.stderr
    assert "T-7#1" in r.stderr and "T-7#2" in r.stderr
    assert json.loads(run("replay", "T-7#2", "--json").output)["attempt"] == 2


def test_cache_rows_of_an_older_lens_are_ignored(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.dialects.base import Snapshot
    from eventstore.ingest import Ingestor

    d = get_dialect("generic")
    ing = Ingestor(store, d)
    for i in range(rp.CACHE_EVERY + 10):
        ing.ingest(Snapshot(doc={"taskId": "LENS", "i": i}))
    rp.replay(store, "LENS")  # caches under the current lens version
    from eventstore import replay_cache

    assert replay_cache.latest(store, "LENS", "replay.generic.v1") is not None
    monkeypatch.setattr(type(d), "lens_version", 2)
    assert replay_cache.latest(store, "LENS", "replay.generic.v2") is None
    assert rp.replay(store, "LENS").doc == {"taskId": "LENS", "i": rp.CACHE_EVERY + 9}
    assert replay_cache.latest(store, "LENS", "replay.generic.v2") is not None
