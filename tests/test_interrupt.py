"""Ctrl-C during `ingest`, `append --batch` and `demo`: exit 130 and one line saying what was and
was not written, which the store then holds (issue 31, part 3; SQLite and PostgreSQL)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import sqlite3
import time
from pathlib import Path

from conftest import evstore_child, migrated

from eventstore.store import EventStore


class _Opens:
    """An inotify watch on ``path`` (a folder: the files in it, or one file), set before the child starts.

    Polling ``/proc/PID/fd`` can miss every open of 4,000 small files on a loaded machine (the
    reads take microseconds and the poller may not run for milliseconds): the kernel queues an
    inotify event for each open instead, so the first one is never missed."""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.path = path
        self.fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")

    def __enter__(self) -> _Opens:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def wait(self, timeout: float = 60) -> None:
        """Return once something opened the path or a file in it: the child is in the command, reading."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            raise AssertionError(f"nothing opened {self.path} within {timeout} s")


def _events(url: str) -> int:
    with EventStore(url) as s:
        return sum(1 for _ in s.iter_all())


def test_ctrl_c_during_ingest_writes_nothing_and_says_so(store_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "hist"
    folder.mkdir()
    for i in range(4000):
        (folder / f"{i:05d}.json").write_text(json.dumps({"taskId": "BIG", "n": i, "pad": "x" * 200}))
    with _Opens(folder) as opens, evstore_child("--url", store_url, "ingest", "generic", str(folder)) as child:
        opens.wait()
        out, err = child.interrupt(timeout=60)
    assert child.proc.returncode == 130, err
    assert err.splitlines()[-1] == ("interrupted: nothing written (an ingest is all-or-nothing; run it again to "
                                    "record the rest)")
    assert "Traceback" not in err and out == []
    assert _events(store_url) == 0


def test_ctrl_c_during_append_batch_writes_nothing_and_says_so(store_url: str, tmp_path: Path) -> None:
    batch = tmp_path / "big.jsonl"
    with batch.open("w") as fh:
        for i in range(200_000):
            fh.write(json.dumps({"stream": f"S-{i % 50}", "type": "t.x", "data": {"i": i}}) + "\n")
    with _Opens(batch) as opens, evstore_child("--url", store_url, "append", "--batch", str(batch)) as child:
        opens.wait()
        out, err = child.interrupt(timeout=60)
    assert child.proc.returncode == 130, err
    assert err.splitlines()[-1] == f"interrupted: nothing written (a --batch is all-or-nothing; {batch} is not recorded)"
    assert "Traceback" not in err and _events(store_url) == 0


def test_ctrl_c_during_demo_says_how_many_runs_were_written(sqlite_url: str) -> None:
    url = migrated(sqlite_url)
    path = url.removeprefix("sqlite:///")
    with evstore_child("demo", "--url", url, "--runs", "400", "--workers", "1") as child:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # some runs written, not all
            with sqlite3.connect(path) as con:
                if con.execute("SELECT count(*) FROM events").fetchone()[0]:
                    break
            time.sleep(0.02)
        out, err = child.interrupt(timeout=60)
    assert child.proc.returncode == 130, err
    m = re.fullmatch(r"interrupted: after (\d+) of 400 runs \((\d+) events written\); the rest not recorded",
                     err.splitlines()[-1])
    assert m, err
    with EventStore(url) as s:
        streams = {e.stream_id for e in s.iter_all()}
        assert (len(streams), _events(url)) == (int(m[1]), int(m[2]))
    assert 0 < int(m[1]) < 400


def test_ctrl_c_during_a_transcript_ingest_says_what_was_written(sqlite_url: str, tmp_path: Path) -> None:
    """Transcripts are recorded file by file: what the line says is what the store holds."""
    import uuid

    from tests.claude_fixtures import records

    url = migrated(sqlite_url)
    project = tmp_path / "projects" / "-work-proj"
    project.mkdir(parents=True)
    body = b"".join(records())
    for _ in range(400):
        (project / f"{uuid.uuid4()}.jsonl").write_bytes(body)
    with _Opens(project) as opens, evstore_child("--url", url, "ingest", "claude", str(tmp_path / "projects")) as child:
        opens.wait()
        out, err = child.interrupt(timeout=60)
    assert child.proc.returncode == 130, err
    last = err.splitlines()[-1]
    m = re.fullmatch(r"interrupted: (?:nothing written|(\d+) event\(s\) written to (\d+) stream\(s\); the rest not "
                     r"recorded \(run it again: what is recorded is not read twice\))", last)
    assert m, err
    with EventStore(url) as s:
        streams = {e.stream_id for e in s.iter_all()}
        assert (_events(url), len(streams)) == ((int(m[1]), int(m[2])) if m[1] else (0, 0))
    assert len(streams) < 400
