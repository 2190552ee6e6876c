"""Team scale on PostgreSQL: appending and reading one run at 10^5 and 10^7 events, against SQLite.

    python benchmarks/bench_scale_pg.py --sizes 100000 10000000                     # PostgreSQL and SQLite
    python benchmarks/bench_scale_pg.py --sizes 100000 1000000 --backend postgresql  # quicker
    python benchmarks/bench_scale_pg.py --sizes 100000 --keep                         # keep the stores (prints URLs)
    python benchmarks/bench_scale_pg.py --reuse postgresql:100000=URL --reuse ...     # measure kept stores again

Each store holds runs of the demo's simulator (every dialect; ~48 events a run, ~480 bytes of payload
an event), copied under fresh stream ids until the size is reached, written as a team's server
writes them: ``append_many`` transactions of one dialect's runs, the runs interleaved in bursts of
a few events (so one run's rows are spread over the table, as concurrent writers spread them), with
the inline indexes (runs, writers) kept by the appends (``IndexedEventStore``).  10^7 events is about
210,000 runs.

Measured on each store, the sizes (and the backends) interleaved round by round so that a change of
the machine's load falls on all of them:

- one single-event append and one 100-event append to an existing stream, in process (median of
  ``--appends``, wall and CPU milliseconds);
- the in-process read of one run (``EventStore.read_stream``, every event; median of ``--appends``);
- ``evstore log RUN`` and ``evstore replay RUN`` as whole processes (median of ``--repeat`` a
  round, after one run of each not measured; wall and CPU seconds of the child).  A demo run has
  fewer events than ``projections.replay.CACHE_EVERY``: its replay folds every event, no cache;
- with ``--explain``, ``EXPLAIN (ANALYZE, BUFFERS)`` of the statements those paths send on
  PostgreSQL (the rows and pages each reads, which do not depend on the load).

The table prints each figure and its ratio to the smallest size (1.0x: flat), and the PostgreSQL
over SQLite ratio at each size.  PostgreSQL: ``--pg-url``, else ``$EVSTORE_BENCH_POSTGRES_URL``, else
``$EVSTORE_TEST_POSTGRES_URL``; each store is a private schema, dropped at the end unless ``--keep``.
A benchmark, not a timed test: the machine is shared, so read the ratios, the CPU seconds and the
plans more than the wall seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find its neighbours

from bench_growth import child, drop_schema, pg_schema_url  # noqa: E402

#: Events of one run written together before the next run's burst (interleaving).
BURST = 8
#: Runs of one dialect interleaved in one append_many transaction.
INTERLEAVE = 16


def simulated_pool(runs: int) -> list[Any]:
    from concurrent.futures import ProcessPoolExecutor

    from projections.demo import _simulate_chunk, pick_dialects

    names = pick_dialects()
    chunks = [(1, list(range(i, min(i + 10, runs + 1))), names) for i in range(1, runs + 1, 10)]
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        return [r for batch in pool.map(_simulate_chunk, chunks) for r in batch]


def _interleaved(group: list[Any], copy: int) -> Iterator[tuple[str, Any, Any]]:
    from bench_projections import _clone

    cursors = [(f"{r.items[0][0]}-c{copy}" if r.dialect else r.items[0][0], iter(r.items)) for r in group]
    while cursors:
        alive = []
        for sid, it in cursors:
            done = False
            for _ in range(BURST):
                nxt = next(it, None)
                if nxt is None:
                    done = True
                    break
                yield sid, _clone(nxt[1]), nxt[2]
            if not done:
                alive.append((sid, it))
        cursors = alive


class _Filler:
    """A run of small generic events (no dialect): most of a big store, so that it stays a few GB."""

    dialect = None

    def __init__(self, number: int, length: int) -> None:
        from eventstore.store import NewEvent

        self.items = [(f"team/run-{number:07d}", NewEvent("bench.step", {"step": v, "ok": True}), None)
                      for v in range(length)]


def build(url: str, size: int, pool: list[Any], real_every: int) -> tuple[int, int, str]:
    """Write ``size`` events (at least): one run in ``real_every`` a copy of a run of ``pool``, the
    others small generic runs of the same length; (events, runs, a demo run in the middle)."""
    from bench_projections import _fresh

    from projections.runs import IndexedEventStore

    _fresh(url)
    by_dialect: dict[str | None, list[Any]] = {}
    for r in pool:
        by_dialect.setdefault(r.dialect, []).append(r)
    written = runs = copy = filler = 0
    middle = ""
    started = time.perf_counter()
    with IndexedEventStore(url) as store:
        while written < size:
            copy += 1
            for dialect, group in by_dialect.items():
                for i in range(0, len(group), INTERLEAVE):
                    part = group[i:i + INTERLEAVE]
                    for _ in range(real_every - 1):
                        fillers = []
                        for r in part:
                            filler += 1
                            fillers.append(_Filler(filler, len(r.items)))
                        store.append_many(_interleaved(fillers, copy))
                        written += sum(len(r.items) for r in part)
                    items = list(_interleaved(part, copy))
                    store.append_many(items, dialect=dialect)
                    written += len(items)
                    runs += len(part) * real_every
                    if not middle and written >= size // 2:
                        middle = items[-1][0]
                    if written >= size:
                        break
                if written >= size:
                    break
            if copy % 5 == 0:
                rate = written / (time.perf_counter() - started)
                print(f"  {written:,} events, {runs:,} runs, {rate:,.0f} events/s", file=sys.stderr)
    return written, runs, middle


# ------------------------------------------------------------------------ measurements


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def append_times(url: str, run: str, n: int) -> dict[str, list[tuple[float, float]]]:
    """(wall ms, CPU ms) of ``n`` single-event and ``n`` 100-event appends, interleaved, and of ``n``
    reads of ``run`` whole, in process.  The appends go to a stream of their own (created before
    the first one measured), not to ``run``: its dialect's replay would refuse their type."""
    import uuid

    from eventstore.store import NewEvent
    from projections.runs import IndexedEventStore

    out: dict[str, list[tuple[float, float]]] = {"append 1 event": [], "append 100 events": [],
                                                 "read one run (in process)": []}
    with IndexedEventStore(url) as store:
        target = f"bench/appends-{uuid.uuid4().hex[:8]}"
        store.append(target, [NewEvent("bench.note", {"i": -1})])  # connect, caches: not measured
        for i in range(n):
            for label, k in (("append 1 event", 1), ("append 100 events", 100)):
                batch = [NewEvent("bench.note", {"i": i, "j": j}) for j in range(k)]
                w, c = time.perf_counter(), time.process_time()
                store.append(target, batch)
                out[label].append(((time.perf_counter() - w) * 1000, (time.process_time() - c) * 1000))
            w, c = time.perf_counter(), time.process_time()
            got = sum(1 for _ in store.read_stream(run))
            out["read one run (in process)"].append(((time.perf_counter() - w) * 1000,
                                                     (time.process_time() - c) * 1000))
            assert got > 0
    return out


#: (label, evstore arguments); ``{run}`` is the measured run.
CLI_ROWS = [("`evstore log RUN`", ["log", "{run}"]), ("`evstore replay RUN`", ["replay", "{run}"])]


def cli_times(url: str, run: str, n: int) -> dict[str, list[tuple[float, float]]]:
    """(wall s, CPU s) of ``n`` ``log`` and ``replay`` processes each, interleaved, after one of each
    not measured (it writes the modules' bytecode, as an installed evstore has it)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out: dict[str, list[tuple[float, float]]] = {}
    for i in range(n + 1):
        for label, args in CLI_ROWS:
            wall, cpu, _ = child(url, [a.replace("{run}", run) for a in args], env)
            if i:
                out.setdefault(label, []).append((wall, cpu))
    return out


def explain(url: str, run: str) -> list[tuple[str, str]]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the statements the append and read paths send, on PostgreSQL."""
    import psycopg

    from eventstore.backends.postgres import PostgresBackend

    b = PostgresBackend(url)
    dsn, _, query = url.replace("postgresql+psycopg://", "postgresql://").partition("?")
    opts = dict(kv.split("=", 1) for kv in query.split("&") if kv)
    schema = opts.get("options", "").rpartition("%3D")[2]
    plans = []
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"SET search_path = {schema}")
        pk, version = c.execute("SELECT stream_pk, version FROM streams WHERE stream_id = %s", (run,)).fetchone()
        maxpos = c.execute("SELECT MAX(position) FROM events").fetchone()[0]
        eid = c.execute("SELECT event_id FROM events WHERE stream_pk = %s LIMIT 1", (pk,)).fetchone()[0]
        sqls = [
            ("stream head (streams by stream_id)", b.sql_stream, (run,)),
            ("max position + stream (begin_append)", b.sql_max_position_and_stream, (run,)),
            ("read one run (read_stream)", b.sql_read_stream, (pk, 0, version)),
            ("read one run's payloads (replay)", b.sql_read_payloads, (pk, 0, version)),
            ("latest replay-cache row", b.sql_latest_cache, (pk, "document", version)),
            ("recorded source versions (capture once)", b.sql_recorded_sources.format(ids="%s"), (run,)),
            ("event ids already recorded (find_event_ids)", b.sql_find_ids.format(ids="%s"), (eid,)),
            ("tree edge: leaves of the last 100 positions", b.sql_leaf_data, (maxpos - 100, maxpos)),
            ("tree nodes of level 0 near the end", b.sql_tree_nodes, (0, maxpos - 64, maxpos)),
        ]
        for label, sql, params in sqls:
            rows = c.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params).fetchall()
            plans.append((label, "\n".join(r[0] for r in rows)))
    return plans


# ------------------------------------------------------------------------ the table


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "-"


def print_table(results: dict[tuple[str, int], dict[str, tuple[float, float]]], sizes: list[int],
                backends: list[str]) -> None:
    labels = list(next(iter(results.values())))
    for backend in backends:
        print(f"\n{backend}: wall, CPU (ratio wall / CPU to {sizes[0]:,} events)")
        print("| | " + " | ".join(f"{s:,} events" for s in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        for label in labels:
            unit, scale = ("ms", 1.0) if "`" not in label else ("s", 1.0)
            cells = []
            for i, s in enumerate(sizes):
                w, c = results[(backend, s)][label]
                cell = f"{w * scale:.2f} {unit}, {c * scale:.2f} {unit} CPU"
                if i:
                    w0, c0 = results[(backend, sizes[0])][label]
                    cell += f" ({ratio(w, w0)} / {ratio(c, c0)})"
                cells.append(cell)
            print(f"| {label} | " + " | ".join(cells) + " |")
    if "sqlite" in backends and "postgresql" in backends:
        print("\nPostgreSQL over SQLite at the same size (wall / CPU of the process)")
        print("| | " + " | ".join(f"{s:,} events" for s in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        for label in labels:
            cells = []
            for s in sizes:
                (pw, pc), (sw, sc) = results[("postgresql", s)][label], results[("sqlite", s)][label]
                cells.append(f"{ratio(pw, sw)} / {ratio(pc, sc)}")
            print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 10_000_000], help="events per store")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--pg-url", default=os.environ.get("EVSTORE_BENCH_POSTGRES_URL")
                    or os.environ.get("EVSTORE_TEST_POSTGRES_URL"))
    ap.add_argument("--pool-runs", type=int, default=300, help="distinct simulated runs copied to reach a size")
    ap.add_argument("--real-every", type=int, default=10,
                    help="one run in N a copy of a simulated run, the others small generic runs")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of measurement")
    ap.add_argument("--appends", type=int, default=8, help="appends of each kind per round (medians over all rounds)")
    ap.add_argument("--repeat", type=int, default=1, help="`log` and `replay` processes per round")
    ap.add_argument("--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS) of the paths' statements")
    ap.add_argument("--dir", default=None, help="where the SQLite stores go (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (and print their URLs and runs)")
    ap.add_argument("--reuse", action="append", default=[], metavar="BACKEND:SIZE=URL#RUN",
                    help="measure a kept store instead of building one (repeatable)")
    opts = ap.parse_args()
    backends = ["sqlite", "postgresql"] if opts.backend == "both" else [opts.backend]
    if "postgresql" in backends and not opts.pg_url and not opts.reuse:
        print("no PostgreSQL URL (--pg-url or EVSTORE_BENCH_POSTGRES_URL): SQLite only", file=sys.stderr)
        backends.remove("postgresql")
    tmp = opts.dir or tempfile.mkdtemp(prefix="bench_scale_")
    stores: dict[tuple[str, int], tuple[str, str]] = {}
    schemas: list[str] = []
    for spec in opts.reuse:
        key, _, rest = spec.partition("=")
        backend, _, size = key.partition(":")
        url, _, run = rest.rpartition("#")
        stores[(backend, int(size))] = (url, run)
    try:
        pool: list[Any] = []
        for backend in backends:
            for size in opts.sizes:
                if (backend, size) in stores:
                    continue
                if not pool:
                    pool = simulated_pool(opts.pool_runs)
                if backend == "sqlite":
                    url = f"sqlite:///{tmp}/scale-{size}.db"
                else:
                    url, schema = pg_schema_url(opts.pg_url)
                    schemas.append(schema)
                print(f"{backend}: building {size:,} events", file=sys.stderr)
                started = time.perf_counter()
                written, runs, run = build(url, size, pool, opts.real_every)
                print(f"  built {written:,} events in {runs:,} runs in {time.perf_counter() - started:.0f} s",
                      file=sys.stderr)
                stores[(backend, size)] = (url, run)
                if opts.keep:
                    print(f"  --reuse '{backend}:{size}={url}#{run}'", file=sys.stderr)
        samples: dict[tuple[str, int], dict[str, list[tuple[float, float]]]] = {k: {} for k in stores}
        for rnd in range(opts.rounds):
            for key, (url, run) in sorted(stores.items(), key=lambda kv: (kv[0][1], kv[0][0]) if rnd % 2 == 0
                                          else (-kv[0][1], kv[0][0])):
                got = {**append_times(url, run, opts.appends), **cli_times(url, run, opts.repeat)}
                for k, v in got.items():
                    samples[key].setdefault(k, []).extend(v)
                print(f"  round {rnd + 1}: {key[0]} {key[1]:,}: "
                      + ", ".join(f"{k} {_median([w for w, _ in v]):.3g}" for k, v in got.items()), file=sys.stderr)
        if not opts.rounds:
            return
        results = {k: {lab: (_median([w for w, _ in v]), _median([c for _, c in v])) for lab, v in by.items()}
                   for k, by in samples.items()}
        print_table(results, sorted({s for _, s in stores}), [b for b in ("postgresql", "sqlite")
                                                               if any(k[0] == b for k in stores)])
        if opts.explain:
            for (backend, size), (url, run) in sorted(stores.items()):
                if backend != "postgresql":
                    continue
                print(f"\nPostgreSQL plans at {size:,} events (run {run})")
                for label, plan in explain(url, run):
                    print(f"\n-- {label}\n{plan}")
    finally:
        if not opts.keep:
            for schema in schemas:
                drop_schema(opts.pg_url, schema)
            if not opts.dir:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
