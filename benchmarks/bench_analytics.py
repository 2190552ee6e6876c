"""Analytics benchmark: DuckDB over the Parquet tables vs plain Python over the event store.

    python benchmarks/bench_analytics.py                 # 1,000,000 review findings (slow: ~3.5M events)
    python benchmarks/bench_analytics.py --scale 0.05    # 50,000 findings

What it measures, on one SQLite store filled with simulated mapipe runs (a pool of simulated
runs, cloned under fresh stream ids until the store holds the target number of review findings
= reviewer x distinct fingerprint x iteration):

1. Two questions, answered end to end both ways, results checked equal:
   * reviewer acceptance per model (Σ accepted / Σ raised, iterations with an anonymizationMap);
   * still-present-next-iteration: Σ stillPresent / Σ (stillPresent + resolved + downgraded) over
     the review deltas.
   "Python" reads the same facts from the event store (``iter_all(types=...)``, decode, fold in
   dicts); "DuckDB" opens the analytics views and runs two SQL queries.  The Parquet build
   (one full refresh) is timed separately and also reported added to DuckDB's side.
2. Refresh cost for 1,000 new events on the big store vs on a store a tenth its size (the
   refresh reads only events after its checkpoint, so both should cost the same).

    python benchmarks/bench_analytics.py --memory --events 43000   # 43k and 430k events

3. ``--memory``: peak memory of a full build (the first ``metrics`` on a store) at two sizes an
   order of magnitude apart, each in a fresh process (``ru_maxrss`` after the imports and after
   one full refresh).  The refresh writes facts every ``FLUSH_EVENTS`` events and compaction
   streams one small file at a time, so the peak must not grow with the number of events.

    python benchmarks/bench_analytics.py --threads      # stores of 2k, 20k, 100k and 400k events

4. ``--threads``: one whole ``metrics`` report (every section's queries) on one DuckDB thread and on
   DuckDB's default (a thread per core), wall and CPU seconds, as a store grows: the figures behind
   ``projections.analytics.views.SERIAL_ROWS`` (below it a connection runs on one thread).

    python benchmarks/bench_analytics.py --demo-build 300000 --dir /tmp/bench-demo

5. ``--demo-build N``: CPU seconds, events per CPU second and peak RSS of a full build (the first
   ``metrics``) over a store of the demo's runs of every dialect, each build in a fresh process
   (the store is kept in ``--dir``: building it is the slow part).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import log  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.codec import decode  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402
from projections import analytics  # noqa: E402
from projections.demo import simulate_run  # noqa: E402

REVIEW_TYPES = ["mapipe.review_iteration_recorded", "mapipe.review_iteration_updated", "mapipe.review_delta_computed"]


def make_store(path: Path) -> EventStore:
    url = f"sqlite:///{path}/events.db"
    s = EventStore(url, check_schema=False, synchronous="NORMAL")
    migrate.upgrade(s.engine)
    return s


def pool(n: int, seed: int) -> list[tuple[list[tuple[str, bytes, bytes, str | None]], int]]:
    """``n`` simulated mapipe runs: their events (type, data, meta, occurred_at) and findings."""
    out = []
    for k in range(n):
        run = simulate_run(seed, k + 1, ["mapipe"])
        events = [(e.type, e.data, e.meta, e.occurred_at) for _sid, e, _v in run.items]
        flat = analytics.Flattener()
        findings = 0
        for type_, data, _meta, _at in events:
            if type_ in REVIEW_TYPES[:2]:
                flat.rows["review_raised"].clear()
                from eventstore.dialects.mapipe.analytics import _review_iteration  # the flattener's own rule
                p = decode(data)
                _review_iteration(flat.rows, _FakeEvent(), p, None)  # type: ignore[arg-type]
                findings += len(flat.rows["review_raised"]) if type_.endswith("recorded") else 0
        out.append((events, findings))
    return out


class _FakeEvent:
    position = 0
    stream_id = ""


def fill(store: EventStore, runs: list[tuple[list[tuple[str, bytes, bytes, str | None]], int]], *,
         target_findings: int | None = None, target_events: int | None = None, prefix: str = "bench") -> tuple[int, int]:
    """Clone the pool under fresh stream ids until a target is reached; (findings, events) added."""
    findings = events = 0
    k = 0
    batch: list[tuple[str, NewEvent, Any]] = []
    while (target_findings is not None and findings < target_findings) or \
            (target_events is not None and events < target_events):
        evs, f = runs[k % len(runs)]
        sid = f"{prefix}-{k:07d}"
        for i, (type_, data, meta, at) in enumerate(evs):
            batch.append((sid, NewEvent(type_, data, meta=decode(meta), occurred_at=at), 0 if i == 0 else None))
        findings += f
        events += len(evs)
        k += 1
        if len(batch) >= 20_000:
            store.append_many(batch, dialect="mapipe", chunk=5000)
            batch = []
    if batch:
        store.append_many(batch, dialect="mapipe", chunk=5000)
    return findings, events


def python_answers(store: EventStore) -> tuple[dict[str, tuple[int, int]], float]:
    """Plain Python from the event store: latest iteration entry per (stream, index), then fold."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    deltas: dict[tuple[str, int], dict[str, Any]] = {}
    for e in store.iter_all(types=REVIEW_TYPES, batch_size=20_000):
        p = decode(e.data)
        key = (e.stream_id, p["index"])
        if e.type == "mapipe.review_delta_computed":
            deltas[key] = p["delta"]
        else:
            latest[key] = p["iteration"]
            if isinstance(p["iteration"].get("delta"), dict):
                deltas[key] = p["iteration"]["delta"]
    raised: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    for it in latest.values():
        if not isinstance(it.get("anonymizationMap"), dict):
            continue
        acc = {a if isinstance(a, str) else a.get("fingerprint") for a in it.get("accepted", [])}
        for r in it.get("reviewers", []):
            model = r.get("model") or "unknown"
            fps = {f if isinstance(f, str) else f.get("fingerprint") for f in r.get("findings", [])} - {None}
            raised[model] += len(fps)
            accepted[model] += len(fps & acc)
    still = sum(len(d.get("stillPresent", [])) for d in deltas.values())
    denom = still + sum(len(d.get("resolved", [])) + len(d.get("downgraded", [])) for d in deltas.values())
    return {m: (accepted[m], raised[m]) for m in raised}, (still / denom if denom else 0.0)


def duckdb_answers(directory: Path) -> tuple[dict[str, tuple[int, int]], float]:
    con = analytics.connect(directory)
    try:
        acc = con.execute("""SELECT model, count_if(accepted), count(*) FROM review_findings
                             WHERE has_map GROUP BY model""").fetchall()
        sp = con.execute("""SELECT sum(still_present) / sum(still_present + resolved + downgraded)
                            FROM review_deltas""").fetchall()[0][0]
    finally:
        con.close()
    return {m: (int(a), int(r)) for m, a, r in acc}, float(sp or 0.0)


def timed(fn: Any, *args: Any, repeat: int = 3) -> tuple[Any, float]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - t)
    return result, best


def refresh_cost(store: EventStore, runs: Any, directory: Path, prefix: str) -> tuple[float, int]:
    fill(store, runs, target_events=1000, prefix=prefix)
    gc.collect()
    t = time.perf_counter()
    r = analytics.refresh(store, directory)
    return time.perf_counter() - t, r.events


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def build_only(url: str, directory: str) -> int:
    """In a fresh process: one full refresh; prints events, wall and CPU seconds and peak RSS (JSON).
    The CPU is this process's (``time.process_time``), from after the store is opened to the end of
    the refresh: on a shared machine it is the figure to compare, wall time follows the load."""
    import resource

    from projections.analytics.files import _workers

    def children() -> tuple[float, float]:  # CPU seconds and peak RSS (MB) of the worker processes
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024

    store = EventStore(url, check_schema=False)
    store.max_position()
    before = _rss_mb()
    t, cpu, child = time.perf_counter(), time.process_time(), children()[0]
    r = analytics.refresh(store, directory, rebuild=True)
    wall = time.perf_counter() - t
    own = time.process_time() - cpu
    child_cpu, child_rss = children()
    cpu = own + child_cpu - child
    print(json.dumps({"events": r.events, "seconds": round(wall, 2), "cpu_s": round(cpu, 2),
                      "events_per_cpu_s": round(r.events / cpu) if cpu else None,
                      "events_per_wall_s": round(r.events / wall) if wall else None,
                      "workers": _workers(r.events),  # the refresh's own choice for that many events
                      "rss_after_imports_mb": round(before, 1), "peak_rss_mb": round(_rss_mb(), 1),
                      "workers_peak_rss_mb": round(child_rss, 1) if child_cpu > child else None,
                      "files": sum(len(v) for v in analytics.Manifest.load(Path(directory)).files.values())}))
    return 0


def demo_build(args: argparse.Namespace) -> int:
    """``--demo-build N``: a full build of the facts of a store of the demo's runs (every dialect, copied
    under fresh stream ids: benchmarks/bench_projections.py's store), in fresh processes, ``--repeat`` times."""
    import subprocess

    from bench_projections import build_store

    work = Path(args.dir or tempfile.mkdtemp(prefix="evstore-bench-analytics-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / f"demo-{args.demo_build}.db"
    url = f"sqlite:///{db}"
    if not db.exists():  # kept with --dir: building the store is the slow part
        t = time.perf_counter()
        n = build_store(url, args.demo_build, args.pool)
        log(f"demo store of {n:,} events in {time.perf_counter() - t:.1f} s: {db}")
    rows = []
    env = dict(os.environ)
    if args.workers:
        env["EVSTORE_ANALYTICS_WORKERS"] = str(args.workers)
    for _ in range(args.repeat):
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, __file__, "--build-only", url, str(work / "analytics")],
                             capture_output=True, text=True, check=True, env=env)
        rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "load": round(load, 1)})
    if args.json:
        print(json.dumps({"flush_events": analytics.FLUSH_EVENTS, "builds": rows}))
        return 0
    print("full analytics build of a demo store (each in a fresh process; target >= 150,000 events/s); CPU s: the")
    print("process and its worker processes; peak RSS MB: the process, and each worker's (the largest) after '+'")
    print(f"{'events':>10} {'workers':>7} {'CPU s':>7} {'events/CPU s':>13} {'wall s':>7} {'events/wall s':>14} "
          f"{'peak RSS MB':>14} {'files':>6} {'load':>5}")
    for r in rows:
        rss = f"{r['peak_rss_mb']}" + (f" + {r['workers_peak_rss_mb']}" if r.get("workers_peak_rss_mb") else "")
        print(f"{r['events']:>10,} {r['workers']:>7} {r['cpu_s']:>7} {r['events_per_cpu_s']:>13,} {r['seconds']:>7} "
              f"{r['events_per_wall_s']:>14,} {rss:>14} {r['files']:>6} {r['load']:>5}")
    return 0


def memory(args: argparse.Namespace) -> int:
    import subprocess

    work = Path(args.dir or tempfile.mkdtemp(prefix="evstore-bench-analytics-mem-"))
    runs = pool(args.pool, args.seed)
    rows = []
    for n in (args.events, 10 * args.events):
        d = work / f"n{n}"
        d.mkdir(parents=True, exist_ok=True)
        store = make_store(d)
        t = time.perf_counter()
        fill(store, runs, target_events=n)
        log(f"store of {store.max_position():,} events filled in {time.perf_counter() - t:.1f} s")
        url = store.url
        store.close()
        out = subprocess.run([sys.executable, __file__, "--build-only", url, str(d / "analytics")],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps({"flush_events": analytics.FLUSH_EVENTS, "builds": rows}))
        return 0
    print(f"full analytics build, FLUSH_EVENTS = {analytics.FLUSH_EVENTS:,} (each in a fresh process)")
    print(f"{'events':>10} {'seconds':>8} {'RSS after imports MB':>21} {'peak RSS MB':>12} {'files':>6}")
    for r in rows:
        print(f"{r['events']:>10,} {r['seconds']:>8} {r['rss_after_imports_mb']:>21} {r['peak_rss_mb']:>12} "
              f"{r['files']:>6}")
    return 0


def threads(args: argparse.Namespace) -> int:
    """A whole metrics report on one thread and on the default, on one store as it grows (``--threads``)."""
    import resource

    from projections import metrics
    from projections.analytics.views import SERIAL_ROWS

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    work = Path(args.dir or tempfile.mkdtemp(prefix="evstore-bench-threads-"))
    store, runs = make_store(work), pool(30, args.seed)
    print(f"{'events':>8} {'fact rows':>10}  {'1 thread: wall / CPU s':>24}  {'default: wall / CPU s':>24}")
    for target in (2_000, 20_000, 100_000, 400_000):
        fill(store, runs, target_events=target - store.max_position(), prefix=f"t{target}")
        analytics.refresh(store, work / "analytics")
        m = analytics.Manifest.load(work / "analytics")
        assert m is not None
        rows = m.rows()
        cells = []
        for n in (1, os.cpu_count() or 1):
            best = (float("inf"), float("inf"))
            for _ in range(3):
                con = analytics.connect(work / "analytics", threads=n)
                metrics.cross_run_report(con)  # parses each file's footer once (the cache lives with con)
                t, c = time.perf_counter(), cpu()
                metrics.cross_run_report(con)
                best = min(best, (time.perf_counter() - t, cpu() - c))
                con.close()
            cells.append(f"{best[0]:.3f} / {best[1]:.3f}")
        print(f"{store.max_position():8,} {rows:10,}  {cells[0]:>24}  {cells[1]:>24}"
              + ("   (one thread by default)" if rows < SERIAL_ROWS else ""))
    store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of 1,000,000 findings (default 1.0)")
    ap.add_argument("--pool", type=int, default=60, help="distinct simulated runs to clone (default 60)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--memory", action="store_true", help="peak memory of a full build at --events and 10x that")
    ap.add_argument("--events", type=int, default=43_000, help="with --memory: the smaller store (default 43,000)")
    ap.add_argument("--threads", action="store_true", help="a metrics report on one DuckDB thread vs the default")
    ap.add_argument("--demo-build", type=int, metavar="EVENTS",
                    help="CPU, events per CPU second and peak RSS of a full build over a demo store of EVENTS "
                         "events (every dialect; kept in --dir for the next run)")
    ap.add_argument("--repeat", type=int, default=3, help="with --demo-build: builds to run (default 3)")
    ap.add_argument("--workers", type=int, help="with --demo-build: processes a build flattens on "
                                                "(EVSTORE_ANALYTICS_WORKERS; default: the refresh's own choice)")
    ap.add_argument("--build-only", nargs=2, metavar=("URL", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_only:
        return build_only(*args.build_only)
    if args.memory:
        return memory(args)
    if args.threads:
        return threads(args)
    if args.demo_build:
        if args.pool == 60:
            args.pool = 100  # distinct simulated runs of every dialect (bench_growth.py copies 200)
        return demo_build(args)
    target = int(1_000_000 * args.scale)
    work = Path(args.dir or tempfile.mkdtemp(prefix="evstore-bench-analytics-"))
    log(f"work directory {work}; simulating a pool of {args.pool} runs")
    runs = pool(args.pool, args.seed)
    big, small = work / "big", work / "small"
    big.mkdir(parents=True, exist_ok=True)
    small.mkdir(parents=True, exist_ok=True)
    store, store_small = make_store(big), make_store(small)
    t = time.perf_counter()
    findings, events = fill(store, runs, target_findings=target)
    log(f"big store: {findings:,} findings, {events:,} events in {time.perf_counter() - t:.1f} s")
    fill(store_small, runs, target_findings=max(1, target // 10))
    out_big, out_small = big / "analytics", small / "analytics"

    t = time.perf_counter()
    analytics.refresh(store, out_big)
    build_s = time.perf_counter() - t
    analytics.refresh(store_small, out_small)
    log(f"Parquet build (full refresh): {build_s:.2f} s")

    (py_acc, py_sp), py_s = timed(python_answers, store, repeat=1)
    (dk_acc, dk_sp), dk_s = timed(duckdb_answers, out_big)
    same = py_acc == dk_acc and abs(py_sp - dk_sp) < 1e-9
    raised_total = sum(r for _a, r in dk_acc.values())

    big_refresh_s, big_new = refresh_cost(store, runs, out_big, "new-big")
    small_refresh_s, small_new = refresh_cost(store_small, runs, out_small, "new-small")
    result = {
        "findings": raised_total, "events": store.max_position(), "python_s": round(py_s, 3),
        "duckdb_query_s": round(dk_s, 3), "parquet_build_s": round(build_s, 3),
        "ratio_query": round(py_s / dk_s, 1), "ratio_build_plus_query": round(py_s / (dk_s + build_s), 2),
        "answers_equal": same,
        "refresh_big_s": round(big_refresh_s, 3), "refresh_big_events": big_new,
        "refresh_small_s": round(small_refresh_s, 3), "refresh_small_events": small_new,
        "small_store_events": store_small.max_position(),
        "still_present_next_iteration": round(dk_sp, 4),
    }
    store.close()
    store_small.close()
    if args.json:
        print(json.dumps(result))
        return 0 if same else 1
    print(f"review findings (reviewer x distinct fingerprint x iteration): {raised_total:,} "
          f"in {result['events']:,} events")
    print(f"{'what':58} {'seconds':>9}")
    print(f"{'plain Python reading the facts from the event store':58} {py_s:9.3f}")
    print(f"{'DuckDB over the Parquet analytics views (2 queries)':58} {dk_s:9.3f}")
    print(f"{'  one-off Parquet build (full refresh from position 0)':58} {build_s:9.3f}")
    print(f"ratio Python / DuckDB: {result['ratio_query']}x (target >= 10x); "
          f"including the one-off build: {result['ratio_build_plus_query']}x")
    print(f"answers equal: {same}; still-present-next-iteration = {dk_sp:.4f}")
    print(f"refresh after ~1,000 new events: {big_refresh_s:.3f} s on {result['events']:,} events "
          f"({big_new} new) vs {small_refresh_s:.3f} s on {result['small_store_events']:,} events ({small_new} new)")
    return 0 if same else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
