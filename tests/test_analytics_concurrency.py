"""Several processes at once (issue 10, defect 5 and "Concurrency under the CLI").

Each worker is a separate Python process (tests/concurrent_worker.py) that runs one `evstore`
command in a loop, in-process, while the others run theirs (until every worker has run its turns):
refreshes race refreshes, compaction deletes files readers had listed, and an appender keeps the log
moving.  Every turn of every worker must succeed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from analytics_fixtures import simulate_into
from click.testing import CliRunner
from concurrent_worker import MIN_TURNS

from eventstore.cli import register
from eventstore.store import EventStore
from projections import analytics

WORKER = str(Path(__file__).with_name("concurrent_worker.py"))


def _race(url: str, jobs: list[list[str]], peers: Path) -> list[dict[str, object]]:
    """Start every job as its own process at one moment; wait; every job's summary."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), str(Path(__file__).parent)])}
    peers.mkdir()
    for i in range(len(jobs)):
        (peers / str(i)).write_text("0")
    procs = [subprocess.Popen([sys.executable, WORKER, str(peers), str(i), url, *job], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i, job in enumerate(jobs)]
    out = []
    try:
        for job, p in zip(jobs, procs, strict=True):  # each has imported what its command needs
            assert p.stdout is not None and p.stderr is not None
            assert p.stdout.readline() == "ready\n", f"{job}: exit {p.wait(60)}\n{p.stderr.read()[-3000:]}"
        start = time.time() + 0.2  # a moment for the last "go" to reach its process
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start}\n")
            p.stdin.flush()
        for job, p in zip(jobs, procs, strict=True):
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, f"{job}: exit {p.returncode}\n{stderr[-3000:]}"
            summary = json.loads(stdout.strip().splitlines()[-1])
            summary["job"] = job
            out.append(summary)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


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
