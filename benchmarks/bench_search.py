"""Full-text search (``evstore search``, the ``search`` projection) over a large log on SQLite.

    python benchmarks/bench_search.py                    # 1,000,000 events
    python benchmarks/bench_search.py --events 100000    # quick

1. Appends ``--events`` ~500-byte events (the shared benchmark payloads: words from a 400-word
   vocabulary, ids, paths; 100 per stream, 1,000 per transaction) with ``EventStore.append_many``
   and times it: the ingest.
2. Builds the search index from the log (``ProjectionRunner.catch_up`` of the ``search``
   projection: ``proj_search`` + FTS5) and times it against the ingest (target: under 30 %).
3. Times queries through :func:`projections.search.search` (the index current, no catch-up): a
   word in ten events, a word in ~5 % of them, two common words, a phrase, a prefix, and a word
   within one stream; median of ``--repeat`` runs each (target: under 100 ms).

``--claude-mb MB`` instead measures the realistic ingest: MB of generated Claude Code transcripts
(``bench_ingest.write_claude_projects``) through ``evstore ingest claude`` into a fresh store, then
the index build over them, wall and CPU time of each and the ratio (target: under 30 %);
``--claude-copies N`` the same over N copies of the usage fixture's transcripts; ``--backend
postgresql`` (with ``--pg-url`` or ``$EVSTORE_TEST_POSTGRES_URL``) in a throwaway database of the
server, whose backends' CPU is measured too when the server runs on this machine (to_tsvector runs
there); ``--profile`` prints a cProfile of the build::

    python benchmarks/bench_search.py --claude-mb 20
    python benchmarks/bench_search.py --claude-mb 20 --backend postgresql
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import _WORDS, log, make_payloads, pg_database, plan  # noqa: E402
from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402
from projections.engine import ProjectionRunner  # noqa: E402
from projections.search import SEARCH, search  # noqa: E402

RARE = "xylophonequark"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    n = args.events
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'events.db'}"
        eng = make_engine(url)
        migrate.upgrade(eng)
        eng.dispose()
        payloads = make_payloads(n)
        for i in range(0, n, max(n // 10, 1)):  # ten events hold a rare word
            payloads[i] = {**payloads[i], "note": f"found {RARE} here"}
        with EventStore(url) as store:
            log(f"appending {n:,} events ...")
            t0 = time.perf_counter()
            slices = list(plan(n, 100, 100))  # streams of 100 events, appended 1,000 per transaction
            batch: list[tuple[str, NewEvent, None]] = []
            for s in slices:
                batch.extend((f"run-{s.stream:06d}", NewEvent("bench.noted", payloads[i]), None) for i in range(s.lo, s.hi))
                if len(batch) >= 1000:
                    store.append_many(batch)
                    batch = []
            if batch:
                store.append_many(batch)
            ingest = time.perf_counter() - t0
            log("building the search index ...")
            with ProjectionRunner(store) as runner:
                t0 = time.perf_counter()
                runner.catch_up(SEARCH)
                build = time.perf_counter() - t0
            size = Path(tmp, "events.db").stat().st_size
            common = _WORDS[0]
            phrase = " ".join(str(payloads[7]["summary"]).split()[:2])
            queries = [("rare word (10 events)", RARE, {}), ("common word", common, {}),
                       ("two common words", f"{_WORDS[0]} {_WORDS[1]}", {}),
                       ("phrase", f'"{phrase}"', {}), ("prefix", _WORDS[4][:3] + "*", {}),
                       ("word in one stream", "coder", {"stream": f"run-{n // 200:06d}"})]  # in every payload
            print(f"{n:,} events; ingest {ingest:.1f} s ({n / ingest:,.0f} events/s); index build {build:.1f} s "
                  f"({n / build:,.0f} events/s) = {build / ingest:.0%} of ingest (target < 30 %); "
                  f"database {size / 1e6:,.0f} MB")
            print(f"{'query':28}{'hits':>6}{'median ms':>11}{'max ms':>9}")
            for label, q, kw in queries:
                times = []
                hits = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    hits = search(store, q, refresh=False, **kw)  # type: ignore[arg-type]
                    times.append((time.perf_counter() - t0) * 1000)
                print(f"{label:28}{len(hits):>6}{statistics.median(times):>11.1f}{max(times):>9.1f}")


def transcripts(copies: int, mb: float, backend: str, pg_url: str | None, profile: bool) -> None:
    """The realistic ingest: Claude Code transcripts through ``evstore ingest claude`` (a separate
    process: scrubbing, blobs, subagent links) into a fresh store, then the index built over them (in
    this process).  The transcripts: ``mb`` MB generated by ``bench_ingest.write_claude_projects``
    (prompts, streamed assistant blocks, Read/Bash/Grep/Edit results, screenshots, subagents), or
    ``copies`` copies of the usage fixture's.  Prints wall and CPU time of both and their ratio."""
    import contextlib
    import cProfile
    import pstats
    import subprocess

    from benchmarks.bench_ingest import write_claude_projects
    from benchmarks.bench_usage import write_copies

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        if copies:
            write_copies(work / "projects", copies)
            what = f"{copies} copies of the usage fixture"
        else:
            size, files = write_claude_projects(work / "projects", target=int(mb * 1_000_000))
            what = f"{size / 1e6:.1f} MB of generated transcripts ({files} files)"
        server: ServerCpu | None = None
        if backend == "sqlite":
            url = f"sqlite:///{work / 'ev.db'}"
        else:
            # a database of its own: the append lock is one per database, and on a shared one the
            # ingest waited for whatever else appended there (other test runs)
            assert pg_url is not None
            os.environ["EVSTORE_BENCH_PG_URL"] = pg_url
            url = stack.enter_context(pg_database("evbench_search_"))
            server = ServerCpu(pg_url, url.rsplit("/", 1)[1].split("?")[0])
        env = {**os.environ, "EVSTORE_URL": url, "EVSTORE_SCRUB_KEY": "bench"}
        subprocess.run([sys.executable, "-m", "eventstore", "init"], env=env, check=True, capture_output=True)
        log(f"ingesting {what} into {backend} ...")
        ingest, ingest_cpu, ingest_server = _timed(["ingest", "claude", str(work / "projects")], env, server)
        log("building the search index ...")
        # as a user builds it: a process of its own (`evstore projections rebuild search`), like the ingest
        build, build_cpu, build_server = _timed(["projections", "rebuild", "search"], env, server)
        with EventStore(url, check_schema=backend == "sqlite") as store, ProjectionRunner(store) as runner:
            n = store.max_position()
            t0 = time.perf_counter()
            hits = search(store, "config value", refresh=False)
            took = (time.perf_counter() - t0) * 1000
            prof = None
            if profile:  # once more, in this process, profiled (imports already done)
                prof = cProfile.Profile()
                prof.enable()
                runner.rebuild(SEARCH)
                prof.disable()
        print(f"{backend}: {what}, {n:,} events; evstore ingest claude {ingest:.2f} s (CPU {ingest_cpu:.2f} s); "
              f"index build {build:.2f} s (CPU {build_cpu:.2f} s) = {build / ingest:.0%} of ingest "
              f"(CPU {build_cpu / ingest_cpu:.0%}; target < 30 %); a two-word query {took:.1f} ms ({len(hits)} hits)")
        if server is not None and ingest_server is not None and build_server is not None:
            print(f"  server CPU: ingest {ingest_server:.2f} s, build {build_server:.2f} s; client + server: "
                  f"ingest {ingest_cpu + ingest_server:.2f} s, build {build_cpu + build_server:.2f} s "
                  f"= {(build_cpu + build_server) / (ingest_cpu + ingest_server):.0%}")
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


class ServerCpu:
    """CPU seconds of a local PostgreSQL server's backends serving one database (``/proc/<pid>/stat``
    of the ``pg_stat_activity`` rows, read every 50 ms while a command runs: a backend's last moments
    before it exits can be missed).  None where the server is not on this machine."""

    def __init__(self, pg_url: str, database: str) -> None:
        self.admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
        self.database = database

    @staticmethod
    def _cpu(pid: int) -> float | None:
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
                return None  # the server is elsewhere (the pid is another machine's)
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def run(self, cmd: list[str], env: dict[str, str]) -> float | None:
        import subprocess

        import psycopg

        seen: dict[int, float] = {}
        with psycopg.connect(self.admin, autocommit=True) as conn:
            me = conn.execute("SELECT pg_backend_pid()").fetchone()
            with tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
                while True:
                    done = proc.poll() is not None
                    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                                        (self.database, me[0] if me else 0)).fetchall()
                    for (pid,) in rows:
                        cpu = self._cpu(pid)
                        if cpu is not None:
                            seen[pid] = cpu
                    if done:
                        break
                    time.sleep(0.05)
                if proc.returncode:
                    err.seek(0)
                    raise SystemExit(f"{' '.join(cmd)} failed: {err.read().decode(errors='replace')}")
        return sum(seen.values()) if seen else None


def _timed(args: list[str], env: dict[str, str], server: ServerCpu | None) -> tuple[float, float, float | None]:
    """Wall and CPU seconds of ``evstore ARGS`` run as a process of its own (and its server's CPU)."""
    import resource
    import subprocess

    cmd = [sys.executable, "-m", "eventstore", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    server_cpu = None
    if server is not None:
        server_cpu = server.run(cmd, env)
    else:
        subprocess.run(cmd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), server_cpu


if __name__ == "__main__":
    if "--claude-copies" in sys.argv or "--claude-mb" in sys.argv:
        ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("--claude-copies", type=int, default=0)
        ap.add_argument("--claude-mb", type=float, default=20)
        ap.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
        ap.add_argument("--pg-url", default=os.environ.get("EVSTORE_TEST_POSTGRES_URL"))
        ap.add_argument("--profile", action="store_true", help="cProfile the index build (top 30, cumulative)")
        a = ap.parse_args()
        if a.backend == "postgresql" and not a.pg_url:
            ap.error("--backend postgresql needs --pg-url or $EVSTORE_TEST_POSTGRES_URL")
        transcripts(a.claude_copies, a.claude_mb, a.backend, a.pg_url, a.profile)
    else:
        main()
