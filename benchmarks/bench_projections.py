"""Projection benchmarks: rebuild rates, `evstore demo` throughput, catch-up lag on PostgreSQL.

    python benchmarks/bench_projections.py                       # 1,000,000 events, demo 10,000 runs
    python benchmarks/bench_projections.py --events 100000 --demo-runs 200   # quick
    EVSTORE_BENCH_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python benchmarks/...

1. Builds a SQLite store of ``--events`` demo events: a pool of simulated runs (the demo's own
   simulator + Ingestor) copied under fresh stream ids until the size is reached (simulation is
   the slow part, see 2), then times a full rebuild of the runs index and of every async
   projection, the Parquet analytics projection included (events/s; target >= 100,000 on SQLite).
2. Times ``evstore demo --runs N`` end to end (CLI, fresh store): wall time and events/s.
3. PostgreSQL (if a URL is given): a writer appends 100-event batches for ``--pg-seconds`` while
   a runner follows the async projections; reports the lag (events behind) sampled every 50 ms
   and how long the final catch-up took after the writer stopped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from click.testing import CliRunner  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402
from projections import engine  # noqa: E402
from projections.demo import _simulate_chunk, pick_dialects  # noqa: E402


def _fresh(url: str) -> None:
    eng = make_engine(url)
    migrate.upgrade(eng)
    eng.dispose()


def build_store(url: str, events: int, pool_runs: int) -> int:
    from concurrent.futures import ProcessPoolExecutor

    names = pick_dialects()
    chunks = [(1, list(range(i, min(i + 10, pool_runs + 1))), names) for i in range(1, pool_runs + 1, 10)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        pool_runs_ = [r for batch in pool.map(_simulate_chunk, chunks) for r in batch]
    _fresh(url)
    written = 0
    copy = 0
    with EventStore(url) as store:
        while written < events:
            copy += 1
            for run in pool_runs_:
                items = [(f"{sid}-c{copy}", _clone(e), x) for sid, e, x in run.items]
                store.append_many(items, dialect=run.dialect)
                written += len(items)
                if written >= events:
                    break
    return written


def _clone(e: NewEvent) -> NewEvent:
    c = object.__new__(NewEvent)
    for slot in NewEvent.__slots__:
        setattr(c, slot, getattr(e, slot))
    import uuid

    c.event_id = str(uuid.uuid4())
    return c


def bench_rebuilds(url: str) -> list[tuple[str, str, float]]:
    rows = []
    with EventStore(url) as store:
        n = store.max_position()
        for p in engine.registered():
            with engine.ProjectionRunner(store) as runner:
                t = time.perf_counter()
                applied = runner.rebuild(p)
                dt = time.perf_counter() - t
            rows.append((f"rebuild {p.name} ({'inline' if p.inline else 'async'}), SQLite",
                         f"{applied:,} events in {dt:.1f} s", applied / dt))
            assert applied == n
        # The analytics projection (Parquet files + manifest, refreshed by `evstore projections run`)
        # is async too, but keeps its checkpoint in its manifest rather than in the database.
        from projections import analytics

        with tempfile.TemporaryDirectory() as out:
            t = time.perf_counter()
            res = analytics.refresh(store, out, rebuild=True)
            dt = time.perf_counter() - t
        rows.append(("rebuild analytics (async, Parquet), SQLite",
                     f"{res.events:,} events in {dt:.1f} s", res.events / dt))
        assert res.events == n
    return rows


def bench_demo(runs: int, tmp: Path) -> tuple[str, str, float]:
    import json

    from eventstore.cli import register

    url = f"sqlite:///{tmp}/demo/events.db"
    t = time.perf_counter()
    res = CliRunner().invoke(register(), ["demo", "--url", url, "--runs", str(runs), "--json"])
    dt = time.perf_counter() - t
    if res.exit_code != 0:
        raise SystemExit(res.output)
    s = json.loads(res.stdout)
    return (f"evstore demo --runs {runs} (SQLite)", f"{s['events']:,} events, wall {dt:.1f} s", s["events"] / dt)


def bench_pg_lag(url: str, seconds: float) -> list[tuple[str, str, float]]:
    import uuid

    import psycopg

    schema = "bench_" + uuid.uuid4().hex[:8]
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in url else "?"
        surl = f"{url}{sep}options=-csearch_path%3D{schema}"
        _fresh(surl)
        stop = threading.Event()
        writer_done = threading.Event()
        written = [0]

        def writer() -> None:
            with EventStore(surl) as w:
                i = 0
                while not stop.is_set():
                    i += 1
                    w.append_many([(f"s{i % 50}", NewEvent(f"t.{j % 5}", {"i": j}), None) for j in range(100)])
                    written[0] += 100
            writer_done.set()

        lags: list[int] = []
        with EventStore(surl) as store, engine.ProjectionRunner(store, batch_size=2000) as runner:
            projs = [p for p in engine.registered() if not p.inline]
            for p in projs:
                runner.ensure(p)
            follower_stop = threading.Event()

            def follow() -> None:
                with engine.ProjectionRunner(store, batch_size=2000) as r2:
                    r2.run(projs, follow=True, poll_interval=0.01, stop=follower_stop)

            tw, tf = threading.Thread(target=writer), threading.Thread(target=follow)
            tw.start()
            tf.start()
            end = time.time() + seconds
            while time.time() < end:
                time.sleep(0.05)
                head = store.max_position()
                cp = min(runner.checkpoint(p.name).position for p in projs)  # type: ignore[union-attr]
                lags.append(max(0, head - cp))
            stop.set()
            writer_done.wait()
            t = time.perf_counter()
            head = store.max_position()
            while min(runner.checkpoint(p.name).position for p in projs) < head:  # type: ignore[union-attr]
                time.sleep(0.005)
            drain = time.perf_counter() - t
            follower_stop.set()
            tf.join()
            tw.join()
        rate = written[0] / seconds
        return [("PG writer (100-event appends), concurrent", f"{written[0]:,} events in {seconds:.0f} s", rate),
                ("PG catch-up lag while writing (events)",
                 f"median {statistics.median(lags):,.0f}, p95 {sorted(lags)[int(len(lags) * .95) - 1]:,}, "
                 f"max {max(lags):,}; drained in {drain * 1000:.0f} ms", 0.0)]
    finally:
        with psycopg.connect(plain, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--pool-runs", type=int, default=200, help="distinct simulated runs copied to reach --events")
    ap.add_argument("--demo-runs", type=int, default=10_000)
    ap.add_argument("--pg-url", default=os.environ.get("EVSTORE_BENCH_POSTGRES_URL")
                    or os.environ.get("EVSTORE_TEST_POSTGRES_URL"))
    ap.add_argument("--pg-seconds", type=float, default=10.0)
    args = ap.parse_args()
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/rebuild/events.db"
        t = time.perf_counter()
        n = build_store(url, args.events, args.pool_runs)
        print(f"built a store of {n:,} demo events in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        rows += bench_rebuilds(url)
        if args.demo_runs:
            rows.append(bench_demo(args.demo_runs, Path(tmp)))
    if args.pg_url:
        rows += bench_pg_lag(args.pg_url, args.pg_seconds)
    from rich.console import Console
    from rich.table import Table

    table = Table(title="projections benchmark")
    table.add_column("what")
    table.add_column("measured")
    table.add_column("events/s", justify="right")
    for what, measured, rate in rows:
        table.add_row(what, measured, f"{rate:,.0f}" if rate else "")
    Console().print(table)


if __name__ == "__main__":
    main()
