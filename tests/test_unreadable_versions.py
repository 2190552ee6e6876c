"""Unreadable versions are observations: ingest records them as document.unreadable with their
exact bytes and the error (line, column); the document stays the last valid one; --strict refuses."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Child, evstore_child, migrated

from eventstore.store import EventStore
from projections import replay as rp
from projections.analytics.files import replacing

DATA = Path(__file__).parent / "data" / "real"


def test_ralph_status_043_is_recorded_as_unreadable(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """codeharness-ralph-status 043 is `{not valid json!!!` as committed: it is version 43 of the
    stream, its bytes come back with --raw, --json gives version 42's document and says so, log and
    --check show the finding, and version 44 is diffed against 42."""
    src = DATA / "codeharness-ralph-status"
    files = sorted(src.iterdir())
    bad = files[42]
    assert bad.name.startswith("043-") and bad.read_bytes().startswith(b"{not valid json!!!")
    r = run("ingest", "generic", str(src), "--stream", "ralph", "--json")
    assert r.exit_code == 0, r.output
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["version"] for x in results] == list(range(1, len(files) + 1))
    assert "not valid JSON at line 1, column 2" in results[42]["unreadable"]

    assert run("replay", "ralph", "--upto", "43", "--raw").stdout_bytes == bad.read_bytes()
    shown = run("replay", "ralph", "--upto", "43", "--json")
    assert shown.exit_code == 0
    assert json.loads(shown.stdout) == json.loads(files[41].read_bytes())
    assert "version 43: unreadable" in shown.stderr and "last valid one (version 42)" in shown.stderr
    assert "unreadable" not in run("replay", "ralph", "--upto", "44", "--json").stderr

    log = run("log", "ralph").stdout.splitlines()
    at = next(i for i, line in enumerate(log) if line.lstrip().startswith("43 "))
    assert "document.unreadable" in log[at] and "line 1, column 2" in log[at]
    # the lines under event 43 (its finding, its source), up to the next event's line
    end = next((i for i in range(at + 1, len(log)) if log[i].lstrip()[:1].isdigit()), len(log))
    under = "\n".join(log[at + 1:end])
    assert "[unreadable-json]" in under and bad.name in under
    [rec] = [json.loads(x) for x in run("log", "ralph", "--json", "--after", "42").stdout.splitlines()[:1]]
    assert rec["data"]["line"] == 1 and rec["data"]["column"] == 2 and rec["data"]["reason"] == "json"
    assert rec["meta"]["source"]["file"] == str(bad)

    check = run("replay", "ralph", "--upto", "43", "--check")
    assert check.exit_code == 1 and "version 43: [unreadable-json]" in check.stdout
    patch = json.loads(run("replay", "ralph", "--diff", "42", "44", "--json").stdout)
    v44 = json.loads(run("log", "ralph", "--json", "--after", "43").stdout.splitlines()[0])
    assert v44["type"] == "document.patched" and v44["data"]["ops"] == patch  # diffed against the last valid one


def test_strict_refuses_sprint_state_whole(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = DATA / "codeharness-sprint-state"
    r = run("ingest", "generic", str(src), "--stream", "sprint", "--strict")
    assert r.exit_code == 1
    assert "098-" in r.stderr and "not valid JSON at line 603, column 3" in r.stderr and "--strict" in r.stderr
    assert run("log", "sprint").exit_code == 1  # nothing written


def test_not_utf8_and_wrong_dialect_versions(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "hist"
    d.mkdir()
    good = {"status": "running", "last_updated": "2026-01-01T00:00:00Z", "next_action": "wait", "n": 1}
    (d / "1.json").write_text(json.dumps(good))
    (d / "2.json").write_bytes(b'{"status": "running",\n "who": "caf\xe9"}')
    (d / "3.json").write_text(json.dumps({"unrelated": True}))  # JSON, but no friday document
    (d / "4.json").write_text(json.dumps({**good, "n": 2}))
    r = run("ingest", "friday", str(d), "--stream", "F", "--json")
    assert r.exit_code == 0, r.output
    res = [json.loads(line) for line in r.stdout.splitlines()]
    assert "not valid UTF-8 at byte 34 (line 2, column 13)" in res[1]["unreadable"]
    assert 'not a friday document: required field(s) "status", "next_action" missing' in res[2]["unreadable"]
    for v, f in ((2, "2.json"), (3, "3.json"), (4, "4.json")):
        assert run("replay", "F", "--upto", str(v), "--raw").stdout_bytes == (d / f).read_bytes()
    assert json.loads(run("replay", "F", "--upto", "3", "--json").stdout) == good
    codes = [json.loads(x)["meta"].get("findings", [{}])[0].get("code")
             for x in run("log", "F", "--json").stdout.splitlines()]
    assert "unreadable-utf-8" in codes and "unreadable-dialect" in codes
    # a version recorded before is not recorded again (capture-once: 3.json with these bytes is version 3);
    # the same unreadable bytes from another file are a new version (the stream is at 4.json's), once
    again = run("ingest", "friday", str(d / "3.json"), "--stream", "F", "--json")
    assert json.loads(again.stdout) | {"source_id": None} == {
        "file": str(d / "3.json"), "stream": "F", "version": 3, "events": 0, "lens_failures": 0, "status": "recorded",
        "source_id": None}
    (d / "5.json").write_bytes((d / "3.json").read_bytes())
    assert json.loads(run("ingest", "friday", str(d / "5.json"), "--stream", "F", "--json").stdout)["events"] == 1
    again = run("ingest", "friday", str(d / "5.json"), "--stream", "F", "--json")
    assert json.loads(again.stdout)["events"] == 0 and json.loads(again.stdout)["status"] == "recorded"
    (d / "6.json").write_bytes((d / "3.json").read_bytes())  # the bytes the stream is at, from a new place
    again = run("ingest", "friday", str(d / "6.json"), "--stream", "F", "--json")
    assert json.loads(again.stdout)["events"] == 0 and json.loads(again.stdout)["status"] == "unchanged"


@contextmanager
def _watching(sqlite_url: str, state: Path, first: dict[str, Any]) -> Iterator[tuple[Child, list[str]]]:
    """``evstore watch`` (every 0.05 s) of ``state``, first written as ``first``; the child and its first
    line (that version ingested)."""
    migrated(sqlite_url)
    state.write_text(json.dumps(first))
    with evstore_child("--url", sqlite_url, "watch", "generic", str(state), "--interval", "0.05", "--json") as child:
        yield child, [child.readline()]


def test_watch_records_a_write_that_stays_unreadable(sqlite_url: str, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with _watching(sqlite_url, state, {"taskId": "W-U", "n": 0}) as (child, lines):
        time.sleep(0.05)
        with replacing(state) as tmp:  # a broken write that stays (atomic: no empty file in between)
            tmp.write_text('{"taskId": "W-U", "n": ')
        lines.append(child.readline())
        time.sleep(0.05)
        with replacing(state) as tmp:
            tmp.write_text(json.dumps({"taskId": "W-U", "n": 2}))
        lines.append(child.readline())
        _, err = child.interrupt()
    res = [json.loads(x) for x in lines]
    assert [x["version"] for x in res] == [1, 2, 3], err
    assert "not valid JSON at line 1, column 24" in res[1]["unreadable"]
    with EventStore(sqlite_url) as s:
        assert rp.replay_raw(s, "W-U", 2) == b'{"taskId": "W-U", "n": '
        assert rp.replay(s, "W-U", upto_version=2).doc == {"taskId": "W-U", "n": 0}
        assert rp.replay(s, "W-U").doc == {"taskId": "W-U", "n": 2}


def test_watch_waits_out_an_in_place_write_caught_half_way(sqlite_url: str, tmp_path: Path) -> None:
    """A writer that truncates and is descheduled before it writes leaves an empty file for several
    ticks: the watcher waits for it to stay quiet (UNREADABLE_QUIET_S) before calling it unreadable."""
    state = tmp_path / "state.json"
    with _watching(sqlite_url, state, {"taskId": "W-H", "n": 0}) as (child, lines):
        time.sleep(0.05)
        with state.open("w") as fh:  # truncated: empty for four ticks, then written
            time.sleep(4 * 0.05)
            fh.write(json.dumps({"taskId": "W-H", "n": 1}))
        lines.append(child.readline())
        out, err = child.interrupt()
    res = [json.loads(x) for x in lines + out]
    assert [(x["version"], "unreadable" in x) for x in res] == [(1, False), (2, False)], err
    with EventStore(sqlite_url) as s:
        assert rp.replay(s, "W-H").doc == {"taskId": "W-H", "n": 1}


def test_append_batch_stays_all_or_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"stream": "B", "type": "x.y", "data": {"a": 1}}\n{"stream": "B", "type": "x.y", "data": {,}}\n')
    r = run("append", "--batch", str(batch))
    assert r.exit_code == 1 and "line 2" in r.stderr
    assert run("log", "B").exit_code == 1


def test_folder_of_only_foreign_files_is_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "foreign"
    d.mkdir()
    for i in range(3):
        (d / f"{i}.json").write_text(json.dumps({"something": i}))
    shutil.copy(d / "0.json", d / "10.json")
    os.utime(d / "10.json")
    r = run("ingest", "mapipe", str(d))
    assert r.exit_code == 1
    assert "not a mapipe document" in r.stderr and "No readable version" in r.stderr and "3 more" in r.stderr


def test_runs_counts_the_findings_of_versions_that_could_not_be_read(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 12 leftover: `evstore runs` showed 0 findings for a run whose only versions were
    unreadable (turns whose JSON could not be read, recorded as envelope.turn_rejected with no
    finding).  Each is now a finding of its version, counted like an unreadable state file's: the
    runs index shows the latest version's findings."""
    turns = tmp_path / "turns"
    turns.mkdir()
    (turns / "turn-1.md").write_text('---\nrun: R-1\nturn: 1\n---\nThe envelope:\n```json\n{"state": "x",, }\n```\n')
    (turns / "turn-2.md").write_text("---\nrun: R-1\nturn: 2\n---\nno block at all\n")
    r = run("ingest", "envelope", str(turns))
    assert r.exit_code == 0, r.output
    row = [json.loads(line) for line in run("runs", "--json").stdout.splitlines()][0]
    assert (row["stream_id"], row["events"], row["findings"]) == ("R-1", 2, 1)
    events = [json.loads(x) for x in run("log", "R-1", "--json").stdout.splitlines()]
    assert [e["type"] for e in events] == ["envelope.turn_rejected"] * 2
    found = [e["meta"]["findings"] for e in events]
    assert [[(f["code"], f["severity"]) for f in fs] for fs in found] == [[("turn-invalid-json", "error")],
                                                                           [("turn-no-json-block", "error")]]
    assert found[0][0]["message"].startswith(f"{turns / 'turn-1.md'}: turn 1 rejected: invalid JSON")
    assert "[turn-no-json-block]" in run("log", "R-1").stdout

    # A state file whose only versions in this run are unreadable: the latest one's finding counts.
    good, bad = tmp_path / "v1.json", tmp_path / "v2.json"
    good.write_text('{"taskId": "S-1"}')
    bad.write_text('{"taskId": "S-1",')
    assert run("ingest", "generic", str(good)).exit_code == 0
    assert [json.loads(line) for line in run("runs", "--json").stdout.splitlines()][0]["findings"] == 0
    assert run("ingest", "generic", "--stream", "S-1", str(bad)).exit_code == 0
    row = next(x for x in [json.loads(line) for line in run("runs", "--json").stdout.splitlines()] if x["stream_id"] == "S-1")
    assert (row["events"], row["findings"]) == (2, 1)


def test_removals_and_unreadable_versions_record_exactly_this(store: EventStore,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each result, event, meta and id of a removal and of an unreadable version, written out
    (mutation testing: the results' fields, the meta's keys, the keyed ids, the finding and the
    compressed bytes' level each survived the end-to-end tests)."""
    import base64
    import zlib

    from eventstore import chain
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Finding, Snapshot, Unreadable
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor, IngestResult, keyed_event_id

    ing = Ingestor(store, get_dialect("generic"), stream="R")
    src = {"file": "s.json"}

    def removal() -> Snapshot:
        return Snapshot(doc=None, raw=None, source=dict(src), removed=True)

    assert ing.ingest(removal()) == IngestResult("s.json", "R", 0, 0)  # nothing recorded: nothing removed
    ing.ingest(Snapshot(doc={"n": 1}, raw=b'{"n": 1}', source=dict(src)))
    raw = b'{"n":'
    why = Unreadable("json", "s.json: not valid JSON at line 1, column 6", 1, 6)
    finding = Finding("", "unreadable-json", why.error, "error")
    got = ing.ingest(Snapshot(doc=None, raw=raw, source=dict(src), unreadable=why), key="k2")
    assert got == IngestResult("s.json", "R", 2, 1, [finding], unreadable=why.error)
    assert ing.ingest(removal(), key="k1") == IngestResult("s.json", "R", 3, 1, removed=True)
    assert ing.ingest(removal()) == IngestResult("s.json", "R", 3, 0)  # removed already
    unreadable, removed = list(store.read_stream("R"))[1:]
    assert (removed.type, removed.event_id, removed.metadata) == (
        "document.removed", keyed_event_id("k1", 0), {"dialect": "generic", "source": src})
    sha = chain.digest(raw).hex()
    assert (unreadable.type, unreadable.event_id, unreadable.metadata) == ("document.unreadable", keyed_event_id("k2", 0), {
        "dialect": "generic", "source": src, "snapshot": {"sha256": sha, "bytes": 5, "unreadable": True},
        "findings": [finding.to_dict()]})
    other = Ingestor(store, get_dialect("generic"), stream="R2")
    other.ingest(Snapshot(doc={"n": 1}, raw=b'{"n": 1}', source={}))
    monkeypatch.setattr("eventstore.config.MAX_EVENT_BYTES", 256)  # an unreadable version too big to keep
    with pytest.raises(IngestError) as info:  # named by its stream when its source names no file
        other.ingest(Snapshot(doc=None, raw=os.urandom(400), source={}, unreadable=why))
    assert str(info.value).startswith("R2: ")
    monkeypatch.undo()
    assert unreadable.payload == {
        "type": "document.unreadable", "reason": "json", "error": why.error, "line": 1, "column": 6, "size": 5,
        "sha256": sha, "content_zlib_b64": base64.b64encode(zlib.compress(raw, 9)).decode()}


def test_an_unreadable_version_leaves_the_runs_status_as_it_was(store_url: str) -> None:
    """The runs index, kept inline, keeps the status the last readable version gave (an unreadable
    version moves no document) and counts the unreadable version's finding."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot, Unreadable
    from eventstore.ingest import Ingestor
    from projections.runs import IndexedEventStore, list_runs

    with IndexedEventStore(store_url) as store:
        ing = Ingestor(store, get_dialect("generic"), stream="G")
        ing.ingest(Snapshot(doc={"taskId": "G", "status": "running"}, raw=b"{}", source={"file": "g.json"}))
        ing.ingest(Snapshot(doc=None, raw=b'{"n":', source={"file": "g.json"},
                            unreadable=Unreadable("json", "g.json: not valid JSON", 1, 6)))
        [row] = list_runs(store)
    assert (row.task_id, row.status, row.events, row.findings) == ("G", "running", 2, 1)


def test_a_broken_version_joins_a_stream_by_file_name_only_where_the_dialect_says_so(store: EventStore) -> None:
    """mapipe does not name streams by source file (generic does): a new loader refuses a broken
    version with nothing else to go by, even where a stream of its file's name exists (mutation
    testing: taking the file's name for every dialect survived)."""
    import random
    from datetime import UTC, datetime

    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot, Unreadable
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor

    mapipe = get_dialect("mapipe")
    assert not mapipe.streams_by_source and get_dialect("generic").streams_by_source
    first = next(iter(mapipe.simulate(random.Random(1), run_id="M-1", start=datetime(2026, 1, 1, tzinfo=UTC))))
    Ingestor(store, mapipe, stream="agent-state.json").ingest(first)
    broken = Snapshot(doc=None, raw=b'{"n":', source={"file": "agent-state.json"}, source_stream="agent-state.json",
                      unreadable=Unreadable("json", "agent-state.json: not valid JSON", 1, 6))
    with pytest.raises(IngestError) as info:
        Ingestor(store, mapipe).ingest(broken)
    assert str(info.value) == ("agent-state.json: not valid JSON No readable version to start a stream from; nothing "
                               "was written.")
    assert store.stream_version("agent-state.json") == 1


def test_versions_without_a_document_join_the_stream_around_them(store: EventStore) -> None:
    """A broken or removed version that names no stream joins the stream of the version before it; the
    first ones, of the version after them; a readable version keeps its own (mutation testing: each
    pass of the placing survived the end-to-end tests)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot, Unreadable
    from eventstore.ingest import Ingestor

    def broken() -> Snapshot:
        return Snapshot(doc=None, raw=b"{", source={"file": "x.json"}, unreadable=Unreadable("json", "x.json: bad", 1, 2))

    snaps = [broken(), broken(), Snapshot(doc={"taskId": "A"}), broken(),
             Snapshot(doc=None, source={"file": "x.json"}, removed=True), Snapshot(doc={"taskId": "B"}), broken(),
             Snapshot(doc={"n": 1})]  # readable, naming no stream: not placed (its own rules name it)
    Ingestor(store, get_dialect("generic"))._place_docless(snaps)
    assert [s.stream_hint for s in snaps] == ["A", "A", None, "A", "A", None, "B", None]


def test_a_broken_version_ingested_on_its_own_joins_the_stream_written_last(store: EventStore) -> None:
    """A broken version that names no stream, ingested on its own after a readable one (as ``watch``
    does), joins the stream that Ingestor wrote last (mutation testing: forgetting it survived)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot, read_snapshot
    from eventstore.ingest import Ingestor

    mapipe = Ingestor(store, get_dialect("mapipe"))
    mapipe.ingest(Snapshot(doc={"schemaVersion": 1, "taskId": "W-1", "status": "planning"}, raw=None, source={}))
    broken = read_snapshot(b'{"taskId": ', "agent-state.json", {"file": "agent-state.json"})
    assert broken.unreadable is not None
    assert mapipe.ingest(broken).stream == "W-1"
