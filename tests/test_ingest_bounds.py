"""Ingest reads only what it was named, and never a file whole before deciding (issue 32, item 8):
stat before reading, no symlink followed out of or around the named tree, a file over the limit
refused unread, Claude transcripts streamed (peak memory does not grow with the file).
``benchmarks/bench_bounds.py`` measures the same at full size in a process of its own."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import migrated

from eventstore import capture, config
from eventstore.cli import register

MB = 1024 * 1024


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (a hole): reading it costs memory, not space."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``fn()`` returned, the most bytes Python held at once while it ran)."""
    tracemalloc.start()
    try:
        return fn(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def task(folder: Path, title: str = "Task") -> Path:
    folder.mkdir(parents=True)
    (folder / "SPEC.md").write_text(f"# {title}\n")
    return folder


def test_an_oversized_file_is_refused_before_it_is_read(sqlite_url: str, tmp_path: Path) -> None:
    url = migrated(sqlite_url)
    big = sparse(tmp_path / "state.json", config.MAX_SNAPSHOT_BYTES + 1)
    r, used = peak(lambda: cli(url, "ingest", "generic", str(big)))
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(f"Error: {big}: file of {config.MAX_SNAPSHOT_BYTES + 1} bytes exceeds the snapshot "
                               f"limit of {config.MAX_SNAPSHOT_BYTES} bytes (EVSTORE_MAX_SNAPSHOT_BYTES); it was not "
                               "read.")
    assert used < 8 * MB, used  # the 64 MiB file was read whole before (65+ MB)
    # A folder of versions: the same, for the file over the limit, before the others are ingested.
    sparse(tmp_path / "versions" / "2.json", config.MAX_SNAPSHOT_BYTES + 1)
    (tmp_path / "versions" / "1.json").write_text('{"a": 1}')
    r, used = peak(lambda: cli(url, "ingest", "generic", str(tmp_path / "versions")))
    assert r.exit_code == 1 and "it was not read" in r.stderr and used < 8 * MB
    assert cli(url, "runs", "--json").stdout.strip() == ""  # nothing was written (NDJSON: no run, no line)


def test_a_folder_holding_an_unrelated_big_file_is_refused_unread(sqlite_url: str, tmp_path: Path) -> None:
    url = migrated(sqlite_url)
    sparse(tmp_path / "tasks" / "downloads" / "disk.img", 300 * MB)
    task(tmp_path / "tasks" / "T-1")
    r, used = peak(lambda: cli(url, "ingest", "taskflow", str(tmp_path / "tasks")))
    assert r.exit_code == 1 and "downloads: not a task folder: it holds disk.img" in r.stderr, r.output
    assert used < 8 * MB, used  # 300 MB before
    # A task folder's files are summed before any is read: its document could not hold them.
    sparse(tmp_path / "big" / "T-2" / "DESIGN.md", config.MAX_SNAPSHOT_BYTES)
    (tmp_path / "big" / "T-2" / "SPEC.md").write_text("# T-2\n")
    r, used = peak(lambda: cli(url, "ingest", "taskflow", str(tmp_path / "big" / "T-2")))
    assert r.exit_code == 1 and "T-2: task folder of" in r.stderr and "it was not read" in r.stderr, r.output
    assert used < 8 * MB, used


@pytest.mark.timeout(60)
def test_ingest_taskflow_of_the_root_stops_at_its_first_folder(sqlite_url: str) -> None:
    """`ingest taskflow /` read every file on the disk for over a minute before."""
    r = cli(migrated(sqlite_url), "ingest", "taskflow", "/")
    assert r.exit_code == 1 and ": not a task folder: it holds" in r.stderr, r.output


def test_symlinks_are_not_followed_out_of_or_around_the_tree(store_url: str, tmp_path: Path) -> None:
    url = migrated(store_url)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("not for the store\n")
    tasks = tmp_path / "tasks"
    t1 = task(tasks / "T-1", "One")
    (t1 / "loop").symlink_to(tasks, target_is_directory=True)  # a loop: tasks/T-1/loop/T-1/loop/...
    (t1 / "elsewhere").symlink_to(outside, target_is_directory=True)
    (t1 / "NOTES.md").symlink_to(outside / "secret.md")  # a file out of the tree
    (t1 / "PLAN.md").write_text("plan\n")
    (t1 / "SAME.md").symlink_to(t1 / "PLAN.md")  # a file inside the tree: followed
    r = cli(url, "ingest", "taskflow", str(tasks))
    assert r.exit_code == 0, r.output
    runs = [json.loads(line) for line in cli(url, "runs", "--json").stdout.splitlines()]
    assert [x["task_id"] for x in runs] == ["T-1"]
    doc = json.loads(cli(url, "replay", runs[0]["stream_id"], "--json").stdout)
    assert sorted(doc["artifacts"]) == ["PLAN.md", "SAME.md", "SPEC.md"]
    assert doc["subtasks"] == []
    # Generic folders and Claude projects alike.
    (outside / "1.json").write_text('{"x": 1}')
    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "1.json").write_text('{"a": 1}')
    (versions / "2.json").symlink_to(outside / "1.json")
    r = cli(url, "ingest", "generic", "--stream", "g", str(versions))
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["version"] for x in cli(url, "log", "g", "--json").stdout.splitlines()] == [1]
    projects = tmp_path / "projects"
    (projects / "p").mkdir(parents=True)
    (projects / "p" / "loop").symlink_to(projects, target_is_directory=True)
    (projects / "p" / "s.jsonl").write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s",
                                                        "message": {"role": "user", "content": "hi"}}) + "\n")
    (outside / "o.jsonl").write_text((projects / "p" / "s.jsonl").read_text())
    (projects / "p" / "o.jsonl").symlink_to(outside / "o.jsonl")
    r = cli(url, "ingest", "claude", "--json", str(projects))
    assert r.exit_code == 0, r.output
    assert [Path(json.loads(x)["file"]).name for x in r.stdout.splitlines()] == ["s.jsonl"]


def _transcript(path: Path, lines: int) -> int:
    with open(path, "w") as f:
        for i in range(lines):
            f.write(json.dumps({"type": "user" if i % 2 else "assistant", "uuid": f"u{i}", "sessionId": "s",
                                "timestamp": f"2026-12-03T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                "message": {"role": "user", "content": f"line {i} " + "word " * 180}}) + "\n")
    return os.path.getsize(path)


def test_a_transcript_is_streamed_not_read_whole(store_url: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated(store_url)
    path = tmp_path / "s.jsonl"
    size = _transcript(path, 4500)  # 4.7 MB, read in batches of 1/36 of it
    monkeypatch.setattr(capture, "BATCH_BYTES", 128 * 1024, raising=False)
    warm = tmp_path / "warm.jsonl"  # the modules an ingest imports, imported before memory is traced
    warm.write_text(json.dumps({"type": "user", "uuid": "w", "sessionId": "warm", "message": {"content": "x"}}) + "\n")
    assert cli(url, "ingest", "claude", str(warm)).exit_code == 0
    r, used = peak(lambda: cli(url, "ingest", "claude", "--json", str(path)))
    assert r.exit_code == 0, r.output
    assert used < size / 2, (used, size)  # before: the file, its lines and every event at once (over 5x)
    assert json.loads(r.stdout)["lines"] == 4500
    assert cli(url, "replay", "s", "--raw").stdout_bytes == path.read_bytes()
    assert cli(url, "verify").exit_code == 0
    # Appended lines are recorded from where the last batch ended; the same events as one big batch.
    with open(path, "a") as f:
        f.write(json.dumps({"type": "user", "uuid": "late", "sessionId": "s", "message": {"content": "x"}}) + "\n")
    r = cli(url, "ingest", "claude", "--json", str(path))
    assert json.loads(r.stdout)["lines"] == 1
    streamed = [json.loads(x)["type"] for x in cli(url, "log", "s", "--json").stdout.splitlines()]
    monkeypatch.setattr(capture, "BATCH_BYTES", 1 << 40)
    other = migrated(str(url).replace("events.db", "whole.db")) if url.startswith("sqlite") else None
    if other is not None:
        assert cli(other, "ingest", "claude", str(path)).exit_code == 0
        whole = [json.loads(x)["type"] for x in cli(other, "log", "s", "--json").stdout.splitlines()]
        assert whole == streamed and cli(other, "replay", "s", "--raw").stdout_bytes == path.read_bytes()
