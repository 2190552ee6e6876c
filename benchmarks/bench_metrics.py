"""What a later `evstore metrics` and `GET /metrics` cost on an existing store, A/B against another checkout.

    python benchmarks/bench_metrics.py --url sqlite:///big.db --analytics-dir big.analytics
    python benchmarks/bench_metrics.py --url URL --analytics-dir DIR --old ../main --runs 5
    python benchmarks/bench_metrics.py --url URL --analytics-dir DIR --progressive   # the page after new events
    python benchmarks/bench_metrics.py --url URL --analytics-dir DIR --old ../main --grow 10000 --formats table
    python benchmarks/bench_metrics.py --url URL --analytics-dir DIR --old ../main --first --runs 2

``--grow N`` measures a later ``metrics`` after N new events: it keeps a copy of the analytics folder per side
(caught up first by that side's checkout, so it holds that side's kept run views too), appends N events (copies of the store's runs
from the middle of its listing, under new stream ids: the store grows for good), and before each measured
process puts the copy back, so every process applies the same N events and computes the report after them.
``--first`` measures the first ``metrics`` (facts built, report computed): the folder is deleted before each
process; its peak RSS comes from GNU time (``/usr/bin/time``), with the process's CPU and wall.

A store to measure: ``benchmarks/bench_growth.py`` builds them and removes them at the end; build one that
stays with ``bench_projections.build_store`` (what bench_growth calls) and run ``evstore metrics`` once to
build its facts.  Each ``metrics`` row is one whole ``evstore`` process, its CPU seconds (user + system,
from ``os.wait4``) and wall seconds; with ``--old PATH`` the same command runs alternately with
``PYTHONPATH=PATH`` (another checkout) and with this one, so the load of a shared machine falls on both.
``GET /metrics`` is the server's time for one request of an app in a child process (the second request
on: the report and the page's body are kept by then), CPU and wall.  ``--progressive`` deletes the kept
reports first, so the page is computed: it prints when its first part and its last part arrived.
The load average is printed with each figure.  A benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

#: Runs in a child (PYTHONPATH decides whose code): the server time of GET /metrics, as JSON.
PAGE = """
import json, sys, time, shutil
from starlette.testclient import TestClient
from projections.serve import ServeConfig, create_app
url, directory, runs, progressive = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
out = {}
with TestClient(create_app(ServeConfig(url=url, analytics_dir=directory)), base_url="http://127.0.0.1") as c:
    if progressive:
        shutil.rmtree(directory + "/reports", ignore_errors=True)
        start, arrived = time.perf_counter(), []
        with c.stream("GET", "/metrics") as r:
            for chunk in r.iter_raw():
                arrived.append(time.perf_counter() - start)
        out["progressive"] = {"parts": len(arrived), "first": arrived[0], "last": arrived[-1]}
    c.get("/metrics")
    cpu, wall = [], []
    for _ in range(runs):
        t, p = time.perf_counter(), time.process_time()
        r = c.get("/metrics")
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - p)
        assert r.status_code == 200
    out.update(cpu=cpu, wall=wall, bytes=len(r.content))
print(json.dumps(out))
"""


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def metrics_process(path: str, url: str, directory: str, fmt: str, peaks: list[float] | None = None,
                    ) -> tuple[float, float]:
    """One ``evstore metrics --format FMT`` with ``PYTHONPATH=path``: (CPU s, wall s); its peak RSS (MB, from
    GNU time) appended to ``peaks`` if given."""
    env = {**os.environ, "PYTHONPATH": path}
    args = ["--format", fmt] + (["--out", os.devnull] if fmt == "html" else [])
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrap = ["/usr/bin/time", "-f", "%M", "-o", rss.name] if peaks is not None else []
        start = time.perf_counter()
        proc = subprocess.Popen([*wrap, sys.executable, "-m", "eventstore", "--url", url, "metrics", "--analytics-dir",
                                 directory, *args], env=env, cwd=tempfile.gettempdir(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"evstore metrics failed: {proc.stderr.read().decode() if proc.stderr else ''}")
        if peaks is not None:
            peaks.append(int(rss.read().split()[-1]) / 1024)
    return usage.ru_utime + usage.ru_stime, wall


def grow(url: str, n: int) -> int:
    """Append about ``n`` events: copies of the store's runs, from the middle of its listing, under new ids.
    Appended as the CLI and a server append them, keeping the inline indexes (runs, writers) current: a
    plain ``EventStore`` would leave them to the next ``metrics``, which reads the writers index."""
    import uuid

    import msgspec

    sys.path.insert(0, str(HERE))
    from eventstore.store import NewEvent
    from projections.runs import IndexedEventStore

    written, tag = 0, uuid.uuid4().hex[:6]
    with IndexedEventStore(url) as store:
        streams = store.list_streams()
        for s in streams[len(streams) // 2:]:
            items = [(f"{s.stream_id}-{tag}", NewEvent(e.type, e.data, meta=msgspec.json.decode(e.meta) if e.meta
                                                       else None, occurred_at=e.occurred_at), None)
                     for e in store.read_stream(s.stream_id)]
            store.append_many(items, dialect=s.dialect)
            written += len(items)
            if written >= n:
                break
    return written


def restore(directory: str, copy: str | None) -> None:
    """Put the analytics folder back as ``copy`` holds it (None: delete it)."""
    shutil.rmtree(directory, ignore_errors=True)
    if copy is not None:
        shutil.copytree(copy, directory)


def page(path: str, url: str, directory: str, runs: int, progressive: bool) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": path}
    r = subprocess.run([sys.executable, "-c", PAGE, url, directory, str(runs), "1" if progressive else "0"],
                       env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])  # (DuckDB's progress bar)


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--analytics-dir", required=True)
    ap.add_argument("--old", default=None, metavar="PATH", help="another checkout to compare with (PYTHONPATH)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--formats", nargs="+", default=["table", "html"])
    ap.add_argument("--progressive", action="store_true", help="compute the page first (kept reports deleted)")
    ap.add_argument("--grow", type=int, default=0, metavar="N", help="measure metrics after N new events")
    ap.add_argument("--first", action="store_true", help="measure the first metrics (facts built), peak RSS")
    opts = ap.parse_args()
    sides = [("new", str(HERE))] + ([("old", opts.old)] if opts.old else [])
    before: dict[str, str | None] = {name: None for name, _ in sides}
    if opts.grow or opts.first:
        if opts.grow:
            # Each side's own copy, caught up by that side: the two may keep other run views (another key),
            # and a copy kept by one side would make the other build its kept rows from scratch.
            for name, path in sides:
                metrics_process(path, opts.url, opts.analytics_dir, "table")  # caught up, the run views kept
                copy = before[name] = tempfile.mkdtemp(prefix=f"bench-metrics-{name}-")
                shutil.rmtree(copy)
                shutil.copytree(opts.analytics_dir, copy)
            print(f"appended {grow(opts.url, opts.grow)} events; {load()}")
    else:
        for _, path in sides:  # the first run of each side builds what it keeps; not measured
            for fmt in opts.formats:
                metrics_process(path, opts.url, opts.analytics_dir, fmt)
    for fmt in opts.formats:
        got: dict[str, tuple[list[float], list[float], list[float]]] = {name: ([], [], []) for name, _ in sides}
        for i in range(opts.runs):
            for name, path in (sides if i % 2 == 0 else sides[::-1]):  # alternate which side goes first
                if opts.grow or opts.first:
                    restore(opts.analytics_dir, before[name])
                cpu, wall = metrics_process(path, opts.url, opts.analytics_dir, fmt,
                                            got[name][2] if (opts.grow or opts.first) else None)
                got[name][0].append(cpu)
                got[name][1].append(wall)
        for name, (cpu, wall, peak) in got.items():
            print(f"metrics --format {fmt} [{name}]: CPU {summary(cpu)}; wall {summary(wall)}"
                  + (f"; peak RSS {min(peak):.0f}-{max(peak):.0f} MB" if peak else "") + f"; {load()}")
    for kept_copy in before.values():
        if kept_copy is not None:
            shutil.rmtree(kept_copy, ignore_errors=True)
    if opts.grow or opts.first:
        return
    for name, path in sides:
        if opts.progressive:
            computed = page(path, opts.url, opts.analytics_dir, opts.runs, True)["progressive"]
            print(f"GET /metrics computed [{name}]: {computed}; {load()}")
        r = page(path, opts.url, opts.analytics_dir, opts.runs, False)
        print(f"GET /metrics kept [{name}]: CPU {summary(r['cpu'])}; wall {summary(r['wall'])}; "  # type: ignore[arg-type]
              f"{r['bytes']} bytes; {load()}")


if __name__ == "__main__":
    main()
