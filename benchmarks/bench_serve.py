"""``evstore serve`` response times and HTTP append throughput, against a real uvicorn process.

    python benchmarks/bench_serve.py                 # 10,000 demo runs + one 1,000-event run
    python benchmarks/bench_serve.py --quick         # 2,000 runs, fewer repeats
    python benchmarks/bench_serve.py --dir /tmp/bs   # keep (and reuse) the built stores there

Server time is the ``Server-Timing: app;dur=`` header the server puts on every response (request
in to response headers out, rendering included); the client's wall time per request is printed
beside it.  Targets (issue 15): runs page of a 10,000-run store <= 100 ms (paginated), run page
of a 1,000-event run <= 150 ms, HTTP append >= 2,000 events/s with 100 events per request on
SQLite.  A benchmark, not a timed test: it prints figures and whether each target is met.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2  # noqa: E402
from _common import log  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.dialects import get_dialect  # noqa: E402
from eventstore.ingest import Ingestor  # noqa: E402
from projections.demo import run_demo  # noqa: E402
from projections.runs import IndexedEventStore  # noqa: E402

TOKEN = "bench-" + uuid.uuid4().hex
LONG = "bench-long"


def build(db: Path, runs: int, long_events: int) -> None:
    """``runs`` demo runs plus one mapipe stream of at least ``long_events`` events (reused if there)."""
    if db.exists():
        log(f"reusing {db}")
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{db}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    store = IndexedEventStore(url)
    try:
        t = time.perf_counter()
        run_demo(store, runs=runs, seed=1, workers=min(os.cpu_count() or 1, 4))
        log(f"{runs} demo runs in {time.perf_counter() - t:.1f} s")
        dialect = get_dialect("mapipe")
        ing = Ingestor(store, dialect, stream=LONG)
        seed, when = 7000, datetime(2025, 6, 1, tzinfo=UTC)
        while store.stream_version(LONG) < long_events:  # the same task re-run until its stream is long
            for snap in dialect.simulate(random.Random(seed), run_id=LONG, start=when):
                ing.ingest(snap)
            seed, when = seed + 1, when + timedelta(days=1)
        log(f"{LONG}: {store.stream_version(LONG)} events")
    finally:
        store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``evstore serve`` in its own process (a real uvicorn, as users run it)."""

    def __init__(self, url: str, analytics: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "EVSTORE_SERVE_TOKEN": TOKEN, "EVSTORE_ANALYTICS_DIR": str(analytics)}
        self.proc = subprocess.Popen([sys.executable, "-c", "from eventstore.cli import main; main()", "--url", url, "serve",
                                      "--port", str(self.port)], env=env, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(self.base + "/openapi.json", timeout=2)
                return
            except httpx2.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("evstore serve did not start") from None
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def server_ms(r: httpx2.Response) -> float:
    return float(r.headers["server-timing"].split("dur=")[1])


def bench_page(http: httpx2.Client, label: str, path: str, repeat: int) -> tuple[float, float]:
    r = http.get(path)  # warm: templates compiled, caches filled
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    server, wall = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        r = http.get(path)
        wall.append((time.perf_counter() - t) * 1000)
        server.append(server_ms(r))
    med_s, med_w = statistics.median(server), statistics.median(wall)
    print(f"  {label:<46} server {med_s:7.1f} ms (p90 {sorted(server)[int(0.9 * (repeat - 1))]:6.1f})"
          f"   wall {med_w:7.1f} ms   {len(r.content) / 1024:7.1f} KiB")
    return med_s, med_w


def bench_append(base: str, requests: int, per_request: int) -> float:
    payload = [{"type": "bench.noted", "data": {"seq": i, "text": "x" * 300, "tags": ["a", "b"]}}
               for i in range(per_request)]
    with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        http.post("/api/streams/warm/events", json={"events": payload[:1]})
        t = time.perf_counter()
        for i in range(requests):
            r = http.post(f"/api/streams/append-{i % 10}/events", json={"events": payload})
            assert r.status_code == 201, r.text
        secs = time.perf_counter() - t
    return requests * per_request / secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="demo runs in the store (default 10000, quick 2000)")
    ap.add_argument("--long-events", type=int, default=1000, help="events in the long run (default 1000)")
    ap.add_argument("--repeat", type=int, default=None, help="requests per page (default 30, quick 10)")
    ap.add_argument("--append-requests", type=int, default=None, help="append requests (default 200, quick 50)")
    ap.add_argument("--dir", type=Path, default=None, help="keep and reuse the stores here")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs = args.runs or (2000 if args.quick else 10_000)
    repeat = args.repeat or (10 if args.quick else 30)
    appends = args.append_requests or (50 if args.quick else 200)
    root = args.dir or Path(tempfile.mkdtemp(prefix="evstore-bench-serve-"))
    db = root / f"runs-{runs}-long-{args.long_events}.db"
    build(db, runs, args.long_events)

    print(f"evstore serve on {db.name} ({runs} demo runs + {LONG}), median of {repeat} requests")
    server = ServeProcess(f"sqlite:///{db}", root / "analytics")
    try:
        with httpx2.Client(base_url=server.base, timeout=60) as http:
            runs_page, _ = bench_page(http, "runs page (/, 50 rows)", "/", repeat)
            bench_page(http, "runs page 100 (/?page=100)", "/?page=100", repeat)
            bench_page(http, "runs search (/?q=refund&dialect=mapipe)", "/?q=refund&dialect=mapipe", repeat)
            bench_page(http, "API runs (/api/runs)", "/api/runs", repeat)
            run_page, _ = bench_page(http, f"run page of {LONG} (latest state)", f"/runs/{LONG}", repeat)
            bench_page(http, f"run page of {LONG} + diff 500 -> 1000", f"/runs/{LONG}?from=500&to=1000", repeat)
            bench_page(http, f"API events of {LONG}", f"/api/runs/{LONG}/events", repeat)
    finally:
        server.close()

    adb = root / f"append-{uuid.uuid4().hex[:8]}.db"
    engine = make_engine(f"sqlite:///{adb}")
    migrate.upgrade(engine)
    engine.dispose()
    server = ServeProcess(f"sqlite:///{adb}", root / "analytics-append")
    try:
        rate = bench_append(server.base, appends, 100)
    finally:
        server.close()
    print(f"  HTTP append, 100 events/request, SQLite, one client   {rate:9,.0f} events/s ({appends} requests)")
    print()
    for name, ok, text in (
        ("runs page <= 100 ms", runs_page <= 100, f"{runs_page:.1f} ms"),
        ("run page of 1,000 events <= 150 ms", run_page <= 150, f"{run_page:.1f} ms"),
        ("HTTP append >= 2,000 events/s", rate >= 2000, f"{rate:,.0f} events/s"),
    ):
        print(f"  [{'  met  ' if ok else ' MISSED'}] {name}: {text}")


if __name__ == "__main__":
    main()
