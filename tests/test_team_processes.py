"""A team's store with real processes on the real PostgreSQL server (issue 36, items 2-4): two client
"machines" (their own HOME, local store and config) append while a server with two workers takes their
pushes; the server is SIGKILLed and restarted, and one machine's token is revoked mid-run.  Afterwards every
local event is in the team store exactly once, `verify` passes, and every event names its sender."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import migrated

from eventstore import tokens
from eventstore.store import EventStore

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


class Server:
    def __init__(self, url: str, port: int, tmp: Path) -> None:
        self.url, self.port, self.tmp, self.proc = url, port, tmp, None  # type: ignore[var-annotated]

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eventstore", "--url", self.url, "serve", "--port", str(self.port),
             "--workers", "2", "--no-drain"], env=_env(HOME=str(self.tmp)), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                    if json.loads(r.read()) == {"status": "ok"}:
                        return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise AssertionError("the server did not answer /healthz within 30 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the master and its workers: a crash, no shutdown
            self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


class Machine:
    def __init__(self, name: str, tmp: Path, port: int, token: str) -> None:
        self.name, self.home = name, tmp / name
        self.home.mkdir()
        self.token_file = self.home / "token"
        self.token_file.write_text(token + "\n")
        self.url = f"sqlite:///{self.home}/store/events.db"
        self.env = _env(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"), EVSTORE_URL=self.url)
        self.run("remote", "set", f"http://127.0.0.1:{port}", "--token-file", str(self.token_file),
                 "--machine", name)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, "-m", "eventstore", *args], env=self.env, capture_output=True, text=True,
                           timeout=60)
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def append_batch(self, round_no: int) -> subprocess.CompletedProcess[str]:
        batch = self.home / f"batch-{round_no}.jsonl"
        lines = [{"stream": f"{self.name}/run-{round_no % 2}", "type": "demo.note",
                  "data": {"machine": self.name, "round": round_no, "i": i}} for i in range(5)]
        batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return self.run("append", "--batch", str(batch))

    def ingest(self, round_no: int) -> subprocess.CompletedProcess[str]:
        state = self.home / "state.json"
        state.write_text(json.dumps({"round": round_no, "status": "running"}))
        return self.run("ingest", "generic", str(state), "--stream", f"{self.name}/state")

    def local_ids(self) -> set[str]:
        with EventStore(self.url) as store:
            return {e.event_id for e in store.iter_all()}


@pytest.mark.timeout(240)
def test_two_machines_a_killed_server_and_a_revoked_token_lose_nothing_and_record_nothing_twice(
        pg_url: str, tmp_path: Path) -> None:
    url = migrated(pg_url)
    with EventStore(url) as store:
        secret_a = tokens.add_token(store, "alice-laptop", "append")
        secret_b = tokens.add_token(store, "bob-laptop", "append")
    port = _free_port()
    server = Server(url, port, tmp_path)
    server.start()
    try:
        a, b = Machine("alice", tmp_path, port, secret_a), Machine("bob", tmp_path, port, secret_b)
        a.ingest(0)
        for n in range(2):
            a.append_batch(n)
            b.append_batch(n)
        server.kill()  # the server dies; the machines keep recording locally
        a.ingest(1)
        r = a.append_batch(2)
        assert "wait to be sent" in r.stderr
        b.append_batch(2)
        doctor = a.run("doctor", check=False)
        assert "backlog: " in doctor.stdout and "cannot reach" in doctor.stdout and "oldest waiting" in doctor.stdout
        server.start()
        a.run("push")
        b.append_batch(3)  # sends its backlog and this
        with EventStore(url) as store:
            tokens.revoke_token(store, "bob-laptop")  # refused from the next request on
        r = b.append_batch(4)
        assert "revoked" in r.stderr
        r = b.run("push", check=False)
        assert r.returncode == 1 and "revoked" in r.stderr and "backlog is kept" in r.stderr
        with EventStore(url) as store:
            new = tokens.add_token(store, "bob-laptop-2", "append")
        b.token_file.write_text(new + "\n")
        b.run("push")
        a.append_batch(5)
    finally:
        server.kill()
    with EventStore(url) as store:
        events = [e for e in store.iter_all() if e.stream_id != tokens.ADMIN_STREAM]
    ids = [e.event_id for e in events]
    assert len(ids) == len(set(ids))  # nothing twice
    assert set(ids) == a.local_ids() | b.local_ids()  # nothing lost
    assert len(ids) >= 4 * 5 + 5 * 5 + 2  # alice: rounds 0, 1, 2, 5 and two state versions; bob: rounds 0-4
    senders = {(json.loads(e.meta)["sent_by"]["token"], json.loads(e.meta)["sent_by"]["machine"]) for e in events}
    assert senders == {("alice-laptop", "alice"), ("bob-laptop", "bob"), ("bob-laptop-2", "bob")}
    with EventStore(url) as store:  # a stream keeps the dialect it has on the machine that sent it
        head = store.stream_head("alice/state")
        assert head is not None and head.dialect == "generic"
    r = subprocess.run([sys.executable, "-m", "eventstore", "--url", url, "verify"], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
