"""Ingest and the CLI under hostile conditions: odd paths, oversized events, lens bugs, bad input."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import EVSTORE, evstore_child, migrated

from eventstore import config
from eventstore.cli import register
from eventstore.errors import is_disk_full
from eventstore.store import EventStore, iso

# ---------------------------------------------------------------- taskflow: relative paths


def _task_with_subtask(root: Path) -> Path:
    task = root / "t" / "tasks" / "feat-1"
    (task / "sub-a").mkdir(parents=True)
    (task / "SPEC.md").write_text("x\n")
    (task / "sub-a" / "SPEC.md").write_text("x\n")
    return task


@pytest.mark.timeout(60)  # the bug was an endless loop: fail, do not hang
def test_taskflow_ingest_of_relative_paths_finishes(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """``ingest taskflow .`` inside a task with a sub-task folder looped forever (100 % CPU)."""
    task = _task_with_subtask(tmp_path)
    spellings = [(task, "."), (task, "SPEC.md"), (task / "sub-a", ".."), (task.parent, "feat-1"), (tmp_path, str(task))]
    for i, (cwd, arg) in enumerate(spellings):
        monkeypatch.chdir(cwd)
        r: Result = run("ingest", "taskflow", arg, "--json")
        assert r.exit_code == 0, r.output
        got = [json.loads(line) for line in r.stdout.splitlines()]
        assert [g["stream"] for g in got] == ["taskflow/feat-1", "taskflow/sub-a"], arg
        # every spelling of the same folder is the same document: only the first one appends
        assert all((g["events"] > 0) == (i == 0) for g in got), (arg, got)
    r = run("replay", "taskflow/sub-a", "--json")
    assert json.loads(r.stdout)["task"] == "sub-a"


@pytest.mark.timeout(60)
def test_taskflow_watch_of_a_relative_folder(sqlite_url: str, tmp_path: Path) -> None:
    migrated(sqlite_url)
    task = _task_with_subtask(tmp_path)
    with evstore_child("--url", sqlite_url, "watch", "taskflow", ".", "--interval", "0.05", "--json",
                       cwd=task) as child:
        first = [json.loads(child.readline()) for _ in range(2)]
        (task / "sub-a" / "PLAN.md").write_text("plan\n")
        more = json.loads(child.readline())
        _, err = child.interrupt()
    assert child.proc.returncode == 0, err
    assert [f["stream"] for f in first] == ["taskflow/feat-1", "taskflow/sub-a"]
    assert more["stream"] == "taskflow/sub-a" and more["events"] > 0


# ---------------------------------------------------------------- test children


def test_children_stop_even_when_sigint_is_ignored(sqlite_url: str, tmp_path: Path) -> None:
    """pytest run as a background job inherits SIGINT ignored: the watch child must still get
    Ctrl-C, and a child nobody stopped must not outlive its test."""
    migrated(sqlite_url)
    state = tmp_path / "state.json"
    state.write_text('{"taskId": "W-2", "n": 0}')
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the shell does to a background job
    try:
        with evstore_child("--url", sqlite_url, "watch", "generic", str(state), "--json") as child:
            assert json.loads(child.readline())["version"] == 1
            _, err = child.interrupt()
        assert child.proc.returncode == 0 and "stopped" in err
        with evstore_child("--url", sqlite_url, "watch", "generic", str(state)) as left:
            pid = left.proc.pid
    finally:
        signal.signal(signal.SIGINT, previous)
    assert left.proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing of its process group is left


# ---------------------------------------------------------------- per-event limit on ingest


def log_state(url: str) -> tuple[int, list[tuple[str, str | None, int]]]:
    """(max position, every stream's id, dialect and version): equal before and after = nothing written."""
    with EventStore(url) as s:
        return s.max_position(), s.list_streams()


def clean_error(r: Result | subprocess.CompletedProcess[str], *needles: str) -> None:
    out, err = (r.stdout, r.stderr)
    code = r.exit_code if isinstance(r, Result) else r.returncode
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_ingest_enforces_the_event_size_limit(run, store_url: str, tmp_path: Path,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "MAX_EVENT_BYTES", 4096)
    small = tmp_path / "01-small.json"
    small.write_text(json.dumps({"taskId": "BIG-1", "n": 1}))
    big = tmp_path / "02-big.json"
    big.write_text(json.dumps({"taskId": "BIG-1", "n": 2, "blob": "x" * 5000}))
    before = log_state(store_url)
    # all-or-nothing: the small first file is not written either
    r = run("ingest", "generic", str(small), str(big))
    clean_error(r, str(big), 'data of "document.patched"', "exceeds the limit of 4096 bytes",
                "EVSTORE_MAX_EVENT_BYTES", "Nothing was written")
    assert log_state(store_url) == before
    r = run("ingest", "generic", str(big))  # as a first snapshot: one oversized document.observed
    clean_error(r, str(big), 'data of "document.observed"')
    assert log_state(store_url) == before
    # the same limit as `append`
    clean_error(run("append", "S", "note", "--data", json.dumps({"blob": "x" * 5000})), "exceeds the limit of 4096")
    # a typed dialect event (mapipe's task description) is held to it too
    doc = {"schemaVersion": "2.2.0", "taskId": "PROJ-9", "taskDescription": "y" * 5000, "currentPhase": 0,
           "phases": {}}
    f = tmp_path / "agent-state.json"
    f.write_text(json.dumps(doc))
    clean_error(run("ingest", "mapipe", str(f)), str(f), "exceeds the limit of 4096")
    assert log_state(store_url) == before
    assert run("ingest", "generic", str(small)).exit_code == 0  # within the limit: accepted


def test_event_size_limit_is_read_from_the_environment(store_url: str, tmp_path: Path) -> None:
    """`evstore ingest generic big.json` stored a 60 MB file as one 60 MB event."""
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"taskId": "BIG-2", "rows": ["z" * 100] * 200}))  # ~21 KB
    env = {**os.environ, "EVSTORE_MAX_EVENT_BYTES": "16384"}
    before = log_state(store_url)
    r = subprocess.run([EVSTORE, "--url", store_url, "ingest", "generic", str(big)], env=env,
                       capture_output=True, text=True, timeout=60)
    clean_error(r, f"{big}: ", "exceeds the limit of 16384 bytes")
    assert log_state(store_url) == before


# ---------------------------------------------------------------- Error:, never a traceback


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs: a real filesystem that fills up (needs root and mount permission); the store's
    schema, its WAL and one append take about 260 KiB of it."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 512 KiB tmpfs to fill ({(r.stderr or r.stdout).strip()}); needs root in a "
                    "container that allows mount")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(path: Path) -> None:
    """Take what space the disk has left (the failed appends may have taken it all)."""
    try:
        with (path / "filler").open("wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


def test_a_full_disk_is_an_error_not_a_traceback(small_disk: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{small_disk}/events.db"
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(register(), ["--url", url, *args])

    assert run("init").exit_code == 0
    assert run("append", "S", "note", "--data", "{}").exit_code == 0
    batch = tmp_path / "big.jsonl"
    batch.write_text("".join(json.dumps({"stream": f"S{i % 50}", "type": "t.x", "data": {"x": os.urandom(60).hex()}})
                             + "\n" for i in range(6000)))  # ~1 MB of events for a 512 KiB disk
    before = log_state(url)
    r = run("append", "--batch", str(batch))
    clean_error(r, "No space left on the disk holding", "events.db", "nothing of this append was written")
    assert "--url" not in r.stderr
    assert "events.db (database or disk is full); nothing" in r.stderr  # the driver's own words, not its class
    assert log_state(url) == before
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"taskId": "FULL-1", "rows": [os.urandom(40).hex() for _ in range(8000)]}))
    r = run("ingest", "generic", str(big))
    clean_error(r, "No space left", "nothing of this append was written")
    assert log_state(url) == before
    assert run("verify").exit_code == 0  # what was there before is intact
    _fill(small_disk)
    monkeypatch.chdir(small_disk)
    r = runner.invoke(register(), ["init"])  # a new store in ./.evstore on the full disk
    clean_error(r, "no space left")
    assert "--url" not in r.stderr


def test_disk_full_is_recognised_for_each_driver() -> None:
    import sqlite3

    import psycopg

    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # what sqlite3 sets (SQLITE_FULL); a real one is raised above
    assert is_disk_full(full) and is_disk_full(psycopg.errors.DiskFull("could not extend file"))
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full(psycopg.errors.UniqueViolation("duplicate key"))
    # The rest of PostgreSQL's class 53 is not disk space (files, memory, connections, limits).
    others = (psycopg.errors.InsufficientResources, psycopg.errors.OutOfMemory, psycopg.errors.TooManyConnections,
              psycopg.errors.ConfigurationLimitExceeded)
    assert [c.sqlstate for c in others] == ["53000", "53200", "53300", "53400"]
    assert not any(is_disk_full(c("no")) for c in others)


def test_db_upgrade_to_an_unknown_revision(run) -> None:  # type: ignore[no-untyped-def]
    clean_error(run("db", "upgrade", "nope"), 'Cannot upgrade the schema to "nope"', "evstore db current")


def test_times_out_of_range(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"stream": "S", "type": "t.x", "occurred_at": "9999-12-31T23:59:59-05:00"}) + "\n")
    before = log_state(store_url)
    clean_error(run("append", "--batch", str(f)), f"{f}, line 1", "out of range")
    assert log_state(store_url) == before
    assert run("append", "S", "t.x", "--data", "{}").exit_code == 0
    # A time past what datetime holds once in UTC: "Error:" naming the option, exit 1 (issue 10 item 9),
    # like --at yesterday and runs --since; nothing of the store changes.
    before = log_state(store_url)
    for args in (("replay", "S", "--at"), ("runs", "--since")):
        r = run(*args, "9999-12-31T23:59:59-05:00")
        clean_error(r, f"{args[-1]} '9999-12-31T23:59:59-05:00' is out of range: in UTC it falls outside the years "
                       "1 to 9999.")
        assert "Usage:" not in r.stderr
    assert log_state(store_url) == before
    # years before 1000 keep four digits, so stored times still sort as text
    assert iso("0999-06-01T00:00:00+01:00") == "0999-05-31T23:00:00.000000Z"
    assert iso("2025-01-02T03:04:05.5Z") == "2025-01-02T03:04:05.500000Z"


def test_nul_in_stream_ids_and_types_is_refused_on_every_backend(run, store_url: str,  # type: ignore[no-untyped-def]
                                                                  tmp_path: Path) -> None:
    f = tmp_path / "n.jsonl"
    before = log_state(store_url)
    for line in ({"stream": "a\0b", "type": "t.x"}, {"stream": "ab", "type": "t\0x"}):
        f.write_text(json.dumps({"stream": "ok", "type": "t.x"}) + "\n" + json.dumps(line) + "\n")
        clean_error(run("append", "--batch", str(f)), f"{f}, line 2", "NUL character")
        assert log_state(store_url) == before
    clean_error(run("append", "a\0b", "t.x", "--data", "{}"), "NUL character")
    doc = tmp_path / "nul.json"
    doc.write_text(json.dumps({"taskId": "T\0X", "n": 1}))
    clean_error(run("ingest", "generic", str(doc)), str(doc), "NUL character", "--stream")
    assert log_state(store_url) == before
    # NUL or an over-long field inside a document is data: stored, and the runs index copes
    doc.write_text(json.dumps({"taskId": "T-NUL", "status": "a\0b", "title": "t" * 3000}))
    assert run("ingest", "generic", str(doc)).exit_code == 0
    assert json.loads(run("replay", "T-NUL", "--json").stdout)["status"] == "a\0b"
    clean_error(run("replay", "a\0b"), "NUL character")


def test_stream_ids_that_are_not_utf8_on_the_command_line(store_url: str) -> None:
    """argv bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape)."""
    for args in ([b"append", b"S\xff", b"t.x", b"--data", b"{}"], [b"replay", b"S\xff"], [b"log", b"\xfe"],
                 [b"append", b"S", b"t\xff", b"--data", b"{}"]):
        r = subprocess.run([EVSTORE.encode(), b"--url", store_url.encode(), *args], capture_output=True, text=True,
                           timeout=60, errors="backslashreplace")
        clean_error(r, "is not valid UTF-8 text")


# ---------------------------------------------------------------- lens failures are visible


def _simulated_files(dialect: str, folder: Path, n: int = 6) -> list[Path]:
    import random
    from datetime import UTC, datetime

    from eventstore.dialects import get_dialect

    snaps = list(get_dialect(dialect).simulate(random.Random(7), run_id="LENS-1", start=datetime(2026, 1, 5, tzinfo=UTC)))
    folder.mkdir()
    files = []
    for i, snap in enumerate(snaps[:n]):
        f = folder / f"{i:03d}.json"
        f.write_text(json.dumps(snap.doc, indent=2))
        files.append(f)
    return files


def test_a_failing_lens_is_recorded_counted_and_strict_refuses_it(run, store_url: str, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A dialect whose apply raised was silently ingested as document.patched."""
    from eventstore.dialects.mapipe import MapipeDialect

    files = _simulated_files("mapipe", tmp_path / "snaps")

    def broken(self, doc, event):  # type: ignore[no-untyped-def]
        raise RuntimeError("apply is broken")

    monkeypatch.setattr(MapipeDialect, "apply", broken)
    before = log_state(store_url)
    r = run("ingest", "mapipe", "--strict", *map(str, files))
    clean_error(r, str(files[1]), "the mapipe lens failed", "RuntimeError: apply is broken", "Nothing was written")
    assert "(without --strict the snapshot is recorded as an exact document event with a lens-failed finding)" \
        in r.stderr
    assert log_state(store_url) == before

    r = run("ingest", "mapipe", *map(str, files), "--json")
    assert r.exit_code == 0, r.output
    results = [json.loads(line) for line in r.stdout.splitlines()]
    failed = [x["lens_failures"] for x in results]
    assert failed[0] == 0 and all(f == 1 for f in failed[1:]), results  # the first snapshot is observed whole
    assert f"the mapipe lens failed on {len(files) - 1} snapshot(s)" in r.stderr
    r = run("ingest", "mapipe", str(files[-1]))  # recorded already: nothing to observe, no failure
    assert r.exit_code == 0 and "(already recorded)" in r.stdout and "lens" not in r.stderr
    stream = results[0]["stream"]
    events = [json.loads(line) for line in run("log", stream, "--json").stdout.splitlines()]
    closing = [e for e in events if "source" in e["meta"]]
    codes = [[f["code"] for f in e["meta"].get("findings", [])] for e in closing]
    assert ["lens-failed" in c for c in codes] == [False] + [True] * (len(files) - 1)
    lens = next(f for f in closing[1]["meta"]["findings"] if f["code"] == "lens-failed")
    assert lens["severity"] == "error" and "apply is broken" in lens["message"]
    assert {e["type"] for e in events} == {"document.observed", "document.patched"}
    assert "lens-failed" in run("log", stream).stdout
    monkeypatch.undo()  # the recorded history replays exactly with the real lens
    assert json.loads(run("replay", stream, "--json").stdout) == json.loads(files[-1].read_text())
    assert run("replay", stream, "--raw").stdout_bytes == files[-1].read_bytes()


def test_a_lens_that_breaks_its_law_is_a_failure_too(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """derive raising, or observed events that rebuild another document, are lens failures."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Dialect, DocumentPatched, Snapshot
    from eventstore.ingest import Ingestor
    from projections import replay as rp

    ing = Ingestor(store, get_dialect("generic"))
    assert ing.ingest(Snapshot(doc={"taskId": "LAW-1", "n": 0})).lens_failures == 0
    wrong = [DocumentPatched(ops=[{"op": "replace", "path": "/n", "value": -1}])]
    monkeypatch.setattr(Dialect, "observe", lambda self, prev, nxt: wrong)
    r = ing.ingest(Snapshot(doc={"taskId": "LAW-1", "n": 1}))
    assert r.lens_failures == 1 and r.findings[0].code == "lens-failed" and "do not rebuild it" in r.findings[0].message
    [finding] = r.findings
    assert (finding.path, finding.severity) == ("", "error")
    assert finding.message.startswith("the generic lens failed (") and finding.message.endswith(
        "); recorded as an exact document.patched instead of domain events (a dialect bug: please report it)")
    # the exact event is the smallest patch from the document before, not the whole document again
    assert list(store.read_stream("LAW-1"))[-1].payload["ops"] == [{"op": "replace", "path": "/n", "value": 1}]
    monkeypatch.undo()

    def derive(self, prev, nxt):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("x" * 600)

    monkeypatch.setattr(Dialect, "derive", derive)
    r = ing.ingest(Snapshot(doc={"taskId": "LAW-1", "n": 2}))
    assert r.lens_failures == 1 and "ZeroDivisionError" in r.findings[0].message
    reason = "ZeroDivisionError: " + "x" * 600
    assert f"({reason[:500]}); " in r.findings[0].message  # the reason cut to 500 characters
    monkeypatch.undo()
    assert ing.ingest(Snapshot(doc={"taskId": "LAW-1", "n": 3})).lens_failures == 0
    assert [rp.replay(store, "LAW-1", upto_version=v).doc["n"] for v in (1, 2, 3, 4)] == [0, 1, 2, 3]


def test_what_an_ingested_version_records_of_itself(store: EventStore, tmp_path: Path) -> None:
    """meta.snapshot names the bytes (SHA-256, size) and, when a known layout reproduces them, the
    layout instead of the bytes; every event carries its dialect (mutation testing: each survived)."""
    import hashlib

    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.ingest import Ingestor

    doc = {"taskId": "SNAP-1", "n": 1, "text": "é"}
    pretty = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    odd = b'{"taskId":"SNAP-1",  "n": 2,"text":"\\u00e9"}'  # no layout writes this
    ing = Ingestor(store, get_dialect("generic"))
    ing.ingest(Snapshot(doc=doc, raw=pretty, source={"file": "a.json"}))
    ing.ingest(Snapshot(doc={**doc, "n": 2}, raw=odd, source={"file": "b.json"}))
    first, second = (e.metadata["snapshot"] for e in store.read_stream("SNAP-1"))
    assert first == {"sha256": hashlib.sha256(pretty).hexdigest(), "bytes": len(pretty),
                     "format": {"renderer": "msgspec", "indent": 2, "newline": "\n"}}
    assert set(second) == {"sha256", "bytes", "raw_zlib_b64"} and second["bytes"] == len(odd)
    assert {e.metadata["dialect"] for e in store.read_stream("SNAP-1")} == {"generic"}


def test_a_keyed_observation_retried_later_is_no_second_version(store: EventStore) -> None:
    """``key`` (a hook call) names a snapshot's events: retried after the stream moved on, it is a
    DuplicateEventId (recorded already), not a third version (mutation testing: unkeyed ids survived)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.errors import DuplicateEventId
    from eventstore.ingest import Ingestor, keyed_event_id

    ing = Ingestor(store, get_dialect("generic"))
    ing.ingest(Snapshot(doc={"taskId": "K-1", "n": 1}), key="call-1")
    ing.ingest(Snapshot(doc={"taskId": "K-1", "n": 2}), key="call-2")
    [first, second] = store.read_stream("K-1")
    assert (first.event_id, second.event_id) == (keyed_event_id("call-1", 0), keyed_event_id("call-2", 0))
    with pytest.raises(DuplicateEventId):
        Ingestor(store, get_dialect("generic")).ingest(Snapshot(doc={"taskId": "K-1", "n": 1}), key="call-1")
    assert store.stream_version("K-1") == 2


def test_a_lens_failing_on_the_first_version_records_the_whole_document(store: EventStore,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Dialect, Snapshot
    from eventstore.ingest import Ingestor
    from projections import replay as rp

    def broken(self, prev, nxt):  # type: ignore[no-untyped-def]
        raise RuntimeError("derive is broken")

    monkeypatch.setattr(Dialect, "observe_folded", broken)
    doc = {"taskId": "LENS-0", "items": [1, 2.0, {"k": None}]}
    r = Ingestor(store, get_dialect("generic")).ingest(Snapshot(doc=doc))
    assert r.lens_failures == 1 and r.findings[0].code == "lens-failed"
    [e] = store.read_stream("LENS-0")
    assert e.type == "document.observed" and e.payload["doc"] == doc
    monkeypatch.undo()
    assert rp.replay(store, "LENS-0").doc == doc


def test_a_snapshots_own_events_are_folded_before_its_document_is_derived(store: EventStore) -> None:
    """A loader may read events with a document (envelope: a repair with its envelope). Ingest folds
    them first and derives the document's events from the result, so replay folds to the document
    (mutation testing: deriving from the document before them survived, envelope's events being
    neutral to the document)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import DocumentPatched, Snapshot
    from eventstore.ingest import Ingestor
    from projections import replay as rp

    ing = Ingestor(store, get_dialect("generic"))
    ing.ingest(Snapshot(doc={"taskId": "OWN-1", "n": 1}))
    read_with_it = DocumentPatched(ops=[{"op": "add", "path": "/loader", "value": True}])
    ing.ingest(Snapshot(doc={"taskId": "OWN-1", "n": 2}, events=[read_with_it]))
    assert rp.replay(store, "OWN-1").doc == {"taskId": "OWN-1", "n": 2}
    assert [e.type for e in store.read_stream("OWN-1")] == ["document.observed", "document.patched",
                                                           "document.patched"]


def test_an_unreadable_version_written_twice_is_recorded_once(store: EventStore) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot, Unreadable
    from eventstore.ingest import Ingestor

    ing = Ingestor(store, get_dialect("generic"), stream="TWICE")
    ing.ingest(Snapshot(doc={"n": 1}, raw=b'{"n": 1}', source={"file": "a.json"}))

    def broken(where: dict[str, str]) -> Snapshot:
        return Snapshot(doc=None, raw=b'{"n":', source=where, unreadable=Unreadable("json", "not JSON", 1, 6))

    first = ing.ingest(broken({"dir": "/tasks/t-1"}))  # a folder source names itself by its dir
    again = ing.ingest(broken({"file": "b.json"}))
    assert (first.file, first.stream, first.version, first.events) == ("/tasks/t-1", "TWICE", 2, 1)
    assert (again.file, again.stream, again.version, again.events) == ("b.json", "TWICE", 2, 0)
    assert store.stream_version("TWICE") == 2


def test_a_snapshots_own_events_that_do_not_fold_are_refused(store: EventStore) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import DocumentPatched, Snapshot
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor

    ing = Ingestor(store, get_dialect("generic"))
    ing.ingest(Snapshot(doc={"taskId": "OWN-2", "n": 1}))
    bad = DocumentPatched(ops=[{"op": "remove", "path": "/nothing"}])
    with pytest.raises(IngestError) as exc:
        ing.ingest(Snapshot(doc={"taskId": "OWN-2", "n": 2}, events=[bad], source={"file": "x.json"}))
    assert str(exc.value) == ("x.json: the generic events read with this snapshot do not fold (InvalidEvent: JSON "
                              "Patch operation 0 (remove '/nothing') does not apply: KeyError('nothing')). Nothing "
                              "was written.")
    assert store.stream_version("OWN-2") == 1
    # from no file (a doc-less turn, say), the error names the stream (mutation testing: "None" and
    # "snapshot" in its place survived)
    with pytest.raises(IngestError) as exc:
        ing.ingest(Snapshot(doc=None, events=[bad], stream_hint="OWN-2", source={}))
    assert str(exc.value).startswith("OWN-2: the generic events read with this snapshot do not fold (InvalidEvent: ")
    assert store.stream_version("OWN-2") == 1


def test_a_lens_failing_without_a_message_is_named_by_its_class(store: EventStore,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Dialect, Snapshot
    from eventstore.ingest import Ingestor

    def broken(self, prev, nxt):  # type: ignore[no-untyped-def]
        raise KeyError  # no message at all

    ing = Ingestor(store, get_dialect("generic"))
    ing.ingest(Snapshot(doc={"taskId": "QUIET-1", "n": 1}))
    monkeypatch.setattr(Dialect, "observe_folded", broken)
    r = ing.ingest(Snapshot(doc={"taskId": "QUIET-1", "n": 2}))
    assert r.findings[0].message.startswith("the generic lens failed (KeyError); recorded as an exact")


def test_an_oversized_event_of_a_snapshot_without_a_file_is_named_by_its_stream(store: EventStore,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor

    monkeypatch.setattr(config, "MAX_EVENT_BYTES", 1000)
    with pytest.raises(IngestError) as exc:
        Ingestor(store, get_dialect("generic")).ingest(Snapshot(doc={"taskId": "BIG-1", "text": "x" * 2000}))
    assert str(exc.value).startswith('BIG-1: data of "document.observed": ')
    assert str(exc.value).endswith(" Nothing was written.") and store.stream_version("BIG-1") == 0


@pytest.mark.parametrize("one_by_one", [True, False], ids=["ingest", "ingest_all"])
def test_an_ingestor_whose_stream_moved_on_under_it_appends_nothing(store: EventStore, one_by_one: bool) -> None:
    """``Ingestor.ingest`` (and ``ingest_all``) derives a snapshot's events against the document it last saw and appends them
    at that version: when another writer moved the stream on meanwhile (a second `watch`, a hook), the
    append is refused, not laid on top as a diff against a stale document (mutation testing: appending
    without the expected version survived every test, on either path)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.errors import ConcurrencyError
    from eventstore.ingest import Ingestor

    mapipe = get_dialect("mapipe")

    def snap(status: str) -> Snapshot:
        return Snapshot(doc={"schemaVersion": 1, "taskId": "RACE-1", "status": status}, raw=None, source={})

    first, second = Ingestor(store, mapipe), Ingestor(store, mapipe)
    first.ingest(snap("planning"))
    second.ingest(snap("implementing"))  # reads the stream (version 1) and moves it on
    before = store.stream_version("RACE-1")
    with pytest.raises(ConcurrencyError):  # ``first`` still holds version 1's document
        first.ingest(snap("done")) if one_by_one else first.ingest_all([snap("review"), snap("done")])
    assert store.stream_version("RACE-1") == before
    assert Ingestor(store, mapipe).ingest(snap("done")).version > before  # a fresh reader goes on from there


def test_meta_over_the_size_limit_is_refused_naming_the_stream(store: EventStore,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A version whose meta (its source, its findings, its bytes) is over the event size limit is refused
    with the file, or when it came from no file the stream, named; nothing is written (mutation testing:
    the message and its place survived every test)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor

    monkeypatch.setattr(config, "MAX_EVENT_BYTES", 4096)
    doc = {"schemaVersion": 1, "taskId": "META-1", "status": "planning"}
    with pytest.raises(IngestError) as err:
        Ingestor(store, get_dialect("mapipe")).ingest(Snapshot(doc=doc, raw=None, source={"origin": "y" * 8000}))
    assert str(err.value).startswith("META-1: ") and str(err.value).endswith(" Nothing was written.")
    assert "exceeds the limit of 4096 bytes" in str(err.value)
    assert store.stream_version("META-1") == 0


def test_results_name_their_folder_and_events_their_dialect(store: EventStore) -> None:
    """What each ingest says and keeps, field by field (mutation testing: each survived every test): a
    result names the file, or for a folder-per-task dialect the folder; every event's meta names its
    dialect; a doc-less turn keeps no snapshot record of bytes it did not read as a document."""
    import random
    from datetime import UTC, datetime

    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.dialects.envelope.parse import LoadContext, load_turn
    from eventstore.ingest import Ingestor

    taskflow = get_dialect("taskflow")
    first = next(iter(taskflow.simulate(random.Random(3), run_id="t-1", start=datetime(2026, 1, 5, tzinfo=UTC))))
    assert first.doc is not None
    r = Ingestor(store, taskflow).ingest(Snapshot(doc=first.doc, raw=None, source={"dir": "/work/tasks/t-1"}))
    assert r.file == "/work/tasks/t-1" and r.events >= 1
    for e in store.read_stream(r.stream):
        assert e.metadata["dialect"] == "taskflow", (e.type, e.metadata)

    turn = load_turn(Path("/t/turn-002.md"), b"## Assistant\nno envelope\n", LoadContext(stream="U-1"))
    assert turn.doc is None and turn.events
    Ingestor(store, get_dialect("envelope")).ingest(turn)
    [rejected] = store.read_stream("U-1")
    assert rejected.type == "envelope.turn_rejected" and "snapshot" not in rejected.metadata

    mapipe = Ingestor(store, get_dialect("mapipe"))
    mapipe.ingest(Snapshot(doc={"schemaVersion": 1, "taskId": "W-1", "status": "planning"}, raw=None, source={}))
    r = mapipe.ingest(Snapshot(doc={"schemaVersion": 1, "taskId": "W-1", "status": "implementing", "title": "T",
                                    "project": "p"}, raw=None, source={}))
    assert r.events > 1
    for e in store.read_stream("W-1", after_version=r.version - r.events):
        assert e.metadata["dialect"] == "mapipe", (e.type, e.metadata)


def test_refusals_name_the_snapshot_and_count_the_other_broken_files(store: EventStore, tmp_path: Path) -> None:
    """A snapshot from no file is called "snapshot" in an error; a history of broken files only names the
    first and counts the others (mutation testing: both survived every test)."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.errors import IngestError
    from eventstore.ingest import Ingestor, ingest

    with pytest.raises(IngestError) as err:
        Ingestor(store, get_dialect("mapipe")).ingest(Snapshot(doc={"schemaVersion": 1, "status": "x"}, source={}))
    assert str(err.value).startswith("snapshot: not a mapipe document: required field(s) \"taskId\" missing")
    for n in (2, 3):
        folder = tmp_path / f"broken-{n}"
        folder.mkdir()
        for i in range(n):
            (folder / f"{i}.json").write_text('{"taskId": ')
        with pytest.raises(IngestError) as err:
            ingest(store, get_dialect("mapipe"), [folder])
        assert f" (and {n - 1} more unreadable file(s)) No readable version to start a stream from" in str(err.value)
