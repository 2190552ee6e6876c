"""Retention, legal hold and erasure that keep every proof valid (issue 38; eventstore/erasure.py).

Real Claude Code transcripts (tests/claude_fixtures.py) are ingested, a checkpoint is signed, a
session is erased and a retention policy applied while a held session stays; then verify, an
inclusion proof against the earlier checkpoint and consistency to a new one pass, and the bytes of
the database files (SQLite file and WAL; PostgreSQL's relation files after a CHECKPOINT) and the
analytics Parquet hold none of the erased strings.  SIGKILL in the middle leaves a store that
verifies and a command that finishes when run again.  Both backends.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import exec_sql, migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.config import sqlite_file
from eventstore.erasure import ADMIN_STREAM
from eventstore.store import EventStore, NewEvent
from tests.claude_fixtures import SESSION, records

KEPT, PURGED = "11111111-2222-4333-8444-555555555555", "22222222-3333-4444-8555-666666666666"
#: Strings only the erased session holds (and the image of its blob).
ERASED_TEXT = ["Look at the test first.", "Reading the test.", "Ünïcödé"]
PURGED_TEXT = ["PURGE-THOUGHT-1f4e", "PURGE-READING-77ab", "PURGE-NAME-03c9"]


def _image(seed: int) -> str:
    return base64.b64encode(random.Random(seed).randbytes(1_100_000)).decode("ascii")


def _session(tmp_path: Path, seed: int, session: str, texts: list[str]) -> Path:
    raw = b"".join(records(seed)).replace(SESSION.encode(), session.encode())
    for old, new in zip(ERASED_TEXT, texts, strict=False):
        raw = raw.replace(old.encode(), new.encode())
    f = tmp_path / "projects" / f"{session}.jsonl"
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(raw)
    return f


def _ingest(run: Callable[..., Any], tmp_path: Path) -> None:
    files = [_session(tmp_path, 1, SESSION, ERASED_TEXT), _session(tmp_path, 2, KEPT, ["KEEP-1", "KEEP-2", "KEEP-3"]),
             _session(tmp_path, 3, PURGED, PURGED_TEXT)]
    r = run("ingest", "claude", *map(str, files))
    assert r.exit_code == 0, r.output


def _needles() -> list[bytes]:
    gone = [*ERASED_TEXT, *PURGED_TEXT, _image(1)[5000:5040], _image(3)[5000:5040]]
    return [t.encode() for t in gone]


def _pg_files(store: EventStore) -> bytes:
    """The bytes of the relation files (and their TOAST) of the tables holding payloads, as on disk."""
    from sqlalchemy import text

    out = b""
    with store.engine.begin() as conn:
        conn.execute(text("CHECKPOINT"))  # pages still only in shared buffers: written out
        for table in ("events", "blobs", "replay_cache", "proj_runs", "proj_search", "ix_proj_search_fts"):
            oids = conn.execute(text("SELECT oid, reltoastrelid FROM pg_class WHERE oid = CAST(:t AS regclass)"),
                                {"t": table}).one()
            for oid in oids:
                if not oid:
                    continue
                path = conn.execute(text("SELECT pg_relation_filepath(:o)"), {"o": oid}).scalar_one()
                out += conn.execute(text("SELECT pg_read_binary_file(:p)"), {"p": path}).scalar_one()
    return out


def _stored_bytes(store: EventStore) -> bytes:
    path = sqlite_file(store.url)
    if path is None:
        return _pg_files(store)
    return b"".join(p.read_bytes() for p in Path(path).parent.glob(Path(path).name + "*") if p.is_file())


def _parquet_text(folder: Path) -> str:
    import pyarrow.parquet as pq

    return "".join(str(pq.read_table(p).to_pylist()) for p in folder.rglob("*.parquet"))


def _keys(run: Callable[..., Any], tmp_path: Path) -> Path:
    assert run("keygen", "--out", str(tmp_path / "log"), "--name", "example.com/erasure").exit_code == 0
    return tmp_path / "log"


def test_erase_and_purge_keep_verify_checkpoints_and_proofs(run: Callable[..., Any], store: EventStore,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from projections.analytics import views

    monkeypatch.setattr(views, "KEPT_ROWS", 0)  # the run views' rows kept too (below that many rows they are not)
    _ingest(run, tmp_path)
    analytics = tmp_path / "analytics"
    os.environ["EVSTORE_ANALYTICS_DIR"] = str(analytics)
    try:
        assert run("metrics").exit_code == 0  # the analytics Parquet, made before the erasure
        assert list(analytics.rglob("kept.duckdb")), "the run views' rows are kept beside the tables"
        assert run("search", "--json", "PURGE-THOUGHT-1f4e").stdout  # the search index, filled before it
        before = _stored_bytes(store)
        assert all(n in before for n in _needles()[:2]), "the check must see the strings while they are stored"
        key = _keys(run, tmp_path)
        cp1 = tmp_path / "cp1"
        assert run("checkpoint", "--key-file", f"{key}.key", "--out", str(cp1)).exit_code == 0
        kept_doc = run("replay", KEPT, "--json").stdout

        assert run("hold", "add", KEPT, "--reason", "matter 2026-17").exit_code == 0
        refused = run("erase", "--stream", KEPT, "--reason", "by mistake")
        assert refused.exit_code == 1 and "is under hold" in refused.stderr and "matter 2026-17" in refused.stderr
        r = run("erase", "--stream", SESSION, "--reason", "GDPR request 114", "--batch", "7")
        assert r.exit_code == 0, r.output
        assert r.stdout.startswith("21 event payload(s) erased in 1 stream(s), 1 blob(s), 3 batch(es)")

        assert run("retention", "set", "--dialect", "claude", "--keep-payloads", "30d").exit_code == 1  # the floor
        assert run("retention", "set", "--dialect", "claude", "--keep-payloads", "30d", "--below-floor",
                   "--reason", "test").exit_code == 0
        dry = run("retention", "apply", "--dry-run", "--as-of", "2099-01-01T00:00:00Z")
        assert dry.exit_code == 0 and dry.stdout.startswith("21 event payload(s) would be purged"), dry.output
        assert KEPT in dry.stdout  # kept by the hold
        assert run("retention", "apply").stdout.startswith("0 event payload(s) purged")  # nothing is 30 days old
        applied = run("retention", "apply", "--as-of", "2099-01-01T00:00:00Z", "--batch", "5")
        assert applied.exit_code == 0 and applied.stdout.startswith("21 event payload(s) purged"), applied.output

        # verify and the earlier checkpoint hold; the counts are reported.
        v = run("verify", "--json")
        assert v.exit_code == 0, v.output
        report = json.loads(v.stdout)
        assert (report["erased"], report["purged"], report["erased_blobs"]) == (21, 21, 2)
        assert run("verify", "--checkpoint", str(cp1), "--vkey", f"{key}.vkey").exit_code == 0
        # An inclusion proof of an erased event against the checkpoint taken before the erasure.
        p = run("prove", SESSION, "--version", "3", "--checkpoint", str(cp1))
        assert p.exit_code == 0, p.output
        (tmp_path / "p.json").write_text(p.stdout)
        assert json.loads(p.stdout)["content"].startswith("erased at")  # a note beside the proof
        vp = run("verify-proof", str(tmp_path / "p.json"), "--vkey", f"{key}.vkey")
        assert vp.exit_code == 0 and "its content was erased at" in vp.stdout and "GDPR request 114" in vp.stdout
        cp2 = tmp_path / "cp2"
        assert run("checkpoint", "--key-file", f"{key}.key", "--out", str(cp2)).exit_code == 0
        c = run("prove", "--consistency", str(cp1), str(cp2))
        assert c.exit_code == 0, c.output
        (tmp_path / "c.json").write_text(c.stdout)
        assert run("verify-proof", str(tmp_path / "c.json"), "--vkey", f"{key}.vkey").exit_code == 0

        # Readers say what happened, never a wrong document.
        for args in (("replay", SESSION), ("replay", SESSION, "--raw"), ("replay", PURGED, "--json")):
            out = run(*args)
            assert out.exit_code == 1 and "content of" in out.stderr, (args, out.output)
        assert "was erased at" in run("replay", SESSION).stderr and "GDPR request 114" in run("replay", SESSION).stderr
        assert "was purged at" in run("replay", PURGED).stderr
        log = run("log", SESSION)
        assert log.exit_code == 0 and "[content erased at" in log.stdout and "GDPR request 114" in log.stdout
        assert run("replay", KEPT, "--json").stdout == kept_doc  # the held session is untouched
        admin = [json.loads(x) for x in run("log", ADMIN_STREAM, "--json").stdout.splitlines()]
        assert [a["type"] for a in admin] == ["evstore.hold_added", "evstore.erased", "evstore.erased", "evstore.erased",
                                              "evstore.retention_set", *["evstore.purged"] * 5]
        assert sum(a["data"]["events"] for a in admin if a["type"] == "evstore.purged") == 21

        # The bytes: none of the erased strings in the database files, the WAL or the Parquet.
        after = _stored_bytes(store)
        for n in _needles():
            assert n not in after, n
        assert b"KEEP-1" in after  # the held session's content is still stored
        assert not [h for h in run("search", "--json", "PURGE-THOUGHT-1f4e").stdout.splitlines()
                    if PURGED in h or SESSION in h]  # nor found by the search index
        text = _parquet_text(analytics)
        assert text and "KEEP-1" in text or analytics.exists()
        for n in _needles():
            assert n.decode() not in text
        # Nor what reports kept beside the tables (the run views' rows, the reports): deleted with the tables.
        derived = b"".join(p.read_bytes() for p in analytics.rglob("*") if p.is_file() and p.suffix != ".parquet"
                           and p.name != "manifest.json")
        for n in _needles():
            assert n not in derived, n
    finally:
        os.environ.pop("EVSTORE_ANALYTICS_DIR", None)


def test_erase_by_matching_text_erases_each_event_holding_it(run: Callable[..., Any], store: EventStore,
                                                             tmp_path: Path) -> None:
    _ingest(run, tmp_path)
    r = run("erase", "--match", "Ünïcödé", "--reason", "a name in a prompt")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("1 event payload(s) erased in 1 stream(s)"), r.output
    assert "Ünïcödé" not in r.stdout + r.stderr
    assert "Ünïcödé".encode() not in _stored_bytes(store)
    admin = [json.loads(x) for x in run("log", ADMIN_STREAM, "--json").stdout.splitlines()]
    assert "Ünïcödé" not in json.dumps(admin, ensure_ascii=False)  # the request does not record the text
    assert run("verify").exit_code == 0
    assert run("replay", KEPT).exit_code == 0
    # Exports made afterwards hold the tombstone, not the text.
    out = tmp_path / "export"
    assert run("export", "--parquet", str(out), "--analytics-dir", str(tmp_path / "a")).exit_code == 0
    jsonl = run("export", "--jsonl", "-", "--analytics-dir", str(tmp_path / "a"))
    assert jsonl.exit_code == 0, jsonl.output
    assert "Ünïcödé" not in _parquet_text(out) and "Ünïcödé" not in jsonl.stdout and "KEEP-3" in jsonl.stdout
    short = run("erase", "--match", "abc", "--reason", "x")
    assert short.exit_code == 1 and "at least 4 characters" in short.stderr


def test_the_database_refuses_any_other_change_of_a_payload(store: EventStore) -> None:
    """The relaxed triggers allow the tombstone only: with its erasures row, every hashed column unchanged."""
    store.append("S", [NewEvent("demo.note", {"i": 1})])
    with pytest.raises(Exception, match="append-only"):  # no erasures row
        exec_sql(store, "UPDATE events SET data = :e, meta = :e, salt = NULL WHERE position = 1", e=b"")
    exec_sql(store, "INSERT INTO erasures (position, kind, reason, admin_event_id, erased_at) "
                    "VALUES (1, 'erased', 'x', 'y', 'z')")
    with pytest.raises(Exception, match="append-only"):  # not the tombstone
        exec_sql(store, "UPDATE events SET data = :d, meta = :e WHERE position = 1", d=b'{"i":2}', e=b"")
    with pytest.raises(Exception, match="append-only"):  # a hashed column changed
        exec_sql(store, "UPDATE events SET data = :e, meta = :e, type = 'x' WHERE position = 1", e=b"")
    with pytest.raises(Exception, match="append-only"):
        exec_sql(store, "DELETE FROM events WHERE position = 1")
    with pytest.raises(Exception, match="append-only"):
        exec_sql(store, "DELETE FROM erasures WHERE position = 1")
    with pytest.raises(Exception, match="append-only"):  # the tombstone keeping its digests' salt
        exec_sql(store, "UPDATE events SET data = :e, meta = :e WHERE position = 1", e=b"")
    exec_sql(store, "UPDATE events SET data = :e, meta = :e, salt = NULL WHERE position = 1", e=b"")


def test_a_tombstone_without_its_record_fails_verify(store: EventStore, run: Callable[..., Any]) -> None:
    from conftest import drop_append_only_triggers

    store.append("S", [NewEvent("demo.note", {"i": 1}), NewEvent("demo.note", {"i": 2})])
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET data = :e, meta = :e, salt = NULL WHERE position = 2", e=b"")
    r = run("verify")
    assert r.exit_code == 1 and "no erasure is recorded" in r.stderr


#: ``evstore ARGS`` with a pause after each line saying a batch committed (so a kill lands between batches).
_PAUSED_MAIN = """
import sys, time, click
echo = click.echo
def paused(message=None, *args, **kwargs):
    echo(message, *args, **kwargs)
    if isinstance(message, str) and "payload(s)" in message:
        time.sleep(0.2)
click.echo = paused
sys.argv = ["evstore", *sys.argv[1:]]
from eventstore.entry import main
main()
"""


@pytest.mark.parametrize("command", ["erase", "retention"])
def test_sigkill_in_the_middle_leaves_a_consistent_store_and_the_command_finishes(
        run: Callable[..., Any], store_url: str, store: EventStore, tmp_path: Path, command: str) -> None:
    _ingest(run, tmp_path)
    if command == "erase":
        args = ["erase", "--stream", SESSION, "--reason", "request 9", "--batch", "1"]
    else:
        assert run("retention", "set", "--dialect", "claude", "--keep-payloads", "1d", "--below-floor").exit_code == 0
        args = ["retention", "apply", "--as-of", "2099-01-01T00:00:00Z", "--batch", "1"]
    # The command as the console script runs it, each batch's line followed by a pause: killed after three lines,
    # it is always in the middle (21 batches of one payload could all commit before the kill on a busy machine).
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_MAIN, "--url", store_url, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        for _ in range(3):  # a few batches committed, more to come
            assert "payload(s)" in proc.stderr.readline()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    report = json.loads(run("verify", "--json").stdout)
    # The log, the tree and the tombstones hold; only the runs index (a projection the command rebuilds once
    # every batch is done) may still describe what the killed run had erased, and verify says how to fix it.
    assert all(f["field"] == "projection" and "rebuild" in f["detail"] for f in report["failures"]), report["failures"]
    done = report["erased"] + report["purged"]
    assert 3 <= done < (21 if command == "erase" else 63)
    again = run(*args)
    assert again.exit_code == 0, again.output
    report = json.loads(run("verify", "--json").stdout)
    assert report["ok"] and report["erased"] + report["purged"] == (21 if command == "erase" else 63), report
    assert b"Look at the test first." not in _stored_bytes(store)


def test_the_pages_and_the_api_say_when_and_why(run: Callable[..., Any], store_url: str, tmp_path: Path) -> None:
    from serve_fixtures import LOCAL
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app

    _ingest(run, tmp_path)
    assert run("erase", "--event", _event_id(store_url, SESSION, 3), "--reason", "a token in a reply").exit_code == 0
    with TestClient(create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "a"))), base_url=LOCAL) as c:
        events = c.get(f"/api/runs/{SESSION}/events").json()
        assert [e.get("erased", False) for e in events] == [v == 3 for v in range(1, 22)]
        assert "erased at" in events[2]["erasure"] and "a token in a reply" in events[2]["erasure"]
        assert events[2]["data"] is None and events[3]["data"] is not None
        state = c.get(f"/api/runs/{SESSION}/state")
        assert state.status_code == 410 and "a token in a reply" in state.text
        assert c.get(f"/api/runs/{SESSION}/state", params={"version": 2}).status_code == 200  # before it: whole
        page = c.get(f"/runs/{SESSION}")
        assert page.status_code == 200 and "a token in a reply" in page.text and "[content erased at" in page.text


def _event_id(url: str, stream: str, version: int) -> str:
    with EventStore(url) as s:
        return next(iter(s.read_stream(stream, after_version=version - 1, upto_version=version))).event_id


def test_a_project_hold_stops_an_erasure_until_it_is_released(run: Callable[..., Any], store_url: str) -> None:
    from projections.demo import run_demo
    from projections.runs import IndexedEventStore, list_runs

    s = IndexedEventStore(store_url)
    try:
        run_demo(s, runs=4, seed=3)
        rows = list_runs(s)
    finally:
        s.close()
    held = next(r for r in rows if r.project)
    added = run("hold", "add", "--project", held.project, "--reason", "audit 5")
    assert added.exit_code == 0 and "audit 5" in added.stdout
    hold_id = added.stdout.split()[1]
    refused = run("erase", "--stream", held.stream_id, "--reason", "r")
    assert refused.exit_code == 1 and f"hold {hold_id} on project" in refused.stderr
    assert held.project in run("retention", "show").stdout
    assert run("hold", "release", hold_id, "--reason", "closed").exit_code == 0
    assert run("hold", "show").stdout == ""
    r = run("erase", "--stream", held.stream_id, "--reason", "r")
    assert r.exit_code == 0, r.output
    admin = [json.loads(x)["type"] for x in run("log", ADMIN_STREAM, "--json").stdout.splitlines()]
    assert admin == ["evstore.hold_added", "evstore.hold_released", "evstore.erased"]
    assert json.loads(run("verify", "--json").stdout)["ok"]


def test_bad_requests_are_named(run: Callable[..., Any]) -> None:
    r = run("erase", "--reason", "x")
    assert r.exit_code == 2 and "say what to erase" in r.stderr
    r = run("erase", "--stream", "nope", "--reason", "x")
    assert r.exit_code == 1 and 'No stream "nope"' in r.stderr
    r = run("retention", "set", "--dialect", "claude", "--keep-payloads", "soon")
    assert r.exit_code == 1 and "180d, 26w, 1y" in r.stderr
    r = run("erase", "--stream", "S", "--reason", "x")
    assert r.exit_code == 1
    run("hold", "add", "--project", "P", "--reason", "x")  # makes the admin stream
    r = run("erase", "--stream", ADMIN_STREAM, "--reason", "x")
    assert r.exit_code == 1 and "it is never erased" in r.stderr
    r = run("hold", "release", "nothing", "--reason", "x")
    assert r.exit_code == 1 and "No hold in force" in r.stderr


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_any_erasure_leaves_every_root_and_verify_as_they_were(sizes: list[int], data: st.DataObject,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever is erased, in whatever order: the tree's root at every size is unchanged and verify passes."""
    from eventstore.erasure import erase
    from eventstore.verify import verify

    url = migrated(f"sqlite:///{tmp_path_factory.mktemp('p')}/events.db")
    with EventStore(url) as s:
        for i, n in enumerate(sizes):
            s.append(f"S{i}", [NewEvent("demo.note", {"i": k, "secret": f"x{i}-{k}"}) for k in range(n)])
        total = s.max_position()
        roots = []
        for size in range(total + 1):
            with s.tree(size) as t:
                roots.append(t.root())
        ids = [e.event_id for e in s.iter_all()]
        for event_id in data.draw(st.lists(st.sampled_from(ids), unique=True)):
            erase(s, reason="p", event_id=event_id, scrub=False)
        streams = data.draw(st.lists(st.sampled_from([f"S{i}" for i in range(len(sizes))]), max_size=2))
        if streams:
            erase(s, reason="q", stream_ids=streams, kind="purged")
        for size in range(total + 1):
            with s.tree(size) as t:
                assert t.root() == roots[size]
        report = verify(s)
        assert report.ok, report.failures
        assert report.erased + report.purged == sum(1 for e in s.iter_all() if e.erased and e.stream_id != ADMIN_STREAM)


SPOOL_SECRET = "quokka-zebra-77 private phrase"


def _hook_call(session: str, i: int, text: str) -> bytes:
    return json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": f"{text} #{i}",
                       "cwd": "/home/dev/p"}).encode()


def _spool_holds(folder: Path, needles: list[bytes]) -> list[str]:
    """Files of the spool folder whose raw bytes, or any base64 field of a line decoded, hold a needle."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        parts = [raw]
        for line in raw.splitlines():
            for field in line.split(b"\t"):
                try:
                    parts.append(base64.b64decode(field))
                except ValueError:
                    pass
        if any(n in part for part in parts for n in needles):
            found.append(path.name)
    return found


def test_erase_takes_what_it_erases_out_of_the_hook_spool(run: Callable[..., Any], store: EventStore,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls waiting in the spool are drained first (recorded, then erased with the rest), and the
    claimed file a killed drain left behind (recorded already, still on disk) goes with them: no
    spool file holds the erased text afterwards, raw or decoded; calls of other sessions are recorded."""
    from eventstore import capture, spool
    from eventstore.erasure import needles

    folder = tmp_path / "spool"
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(folder))
    for i in range(2):
        spool.write(folder, _hook_call("sess-a", i, SPOOL_SECRET))
    killed = (folder / spool.SPOOL).read_bytes()
    assert capture.drain(store, folder).hooks == 2
    (folder / "claimed-1-1.jsonl").write_bytes(killed)  # a drain killed after recording, before the unlink
    spool.write(folder, _hook_call("sess-a", 2, SPOOL_SECRET))  # waiting: never drained
    spool.write(folder, _hook_call("sess-b", 3, "nothing to erase"))
    # What a drain could not record, quoted in its error log (the message's whitespace collapsed).
    spool.log_drain_error(folder, f"/p/x.json: the lens failed (KeyError: '{SPOOL_SECRET}')", streams=["sess-a"])
    spool.log_drain_error(folder, "/p/y.json: the lens failed (KeyError: 'other')", streams=["sess-b"])
    wanted = needles(SPOOL_SECRET)
    assert _spool_holds(folder, wanted) == ["claimed-1-1.jsonl", spool.DRAIN_ERRORS, "spool.jsonl"]
    r = run("erase", "--match", SPOOL_SECRET, "--reason", "leaked phrase")
    assert r.exit_code == 0, r.stderr
    assert "drained the hook spool first: 4 call(s) recorded" in r.stderr
    assert _spool_holds(folder, wanted) == []
    assert "'other'" in (folder / spool.DRAIN_ERRORS).read_text()  # the other line stays
    assert not (folder / "claimed-1-1.jsonl").exists() and not spool.waiting(folder)
    assert [e.erased for e in store.read_stream("sess-a")] == [True, True, True]
    assert [e.erased for e in store.read_stream("sess-b")] == [False]
    assert b"nothing to erase" in _stored_bytes(store)
    assert run("verify").exit_code == 0


def test_calls_spooled_while_another_drain_holds_the_spool_are_taken_out(
        run: Callable[..., Any], store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the drain lock is taken (a server draining), the erasure cannot record the waiting calls
    first: it takes those it would have erased out of the file hooks append to (never recorded), keeps
    the others, and says the claimed files it could not reach are left to that drain."""
    from eventstore import spool
    from eventstore.erasure import needles

    folder = tmp_path / "spool"
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(folder))
    store.append("sess-a", [NewEvent("demo.note", {"text": SPOOL_SECRET})])
    spool.write(folder, _hook_call("sess-a", 0, SPOOL_SECRET))
    spool.write(folder, _hook_call("sess-b", 1, "kept for the drain"))
    lock = spool.drain_lock(folder)
    assert lock is not None
    try:
        r = run("erase", "--match", SPOOL_SECRET, "--reason", "leaked phrase")
    finally:
        os.close(lock)
    assert r.exit_code == 0, r.stderr
    assert "another drain holds the hook spool" in r.stderr and "removed 1 hook call(s)" in r.stderr
    assert _spool_holds(folder, needles(SPOOL_SECRET)) == []
    assert [json.loads(rec.stdin)["session_id"] for rec in spool.read(folder / spool.SPOOL)] == ["sess-b"]


def test_erase_stream_takes_every_call_bound_for_it_and_its_error_lines_out_of_the_spool(
        run: Callable[..., Any], store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state stream is written by calls of any session (a Write of its state file): with another drain
    holding the spool, `erase --stream` takes out every waiting call a drain would record in it — whatever
    its session —, and the error-log lines of the stream, tagged or naming it; the other calls and lines stay."""
    from test_dialect_contract import history

    from eventstore import capture, spool

    folder = tmp_path / "spool"
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(folder))
    state = tmp_path / "agent-state.json"  # mapipe's state file: a Write of it records a version
    docs = [s.doc for s in history("mapipe", 4) if s.doc is not None][:2]

    def write(session: str, doc: Any, tool: str = "t") -> None:
        text = json.dumps(doc, indent=2)
        spool.write(folder, json.dumps({"session_id": session, "hook_event_name": "PostToolUse", "tool_name": "Write",
                                        "tool_use_id": tool, "tool_input": {"file_path": str(state),
                                                                            "content": text}}).encode())

    write("sess-1", docs[0])
    first = capture.drain(store, folder)
    [task] = {r.stream for r in first.states}
    write("sess-2", docs[1], "t2")  # another session's call, bound for the same state stream
    spool.write(folder, _hook_call("sess-3", 1, "kept for the drain"))
    spool.log_drain_error(folder, f"{state}: lens failed (KeyError: 'TASK-SECRET-9')", streams=[task])
    spool.log_drain_error(folder, f"/home/dev/.claude/projects/p/{task}.jsonl: not read")  # before tags
    spool.log_drain_error(folder, "/home/dev/other.json: lens failed", streams=["sess-3"])
    lock = spool.drain_lock(folder)
    assert lock is not None
    try:
        r = run("erase", "--stream", task, "--reason", "request 12")
    finally:
        os.close(lock)
    assert r.exit_code == 0, r.stderr
    assert "removed 1 hook call(s)" in r.stderr and "removed 2 line(s)" in r.stderr, r.stderr
    assert [json.loads(rec.stdin)["session_id"] for rec in spool.read(folder / spool.SPOOL)] == ["sess-3"]
    log = (folder / spool.DRAIN_ERRORS).read_text()
    assert "TASK-SECRET-9" not in log and task not in log and "other.json" in log


def test_spool_remove_rewrites_pending_and_claimed_files(tmp_path: Path) -> None:
    """By stream (the call's session) as `erase --stream` selects them, in the file hooks append to and in
    a claimed one; a hook writing afterwards appends to the rewritten file."""
    from eventstore import capture, spool

    for i, session in enumerate(["a", "b", "a"]):
        spool.write(tmp_path, _hook_call(session, i, "x"))
    (tmp_path / "claimed-1-1.jsonl").write_bytes((tmp_path / spool.SPOOL).read_bytes())
    removed, reached = spool.remove(tmp_path, lambda rec: capture.hook_target(rec)[0] == "a")
    assert (removed, reached) == (4, True)
    spool.write(tmp_path, _hook_call("c", 9, "x"))
    sessions = {p.name: [json.loads(rec.stdin)["session_id"] for rec in spool.read(p)]
                for p in (tmp_path / spool.SPOOL, tmp_path / "claimed-1-1.jsonl")}
    assert sessions == {"spool.jsonl": ["b", "c"], "claimed-1-1.jsonl": ["b"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claimed-1-1.jsonl", "drain.lock", "spool.jsonl"]


def test_a_transcript_captured_again_does_not_bring_back_what_was_erased(run: Callable[..., Any], store: EventStore,
                                                                        tmp_path: Path) -> None:
    """The capture resumes from the bookkeeping the erasure kept (erasures.kept), not from the start."""
    f = _session(tmp_path, 1, SESSION, ERASED_TEXT)
    assert run("ingest", "claude", str(f)).exit_code == 0
    assert run("erase", "--match", "Look at the test first.", "--reason", "one line").exit_code == 0
    assert run("erase", "--event", _event_id(store.url, SESSION, 21), "--reason", "the last line").exit_code == 0
    again = run("ingest", "claude", str(f))
    assert again.exit_code == 0 and store.stream_version(SESSION) == 21, again.output
    line = {"type": "user", "uuid": "z1", "parentUuid": None, "sessionId": SESSION,
            "timestamp": "2026-03-02T10:00:00.000Z", "message": {"role": "user", "content": "one more line"}}
    with f.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    more = run("ingest", "claude", str(f))
    assert more.exit_code == 0 and store.stream_version(SESSION) == 22, more.output
    assert b"Look at the test first." not in _stored_bytes(store)
    assert json.loads(run("verify", "--json").stdout)["ok"]
    run("erase", "--stream", SESSION, "--reason", "all")
    assert run("ingest", "claude", str(f)).exit_code == 0 and store.stream_version(SESSION) == 22


def test_the_sqlite_scrub_removes_what_a_build_without_secure_delete_leaves(sqlite_url: str) -> None:
    """SQLite builds differ (Debian's turns secure_delete on by default): with it off, the old bytes stay in
    the file's free space or the WAL until the scrub (secure_delete, VACUUM, a TRUNCATE checkpoint)."""
    from eventstore.erasure import erase

    url = migrated(sqlite_url)
    with EventStore(url) as s:
        s._raw().execute("PRAGMA secure_delete=OFF")
        s.append("S", [NewEvent("demo.note", {"secret": f"ZEBRA-SECRET-{i:04d}" + "pad" * 300}) for i in range(40)])
        s.append("T", [NewEvent("demo.note", {"kept": "KEPT-VALUE"})])
        erase(s, reason="r", stream_ids=["S"], scrub=False)
        assert b"ZEBRA-SECRET-" in _stored_bytes(s)  # without the scrub the bytes are still on disk
        s.backend.scrub(s._raw())
        stored = _stored_bytes(s)
        assert b"ZEBRA-SECRET-" not in stored and b"KEPT-VALUE" in stored


REAL = Path(__file__).parent / "data" / "claude" / "projects"
REAL_ERASED, REAL_PURGED = "3a7770b4-aba3-46dd-b677-8fc2d71d4e06", "5b539e53-47c8-4996-bc4e-3896a787c8ab"
#: Phrases of the erased real session's lines (tests/data/claude/ORIGIN.md) that the other one lacks.
REAL_ERASED_TEXT = ["I need you to do pwd and then move the claude-parser",
                    "It seems the current directory no longer exists",
                    "claude-parser already exists in ~/.claude/projects"]
#: And of the purged one.
REAL_PURGED_TEXT = ["Please analyze this codebase and create a CLAUDE.md file",
                    "analyze the codebase structure to understand the project type"]


def test_real_transcripts_erased_and_purged_keep_every_proof_and_leave_no_bytes(run: Callable[..., Any],
                                                                                store: EventStore,
                                                                                tmp_path: Path) -> None:
    """The issue's proof on real Claude Code transcripts, through the CLI as a user runs it: ingest
    the projects folder, sign a checkpoint, erase one session, purge the other by a retention policy;
    verify, the earlier checkpoint, an inclusion proof of an erased event against it and consistency
    to a new checkpoint all pass, and the database bytes hold none of the erased phrases."""
    erased_raw = (REAL / "-Volumes-AliDev-ai-projects-claude-parser" / f"{REAL_ERASED}.jsonl").read_text()
    purged_raw = (REAL / "-Users-michael-Projects-oss-graph-monitor" / f"{REAL_PURGED}.jsonl").read_text()
    for t in REAL_ERASED_TEXT:
        assert t in erased_raw and t not in purged_raw, t  # the needles are the erased session's only
    for t in REAL_PURGED_TEXT:
        assert t in purged_raw and t not in erased_raw, t
    r = run("ingest", "claude", str(REAL))
    assert r.exit_code == 0, r.output
    assert {store.stream_info(s) is not None for s in (REAL_ERASED, REAL_PURGED)} == {True}
    needles = [t.encode() for t in (*REAL_ERASED_TEXT, *REAL_PURGED_TEXT)]
    assert REAL_ERASED in run("search", "--json", "claude-parser").stdout  # the search index, filled before
    before = _stored_bytes(store)
    assert all(n in before for n in needles), "the check must see the phrases while they are stored"
    key = _keys(run, tmp_path)
    cp1 = tmp_path / "cp1"
    assert run("checkpoint", "--key-file", f"{key}.key", "--out", str(cp1)).exit_code == 0

    r = run("erase", "--stream", REAL_ERASED, "--reason", "GDPR request 7")
    assert r.exit_code == 0 and " erased in 1 stream(s)" in r.stdout, r.output
    assert run("retention", "set", "--stream", REAL_PURGED, "--keep-payloads", "1d", "--below-floor",
               "--reason", "test").exit_code == 0
    applied = run("retention", "apply", "--as-of", "2099-01-01T00:00:00Z")
    assert applied.exit_code == 0 and " purged in 1 stream(s)" in applied.stdout, applied.output

    v = run("verify", "--json")
    assert v.exit_code == 0, v.output
    report = json.loads(v.stdout)
    assert report["erased"] > 0 and report["purged"] > 0, report
    assert run("verify", "--checkpoint", str(cp1), "--vkey", f"{key}.vkey").exit_code == 0
    p = run("prove", REAL_ERASED, "--version", "2", "--checkpoint", str(cp1))
    assert p.exit_code == 0, p.output
    assert json.loads(p.stdout)["content"].startswith("erased at")
    (tmp_path / "p.json").write_text(p.stdout)
    vp = run("verify-proof", str(tmp_path / "p.json"), "--vkey", f"{key}.vkey")
    assert vp.exit_code == 0 and "GDPR request 7" in vp.stdout, vp.output
    cp2 = tmp_path / "cp2"
    assert run("checkpoint", "--key-file", f"{key}.key", "--out", str(cp2)).exit_code == 0
    c = run("prove", "--consistency", str(cp1), str(cp2))
    assert c.exit_code == 0, c.output
    (tmp_path / "c.json").write_text(c.stdout)
    assert run("verify-proof", str(tmp_path / "c.json"), "--vkey", f"{key}.vkey").exit_code == 0
    assert "was erased at" in run("replay", REAL_ERASED).stderr

    after = _stored_bytes(store)
    for n in needles:
        assert n not in after, n
    assert REAL_ERASED not in run("search", "--json", "claude-parser").stdout  # nor found by the search index


def test_retention_apply_takes_the_purged_streams_lines_out_of_the_spool_error_logs(
        run: Callable[..., Any], store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As erase does: the lines of drain-errors.log and hook-errors.log naming a stream the policy purged
    and logged before its cutoff go; another stream's lines and a line logged after the cutoff stay."""
    from eventstore import spool

    folder = tmp_path / "spool"
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(folder))
    _session(tmp_path, 3, PURGED, PURGED_TEXT)
    kept = _session(tmp_path, 2, KEPT, ["KEEP-1", "KEEP-2", "KEEP-3"])
    assert run("ingest", "claude", str(tmp_path / "projects" / f"{PURGED}.jsonl"), str(kept)).exit_code == 0
    spool.log_drain_error(folder, "lens failed (KeyError: 'PURGE-SECRET-1')", streams=[PURGED])
    spool.log_drain_error(folder, f"/home/dev/.claude/projects/p/{PURGED}.jsonl: not read")  # untagged, named
    spool.log_drain_error(folder, "lens failed (KeyError: 'KEEP-SECRET-2')", streams=[KEPT])
    with open(folder / spool.DRAIN_ERRORS, "a") as fh:  # logged after the cutoff: its payloads are kept
        fh.write(f"2100-01-01T00:00:00Z pid 1: lens failed (LATER-3) [stream {PURGED}]\n")
    (folder / spool.HOOK_ERRORS).write_text(f"2026-01-01T00:00:00Z ValueError: bad call of {PURGED}: PURGE-SECRET-4\n"
                                            "2026-01-01T00:00:01Z ValueError: another call\n")
    assert run("retention", "set", "--stream", PURGED, "--keep-payloads", "1d", "--below-floor").exit_code == 0
    dry = run("retention", "apply", "--dry-run", "--as-of", "2099-01-01T00:00:00Z")
    assert dry.exit_code == 0 and "PURGE-SECRET-1" in (folder / spool.DRAIN_ERRORS).read_text()  # a dry run keeps
    r = run("retention", "apply", "--as-of", "2099-01-01T00:00:00Z")
    assert r.exit_code == 0 and r.stdout.startswith("21 event payload(s) purged"), r.output
    assert "removed 3 line(s)" in r.stderr, r.stderr
    drain = (folder / spool.DRAIN_ERRORS).read_text()
    assert "PURGE-SECRET-1" not in drain and "/home/dev" not in drain
    assert "KEEP-SECRET-2" in drain and "LATER-3" in drain
    assert (folder / spool.HOOK_ERRORS).read_text() == "2026-01-01T00:00:01Z ValueError: another call\n"
    again = run("retention", "apply", "--as-of", "2099-01-01T00:00:00Z")  # a re-run (after a kill) finds nothing
    assert again.exit_code == 0 and "line(s)" not in again.stderr
