"""``evstore serve --workers N``'s processes (projections/prefork.py), real ones on the real PostgreSQL server:
a SIGKILLed worker is replaced, Ctrl-C stops every process,
and workers whose parent was killed stop too.  Two workers and two starts: about a second of CPU in all
(the parent's imports, twice; each worker is forked, not started afresh)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from conftest import migrated

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _children(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return bool(json.loads(r.read()) == {"status": "ok"})
    except OSError:
        return False


def _start(url: str, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-m", "eventstore", "--url", url, "serve", "--port", str(port),
                             "--workers", "2", "--no-drain"], env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _workers(proc: subprocess.Popen[str]) -> set[int]:
    _wait_until(lambda: len(_children(proc.pid)) == 2, "two workers forked")
    return _children(proc.pid)


def test_a_killed_worker_is_replaced_and_ctrl_c_stops_every_process(pg_url: str) -> None:
    url, port = migrated(pg_url), _free_port()
    proc = _start(url, port)
    try:
        _wait_until(lambda: _healthy(port), "GET /healthz answered")
        first = _workers(proc)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        _wait_until(lambda: len(_children(proc.pid)) == 2 and victim not in _children(proc.pid),
                    "the killed worker replaced")
        assert _children(proc.pid) & first == first - {victim}  # the other worker kept on serving
        assert _healthy(port)
        workers = _children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        assert proc.wait(timeout=30) == 0
        _wait_until(lambda: not any(_alive(p) for p in workers), "no worker left behind")
        assert "ended (signal SIGKILL); starting another" in (proc.stderr.read() if proc.stderr else "")
    finally:
        _kill(proc)


def test_workers_stop_when_their_parent_is_killed(pg_url: str) -> None:
    url, port = migrated(pg_url), _free_port()
    proc = _start(url, port)
    try:
        _wait_until(lambda: _healthy(port), "GET /healthz answered")
        workers = _workers(proc)
        os.kill(proc.pid, signal.SIGKILL)  # the parent alone: nothing tells the workers but its death
        proc.wait()
        _wait_until(lambda: not any(_alive(p) for p in workers), "the orphaned workers stopped")
    finally:
        _kill(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
