"""Ingest and the CLI under hostile conditions: odd paths, oversized events, lens bugs, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import Result
from conftest import EVSTORE, evstore_child, migrated

from eventstore import config
from eventstore.store import EventStore

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
