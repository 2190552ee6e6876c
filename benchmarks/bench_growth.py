"""Growth benchmark: what people run every day, as the store grows by 10x, on SQLite and PostgreSQL.

    python benchmarks/bench_growth.py                          # 10^5 and 10^6 events, both backends
    python benchmarks/bench_growth.py --sizes 100000 --backend sqlite        # quick
    python benchmarks/bench_growth.py --sizes 100000 1000000 10000000        # where the machine allows

Each store is the demo's own simulated runs (every dialect), copied under fresh stream ids until it
holds the size (benchmarks/bench_projections.py's ``build_store``; simulating every run is the slow
part).  Every row is one whole ``evstore`` process (wall and CPU seconds of that child, and its peak
RSS, from ``os.wait4``), except ``GET /metrics``, which is the server's time for one request of an
app in this process, and the two rows "in a warm process": ``log`` and ``replay`` run again in a
process that has run them once (Python started, the driver imported, its connection set up), the
median of five: what the query and its output cost, which an index or a query plan changes.  The ratio is each size's figure over the size before it: 1.0x is a cost that
does not grow with the store, 10x one that grows with it.  A benchmark, not a timed test: the machine
is shared, so read the ratios more than the seconds.

PostgreSQL: ``--pg-url``, else ``$EVSTORE_BENCH_POSTGRES_URL``, else ``$EVSTORE_TEST_POSTGRES_URL``;
each store is a private schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find its neighbours

from bench_projections import build_store  # noqa: E402

#: (row label, evstore arguments); ``{run}`` is a run of the store, ``{dir}`` its analytics folder.
ROWS: list[tuple[str, list[str]]] = [
    ("first `metrics` (builds the facts)", ["metrics", "--analytics-dir", "{dir}"]),
    ("later `metrics` (unchanged store)", ["metrics", "--analytics-dir", "{dir}"]),
    ("`metrics --format html` (unchanged)", ["metrics", "--analytics-dir", "{dir}", "--format", "html",
                                             "--out", "{dir}/report.html"]),
    ("`projections status`", ["projections", "status", "--json"]),
    ("`runs` (one page of 50)", ["runs", "--limit", "50"]),
    ("`runs --json` (every run, NDJSON)", ["runs", "--json"]),
    ("`log` of one run", ["log", "{run}"]),
    ("`replay` of one run", ["replay", "{run}"]),
    ("`verify`", ["verify"]),
    ("`metrics` after 1,000 new events", ["metrics", "--analytics-dir", "{dir}"]),
]


def child(url: str, args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Run ``evstore --url URL ARGS`` to the end: (wall s, CPU s, peak RSS MB) of that process alone.

    The peak comes from GNU time's report on its child when /usr/bin/time is there: a process this
    one starts (vfork, then exec) inherits this process's peak RSS as its own, and this process holds
    the store's build."""
    timed = Path("/usr/bin/time").is_file()
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrap = ["/usr/bin/time", "-f", "%M", "-o", rss.name] if timed else []
        start = time.perf_counter()
        proc = subprocess.Popen([*wrap, sys.executable, "-m", "eventstore", "--url", url, *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)  # CPU: the child's and its children's
        wall = time.perf_counter() - start
        err = proc.stderr.read().decode() if proc.stderr else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"evstore {' '.join(args)} failed ({proc.returncode}): {err}")
        peak = int(rss.read().split()[-1]) / 1024 if timed else usage.ru_maxrss / 1024
    return wall, usage.ru_utime + usage.ru_stime, peak


def catch_up_inline(url: str) -> None:
    """Bring the inline projections (runs and writers indexes) to the end of the log, as appends through
    the CLI keep them: ``build_store`` appends without them, and the first command would pay for it."""
    from eventstore.store import EventStore
    from projections import engine

    with EventStore(url) as store, engine.ProjectionRunner(store) as runner:
        for p in engine.registered():
            if p.inline:
                runner.catch_up(p)


def append_more(url: str, n: int) -> None:
    from eventstore.store import EventStore, NewEvent

    with EventStore(url) as store:
        store.append_many([(f"growth-{uuid.uuid4().hex[:8]}", NewEvent("growth.note", {"i": i}), None)
                           for i in range(n)])


def serve_metrics(url: str, directory: str) -> float:
    """Server time of one ``GET /metrics`` once the report is kept (the second request)."""
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app

    with TestClient(create_app(ServeConfig(url=url, analytics_dir=directory)), base_url="http://127.0.0.1") as c:
        c.get("/metrics")
        start = time.perf_counter()
        assert c.get("/metrics").status_code == 200
        return time.perf_counter() - start


#: In a child process: each command once (imports, the driver's connection set up), then the median of
#: five more of the same in that process: what the query and its output cost, without starting Python.
_WARM = """
import statistics, sys, time
from click.testing import CliRunner
from eventstore.cli import register
cli, runner, url, run = register(), CliRunner(), sys.argv[1], sys.argv[2]
for command in ("log", "replay"):
    runner.invoke(cli, ["--url", url, command, run], catch_exceptions=False)
    took = []
    for _ in range(5):
        start = time.perf_counter()
        result = runner.invoke(cli, ["--url", url, command, run], catch_exceptions=False)
        took.append(time.perf_counter() - start)
        assert result.exit_code == 0, result.output
    print(command, statistics.median(took))
"""


def warm(url: str, run: str, env: dict[str, str]) -> dict[str, float]:
    """``log`` and ``replay`` of ``run`` in a process that has run them once (:data:`_WARM`): seconds each."""
    out = subprocess.run([sys.executable, "-c", _WARM, url, run], env=env, capture_output=True, text=True, check=True)
    return {cmd: float(s) for cmd, s in (line.split() for line in out.stdout.splitlines())}


def measure(url: str, directory: str) -> dict[str, tuple[float, float, float]]:
    from eventstore.store import EventStore

    with EventStore(url) as store:
        run = store.list_streams()[len(store.list_streams()) // 2].stream_id
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out: dict[str, tuple[float, float, float]] = {}
    for label, args in ROWS:
        if label.startswith("`metrics` after"):
            out["`GET /metrics` (unchanged, server time)"] = (serve_metrics(url, directory), 0.0, 0.0)
            append_more(url, 1000)
        argv = [a.replace("{run}", run).replace("{dir}", directory) for a in args]
        out[label] = child(url, argv, env)
        print(f"  {label}: {out[label][0]:.2f} s wall, {out[label][1]:.2f} s CPU, {out[label][2]:.0f} MB",
              file=sys.stderr)
        if label.startswith("`replay`"):  # the query and its output alone: what an index or a plan changes
            for cmd, seconds in warm(url, run, env).items():
                out[f"`{cmd}` of one run, in a warm process"] = (seconds, 0.0, 0.0)
    return out


def pg_schema_url(base: str) -> tuple[str, str]:
    schema = "growth_" + uuid.uuid4().hex[:8]
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}", schema


def analyze(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        for (table,) in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall():
            c.execute(f'ANALYZE "{schema}"."{table}"')


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="events per store")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--pg-url", default=os.environ.get("EVSTORE_BENCH_POSTGRES_URL")
                    or os.environ.get("EVSTORE_TEST_POSTGRES_URL"))
    ap.add_argument("--pool-runs", type=int, default=200, help="distinct simulated runs copied to reach a size")
    ap.add_argument("--dir", default=None, help="where the SQLite stores go (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    opts = ap.parse_args()
    backends = ["sqlite", "postgresql"] if opts.backend == "both" else [opts.backend]
    if "postgresql" in backends and not opts.pg_url:
        print("no PostgreSQL URL (--pg-url or EVSTORE_BENCH_POSTGRES_URL): SQLite only", file=sys.stderr)
        backends.remove("postgresql")
    results: dict[str, dict[int, dict[str, tuple[float, float, float]]]] = {}
    with tempfile.TemporaryDirectory(dir=opts.dir) as tmp:
        for backend in backends:
            results[backend] = {}
            for size in opts.sizes:
                schema = None
                if backend == "sqlite":
                    url = f"sqlite:///{tmp}/s{size}.db"
                else:
                    url, schema = pg_schema_url(opts.pg_url)
                try:
                    print(f"{backend}: building {size:,} events", file=sys.stderr)
                    started = time.perf_counter()
                    build_store(url, size, opts.pool_runs)
                    catch_up_inline(url)  # a user's store has its inline indexes; the copy bypassed them
                    if schema:  # as autovacuum would (this machine's server runs without it): the planner's statistics
                        analyze(opts.pg_url, schema)
                    print(f"  built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
                    results[backend][size] = measure(url, f"{tmp}/{backend}-{size}.analytics")
                finally:
                    if schema:
                        drop_schema(opts.pg_url, schema)
    if opts.json:
        print(json.dumps({b: {str(s): r for s, r in by.items()} for b, by in results.items()}, indent=1))
        return
    for backend, by_size in results.items():
        sizes = sorted(by_size)
        print(f"\n{backend}: wall s, CPU s of the process, peak MB; (wall ratio / CPU ratio to the size before)")
        head = "| | " + " | ".join(f"{s:,} events" for s in sizes) + " |"
        print(head)
        print("|---" * (len(sizes) + 1) + "|")
        for label in by_size[sizes[0]]:
            cells = []
            for i, s in enumerate(sizes):
                wall, cpu, rss = by_size[s][label]
                cell = f"{wall:.2f} s" + (f", {cpu:.2f} s CPU, {rss:.0f} MB" if rss else "")
                if i:
                    w0, c0, _ = by_size[sizes[i - 1]][label]
                    cell += f" ({wall / w0:.1f}x" + (f" / {cpu / c0:.1f}x)" if c0 else ")") if w0 else ""
                cells.append(cell)
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
