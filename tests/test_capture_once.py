"""Capture once (issue 31): each source version is recorded at most once per stream, whatever
path captured it and however often.

The same folder, file list or git range ingested again records nothing and says so; a folder that
grew records only its new versions, in order; a source whose earlier versions differ from what was
recorded is refused, naming the first that differs, and ``--force-new-stream`` records it as a new
stream.  ``watch`` after a restart and a spool drained twice record nothing again.  The real
histories of ``tests/data/real`` are the data that matters: each is captured twice, and as a prefix
then the whole, and must give exactly the stream one capture of the whole gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import evstore_child, migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dialect_contract import SNAPSHOT, history, render
from test_ingest_sources import branchy_repo  # noqa: F401  (a fixture, used by name)
from test_real_histories import HISTORIES

from eventstore import capture, spool
from eventstore.dialects import get_dialect
from eventstore.errors import SourceConflict
from eventstore.ingest import ingest, ingest_git
from eventstore.store import EventStore


def _log(run, stream: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    r = run("log", stream, "--json")
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


def _history_of(store: EventStore, stream: str) -> list[tuple[str, bytes, Any]]:
    """What a stream holds, without times and ids: each event's type, data and source identity."""
    out = []
    for rec in store.read_stream(stream):
        meta = rec.metadata
        source = meta.get("source") if isinstance(meta, dict) else None
        out.append((rec.type, rec.data, source.get("id") if isinstance(source, dict) else None))
    return out


def _copy(files: list[Path], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, folder / f.name)
    return folder


def _files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")),
                  key=lambda p: p.name)


# ------------------------------------------------------------------ the real histories, on both backends


@pytest.mark.parametrize("folder", HISTORIES, ids=[h.name for h in HISTORIES])
def test_a_real_history_captured_twice_and_as_a_prefix_then_whole(store: EventStore, folder: Path,
                                                                  tmp_path: Path) -> None:
    d = get_dialect("friday" if folder.name.startswith("friday") else "generic")
    files = _files(folder)
    half = len(files) // 2
    # a folder that grew (a prefix of the history, then the whole), then the whole at once into another
    # stream: the same record (an unreadable version's error names its file: the same folder for both)
    grows = _copy(files[:half], tmp_path / folder.name)
    assert all(r.status != "recorded" for r in ingest(store, d, [grows], stream="grown"))
    whole = _copy(files, grows)
    grown = ingest(store, d, [whole], stream="grown")
    first = ingest(store, d, [whole], stream="once")
    assert {r.status for r in first} <= {"new", "unchanged"}
    assert [r.status for r in grown[:half]] == [r.status if r.status == "unchanged" else "recorded"
                                                for r in first[:half]]
    assert [r.status for r in grown[half:]] == [r.status for r in first[half:]]
    recorded = _history_of(store, "once")
    assert _history_of(store, "grown") == recorded
    # the same capture again: nothing written, each version named where it was recorded
    again = ingest(store, d, [whole], stream="once")
    assert _history_of(store, "once") == recorded
    assert [r.status for r in again] == [("unchanged" if r.status == "unchanged" else "recorded") for r in first]
    assert [r.version for r in again] == [r.version for r in first]


@pytest.mark.parametrize("folder", [h for h in HISTORIES if h.name in ("codeharness-ralph-status",
                                                                        "friday-temper-ai-full")],
                         ids=lambda h: h.name)
def test_the_command_says_what_was_recorded_before(run, folder: Path) -> None:  # type: ignore[no-untyped-def]
    dialect = "friday" if folder.name.startswith("friday") else "generic"
    r = run("ingest", dialect, str(folder), "--stream", "h", "--json")
    n = len(_files(folder))
    versions = [json.loads(x)["version"] for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and len(versions) == n, r.output
    r = run("ingest", dialect, str(folder), "--stream", "h")
    assert r.exit_code == 0 and f"{n} version(s) already recorded, 0 new; 0 event(s)" in r.stderr, r.output
    assert r.stdout.count("(already recorded)") == n
    r = run("ingest", dialect, str(folder), "--stream", "h", "--json")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["status"] for x in lines] == ["recorded"] * n and [x["version"] for x in lines] == versions
    events = _log(run, "h")
    assert [e["meta"]["source"]["id"] for e in events if "source" in e["meta"]] == [x["source_id"] for x in lines]
    assert lines[0]["source_id"].startswith(f"file:{_files(folder)[0].name}@")
    first = _files(folder)[0]
    assert f"  source file:{first.name}@{_sha(first)[:12]}\n" in run("log", "h").stdout  # the text log too


# ------------------------------------------------------------------ files, folders, rewritten histories


def _state_folder(tmp_path: Path, docs: list[Any], name: str = "hist") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    for i, doc in enumerate(docs, 1):
        (folder / f"{i:02d}-state.json").write_text(json.dumps(doc) + "\n")
    return folder


def test_a_file_list_again_and_grown(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = _state_folder(tmp_path, [{"n": i} for i in range(1, 6)])
    files = [str(f) for f in _files(folder)]
    assert run("ingest", "generic", *files[:3], "--stream", "L").exit_code == 0
    r = run("ingest", "generic", *files[:3], "--stream", "L", "--json")
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["recorded"] * 3
    r = run("ingest", "generic", *files, "--stream", "L", "--json")
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["status"], x["version"]) for x in got] == [("recorded", 1), ("recorded", 2), ("recorded", 3),
                                                          ("new", 4), ("new", 5)]
    assert [json.loads(run("replay", "L", "--upto", str(v), "--json").stdout)["n"] for v in range(1, 6)] == \
        [1, 2, 3, 4, 5]
    # the folder they are in: the identity is the path relative to what was named, here the same names
    r2 = run("ingest", "generic", str(folder), "--stream", "L", "--json")
    assert [json.loads(x)["status"] for x in r2.stdout.splitlines()] == ["recorded"] * 5


def test_a_changed_version_in_the_middle_is_refused_then_recorded_as_a_new_stream(
        run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = _state_folder(tmp_path, [{"n": i} for i in range(1, 6)])
    assert run("ingest", "generic", str(folder), "--stream", "M").exit_code == 0
    before = _log(run, "M")
    (folder / "03-state.json").write_text(json.dumps({"n": 33}) + "\n")
    (folder / "06-state.json").write_text(json.dumps({"n": 6}) + "\n")
    r = run("ingest", "generic", str(folder), "--stream", "M")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1].startswith(
        f'Error: {folder / "03-state.json"} differs from version 3 of stream "M" (recorded 03-state.json sha256 '), \
        r.stderr
    assert "the source's history was rewritten or a version in it changed; nothing was written — pass " \
           "--force-new-stream to record this capture as a new stream." in r.stderr
    assert _log(run, "M") == before  # not even the new 06 was written
    r = run("ingest", "generic", str(folder), "--stream", "M", "--force-new-stream", "--json")
    assert r.exit_code == 0, r.output
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert {x["stream"] for x in got} == {"M~2"} and [x["status"] for x in got] == ["new"] * 6
    assert _log(run, "M") == before
    assert json.loads(run("replay", "M~2", "--upto", "3", "--json").stdout) == {"n": 33}
    # the new stream is where this source now goes: the same capture again records nothing there
    r = run("ingest", "generic", str(folder), "--stream", "M~2", "--json")
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["recorded"] * 6


def test_a_live_file_named_alone_is_recorded_when_it_changed(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One file named alone is the current state of a live source: recorded unless its bytes are the
    last version recorded from it, so A, A, B, A records A, B, A."""
    state = tmp_path / "state.json"
    statuses = []
    for doc in ({"n": 1}, {"n": 1}, {"n": 2}, {"n": 1}):
        state.write_text(json.dumps(doc))
        statuses.append(json.loads(run("ingest", "generic", str(state), "--json").stdout)["status"])
    assert statuses == ["new", "recorded", "new", "new"]
    assert [e["type"] for e in _log(run, "state.json")] == ["document.observed", "document.patched",
                                                            "document.patched"]


def test_the_same_bytes_again_are_no_version_and_a_repeated_capture_passes_over_them(
        run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The rule for a separate write of the bytes the version before it had (docs/capture.md): no
    version (nothing changed that a replay could show), ``unchanged``; capturing it again is still a
    no-op, and a capture that grew past it goes on from there."""
    folder = _state_folder(tmp_path, [{"n": 1}, {"n": 2}, {"n": 2}, {"n": 3}])
    r = run("ingest", "generic", str(folder), "--stream", "U", "--json")
    assert [(x["status"], x["version"]) for x in map(json.loads, r.stdout.splitlines())] == [
        ("new", 1), ("new", 2), ("unchanged", 2), ("new", 3)]
    r = run("ingest", "generic", str(folder), "--stream", "U", "--json")
    assert [(x["status"], x["version"]) for x in map(json.loads, r.stdout.splitlines())] == [
        ("recorded", 1), ("recorded", 2), ("unchanged", 2), ("recorded", 3)]
    (folder / "05-state.json").write_text(json.dumps({"n": 3}) + "\n")  # again the bytes before it
    (folder / "06-state.json").write_text(json.dumps({"n": 4}) + "\n")
    r = run("ingest", "generic", str(folder), "--stream", "U", "--json")
    assert [x["status"] for x in map(json.loads, r.stdout.splitlines())][-2:] == ["unchanged", "new"]
    assert len(_log(run, "U")) == 4


# ------------------------------------------------------------------ git


def _git(repo: Path, *args: str, when: int | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "C",
           "GIT_COMMITTER_EMAIL": "c@example.org", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"2026-01-01T{when // 60:02d}:{when % 60:02d}:00+00:00"
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _commit_history(repo: Path, files: list[Path], target: str, start: int = 0) -> None:
    path = repo / target
    path.parent.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(files, start):
        path.write_bytes(f.read_bytes())
        _git(repo, "add", target)
        _git(repo, "commit", "-qm", f.name, "--allow-empty", when=i)


def test_git_range_twice_grown_and_rewritten(store: EventStore, tmp_path: Path) -> None:
    """friday-temper-ai-full committed as it was: ingested twice (nothing the second time), a
    repository that grew (only the new commits), a rewritten one (refused, naming the commit; then
    a new stream)."""
    files = _files(next(h for h in HISTORIES if h.name == "friday-temper-ai-full"))
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit_history(repo, files[:6], ".temper/friday-state.json")
    friday = get_dialect("friday")
    spec = f"{repo}:.temper/friday-state.json"
    first = ingest_git(store, friday, spec, stream="F")
    assert [r.status for r in first] == ["new"] * 6
    recorded = _history_of(store, "F")
    assert [x[2] for x in recorded if x[2]] == [f"git:{c}:.temper/friday-state.json"
                                                for c in _git(repo, "rev-list", "--reverse", "HEAD").split()]
    assert [r.status for r in ingest_git(store, friday, spec, stream="F")] == ["recorded"] * 6
    assert _history_of(store, "F") == recorded
    _commit_history(repo, files[6:], ".temper/friday-state.json", start=6)
    grown = ingest_git(store, friday, spec, stream="F")
    assert [r.status for r in grown] == ["recorded"] * 6 + ["new"] * (len(files) - 6)
    whole = _history_of(store, "F")
    assert [r.status for r in ingest_git(store, friday, spec, stream="F")] == ["recorded"] * len(files)
    # history rewritten from the fourth commit on (same bytes, new commits): refused, nothing written
    fourth = _git(repo, "rev-list", "--reverse", "HEAD").split()[3]
    _git(repo, "reset", "-q", "--hard", f"{fourth}~1")
    _commit_history(repo, files[3:], ".temper/friday-state.json", start=30)
    new_fourth = _git(repo, "rev-list", "--reverse", "HEAD").split()[3]
    with pytest.raises(SourceConflict) as info:
        ingest_git(store, friday, spec, stream="F")
    assert str(info.value).startswith(f'{repo}:.temper/friday-state.json@{new_fourth[:12]} differs from version ')
    assert f"(recorded .temper/friday-state.json at commit {fourth[:12]}, now .temper/friday-state.json at " \
           f"commit {new_fourth[:12]})" in str(info.value)
    assert _history_of(store, "F") == whole
    moved = ingest_git(store, friday, spec, stream="F", force_new_stream=True)
    assert {r.stream for r in moved} == {"F~2"} and [r.status for r in moved] == ["new"] * len(files)


def test_git_branchy_history_twice_records_nothing(run, branchy_repo) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Side branches, an ours-merge that gives back the bytes before it, a committed conflict, a
    deletion and a re-creation: the second capture records nothing."""
    repo, _ = branchy_repo
    first = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    assert first.exit_code == 0, first.output
    before = _log(run, "state.json")
    again = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    statuses = [json.loads(x)["status"] for x in again.stdout.splitlines()]
    assert statuses == [("unchanged" if json.loads(x)["status"] == "unchanged" else "recorded")
                        for x in first.stdout.splitlines()]
    assert statuses.count("unchanged") == 1  # the ours-merge
    assert _log(run, "state.json") == before
    assert "9 version(s) already recorded, 0 new, 1 unchanged" in run("ingest", "generic", "--git",
                                                                      f"{repo}:state.json").stderr


# ------------------------------------------------------------------ every snapshot dialect


@pytest.mark.parametrize("name", [n for n in SNAPSHOT if get_dialect(n).versions_in_folders or n == "envelope"])
def test_every_dialect_records_a_folder_once(store: EventStore, name: str, tmp_path: Path) -> None:
    d = get_dialect(name)
    docs = [s.doc for s in history(name, 3) if s.doc is not None]
    whole = tmp_path / "whole"
    whole.mkdir()
    for i, doc in enumerate(docs):
        (whole / f"{i:03d}.json").write_bytes(render(doc, i))
    first = ingest(store, d, [whole], stream=f"{name}-once")
    streams = sorted({r.stream for r in first})
    recorded = {s: _history_of(store, s) for s in streams}
    assert sum(len(v) for v in recorded.values()) > 0
    assert {r.status for r in ingest(store, d, [whole], stream=f"{name}-once")} <= {"recorded", "unchanged"}
    assert {s: _history_of(store, s) for s in streams} == recorded
    # a prefix then the whole, into other streams (--stream), against one capture of the whole
    if len(streams) == 1:
        prefix = _copy(_files(whole)[:len(docs) // 2], tmp_path / "prefix")
        ingest(store, d, [prefix], stream="grown")
        ingest(store, d, [whole], stream="grown")
        assert _history_of(store, "grown") == recorded[streams[0]]


def test_a_task_folder_is_a_live_source(store: EventStore, tmp_path: Path) -> None:
    """taskflow: a folder is one document; captured again unchanged it records nothing, changed it
    records one version."""
    d = get_dialect("taskflow")
    docs = [s.doc for s in history("taskflow", 2) if s.doc is not None and s.doc.get("artifacts")]
    target = tmp_path / "t"
    folder = d.restore(docs[0], target)[0].parent
    [r] = ingest(store, d, [folder])
    assert r.status == "new"
    assert [x.status for x in ingest(store, d, [folder])] == ["recorded"]
    shutil.rmtree(folder)
    changed = next(doc for doc in docs[1:] if doc.get("artifacts") != docs[0].get("artifacts"))
    d.restore(changed, target)
    assert [x.status for x in ingest(store, d, [folder])] == ["new"]


# ------------------------------------------------------------------ watch and hooks


def test_watch_restarted_records_nothing_again(store_url: str, tmp_path: Path) -> None:
    """A watched folder of versions and a watched file: stopped and started again, watch records only
    what is new (before, a restarted watch of a folder recorded its versions again after the newest)."""
    folder = _state_folder(tmp_path, [{"taskId": "W", "n": i} for i in range(1, 4)])
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"n": 1}))

    def watching(path: Path) -> Any:
        return evstore_child("--url", store_url, "watch", "generic", str(path), "--interval", "0.05", "--json")

    with watching(folder) as child:
        assert [json.loads(child.readline())["version"] for _ in range(3)] == [1, 2, 3]
        child.interrupt()
    with watching(state) as child:
        assert json.loads(child.readline())["version"] == 1
        child.interrupt()
    (folder / "04-state.json").write_text(json.dumps({"taskId": "W", "n": 4}))
    state.write_text(json.dumps({"n": 2}))
    for path, version, place in ((folder, 4, "file:04-state.json"), (state, 2, "file:state.json")):
        with watching(path) as child:  # restarted: the first thing it records is the new version
            line = json.loads(child.readline())
            out, _ = child.interrupt()
        assert (line["version"], line["status"], line["source_id"].split("@")[0]) == (version, "new", place)
        assert out == []
    with EventStore(store_url) as s:
        assert s.stream_version("W") == 4 and s.stream_version("state.json") == 2


def test_a_spool_drained_twice_records_each_state_version_once(store_url: str, tmp_path: Path) -> None:
    """Hook calls of Writes of a state file: drained, then the same spool file drained again (a drain
    that died before deleting it): one version per call, its identity the spool record's."""
    directory = tmp_path / "spool"
    state = tmp_path / "agent-state.json"  # mapipe's state file: a Write of it records a version
    docs = [s.doc for s in history("mapipe", 4) if s.doc is not None][:4]
    for i, doc in enumerate(docs):
        text = json.dumps(doc, indent=2)
        state.write_text(text)
        spool.write(directory, json.dumps({
            "session_id": "S", "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": f"t{i}",
            "tool_input": {"file_path": str(state), "content": text}}).encode())
    [claimed] = spool.claim(directory)
    kept = tmp_path / "kept.jsonl"
    shutil.copy(claimed, kept)
    with EventStore(store_url) as store:
        first = capture.drain(store, directory)
        assert first.hooks == 4 and not first.errors
        [stream] = {r.stream for r in first.states}
        recorded = _history_of(store, stream)
        shutil.copy(kept, directory / "claimed-1-1.jsonl")
        second = capture.drain(store, directory)
        assert second.hooks == 4 and not second.errors
        assert _history_of(store, stream) == recorded and store.stream_version("S") == 4
        ids = [x[2] for x in recorded if x[2]]
        assert ids == [f"spool:{r.digest}" for r in spool.read(kept)]


# ------------------------------------------------------------------ the property


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.integers(min_value=1, max_value=8), min_size=2, max_size=6),
       values=st.lists(st.integers(min_value=0, max_value=3), min_size=8, max_size=8).filter(lambda v: v[0] < 3))
def test_overlapping_captures_of_prefixes_yield_exactly_the_history(steps: list[int], values: list[int]) -> None:
    """Any sequence of captures of prefixes of one history (shorter, longer, the same again; versions
    that repeat the bytes before them included) leaves the stream one capture of the whole leaves."""
    generic = get_dialect("generic")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        url = migrated(f"sqlite:///{base}/store.db")
        files = []
        for i, v in enumerate(values):
            f = base / "all" / f"{i:02d}-s.json"
            f.parent.mkdir(exist_ok=True)
            f.write_text(json.dumps({"v": v}) if v < 3 else '{"v": ')  # 3: a broken write, recorded as such
            files.append(f)
        with EventStore(url) as store:
            ingest(store, generic, [base / "all"], stream="whole")
            for k in [*steps, len(files)]:
                prefix = base / f"p{k}" / "h"
                if not prefix.exists():
                    _copy(files[:k], prefix)
                ingest(store, generic, [prefix], stream="captured")
            assert _without_paths(_history_of(store, "captured")) == _without_paths(_history_of(store, "whole"))


def _without_paths(recorded: list[tuple[str, bytes, Any]]) -> list[tuple[str, Any, Any]]:
    """A stream's history with the file path an unreadable version's error names left out (each
    prefix is a folder of its own here)."""
    out = []
    for kind, data, ident in recorded:
        decoded = json.loads(data)
        if kind == "document.unreadable":
            decoded["error"] = decoded["error"].rsplit(": ", 2)[-2:]
        out.append((kind, decoded, ident))
    return out


def test_meta_source_id_is_indexed_and_checked(store: EventStore, tmp_path: Path) -> None:
    """What the append writes to source_versions is what meta.source.id says (one row per snapshot's
    last event), and a capture reads it back in one query for every stream."""
    folder = _state_folder(tmp_path, [{"n": 1}, {"n": 2}])
    ingest(store, get_dialect("generic"), [folder], stream="a")
    ingest(store, get_dialect("generic"), [folder], stream="b")
    got = store.recorded_sources(["a", "b", "absent"])
    assert set(got) == {"a", "b"} and got["a"] == got["b"]
    assert [x[0] for x in got["a"]] == [1, 2]
    assert [x[1] for x in got["a"]] == [x[2] for x in _history_of(store, "a")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_migration_fills_the_identities_of_what_was_captured_before(backend: str, tmp_path: Path,
                                                                        request: pytest.FixtureRequest) -> None:
    """A store at revision 0005 holds captures without identities (a folder, a git range, a state file
    written by a hook); migration 0006 derives them from the events' meta, so capturing the same
    sources again afterwards records nothing."""
    from eventstore import migrate
    from eventstore.db import make_engine
    from eventstore.ingest import Ingestor, git_snapshots, load_paths, stamp_times

    url = f"sqlite:///{tmp_path}/old.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0005")
        generic = get_dialect("generic")
        folder = _state_folder(tmp_path, [{"n": 1}, {"n": 2}, {"n": 2}, {"n": 3}])
        repo = tmp_path / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        _commit_history(repo, _files(folder), "state.json")
        with EventStore(url, check_schema=False, plain_digests=True) as old:
            for stream, snaps in (("F", load_paths(generic, [folder])),
                                  ("G", list(git_snapshots(f"{repo}:state.json")))):
                stamp_times(generic, snaps)
                for snap in snaps:
                    snap.source.pop("id", None)  # as evstore wrote them before capture-once
                Ingestor(old, generic, stream=stream).ingest_all(snaps)
            before = {s: _history_of(old, s) for s in ("F", "G")}
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with EventStore(url) as store:
        from eventstore.verify import verify

        assert verify(store).ok  # the rows the migration derived agree with the events' meta
        assert [r.status for r in ingest(store, generic, [folder], stream="F")] == \
            ["recorded", "recorded", "unchanged", "recorded"]
        # git: the commit of 03 (02's bytes again) does not touch the file
        assert [r.status for r in ingest_git(store, generic, f"{repo}:state.json", stream="G")] == ["recorded"] * 3
        assert {s: _history_of(store, s) for s in ("F", "G")} == before
        commits = _git(repo, "log", "--reverse", "--format=%H", "--", "state.json").split()
        assert store.recorded_sources(["F", "G"]) == {
            "F": [(1, f"file:01-state.json@{_sha(folder / '01-state.json')}"),
                  (2, f"file:02-state.json@{_sha(folder / '02-state.json')}"),
                  (3, f"file:04-state.json@{_sha(folder / '04-state.json')}")],
            "G": [(1, f"git:{commits[0]}:state.json"), (2, f"git:{commits[1]}:state.json"),
                  (3, f"git:{commits[2]}:state.json")]}


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_holds_source_versions_to_the_events_meta(store: EventStore, tmp_path: Path) -> None:
    """A source_versions row changed or deleted behind the store's back (triggers dropped first, as an
    owner could) is a ``source`` failure naming stream and version: a capture trusts the table."""
    from conftest import exec_sql

    from eventstore.verify import verify

    folder = _state_folder(tmp_path, [{"n": 1}, {"n": 2}, {"n": 3}])
    ingest(store, get_dialect("generic"), [folder], stream="V")
    assert verify(store).ok
    with pytest.raises(Exception, match="append-only"):
        exec_sql(store, "DELETE FROM source_versions")
    if store.engine.dialect.name == "sqlite":
        exec_sql(store, "DROP TRIGGER source_versions_no_update")
        exec_sql(store, "DROP TRIGGER source_versions_no_delete")
    else:
        exec_sql(store, "DROP TRIGGER source_versions_no_update_delete ON source_versions")
    exec_sql(store, "UPDATE source_versions SET source_id = 'file:forged@00' WHERE version = 2")
    exec_sql(store, "DELETE FROM source_versions WHERE version = 3")
    failures = [(f.stream_id, f.version, f.field_class, f.detail) for f in verify(store).failures]
    ids = [i for _, i in store.recorded_sources(["V"])["V"]]
    assert failures == [
        ("V", 2, "source", f"source_versions says file:forged@00 but meta.source.id is "
                           f"file:02-state.json@{_sha(folder / '02-state.json')}"),
        ("V", 3, "source", f"meta.source.id file:03-state.json@{_sha(folder / '03-state.json')} has no "
                           "source_versions row (a capture would record this version again)")]
    assert ids[0].startswith("file:01-state.json@")


def test_a_capture_reads_what_is_recorded_in_one_query(sqlite_url: str, tmp_path: Path) -> None:
    """Whatever the number of versions and streams, a capture asks the database once what its streams
    recorded (an indexed read of source_versions), not once per version."""
    migrated(sqlite_url)
    folder = _state_folder(tmp_path, [{"taskId": f"T-{i % 3}", "n": i} for i in range(30)])  # three streams
    with EventStore(sqlite_url) as store:
        ingest(store, get_dialect("generic"), [folder])
        statements: list[str] = []
        store._raw().set_trace_callback(statements.append)
        results = ingest(store, get_dialect("generic"), [folder])
        store._raw().set_trace_callback(None)
    assert {r.status for r in results} == {"recorded"} and len({r.stream for r in results}) == 3
    reads = [s for s in statements if "source_versions" in s]
    assert len(reads) == 1 and reads[0].startswith("SELECT") and "FROM events" not in " ".join(statements)


def test_two_captures_racing_record_each_version_once(store_url: str, tmp_path: Path) -> None:
    """Two processes' worth of captures of one folder at once (threads, each its own store handle):
    the stream's expected version makes the loser fail cleanly (ConcurrencyError), and its retry finds
    everything recorded.  The stream is what one capture gives."""
    import threading

    from eventstore.errors import ConcurrencyError

    folder = _copy(_files(next(h for h in HISTORIES if h.name == "codeharness-circuit-breaker")), tmp_path / "cb")
    statuses: list[list[str]] = []
    problems: list[BaseException] = []

    def capture_it() -> None:
        try:
            with EventStore(store_url) as mine:
                for _ in range(5):
                    try:
                        statuses.append([r.status for r in ingest(mine, get_dialect("generic"), [folder],
                                                                   stream="race")])
                        return
                    except ConcurrencyError:
                        continue
        except BaseException as exc:  # noqa: BLE001  (reported by the assertion below)
            problems.append(exc)

    threads = [threading.Thread(target=capture_it) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not problems and len(statuses) == 2, problems
    with EventStore(store_url) as store:
        raced = _history_of(store, "race")
        ingest(store, get_dialect("generic"), [folder], stream="alone")
        assert raced == _history_of(store, "alone")
    assert "new" not in statuses[1]  # the second to finish found every version recorded
