"""Whole-process wall time of the ``evstore`` CLI beside ``python -c "import sqlite3"``.

A command's start-up is paid on every call an orchestrator or a hook makes, so it is measured
as a user sees it: a fresh process, the median of ``--repeat`` runs, on the same machine as a
baseline that does nothing but start Python and import sqlite3.  Each command runs once untimed
first and ``PYTHONDONTWRITEBYTECODE`` is dropped for the runs, so evstore's modules are read from
their bytecode cache, as an installed evstore's are (compiling them from source would add ~50 ms
to every call that a user never pays).

    python benchmarks/bench_cli.py                 # median of 20, prints ratios to the baseline
    python benchmarks/bench_cli.py --repeat 5 --batch-events 5000    # quicker

Contenders:

* ``evstore --help``;
* ``evstore append`` of one event to an existing store;
* ``evstore replay`` of a 50-event run (``--json``);
* ``evstore hook claude-code`` spooling one PreToolUse call (what Claude Code runs per tool call);
* ``evstore query --no-refresh`` of one table, and of ``SHOW TABLES`` (which defines every view: the
  cost a one-table query no longer pays);
* ``evstore append --batch`` of N ~400-byte events as a whole process, against a plain Python
  process that inserts the same rows with raw ``sqlite3`` in one transaction (the floor).

Targets (issue 13): ``--help`` <= 4x the baseline; one-event append and the 50-event replay
<= 12x; ``append --batch`` >= 0.6x raw sqlite3; (issue 14) the hook <= 3x.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log, make_payloads  # noqa: E402

# The console script a user runs: the one beside this interpreter (a venv not activated), else on PATH.
# Never `python -c "from eventstore.cli import main"`: that skips the entry point's fast hook path.
_SCRIPT = Path(sys.executable).with_name("evstore")
EVSTORE = [str(_SCRIPT)] if _SCRIPT.is_file() else [shutil.which("evstore") or "evstore"]

RAW_INSERT = r"""
import json, sqlite3, sys, uuid
path, src = sys.argv[1], sys.argv[2]
con = sqlite3.connect(path, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA synchronous=NORMAL")
con.execute("CREATE TABLE IF NOT EXISTS ev (position INTEGER PRIMARY KEY, stream TEXT, version INTEGER, "
            "event_id TEXT UNIQUE, type TEXT, data BLOB)")
con.execute("BEGIN IMMEDIATE")
rows = []
with open(src, "rb") as f:
    for n, line in enumerate(f, 1):
        e = json.loads(line)
        rows.append((e["stream"], n, str(uuid.uuid4()), e["type"], json.dumps(e["data"]).encode()))
con.executemany("INSERT INTO ev (stream, version, event_id, type, data) VALUES (?, ?, ?, ?, ?)", rows)
con.execute("COMMIT")
"""


def timed(cmd: list[str], *, env: dict[str, str], repeat: int, setup: object = None, warm: bool = True) -> float:
    """Median wall seconds of ``cmd`` over ``repeat`` fresh processes (``setup()`` before each),
    after one untimed run (``warm``) that leaves the bytecode cache written."""
    if warm:
        if callable(setup):
            setup()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = []
    for _ in range(repeat):
        if callable(setup):
            setup()
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.decode(errors='replace')}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch-events", type=int, default=50_000)
    ap.add_argument("--batch-repeat", type=int, default=3)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="evstore-bench-cli-"))
    env = {**os.environ, "EVSTORE_URL": f"sqlite:///{work}/store/events.db"}
    env.pop("EVSTORE_TEST_POSTGRES_URL", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed evstore has its bytecode cached
    try:
        subprocess.run([*EVSTORE, "init"], env=env, check=True, capture_output=True)
        # A 50-event run: 50 versions of a state file, ingested with the generic dialect.
        versions = work / "versions"
        versions.mkdir()
        for i in range(50):
            doc = {"task": "RUN-50", "step": i, "notes": [f"note {j}" for j in range(i % 7)]}
            (versions / f"{i:03d}.json").write_text(json.dumps(doc, indent=2) + "\n")
        subprocess.run([*EVSTORE, "ingest", "generic", "--stream", "RUN-50", str(versions)], env=env, check=True,
                       capture_output=True)
        subprocess.run([*EVSTORE, "query", "SELECT 1"], env=env, check=True, capture_output=True)  # builds the tables

        results: list[tuple[str, float, float | None, str]] = []
        base = timed([sys.executable, "-c", "import sqlite3"], env=env, repeat=args.repeat)
        log(f"baseline python -c 'import sqlite3': {base * 1000:.1f} ms")
        results.append(("python -c 'import sqlite3' (baseline)", base, None, ""))
        for name, cmd, target in [
            ("evstore --help", [*EVSTORE, "--help"], "<= 4x"),
            ("evstore append (one event)", [*EVSTORE, "append", "ONE", "bench.noted", "--data", '{"a":1}'], "<= 12x"),
            ("evstore replay (50-event run, --json)", [*EVSTORE, "replay", "RUN-50", "--json"], "<= 12x"),
            ("evstore log (50-event run)", [*EVSTORE, "log", "RUN-50"], ""),
            ("evstore query (one table)", [*EVSTORE, "query", "--no-refresh", "SELECT count(*) FROM events"], ""),
            ("evstore query (SHOW TABLES: every view)", [*EVSTORE, "query", "--no-refresh", "SHOW TABLES"], ""),
        ]:
            t = timed(cmd, env=env, repeat=args.repeat)
            log(f"{name}: {t * 1000:.1f} ms")
            results.append((name, t, t / base, target))

        hook_env = {**env, "EVSTORE_SPOOL_DIR": str(work / "spool")}
        hook_input = json.dumps({"session_id": "s-1", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                                 "tool_use_id": "toolu_1", "tool_input": {"command": "ls"}},
                                separators=(",", ":")).encode()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = subprocess.run([*EVSTORE, "hook", "claude-code"], input=hook_input, env=hook_env,
                               capture_output=True)
            times.append(time.perf_counter() - t0)
            if r.returncode != 0 or r.stdout:
                raise SystemExit(f"hook failed or printed: {r!r}")
        hook = statistics.median(times)
        log(f"evstore hook claude-code: {hook * 1000:.1f} ms")
        results.append(("evstore hook claude-code (spool one call)", hook, hook / base, "<= 3x"))

        n = args.batch_events
        payloads = make_payloads(n, size=400)
        batch = work / "batch.jsonl"
        with batch.open("w") as f:
            for i, p in enumerate(payloads):
                f.write(json.dumps({"stream": f"B-{i // 1000}", "type": "bench.noted", "data": p}) + "\n")
        batch_env = {**env, "EVSTORE_URL": f"sqlite:///{work}/batch/events.db"}

        def fresh_store() -> None:
            shutil.rmtree(work / "batch", ignore_errors=True)
            subprocess.run([*EVSTORE, "init"], env=batch_env, check=True, capture_output=True)

        def fresh_raw() -> None:
            shutil.rmtree(work / "raw", ignore_errors=True)
            (work / "raw").mkdir()

        ev = timed([*EVSTORE, "append", "--batch", str(batch)], env=batch_env, repeat=args.batch_repeat,
                   setup=fresh_store, warm=False)
        raw = timed([sys.executable, "-c", RAW_INSERT, str(work / "raw" / "raw.db"), str(batch)], env=env,
                    repeat=args.batch_repeat, setup=fresh_raw, warm=False)
        log(f"append --batch {n:,}: evstore {ev:.2f} s, raw sqlite3 {raw:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'command':44} {'median':>10} {'x baseline':>11} {'target':>8}")
    for name, t, ratio, target in results:
        print(f"{name:44} {t * 1000:8.1f}ms {'' if ratio is None else f'{ratio:10.1f}x'} {target:>8}")
    print(f"append --batch {n:,} events (~400 B), whole process: evstore {n / ev:,.0f} ev/s, "
          f"raw sqlite3 one transaction {n / raw:,.0f} ev/s = {raw / ev:.2f}x raw (target >= 0.6x)")


if __name__ == "__main__":
    main()
