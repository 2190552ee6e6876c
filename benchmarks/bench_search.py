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
postgresql`` (with ``--pg-url`` or ``$EVSTORE_TEST_POSTGRES_URL``) in a throwaway schema;
``--profile`` prints a cProfile of the build::

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

from benchmarks._common import _WORDS, log, make_payloads, plan  # noqa: E402
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
    import os
    import pstats
    import resource
    import subprocess
    import uuid

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
        if backend == "sqlite":
            url = f"sqlite:///{work / 'ev.db'}"
        else:
            import psycopg

            assert pg_url is not None
            schema = f"evbench_search_{uuid.uuid4().hex[:8]}"
            admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")

            def drop() -> None:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {schema} CASCADE")

            stack.callback(drop)
            url = f"{pg_url}{'&' if '?' in pg_url else '?'}options=-csearch_path%3D{schema}"
        env = {**os.environ, "EVSTORE_URL": url, "EVSTORE_SCRUB_KEY": "bench"}
        subprocess.run([sys.executable, "-m", "eventstore", "init"], env=env, check=True, capture_output=True)
        log(f"ingesting {what} into {backend} ...")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "eventstore", "ingest", "claude", str(work / "projects")], env=env,
                       check=True, capture_output=True)
        ingest = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ingest_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        log("building the search index ...")
        # as a user builds it: a process of its own (`evstore projections rebuild search`), like the ingest
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "eventstore", "projections", "rebuild", "search"], env=env,
                       check=True, capture_output=True)
        build = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        build_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
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
        print(f"{backend}: {what}, {n:,} events; evstore ingest claude {ingest:.1f} s (CPU {ingest_cpu:.1f} s); "
              f"index build {build:.1f} s (CPU {build_cpu:.1f} s) = {build / ingest:.0%} of ingest "
              f"(CPU {build_cpu / ingest_cpu:.0%}; target < 30 %); a two-word query {took:.1f} ms ({len(hits)} hits)")
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


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
