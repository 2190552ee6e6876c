"""``evstore demo``: deterministic per seed, re-runs add fresh runs, the CLI summary is useful."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import evstore_child, migrated

from eventstore.cli import register
from eventstore.store import EventStore
from projections.demo import pick_dialects, run_demo, simulate_run
from projections.runs import IndexedEventStore, list_runs

DIALECTS = pick_dialects()


def test_the_demo_simulates_every_dialect() -> None:
    assert DIALECTS == ["mapipe", "envelope", "friday", "taskflow", "taskmaster"]  # a lost dialect fails, never skips


def _content(url: str) -> dict[str, list[tuple[str, str, bytes, bytes, str | None]]]:
    with EventStore(url) as s:
        out: dict[str, list] = {}
        for e in s.iter_all():
            out.setdefault(e.stream_id, []).append((e.event_id, e.type, e.data, e.meta, e.occurred_at))
        return out


def _demo(url: str, *args: str) -> object:
    # runs only (--sessions 0): these tests count streams; tests/test_timeline.py covers the sessions
    return CliRunner().invoke(register(), ["demo", "--url", url, "--json", "--sessions", "0", *args])


def test_same_seed_same_portfolio_and_reruns_never_clash(tmp_path: Path) -> None:
    a, b = f"sqlite:///{tmp_path}/a/events.db", f"sqlite:///{tmp_path}/b/events.db"
    ra = _demo(a, "--runs", "6", "--seed", "11")
    rb = _demo(b, "--runs", "6", "--seed", "11")
    assert ra.exit_code == 0 and rb.exit_code == 0, ra.output  # type: ignore[attr-defined]
    first = _content(a)
    assert first == _content(b)  # ids, types, data, meta, times: all the same
    assert len(first) == 6
    # a different seed is a different portfolio
    c = f"sqlite:///{tmp_path}/c/events.db"
    assert _demo(c, "--runs", "6", "--seed", "12").exit_code == 0  # type: ignore[attr-defined]
    assert _content(c) != first
    # a second demo on the same store adds fresh runs; nothing of the first changes
    again = _demo(a, "--runs", "6", "--seed", "11")
    assert again.exit_code == 0  # type: ignore[attr-defined]
    summary = json.loads(again.stdout)  # type: ignore[attr-defined]
    assert summary["first_run"] == 7 and summary["runs"] == 6
    after = _content(a)
    assert len(after) == 12
    assert {k: after[k] for k in first} == first
    with IndexedEventStore(a) as s:
        assert len(list_runs(s)) == 12
        assert sum(r.events for r in list_runs(s)) == s.max_position()


def test_parallel_simulation_equals_sequential(sqlite_url: str, tmp_path: Path) -> None:
    other = f"sqlite:///{tmp_path}/par/events.db"
    assert _demo(sqlite_url, "--runs", "5", "--seed", "3", "--workers", "1").exit_code == 0  # type: ignore[attr-defined]
    assert _demo(other, "--runs", "5", "--seed", "3", "--workers", "2").exit_code == 0  # type: ignore[attr-defined]
    assert _content(sqlite_url) == _content(other)


def test_simulate_run_is_deterministic_and_ingest_shaped() -> None:
    r1, r2 = simulate_run(5, 42, DIALECTS), simulate_run(5, 42, DIALECTS)
    assert [(s, e.type, e.data, e.meta, e.event_id, x) for s, e, x in r1.items] == \
           [(s, e.type, e.data, e.meta, e.event_id, x) for s, e, x in r2.items]
    assert r1.items[0][2] == 0  # the stream's first event expects a new stream
    assert {s for s, _, _ in r1.items} == {r1.stream_id}
    assert "demo-00042" in r1.stream_id
    assert all(b'"dialect"' in e.meta for _, e, _ in r1.items)


def test_demo_human_summary_names_real_next_commands(sqlite_url: str) -> None:
    res = CliRunner().invoke(register(), ["demo", "--url", sqlite_url, "--runs", "8", "--seed", "1", "--sessions", "0"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "events written in" in out and "Next, try:" in out
    task = out.split("evstore --url")[2].split("replay ", 1)[1].split()[0]
    with IndexedEventStore(sqlite_url) as s:
        from projections.runs import find_streams_by_task

        assert find_streams_by_task(s, task)  # the suggested id is real
    for cmd in ("runs", f"log {task}", "verify"):
        assert cmd in out
    # the default portfolio covers several dialects
    rows = [json.loads(line) for line in CliRunner().invoke(register(), ["--url", sqlite_url, "runs", "--json"]).stdout.splitlines()]
    assert len(rows) == 8
    # seed 1 always draws this mix (the dialects' weights, one RNG): any drift is a change of the demo
    assert Counter(r["dialect"] for r in rows) == {"taskflow": 3, "mapipe": 2, "taskmaster": 2, "friday": 1}


def test_demo_library_progress_and_bad_runs(sqlite_url: str) -> None:
    from eventstore.errors import EvstoreError

    migrated(sqlite_url)
    seen: list[tuple[int, int]] = []
    with IndexedEventStore(sqlite_url) as s:
        summary = run_demo(s, runs=3, seed=2, chunk_runs=1, progress=lambda d, t: seen.append((d, t)))
        assert seen == [(1, 3), (2, 3), (3, 3)]
        assert summary.events == s.max_position() and sum(summary.by_dialect.values()) == 3
        with pytest.raises(EvstoreError):
            run_demo(s, runs=0)
    res = CliRunner().invoke(register(), ["demo", "--url", sqlite_url, "--runs", "0"])
    assert res.exit_code == 2


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out.update(int(c) for c in (task / "children").read_text().split())
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status is left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_no_demo_worker_outlives_a_killed_parent(tmp_path: Path) -> None:
    with evstore_child("demo", "--url", f"sqlite:///{tmp_path}/events.db", "--runs", "5000", "--workers", "2",
                       "--json") as child:
        pid = child.proc.pid
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while len(workers) < 2 and time.monotonic() < deadline and child.proc.poll() is None:
            workers = _children(pid)
            time.sleep(0.05)
        assert len(workers) >= 2, "the demo started no worker processes"
        try:
            os.kill(pid, signal.SIGKILL)
            child.proc.wait(timeout=10)
            deadline = time.monotonic() + 5
            while any(_alive(w) for w in workers) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not [w for w in workers if _alive(w)], "demo workers outlived their parent"
        finally:  # a failing run must not leak them (their parent is gone: nobody else stops them)
            for w in workers:
                if _alive(w):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w, signal.SIGKILL)
