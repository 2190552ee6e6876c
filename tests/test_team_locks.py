"""One place only: the hook-spool drain and the projection runner hold a PostgreSQL advisory lock
(eventstore.locks), so several processes (workers, servers, machines) on one store never do the same
work twice, and when the holder dies or loses its session another takes over.  Real processes and the
real PostgreSQL server; on SQLite the lock is always granted and the file locks order the work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import EVSTORE, migrated

from eventstore import spool
from eventstore.backends.postgres import APPEND_LOCK_KEY
from eventstore.locks import ExclusiveLock, lock_key
from eventstore.store import EventStore, NewEvent
from projections.engine import RUNNER_LOCK

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[EventStore]:
    store = EventStore(migrated(pg_url))
    try:
        yield store
    finally:
        store.close()


def _terminate(store: EventStore, holder_pid: int) -> None:
    """End a PostgreSQL session from outside, as an administrator or a network cut would."""
    handle = store.connect()
    try:
        raw = handle.driver_connection
        raw.execute("SELECT pg_terminate_backend(%s)", (holder_pid,))
        raw.commit()
    finally:
        handle.close()


def _session_of(holder: str | None) -> int:
    """The PostgreSQL session id in a holder's description ("... (PostgreSQL session N ...)")."""
    assert holder is not None and "PostgreSQL session " in holder, holder
    return int(holder.split("PostgreSQL session ", 1)[1].split()[0].rstrip(")"))


def test_lock_keys_are_per_store_and_never_the_append_lock(pg_store: EventStore, sqlite_url: str) -> None:
    other = EventStore(migrated(sqlite_url))
    try:
        assert ExclusiveLock(pg_store, RUNNER_LOCK).key == lock_key(f"{pg_store.store_id()}:{RUNNER_LOCK}")
        assert lock_key(f"{pg_store.store_id()}:{RUNNER_LOCK}") != lock_key(f"{other.store_id()}:{RUNNER_LOCK}")
        assert APPEND_LOCK_KEY not in {ExclusiveLock(pg_store, RUNNER_LOCK).key,
                                       ExclusiveLock(pg_store, "hook-drain:x").key}
    finally:
        other.close()


def test_one_session_holds_the_lock_and_another_takes_over_when_it_ends(pg_store: EventStore) -> None:
    second = EventStore(pg_store.backend.url)  # another process's store: its own connections
    first_lock = ExclusiveLock(pg_store, RUNNER_LOCK, label="first runner")
    second_lock = ExclusiveLock(second, RUNNER_LOCK, label="second runner")
    try:
        assert first_lock.acquire() and first_lock.still_held()
        assert not second_lock.acquire() and not second_lock.held
        assert second_lock.holder() is not None and second_lock.holder().startswith("first runner (")  # type: ignore[union-attr]
        # an append takes the append lock meanwhile: a different key
        pg_store.append("S", [NewEvent(type="note", data={"n": 1})])
        first_lock.release()
        assert first_lock.holder() is None
        assert second_lock.acquire()
        assert not first_lock.acquire()
        # The holder's session is ended from outside: the lock is free, and the holder knows it lost it.
        _terminate(pg_store, _session_of(first_lock.holder()))
        wait_until(lambda: first_lock.holder() is None, "the ended session's lock freed")
        assert not second_lock.still_held() and not second_lock.held
        assert first_lock.acquire() and first_lock.still_held()
    finally:
        first_lock.close()
        second_lock.close()
        second.close()


def test_on_sqlite_the_lock_is_always_granted(sqlite_url: str) -> None:
    store = EventStore(migrated(sqlite_url))
    try:
        with ExclusiveLock(store, RUNNER_LOCK) as a, ExclusiveLock(store, RUNNER_LOCK) as b:
            assert a.held and b.held and a.still_held() and a.holder() is None
    finally:
        store.close()


class Runner:
    """A real `evstore projections run --follow` process; what it says on stderr, read as it comes."""

    def __init__(self, url: str, cache: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
        self.proc = subprocess.Popen([EVSTORE, "--url", url, "projections", "run", "--follow", "--poll", "0.1"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self.said: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.said.append(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(timeout=10)


@contextmanager
def runner(url: str, cache: Path) -> Iterator[Runner]:
    r = Runner(url, cache)
    try:
        yield r
    finally:
        r.kill()
        assert r.proc.stderr is not None
        r.proc.stderr.close()


def _holder_pid(lock: ExclusiveLock) -> int | None:
    """The operating-system pid of the evstore process holding ``lock`` (from the label it gave)."""
    holder = lock.holder()
    if holder is None or "(pid " not in holder:
        return None
    return int(holder.split("(pid ", 1)[1].split()[0])


def _caught_up(store: EventStore) -> bool:
    from projections.engine import ProjectionRunner
    from projections.search import SEARCH

    with ProjectionRunner(store) as r:
        cp = r.checkpoint(SEARCH.name)
    return cp is not None and cp.position >= store.max_position()


def test_two_runner_processes_one_runs_and_the_other_takes_over_when_it_dies(
        pg_store: EventStore, tmp_path: Path) -> None:
    url = pg_store.backend.url
    lock = ExclusiveLock(pg_store, RUNNER_LOCK)
    pg_store.append("S", [NewEvent(type="note", data={"n": i}) for i in range(3)])
    with runner(url, tmp_path / "a") as a:
        wait_until(lambda: _holder_pid(lock) == a.pid, "the first runner holding the lock")
        wait_until(lambda: _caught_up(pg_store), "the first runner applying the log")
        with runner(url, tmp_path / "b") as b:
            # b stands by, says who runs, and does not take the lock while a lives
            wait_until(lambda: any("standing by" in line for line in b.said), "the second runner standing by")
            assert any(f"another projection runner is running (evstore projections run (pid {a.pid} " in line
                       for line in b.said), b.said
            pg_store.append("S", [NewEvent(type="note", data={"n": 3})])
            wait_until(lambda: _caught_up(pg_store), "the new event applied")
            assert _holder_pid(lock) == a.pid

            # a's session is ended (a network cut, pg_terminate_backend): one of the two holds it again
            ended = _session_of(lock.holder())
            _terminate(pg_store, ended)
            def held_on_a_new_session() -> bool:
                holder = lock.holder()  # read once: between two reads the lock may pass from hand to hand
                return holder is not None and _session_of(holder) != ended

            wait_until(held_on_a_new_session, "a runner holding the lock on a new session")
            holder = _holder_pid(lock)
            assert holder in (a.pid, b.pid)
            survivor = b if holder == a.pid else a
            victim = a if holder == a.pid else b

            # the holder dies: the other takes over and keeps the projections current
            victim.kill()
            wait_until(lambda: _holder_pid(lock) == survivor.pid, "the surviving runner taking over")
            pg_store.append("S", [NewEvent(type="note", data={"n": 4})])
            wait_until(lambda: _caught_up(pg_store), "the survivor applying new events")
            assert survivor.proc.poll() is None
            survivor.kill()
        wait_until(lambda: lock.holder() is None, "the lock free once every runner died")


def test_a_one_shot_run_skips_while_another_runner_holds_the_lock(pg_store: EventStore) -> None:
    pg_store.append("S", [NewEvent(type="note", data={})])
    with ExclusiveLock(pg_store, RUNNER_LOCK, label="the team server's runner") as held:
        assert held.held
        r = subprocess.run([EVSTORE, "--url", pg_store.backend.url, "projections", "run"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr
        assert "another projection runner is running (the team server's runner (PostgreSQL session" in r.stderr
        assert "nothing applied here" in r.stderr and r.stdout == ""
    assert not _caught_up(pg_store)


HOLD = """
import sys, time
from pathlib import Path
from eventstore import capture
from eventstore.store import EventStore
lock = capture.drain_exclusive(EventStore(sys.argv[1]), Path(sys.argv[2]))
assert lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_drain_skips_while_another_machine_drains_the_folder_and_runs_once_it_died(
        pg_store: EventStore, tmp_path: Path) -> None:
    url = pg_store.backend.url
    directory = tmp_path / "spool"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVSTORE_SPOOL_DIR": str(directory),
           "EVSTORE_SCRUB_KEY": "test-key"}
    for i in range(3):
        payload = {"session_id": "S1", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                   "tool_use_id": f"toolu_{i}", "tool_input": {"command": f"echo {i}"}}
        spool.write(directory, json.dumps(payload).encode())
    # Another process (a server on another machine that mounts the folder) holds the folder's drain lock;
    # the file lock is not shared with it, so only the database can keep the two drains apart.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url, str(directory)], env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"

        def drain() -> dict[str, object]:
            r = subprocess.run([EVSTORE, "--url", url, "hook", "drain", "--json"], env=env, capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            return dict(json.loads(r.stdout))

        assert drain()["hooks"] == 0
        assert spool.waiting(directory) and pg_store.max_position() == 0  # kept for the holder, not lost
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        wait_until(lambda: drain()["hooks"] == 3, "the drain running once the holder died")
        assert not spool.pending(directory)
        assert drain()["hooks"] == 0  # nothing left
        hooks = [e.payload["tool_use_id"] for e in pg_store.read_stream("S1") if e.type == "claude.hook"]
        assert hooks == ["toolu_0", "toolu_1", "toolu_2"]  # each once, in order
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
