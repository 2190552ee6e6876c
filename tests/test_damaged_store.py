"""A damaged store file, a full disk, failing drains, drain bursts and hooks before `evstore init`
(issue 32, items 4 and 9; issue 31, "hooks before evstore init").

Every command here is a real `evstore` process: what a user sees is its stderr and exit code.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EVSTORE

from eventstore import spool

BOUND = 60.0  # seconds: generous for a loaded 2-core machine


def evstore(url: str, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EVSTORE, "--url", url, *args], input=None if stdin is None else stdin.decode(),
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def _idle(directory: Path) -> bool:
    """Whether no drain holds the folder's lock now (taken and let go at once)."""
    lock = spool.drain_lock(directory)
    if lock is None:
        return False
    os.close(lock)
    return True


def _stop(session: str) -> bytes:
    return json.dumps({"session_id": session, "hook_event_name": "Stop"}, separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store of 300 events in 30 streams (built once; each test damages a copy)."""
    where = tmp_path_factory.mktemp("good")
    url = f"sqlite:///{where}/events.db"
    batch = where / "batch.jsonl"
    batch.write_text("".join(json.dumps({"stream": f"S{i % 30}", "type": "t.x", "data": {"i": i, "pad": "x" * 200}})
                             + "\n" for i in range(300)))
    assert evstore(url, "init").returncode == 0
    r = evstore(url, "append", "--batch", str(batch))
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(where / "events.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return where / "events.db"


def _copy(good: Path, tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "events.db"
    shutil.copy(good, db)
    return db, f"sqlite:///{db}"


def _damage(db: Path, how: str) -> None:
    if how == "header overwritten":
        with db.open("r+b") as fh:
            fh.write(b"\xde\xad" * 50)
    else:  # truncated: the second half of the file is gone
        os.truncate(db, db.stat().st_size // 2)


def _damaged_error(r: subprocess.CompletedProcess[str], db: Path) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.startswith(f"Error: the store file is damaged ({db}: "), r.stderr
    assert "Restore it from a backup" in r.stderr and f"sqlite3 {db} .recover" in r.stderr


@pytest.mark.parametrize("how", ["header overwritten", "truncated"])
def test_a_damaged_file_is_one_error_line_for_every_command(how: str, good_store: Path, tmp_path: Path) -> None:
    db, url = _copy(good_store, tmp_path)
    _damage(db, how)
    for args in (["verify"], ["runs"], ["replay", "S3"], ["log", "S3"], ["hook", "drain"]):
        _damaged_error(evstore(url, *args), db)
    log = spool.spool_dir(url) / spool.DRAIN_ERRORS  # the drain said why where `doctor` looks
    assert "drain failed: the store file is damaged" in log.read_text()


def test_verify_runs_sqlites_own_check_and_finds_a_damaged_index_page(good_store: Path, tmp_path: Path) -> None:
    db, url = _copy(good_store, tmp_path)
    r = evstore(url, "verify")
    assert r.returncode == 0 and "file check: SQLite PRAGMA quick_check ok" in r.stderr, r.stderr
    assert json.loads(evstore(url, "verify", "--json").stdout)["storage_check"] == "SQLite PRAGMA quick_check"
    with sqlite3.connect(db) as conn:  # a leaf page of the unique index on event_id
        (index,) = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' "
                                "AND sql IS NULL AND name LIKE 'sqlite_autoindex_events_%' ORDER BY name DESC "
                                "LIMIT 1").fetchone()
        leaves = [p for p, t in conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ?", (index,)) if t == "leaf"]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    with db.open("r+b") as fh:
        fh.seek((leaves[len(leaves) // 2] - 1) * page_size + page_size // 2)
        fh.write(b"\x07" * 200)
    r = evstore(url, "verify")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "FAIL storage — SQLite PRAGMA quick_check: " in r.stderr
    assert f"Error: the store file is damaged ({db}: SQLite PRAGMA quick_check failed)" in r.stderr
    report = json.loads(evstore(url, "verify", "--json").stdout)
    assert report["ok"] is False and report["failures"][0]["field"] == "storage"


def test_verify_says_which_file_check_ran_on_postgresql(pg_url: str) -> None:
    assert evstore(pg_url, "init").returncode == 0
    r = evstore(pg_url, "verify")
    assert r.returncode == 0 and "file check: none on postgresql" in r.stderr, r.stderr
    assert json.loads(evstore(pg_url, "verify", "--json").stdout)["storage_check"] is None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs: a real filesystem that fills up (needs root and mount permission)."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill ({(r.stderr or r.stdout).strip()}); needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_at_0_bytes_free_every_command_says_disk_full(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk}/events.db"
    assert evstore(url, "init").returncode == 0
    assert evstore(url, "append", "S", "note", "--data", "{}").returncode == 0
    try:
        with (small_disk / "filler").open("wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass
    assert shutil.disk_usage(small_disk).free == 0
    for args in (["verify"], ["runs"], ["log", "S"], ["replay", "S"], ["append", "S", "note", "--data", "{}"],
                 ["hook", "drain"]):
        r = evstore(url, *args)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("Error: disk full: no space left on the disk holding"), (args, r.stderr)
        assert "--url" not in r.stderr


# ---------------------------------------------------------------- doctor and the hook's drain


def test_doctor_reports_failing_drains_with_their_error_time_and_waiting_records(good_store: Path,
                                                                                 tmp_path: Path) -> None:
    db, url = _copy(good_store, tmp_path)
    _damage(db, "header overwritten")
    directory = spool.spool_dir(url)
    r = evstore(url, "hook", "claude-code", stdin=_stop("s-1"))  # the drain it starts fails, in the background
    assert r.returncode == 0 and r.stdout == ""
    wait_until(lambda: (directory / spool.DRAIN_ERRORS).exists(), BOUND, "the drain's failure in drain-errors.log")
    wait_until(lambda: _idle(directory), BOUND, "the failed drain to end")
    evstore(url, "hook", "claude-code", stdin=_stop("s-2"))
    wait_until(lambda: len((directory / spool.DRAIN_ERRORS).read_text().splitlines()) >= 2, BOUND, "the second failure")
    r = evstore(url, "doctor")
    assert r.returncode == 1, r.stdout
    assert "last complete drain: never" in r.stdout
    last = [line for line in r.stdout.splitlines() if line.startswith("last drain error: ")]
    assert last and "drain failed: the store file is damaged" in last[0], r.stdout
    stamp = last[0].split(": ")[1]
    assert time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    assert "drains are failing" in r.stdout and "2 hook record(s) wait" in r.stdout
    shutil.copy(good_store, db)  # the file restored: the next drain records both calls
    r = evstore(url, "hook", "drain", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["hooks"] == 2
    after = evstore(url, "doctor").stdout
    assert "drains are failing" not in after and "last complete drain: never" not in after


def test_hooks_before_init_create_the_store(tmp_path: Path) -> None:
    """Issue 31: the drain a hook starts creates the store, as `ingest` does."""
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("EVSTORE_URL", "EVSTORE_SPOOL_DIR")}
    r = subprocess.run([EVSTORE, "hook", "claude-code"], input=_stop("s-1").decode(), cwd=project, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == ""
    db = project / ".evstore" / "events.db"
    url = f"sqlite:///{db}"
    wait_until(lambda: db.exists() and _idle(db.parent / "spool"), BOUND, "the drain's store")
    r = evstore(url, "log", "s-1", "--json")
    assert r.returncode == 0 and "claude.hook" in r.stdout, r.stderr
    r = evstore(url, "doctor")
    assert r.returncode == 0 and "drain errors: none" in r.stdout and "last complete drain: 20" in r.stdout


def test_a_hook_before_init_on_postgresql_is_a_drain_error_doctor_shows(pg_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "EVSTORE_SPOOL_DIR": str(tmp_path / "spool")}
    r = evstore(pg_url, "hook", "claude-code", stdin=_stop("s-1"), env=env)
    assert r.returncode == 0
    wait_until(lambda: (tmp_path / "spool" / spool.DRAIN_ERRORS).exists(), BOUND, "the drain's failure")
    r = evstore(pg_url, "doctor", env=env)
    assert r.returncode == 1 and "last drain error: " in r.stdout and "evstore init" in r.stdout, r.stdout
    assert evstore(pg_url, "init", env=env).returncode == 0
    r = evstore(pg_url, "hook", "drain", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["hooks"] == 1


# ---------------------------------------------------------------- one drain at a time


def _drains_of(marker: str) -> set[int]:
    """The pids of running `hook drain` processes whose environment holds ``marker``."""
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if b"drain" not in fh.read():
                    continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.add(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_burst_of_stops_runs_one_drain_at_a_time_and_records_every_call(backend: str, tmp_path: Path,
                                                                         request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path}/store/events.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    assert evstore(url, "init").returncode == 0
    marker = f"burst-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "EVSTORE_URL": url, "EVSTORE_SPOOL_DIR": str(tmp_path / "spool"), "EVSTORE_TEST_MARK": marker}
    most, seen, done = 0, set(), threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            now = _drains_of(marker)
            seen.update(now)
            most = max(most, len(now))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        hooks = [subprocess.Popen([EVSTORE, "hook", "claude-code"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  env=env) for _ in range(7)]
        for i, proc in enumerate(hooks):
            assert proc.stdin is not None
            proc.stdin.write(_stop(f"s-{i}"))
            proc.stdin.close()
        assert all(proc.wait(timeout=60) == 0 for proc in hooks)
        wait_until(lambda: not _drains_of(marker), BOUND, "the drains to end")
    finally:
        done.set()
        watcher.join()
    assert most <= 1, f"{most} drains ran at once ({len(seen)} started)"
    assert seen, "no drain ran"
    r = evstore(url, "hook", "drain", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["hooks"] == 0  # the drain(s) recorded every call
    for i in range(7):
        assert "claude.hook" in evstore(url, "log", f"s-{i}", "--json", env=env).stdout


def test_a_stop_while_a_drain_runs_starts_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store/events.db"
    assert evstore(url, "init").returncode == 0
    marker = f"held-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "EVSTORE_TEST_MARK": marker}
    directory = spool.spool_dir(url)
    lock = spool.drain_lock(directory)  # a drain is running
    assert lock is not None
    try:
        assert evstore(url, "hook", "claude-code", stdin=_stop("s-1"), env=env).returncode == 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not _drains_of(marker), "a Stop started a drain while one was running"
            time.sleep(0.01)
        r = evstore(url, "hook", "drain", env=env)  # and a drain that finds one running ends at once
        assert r.returncode == 0 and "running already" in r.stderr
    finally:
        os.close(lock)
    assert json.loads(evstore(url, "hook", "drain", "--json").stdout)["hooks"] == 1
