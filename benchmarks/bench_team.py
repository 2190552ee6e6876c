"""A team's server under load: simulated machines append to ``evstore serve --workers N`` on PostgreSQL.

    python benchmarks/bench_team.py                          # 50 machines, 4 workers, 120 s per phase, 2,000 ev/s
    python benchmarks/bench_team.py --machines 20 --seconds 10 --workers 2   # a short run
    python benchmarks/bench_team.py --rate 0                 # unpaced: the most the server takes
    EVSTORE_BENCH_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python benchmarks/bench_team.py

The store is a new database of that server (dropped afterwards), as a team's store would have.

Each machine is a thread with its own keep-alive HTTP connection, its own named token (``evstore tokens
add``) and its own ``X-Evstore-Machine``; it sends what a machine's ``evstore push`` sends: batches of
``--batch`` events of one stream, each event with its client event id, type, data, meta, schema
version and occurred_at, the stream's version as ``expected_version`` (and the session stream's
dialect), as compact JSON: four batches of hook calls (PostToolUse of an Edit, ~0.6 KB) to its
session stream for each batch of state-file versions (~1.5 KB) to its state stream.  Paced
(``--rate``, default the target's 2,000 events/s): each machine sends a request every machines x
batch / rate seconds, and a request's latency counts from when it was due, so a server (or a
client) falling behind shows as latency; events/s counts the events of the requests sent in the
phase over its length.  A request that fails (connection refused, reset, 5xx) is sent again
unchanged until it is answered, after the delays ``evstore push`` waits (eventstore.remote.retry_delay:
0.1 s, then doubled, capped at the last of its retries): the event ids make that at-least-once delivery
exactly-once.
Phase 1 runs undisturbed; phase 2 SIGKILLs one worker a third of the way in and restarts the whole
server two thirds of the way in.  Reported per phase: events/s sustained, request latency
p50/p95/p99 (answered requests), the CPU the client process and the server's processes used (in
cores, and per event) and the load average, and, from the store afterwards, events lost (sent ids
missing) and duplicated (ids recorded more than once; the unique index makes this 0 by
construction, counted anyway).  Targets (issue 36): >= 2,000 events/s, p99 < 250 ms, 0 lost, 0
duplicated.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2  # noqa: E402
from _common import cpu_of, free_port, log, pg_database  # noqa: E402

from eventstore import migrate, remote, tokens  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import EventStore  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent




class Server:
    def __init__(self, url: str, port: int, workers: int, code: Path = ROOT) -> None:
        self.url, self.port, self.workers, self.code = url, port, workers, code
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
        env["PYTHONPATH"] = str(self.code)
        self.proc = subprocess.Popen([sys.executable, "-m", "eventstore", "--url", self.url, "serve", "--port",
                                      str(self.port), "--workers", str(self.workers), "--no-drain"], env=env,
                                     cwd=self.code, start_new_session=True, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.02)
        raise SystemExit("the server did not come up")

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(p) for p in out]

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the server's processes so far (the parent and its workers)."""
        assert self.proc is not None
        return cpu_of([self.proc.pid, *self.worker_pids()])

    def database_cpu_seconds(self) -> float:
        """CPU time of the PostgreSQL backends serving this store's database now (the server is on this
        machine; 0 when its processes cannot be read), and of its WAL writer."""
        import psycopg

        admin = self.url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(admin, autocommit=True) as conn:
            pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                               "AND pid <> pg_backend_pid() OR backend_type = 'walwriter'")]
        return cpu_of(pids)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Machine(threading.Thread):
    """One machine's sender: one keep-alive ``http.client`` connection (what ``evstore push`` holds;
    lighter on the client's CPU than a full HTTP client library, which with 50 threads in one process
    took a good part of the two cores the server needs), four hook-call batches to its session
    stream for each batch of state-file versions to its state stream."""

    def __init__(self, name: str, token: str, port: int, batch: int, stop: threading.Event,
                 interval: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.name_, self.token, self.port, self.batch, self.stop = name, token, port, batch, stop
        self.interval = interval  # seconds between this machine's requests (0: each as soon as the last is answered)
        self.sent_ids: list[str] = []
        self.latencies: list[float] = []
        self.answered: list[float] = []  # when each request was answered (perf_counter), as latencies
        self.retries = 0
        self.confirmed = 0

    def _events(self, kind: str, version: int, ids: list[str]) -> list[dict[str, Any]]:
        # As `evstore push` sends a local event: its own id, type, data, meta, schema version and
        # occurred_at (the server's sent_by is not sent).
        when = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        if kind == "session":  # a PostToolUse hook call, as `evstore hook claude-code` records it (~0.6 KB)
            return [{"type": "claude.hook", "event_id": eid, "schema_version": 1, "occurred_at": when, "meta": {},
                     "data": {"hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": f"toolu_{eid[:12]}",
                              "received_at": time.time(), "secrets": 0,
                              "input": json.dumps({"session_id": self.name_, "hook_event_name": "PostToolUse",
                                                   "tool_name": "Edit", "n": version + i,
                                                   "tool_input": {"file_path": f"src/mod_{i % 7}.py",
                                                                  "old_string": "x" * 120, "new_string": "y" * 160}})}}
                    for i, eid in enumerate(ids)]
        return [{"type": "state.version", "event_id": eid, "schema_version": 1, "occurred_at": when, "meta": {},
                 "data": {"path": ".taskmaster/tasks.json", "version": version + i,  # a state file's version (~1.5 KB)
                          "doc": {"tasks": [{"id": t, "title": f"task {t}", "status": "done" if t < i else "pending",
                                             "details": "z" * 80} for t in range(10)]}}}
                for i, eid in enumerate(ids)]

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "X-Evstore-Machine": self.name_,
                   "Content-Type": "application/json"}
        conn: http.client.HTTPConnection | None = None
        run = uuid.uuid4().hex[:8]
        streams = {"session": (f"{self.name_}/session-{run}", 0), "state": (f"{self.name_}/state-{run}", 0)}
        n = 0
        # Paced: the machines' first requests spread over one interval, then one every interval; a
        # request's latency counts from when it was due, so a server falling behind shows as latency.
        due = time.perf_counter() + self.interval * (int(self.name_[1:]) % 50) / 50
        while not self.stop.is_set():
            if self.interval:
                if self.stop.wait(max(0.0, due - time.perf_counter())):
                    break
            kind = "state" if n % 5 == 4 else "session"
            n += 1
            stream, version = streams[kind]
            ids = [str(uuid.uuid4()) for _ in range(self.batch)]
            body = json.dumps({"events": self._events(kind, version, ids),
                               "expected_version": version if version else "no-stream",
                               **({"dialect": "claude"} if kind == "session" else {})},
                              separators=(",", ":")).encode()  # as push encodes it
            path = "/api/streams/" + urllib.parse.quote(stream, safe="/") + "/events"
            self.sent_ids.extend(ids)
            first_try = due if self.interval else None
            due += self.interval
            attempt = 0
            while True:  # the same batch until it is answered: idempotent by its event ids
                started = time.perf_counter() if first_try is None else first_try
                status, text = 0, ""
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                    conn.request("POST", path, body=body, headers=headers)
                    resp = conn.getresponse()
                    text = resp.read().decode("utf-8", "replace")
                    status = resp.status
                except (OSError, http.client.HTTPException):
                    if conn is not None:
                        conn.close()
                    conn = None
                if status in (200, 201):
                    self.answered.append(time.perf_counter())
                    self.latencies.append(self.answered[-1] - started)
                    self.confirmed += len(ids)
                    streams[kind] = (stream, version + len(ids))
                    break
                if 0 < status < 500:
                    raise SystemExit(f"{self.name_}: {status} {text}")
                self.retries += 1
                time.sleep(remote.retry_delay(min(attempt, remote.RETRIES - 1)))  # as `evstore push` waits
                attempt += 1
        if conn is not None:
            conn.close()


def phase(url: str, server: Server, secrets_: dict[str, str], seconds: float, batch: int, disturb: bool,
          rate: float = 0.0) -> dict[str, Any]:
    stop = threading.Event()
    down = 0.0
    interval = len(secrets_) * batch / rate if rate else 0.0
    machines = [Machine(name, tok, server.port, batch, stop, interval) for name, tok in secrets_.items()]
    started = time.perf_counter()
    client_cpu, server_cpu, db_cpu = time.process_time(), server.cpu_seconds(), server.database_cpu_seconds()
    for m in machines:
        m.start()
    events = []
    if disturb:
        time.sleep(seconds / 3)
        victim = server.worker_pids()[0]
        log(f"SIGKILL worker {victim}")
        victim_killed = time.perf_counter()
        os.kill(victim, signal.SIGKILL)
        time.sleep(seconds / 3)
        log("restarting the whole server (SIGKILL, start)")
        down = killed = time.perf_counter()
        server.kill()
        server.start()
        down = time.perf_counter() - down  # every request due meanwhile waits: its latency counts it
        log(f"the server answered again {down:.2f} s after it was killed")
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    else:
        time.sleep(seconds)
        killed = victim_killed = 0.0
    stop.set()
    window = time.perf_counter() - started  # what was sent in it counts, answered before or after its end
    for m in machines:
        m.join()
    took = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = server.cpu_seconds() - server_cpu  # the workers of a restarted server: since their start
    db_cpu = server.database_cpu_seconds() - db_cpu  # (the backends of the pool, kept for the whole phase)
    load = os.getloadavg()[0]
    lat = sorted(x for m in machines for x in m.latencies)
    sent = {i for m in machines for i in m.sent_ids}
    with EventStore(url) as store:
        recorded = [e.event_id for e in store.iter_all() if e.stream_id != tokens.ADMIN_STREAM]
    events = recorded
    counts: dict[str, int] = {}
    for eid in events:
        counts[eid] = counts.get(eid, 0) + 1
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [0.0] * 99
    # The slow requests (over the target's 250 ms), and of them those answered within 10 s of the worker's
    # SIGKILL, and of the restart.
    slow = [a for m in machines for a, x in zip(m.answered, m.latencies, strict=True) if x > 0.25]
    victim_slow = sum(1 for a in slow if victim_killed and victim_killed <= a <= victim_killed + 10)
    restart_slow = sum(1 for a in slow if killed and killed <= a <= killed + 10)
    if killed:  # how the restart's backlog drains: each half second after the kill, what was answered
        answered = sorted((a, x) for m in machines for a, x in zip(m.answered, m.latencies, strict=True)
                          if killed <= a < killed + 5)
        steps = []
        for k in range(10):
            xs = [x for a, x in answered if killed + k / 2 <= a < killed + (k + 1) / 2]
            steps.append(f"{k / 2:g}s {len(xs)}" + (f" max {max(xs) * 1000:.0f}ms" if xs else ""))
        log("answered after the restart, by half second (requests, slowest): " + ", ".join(steps))
    return {"events_per_s": sum(m.confirmed for m in machines) / (window if rate else took), "requests": len(lat),
            "p50_ms": q[49] * 1000, "p95_ms": q[94] * 1000, "p99_ms": q[98] * 1000,
            "lost": len(sent - set(counts)), "duplicated": sum(c - 1 for c in counts.values() if c > 1),
            "retries": sum(m.retries for m in machines), "client_cpu": client_cpu / took,
            "server_cpu": server_cpu / took, "db_cpu": db_cpu / took, "load": load,
            "events": sum(m.confirmed for m in machines), "took": took, "down": down, "slow": len(slow),
            "victim_slow": victim_slow, "restart_slow": restart_slow}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--machines", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=120.0, help="length of each phase")
    ap.add_argument("--batch", type=int, default=20, help="events per request")
    ap.add_argument("--rate", type=float, default=2000.0,
                    help="events/s offered by all machines together, paced: each machine sends a request every "
                         "machines x batch / rate seconds, its latency counted from when it was due (default: the "
                         "target's 2,000; 0: each machine sends its next request as soon as the last is answered, "
                         "which measures the most the server takes, at a latency of 50 requests in flight)")
    ap.add_argument("--only", choices=("steady", "disturbed"), help="run one phase only (default: both)")
    ap.add_argument("--server-code", type=Path, default=ROOT,
                    help="the evstore checkout the server runs (default: this one; another for an A/B comparison)")
    args = ap.parse_args()
    with pg_database("bench_team_") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        with EventStore(url) as store:
            secrets_ = {f"m{i:02d}": tokens.add_token(store, f"m{i:02d}", "append") for i in range(args.machines)}
        server = Server(url, free_port(), args.workers, args.server_code.resolve())
        server.start()
        try:
            for name, disturb in (("steady", False), ("worker killed + restart", True)):
                if args.only is not None and disturb != (args.only == "disturbed"):
                    continue
                log(f"phase: {name} ({args.machines} machines, {args.workers} workers, {args.seconds:g} s"
                    + (f", {args.rate:g} events/s offered)" if args.rate else ")"))
                r = phase(url, server, secrets_, args.seconds, args.batch, disturb, args.rate)
                ok = r["events_per_s"] >= 2000 and r["p99_ms"] < 250 and not r["lost"] and not r["duplicated"]
                per = r["took"] * 1e6 / max(1, r["events"])  # cores -> CPU microseconds per event
                print(f"{name}: {r['events_per_s']:.0f} events/s, {r['requests']} requests, p50 {r['p50_ms']:.1f} ms, "
                      f"p95 {r['p95_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, lost {r['lost']}, duplicated "
                      f"{r['duplicated']}, retried requests {r['retries']}; CPU: clients {r['client_cpu']:.2f} cores "
                      f"({r['client_cpu'] * per:.0f} us/event), "
                      + (f"server {r['server_cpu']:.2f} ({r['server_cpu'] * per:.0f} us/event), PostgreSQL "
                         f"{r['db_cpu']:.2f} cores ({r['db_cpu'] * per:.0f} us/event); " if not disturb
                         else f"server down {r['down']:.2f} s, {r['slow']} requests over 250 ms "
                              f"(answered within 10 s of the worker's SIGKILL {r['victim_slow']}, of the restart "
                              f"{r['restart_slow']}); ")  # CPU not comparable
                      + f"load average {r['load']:.1f} -> "
                      f"{'meets' if ok else 'misses'} the targets", flush=True)
        finally:
            server.kill()


if __name__ == "__main__":
    main()
