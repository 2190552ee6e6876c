"""Several processes at once (issue 10, defect 5 and "Concurrency under the CLI").

Each worker is a separate process (tests/concurrent_worker.py, forked by multiprocessing's fork server)
that runs one `evstore` command in a loop, in-process, while the others run theirs (until every worker has run its turns):
refreshes race refreshes, compaction deletes files readers had listed, and an appender keeps the log
moving.  Every turn of every worker must succeed.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from analytics_fixtures import simulate_into
from click.testing import CliRunner
from concurrent_worker import MIN_TURNS, PRELOAD, work

from eventstore.cli import register
from eventstore.store import EventStore
from projections import analytics


def _race(url: str, jobs: list[list[str]], peers: Path) -> list[dict[str, object]]:
    """Start every job as its own process at one moment; wait; every job's summary."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # the fork server starts once per test process, on first use
    peers.mkdir()
    for i in range(len(jobs)):
        (peers / str(i)).write_text("0")
    pipes = [ctx.Pipe() for _ in jobs]
    procs = [ctx.Process(target=work, args=(str(peers), i, url, job[0], job[1:], child), daemon=True)
             for i, (job, (_, child)) in enumerate(zip(jobs, pipes, strict=True))]
    out = []
    try:
        for p in procs:
            p.start()
        for _, child in pipes:
            child.close()  # the workers hold their ends: a worker that dies is an end of file here at once
        for job, p, (conn, _) in zip(jobs, procs, pipes, strict=True):  # each has imported what its command needs
            assert _receive(conn, 60, p) == "ready", job
        start = time.time() + 0.2  # a moment for the last "go" to reach its process
        for conn, _ in pipes:
            conn.send(start)
        for job, p, (conn, _) in zip(jobs, procs, pipes, strict=True):
            summary = _receive(conn, 120, p)
            p.join(30)
            assert p.exitcode == 0, f"{job}: exit {p.exitcode}"
            summary["job"] = job
            out.append(summary)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        for ends in pipes:
            for end in ends:
                end.close()
    return out


def _receive(conn: Connection, timeout: float, p: multiprocessing.process.BaseProcess) -> Any:
    """What the worker ``p`` sends next (a failure naming its exit if it died or went quiet instead)."""
    if not conn.poll(timeout):
        raise AssertionError(f"worker {p.pid} sent nothing in {timeout} s (alive: {p.is_alive()})")
    try:
        return conn.recv()
    except EOFError:
        p.join(10)
        raise AssertionError(f"worker {p.pid} exited ({p.exitcode}) without a word; its output is above") from None


def _failures(summaries: list[dict[str, object]]) -> list[object]:
    return [(s["job"], f) for s in summaries for f in s["failures"]]  # type: ignore[attr-defined]


def test_concurrent_queries_and_refreshes_all_succeed(store_url: str, tmp_path: Path) -> None:
    """The issue's reproduction: an appender and query loops (each query refreshes first)."""
    with EventStore(store_url) as s:
        simulate_into(s, {"mapipe": 2, "taskflow": 1}, seed=21)
    out = str(tmp_path / "analytics")
    query = ["cli", "query", "--csv", "select count(*) from events", "--analytics-dir", out]
    summaries = _race(store_url, [["ingest", "1"], query, query, query, query], tmp_path / "peers")
    assert not _failures(summaries), json.dumps(_failures(summaries), indent=1)[:6000]
    turns = [s["turns"] for s in summaries]
    assert all(t >= MIN_TURNS for t in turns), turns  # each ran its turns, while the others ran theirs
    # nothing was lost or applied twice: the tables count exactly the log's events
    with EventStore(store_url) as s:
        with analytics.reading(s, out) as con:
            assert con.execute("SELECT count(*), count(DISTINCT position) FROM events").fetchall()[0] == \
                (s.max_position(), s.max_position())
        m = analytics.Manifest.load(Path(out))
        assert m is not None
        listed = {f["file"] for files in m.files.values() for f in files}
        left = {p.name for p in Path(out).rglob("*") if p.is_file() and p.parent != Path(out)}
        assert left - listed == set()  # nothing unlisted stays behind once the racing stops


def test_commands_under_concurrent_use_on_each_backend(store_url: str, tmp_path: Path) -> None:
    """Appenders, `query`, `metrics`, `projections run` and `verify` at once; then the metrics the
    shared tables give equal a clean rebuild's."""
    with EventStore(store_url) as s:
        simulate_into(s, {"mapipe": 2, "friday": 1}, seed=22)
    summaries = _race(store_url, [
        ["ingest", "2"], ["ingest", "3"],
        ["cli", "query", "--csv", "select count(*) from runs"],
        ["cli", "metrics", "--format", "json"],
        ["cli", "projections", "run"],
        ["cli", "verify"],
    ], tmp_path / "peers")
    assert not _failures(summaries), json.dumps(_failures(summaries), indent=1)[:6000]
    assert all(s["turns"] >= MIN_TURNS for s in summaries), [(s["job"], s["turns"]) for s in summaries]
    runner = CliRunner()
    shared = runner.invoke(register(), ["--url", store_url, "metrics", "--format", "json"])
    clean = runner.invoke(register(), ["--url", store_url, "metrics", "--format", "json",
                                       "--analytics-dir", str(tmp_path / "clean")])
    assert shared.exit_code == clean.exit_code == 0, shared.output + clean.output
    assert json.loads(shared.stdout) == json.loads(clean.stdout)
    with EventStore(store_url) as s:
        assert json.loads(shared.stdout)["scope"]["runs"] == len(s.list_streams())
    assert runner.invoke(register(), ["--url", store_url, "verify"]).exit_code == 0


def test_readers_keep_their_generation_while_a_refresh_compacts_and_rebuilds(store_url: str, tmp_path: Path) -> None:
    """A connection reads the files its manifest listed even after a refresh deleted them."""
    out = tmp_path / "a"
    with EventStore(store_url) as s:
        simulate_into(s, {"mapipe": 2}, seed=23)
        half = s.max_position() // 2
        analytics.refresh(s, out, upto=half)
        with analytics.reading(s, out, fresh=False) as con:
            before = [p for p in out.rglob("*.parquet")]
            analytics.refresh(s, out, rebuild=True)  # every file the reader listed is deleted
            assert not any(p.exists() for p in before)
            assert con.execute("SELECT max(position), count(*) FROM events").fetchall()[0] == (half, half)
        with analytics.reading(s, out, fresh=False) as con:
            assert con.execute("SELECT max(position) FROM events").fetchall()[0][0] == s.max_position()
