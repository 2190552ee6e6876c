"""``evstore serve`` drains the hook spool while it serves (real ``evstore serve`` and ``evstore hook
claude-code`` processes, SQLite and PostgreSQL): spooled calls reach the store and the live view
within a bounded time, a server killed mid-drain and restarted loses and doubles nothing, two
servers and ``hook drain`` draining at once double nothing, and ``--no-drain`` leaves the spool alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from conftest import EVSTORE, Child, evstore_child
from serve_fixtures import http_client

from eventstore import spool
from eventstore.cli import register
from eventstore.store import EventStore
from tests.claude_fixtures import SESSION, write_project

#: How long a spooled call may take to reach the store while a server drains every 0.1 s (generous:
#: the machine running the suite is shared and loaded).
BOUND = 15.0


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hooks and servers find the spool by the store's URL alone, as installed hooks do."""
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    monkeypatch.delenv("EVSTORE_SPOOL_DIR", raising=False)
    monkeypatch.delenv("EVSTORE_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # where a PostgreSQL store's spool lives


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``condition()`` held; fails the test naming ``what`` after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - started


def _get(base: str, path: str, timeout: float) -> httpx2.Response:
    with http_client(base, timeout=timeout) as http:
        return http.get(path)


def _answers(base: str) -> bool:
    try:
        return _get(base, "/api/runs", timeout=2).status_code == 200
    except httpx2.HTTPError:
        return False


@contextmanager
def serve(url: str, *args: str) -> Iterator[tuple[Child, str]]:
    """A real ``evstore --url URL serve`` draining every 0.1 s; yields the child and its base URL."""
    port = free_port()
    with evstore_child("--url", url, "serve", "--port", str(port), "--drain-interval", "0.1",
                       "--live-poll", "0.05", *args) as child:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(base) or child.proc.poll() is not None, 60, "evstore serve answering")
        assert child.proc.poll() is None, child.proc.stderr.read() if child.proc.stderr else ""
        yield child, base


def hook(url: str, payload: dict[str, Any]) -> None:
    """What Claude Code runs: the installed command, the call's JSON on stdin (compact, no newline)."""
    r = subprocess.run([EVSTORE, "--url", url, "hook", "claude-code"], capture_output=True, timeout=60,
                       input=json.dumps(payload, separators=(",", ":")).encode())
    assert r.returncode == 0 and r.stdout == b"", r


def call(session: str, name: str, i: int, **more: Any) -> dict[str, Any]:
    return {"session_id": session, "hook_event_name": name, "tool_name": "Bash", "tool_use_id": f"toolu_{i}",
            "tool_input": {"command": f"echo {i}"}, **more}


def write_call(session: str, i: int, path: Path, status: str) -> dict[str, Any]:
    """A PostToolUse of Write of ``path`` (an agent-state.json), after writing it as the tool did."""
    content = json.dumps({"schemaVersion": 1, "taskId": f"PROJ-{i}", "status": status}, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return {"session_id": session, "cwd": str(path.parent), "hook_event_name": "PostToolUse", "tool_name": "Write",
            "tool_use_id": f"toolu_w{i}", "tool_input": {"file_path": str(path), "content": content},
            "tool_response": {"type": "create", "filePath": str(path)}}


def hook_ids(store: EventStore, stream: str) -> list[str]:
    """The ``tool_use_id`` of every ``claude.hook`` event of ``stream``, in order."""
    if store.stream_version(stream) == 0:
        return []
    return [e.payload["tool_use_id"] for e in store.read_stream(stream) if e.type == "claude.hook"]


def spool_empty(directory: Path) -> bool:
    return not (directory / spool.SPOOL).exists() and not list(directory.glob("claimed-*.jsonl"))


def doctor(url: str) -> str:
    r = CliRunner().invoke(register(), ["--url", url, "doctor"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_hooks_spooled_while_serving_reach_the_store_and_the_live_view(store_url: str, tmp_path: Path) -> None:
    main, _ = write_project(tmp_path / "projects")
    directory = spool.spool_dir(store_url)
    with serve(store_url) as (child, base), http_client(base, timeout=30) as http:
        hook(store_url, call(SESSION, "SessionStart", 0))
        wait_until(lambda: http.get(f"/api/runs/{SESSION}/events").status_code == 200, BOUND,
                   "the first hook event in the store")
        with http.stream("GET", f"/api/runs/{SESSION}/live", params={"after": 1}) as live:
            lines = (line for line in live.iter_lines() if line)
            assert next(lines) == "retry: 2000"
            calls = [call(SESSION, name, i) for i, name in enumerate(["PreToolUse", "PostToolUse"] * 4, start=1)]
            calls.append(write_call(SESSION, 7, tmp_path / "proj" / "agent-state.json", "running"))
            calls.append(call(SESSION, "Stop", 99, transcript_path=str(main)))
            fired = threading.Thread(target=lambda: [hook(store_url, c) for c in calls])
            fired.start()
            seen: list[dict[str, Any]] = []
            while sum(1 for row in seen if row["type"] == "claude.hook") < len(calls) \
                    or not any(row["type"] == "claude.user_message" for row in seen):  # the Stop's transcript
                line = next(lines)  # the server's read timeout (30 s) fails a stalled stream
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
            fired.join()
        assert [row["version"] for row in seen] == list(range(2, 2 + len(seen)))  # in order, none twice
        assert child.proc.poll() is None
    with EventStore(store_url) as store:
        assert hook_ids(store, SESSION) == ["toolu_0", *(c["tool_use_id"] for c in calls)]
        [state] = [e for e in store.read_stream("PROJ-7") if "source" in e.metadata]
        assert state.metadata["source"]["claude"]["tool_use_id"] == "toolu_w7"
    assert spool_empty(directory)
    assert "drain errors: none" in doctor(store_url)


def test_each_call_reaches_the_store_within_a_bounded_time(sqlite_url: str, tmp_path: Path) -> None:
    from conftest import migrated

    migrated(sqlite_url)
    with serve(sqlite_url), EventStore(sqlite_url) as store:
        took = []
        for i in range(5):
            hook(sqlite_url, call("S", "PreToolUse", i))
            took.append(wait_until(lambda n=i + 1: store.stream_version("S") == n, BOUND, f"hook {i} in the store"))
    assert max(took) < BOUND


def test_no_drain_leaves_the_spool_to_others(sqlite_url: str) -> None:
    from conftest import migrated

    migrated(sqlite_url)
    directory = spool.spool_dir(sqlite_url)
    with serve(sqlite_url, "--no-drain"):
        hook(sqlite_url, call("S", "PreToolUse", 1))
        time.sleep(1.0)  # ten drain intervals
        assert (directory / spool.SPOOL).exists()
        with EventStore(sqlite_url) as store:
            assert store.stream_version("S") == 0


def _seed(directory: Path, n: int, states: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``n`` spooled calls of session S, every 50th a Write of a state file (its bytes copied)."""
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", lambda fd: None)  # durability against power loss is not under test here
        ids = []
        for i in range(n):
            payload = write_call("S", i, states / f"p{i}" / "agent-state.json", "running") if i % 50 == 0 \
                else call("S", "PostToolUse", i)
            ids.append(payload["tool_use_id"])
            spool.write(directory, json.dumps(payload, separators=(",", ":")).encode())
    return ids


def test_a_server_killed_mid_drain_and_restarted_loses_and_doubles_nothing(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = spool.spool_dir(store_url)
    # on a quiet machine a SQLite drain recorded 600 calls before the test had seen 10 and killed it
    n = 2000 if store_url.startswith("sqlite") else 600
    ids = _seed(directory, n, tmp_path / "states", monkeypatch)
    with EventStore(store_url) as store:
        with serve(store_url) as (child, _):
            wait_until(lambda: store.stream_version("S") >= 10, 60, "the drain under way")
            os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait(timeout=20)
        at_kill = store.stream_version("S")
        assert 10 <= at_kill < n, "the server was not killed mid-drain"
        assert list(directory.glob("claimed-*.jsonl")), "a killed drain leaves its claim"
        with serve(store_url):
            wait_until(lambda: spool_empty(directory), 120, "the restarted server draining the rest")
        assert hook_ids(store, "S") == ids  # each call once, in spool order
        assert store.stream_version("S") == n
        for i in range(0, n, 50):  # each state version once, linked to its call
            [version] = store.read_stream(f"PROJ-{i}")
            assert version.metadata["source"]["claude"]["tool_use_id"] == f"toolu_w{i}"
    r = CliRunner().invoke(register(), ["--url", store_url, "verify"], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_two_servers_and_hook_drain_at_once_double_nothing(store_url: str, tmp_path: Path) -> None:
    directory = spool.spool_dir(store_url)
    calls = [write_call(f"s-{i % 3}", i, tmp_path / f"p{i}" / "agent-state.json", "done") if i % 10 == 0
             else call(f"s-{i % 3}", "Stop" if i % 10 == 5 else "PreToolUse", i) for i in range(30)]
    with serve(store_url) as (first, _), serve(store_url) as (second, _):
        with ThreadPoolExecutor(max_workers=8) as pool:
            draining = pool.submit(lambda: [subprocess.run([EVSTORE, "--url", store_url, "hook", "drain", "--quiet"],
                                                           timeout=60, check=True) for _ in range(3)])
            list(pool.map(lambda c: hook(store_url, c), calls))
            draining.result()
        wait_until(lambda: spool_empty(directory), 60, "the spool drained")
        assert first.proc.poll() is None and second.proc.poll() is None
    with EventStore(store_url) as store:
        for s in range(3):
            got = hook_ids(store, f"s-{s}")
            assert sorted(got) == sorted(c["tool_use_id"] for c in calls if c["session_id"] == f"s-{s}")
            assert store.stream_version(f"s-{s}") == len(got)  # nothing but the hook events, none twice
        for i in range(0, 30, 10):
            assert store.stream_version(f"PROJ-{i}") == 1
    assert "drain errors: none" in doctor(store_url)


def test_a_failing_drain_is_logged_once_and_the_server_serves_on(sqlite_url: str) -> None:
    from conftest import migrated

    migrated(sqlite_url)
    directory = spool.spool_dir(sqlite_url)
    hook(sqlite_url, call("S", "PreToolUse", 1))
    poison = directory / "claimed-0-0.jsonl"
    poison.mkdir()  # a claim no drain can read: every round fails on it
    with serve(sqlite_url) as (child, base):
        log = directory / spool.DRAIN_ERRORS
        wait_until(log.exists, BOUND, "the failure in drain-errors.log")
        time.sleep(1.0)  # ten more rounds, each failing the same way
        [line] = log.read_text().splitlines()  # said once, not once a round
        assert "evstore serve: drain failed: IsADirectoryError" in line and str(poison) in line
        assert _get(base, "/api/runs", timeout=10).status_code == 200 and child.proc.poll() is None
        r = CliRunner().invoke(register(), ["--url", sqlite_url, "doctor"], catch_exceptions=False)
        assert r.exit_code == 1 and "drain errors: last 1" in r.output and "IsADirectoryError" in r.output
        poison.rmdir()
        with EventStore(sqlite_url) as store:
            wait_until(lambda: store.stream_version("S") == 1, BOUND, "the spool drained once the claim is gone")
