"""Whole-process ``evstore ingest`` of real histories, as a user runs it.

    python benchmarks/bench_ingest.py              # median of 3 per history
    python benchmarks/bench_ingest.py --repeat 5

Histories: every folder of ``tests/data/real`` and a generated task list shaped like the one
issue 12 cites (124 versions of a JSON task list growing from 0.1 to 0.7 MB, 46.7 MB in all,
``json.dumps(indent=2)``, a few tasks changed and eleven added per version; seeded, so every run
writes the same bytes).  Each run ingests one history into a fresh SQLite store
(``evstore --url sqlite:///... ingest generic --stream h FOLDER``) and reports wall time and the
CPU time of the process (user + system), which moves less on a shared machine than wall time.  "refused": evstore would not ingest the
history (before unreadable versions were recorded, a history with one was refused whole).

Another checkout's code can be measured with ``PYTHONPATH=/that/checkout python benchmarks/bench_ingest.py``.

``--simulated RUNS`` measures ingest itself, in one process, for every dialect with a simulator:
RUNS simulated runs each (seeds 1..RUNS, every version rendered with ``json.dumps(indent=2)`` as
an orchestrator writes it), each run one ``Ingestor.ingest_all`` into a fresh SQLite store that
keeps the runs index inline (as the CLI's does).  It reports events per second of wall and of
CPU time (medians of ``--repeat`` passes; CPU time moves less on a shared machine) and, from one more pass, the calls per event of the dialect's ``apply`` and
``evolve`` and of ``encode_event``/``decode_event``, counted around the real functions (what
issue 13 item 6 budgets: at most one apply and one encode per event, no decode)::

    python benchmarks/bench_ingest.py --simulated 20

``--claude`` measures Claude Code transcripts instead (issue 14's targets): a generated, seeded
``~/.claude/projects`` folder of 50 MB (``--claude-mb``) is ingested into a fresh SQLite store
(``evstore ingest claude FOLDER``, whole process), then ingested again unchanged; it prints MB/s
against the 20 MB/s target and seconds per 1,000 files against the 1 s target.  With
``--claude-hooks`` every tool call is also spooled as the ``PostToolUse`` hook call Claude Code
would send (``tool_input`` the call's input, ``tool_response`` its ``toolUseResult``), so the
ingest drains them first: the store size then shows what hook calls cost beside their transcript.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log  # noqa: E402

# The CLI's main through this interpreter (not the console script), so PYTHONPATH picks the code
# (run in the temporary folder: ``-c`` puts the working directory first on sys.path).
EVSTORE = [sys.executable, "-c", "import sys; from eventstore.cli import main; sys.argv[0] = 'evstore'; main()"]
REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"
START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def write_task_list_history(folder: Path, versions: int = 124, seed: int = 12) -> int:
    """The generated history (see the module docstring); returns its size in bytes."""
    rng = random.Random(seed)

    def task(i: int) -> dict[str, object]:
        return {"id": f"T-{i:05d}", "title": f"Task {i} " + "x" * rng.randint(20, 80),
                "status": rng.choice(["todo", "doing", "done"]), "estimate": rng.random() * 10,
                "points": rng.randint(1, 13), "tags": [rng.choice("abcdefgh") for _ in range(3)],
                "notes": "lorem ipsum " * rng.randint(5, 20)}

    tasks = [task(i) for i in range(200)]
    total = 0
    for v in range(1, versions + 1):
        for _ in range(rng.randint(1, 20)):
            t = rng.choice(tasks)
            t["status"], t["estimate"] = rng.choice(["todo", "doing", "done"]), rng.random() * 10
        tasks.extend(task(len(tasks)) for _ in range(11))
        raw = (json.dumps({"project": "big", "version": v, "tasks": tasks}, indent=2) + "\n").encode()
        (folder / f"{v:03d}-tasks.json").write_bytes(raw)
        total += len(raw)
    return total


# -- Claude Code transcripts ------------------------------------------------------------------

_CLAUDE_WORDS = ("the", "test", "parser", "fails", "because", "config", "value", "is", "missing", "we", "should",
                 "read", "module", "first", "then", "fix", "import", "and", "run", "pytest", "again", "ok")


def write_claude_projects(root: Path, *, target: int = 50_000_000, seed: int = 14) -> tuple[int, int]:
    """A ``~/.claude/projects`` folder as Claude Code 2.x writes it: sessions in a few project
    folders, each with 0-6 subagent files, lines as the format has them (user prompts, assistant
    messages split per content block with usage, Read / Bash / Grep / Edit tool uses and results
    with the output in both the message and ``toolUseResult``, Task results carrying the agent
    id, base64 screenshots, file-history snapshots, system lines).  Outputs are drawn from a pool,
    so the same file read or screenshot recurs across sessions as it does in real use.  Seeded:
    every run writes the same bytes.  Returns (bytes, files)."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_CLAUDE_WORDS) for _ in range(n))

    def source(n_lines: int) -> str:
        return "\n".join(f"{i:>6}\u2192    {words(rng.randint(2, 12))}" for i in range(1, n_lines + 1))

    files_pool = [(f"/work/app/src/mod_{i}.py", source(rng.choice((20, 40, 80, 200, 600)))) for i in range(60)]
    shots = [base64.b64encode(rng.randbytes(rng.randint(30_000, 200_000))).decode() for _ in range(12)]
    dump = lambda rec: (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode()  # noqa: E731
    total = count = 0
    n_session = 0
    while total < target:
        n_session += 1
        session = str(uuid.UUID(int=rng.getrandbits(128)))
        project = root / f"-work-proj-{n_session % 7}"
        project.mkdir(parents=True, exist_ok=True)
        clock = datetime(2026, 3, 1, 9, 0, tzinfo=UTC) + timedelta(hours=n_session)

        def tick(sec: int = 7) -> str:
            nonlocal clock
            clock += timedelta(seconds=rng.randint(1, sec))
            return clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.randint(0, 999):03d}Z"

        def conversation(base: dict[str, object], turns: int, agents: list[str]) -> list[bytes]:
            out: list[bytes] = []
            parent = None
            for _ in range(turns):
                u = str(uuid.UUID(int=rng.getrandbits(128)))
                out.append(dump({**base, "type": "user", "uuid": u, "parentUuid": parent, "timestamp": tick(60),
                                 "message": {"role": "user", "content": words(rng.randint(5, 60))}}))
                parent = u
                for _ in range(rng.choice((1, 1, 2, 3, 6))):
                    msg = f"msg_{rng.getrandbits(64):016x}"
                    req = f"req_{rng.getrandbits(64):016x}"
                    usage = {"input_tokens": rng.randint(10, 4000), "output_tokens": rng.randint(10, 2000),
                             "cache_read_input_tokens": rng.randint(0, 90000),
                             "cache_creation_input_tokens": rng.randint(0, 9000)}
                    blocks: list[dict[str, object]] = [{"type": "thinking", "thinking": words(rng.randint(10, 200)),
                                                        "signature": "s" * 200}] if rng.random() < 0.5 else []
                    if rng.random() < 0.6:
                        blocks.append({"type": "text", "text": words(rng.randint(5, 150))})
                    kind = rng.choices(("Read", "Bash", "Grep", "Edit", "Task", "image"), (5, 4, 2, 2, 1, 0.4))[0]
                    tid = f"toolu_{rng.getrandbits(64):016x}"
                    if kind == "Task" and agents:
                        agent = agents.pop()
                        tool = {"name": "Task", "input": {"description": "look", "prompt": words(30),
                                                          "subagent_type": "general-purpose"}}
                    else:
                        agent = None
                        path, text = rng.choice(files_pool)
                        tool = {"Read": {"name": "Read", "input": {"file_path": path}},
                                "Bash": {"name": "Bash", "input": {"command": "pytest -x -q"}},
                                "Grep": {"name": "Grep", "input": {"pattern": "config"}},
                                "Edit": {"name": "Edit", "input": {"file_path": path, "old_string": words(20),
                                                                   "new_string": words(25)}},
                                "image": {"name": "Bash", "input": {"command": "screenshot"}}}.get(kind, {
                                    "name": "Read", "input": {"file_path": path}})
                    blocks.append({"type": "tool_use", "id": tid, **tool})
                    for block in blocks:
                        a = str(uuid.UUID(int=rng.getrandbits(128)))
                        out.append(dump({**base, "type": "assistant", "uuid": a, "parentUuid": parent,
                                         "timestamp": tick(), "requestId": req,
                                         "message": {"id": msg, "model": "claude-sonnet-4-5", "role": "assistant",
                                                     "type": "message", "content": [block], "usage": usage}}))
                        parent = a
                    r = str(uuid.UUID(int=rng.getrandbits(128)))
                    if agent is not None:
                        content: object = [{"type": "text", "text": words(80)}]
                        result: object = {"status": "completed", "agentId": agent, "totalDurationMs": 90000,
                                          "content": content}
                    elif kind == "image":
                        content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                "data": rng.choice(shots)}}]
                        result = {"type": "image"}
                    elif kind == "Read":
                        content = text
                        result = {"type": "text", "file": {"filePath": path, "content": text,
                                                           "numLines": text.count("\n") + 1}}
                    else:
                        content = words(rng.choice((20, 200, 2000))) if kind != "Bash" else rng.choice(files_pool)[1]
                        result = {"stdout": content, "stderr": "", "interrupted": False}
                    out.append(dump({**base, "type": "user", "uuid": r, "parentUuid": parent, "timestamp": tick(30),
                                     "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                                                              "content": content}]},
                                     "toolUseResult": result}))
                    parent = r
                if rng.random() < 0.3:
                    out.append(dump({"type": "file-history-snapshot", "messageId": u, "isSnapshotUpdate": False,
                                     "snapshot": {"messageId": u, "trackedFileBackups": {}, "timestamp": tick()}}))
            return out

        agents = [f"{rng.getrandbits(28):07x}" for _ in range(rng.choice((0, 0, 1, 1, 2, 4)))]
        base = {"sessionId": session, "cwd": "/work/app", "version": "2.1.9", "gitBranch": "main",
                "userType": "external", "isSidechain": False}
        pending = list(agents)
        main = conversation(base, rng.choice((1, 1, 1, 1, 2, 4)), pending)
        (project / f"{session}.jsonl").write_bytes(b"".join(main))
        total += sum(map(len, main))
        count += 1
        for agent in agents:
            sub = project / session / "subagents" / f"agent-{agent}.jsonl"
            sub.parent.mkdir(parents=True, exist_ok=True)
            lines = conversation({**base, "agentId": agent, "isSidechain": True}, 1, [])
            sub.write_bytes(b"".join(lines))
            total += sum(map(len, lines))
            count += 1
    return total, count


def spool_hook_calls(folder: Path, spool_dir: Path) -> int:
    """Spool the ``PostToolUse`` call of every tool call in the transcripts under ``folder`` (what
    ``evstore hook claude-code`` would have written); returns how many."""
    from eventstore import spool

    count = 0
    for f in sorted(folder.rglob("*.jsonl")):
        uses: dict[str, dict[str, Any]] = {}
        for line in f.read_bytes().splitlines():
            rec = json.loads(line)
            content = rec.get("message", {}).get("content") if isinstance(rec.get("message"), dict) else None
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use":
                    uses[block["id"]] = block
                elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                    use = uses.pop(block["tool_use_id"])
                    body = {"session_id": rec["sessionId"], "transcript_path": str(f), "cwd": rec.get("cwd"),
                            "hook_event_name": "PostToolUse", "tool_name": use["name"], "tool_use_id": use["id"],
                            "tool_input": use["input"], "tool_response": rec.get("toolUseResult")}
                    spool.write(spool_dir, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
                    count += 1
    return count


def claude_once(folder: Path, work: Path, *, fresh: bool, extra: tuple[str, ...] = (),
                spooled: Path | None = None) -> tuple[float, float, str]:
    """(wall, cpu, stderr summary) of one ``evstore ingest claude FOLDER`` (a fresh store if ``fresh``;
    ``spooled``: a spool folder whose calls a fresh run drains first)."""
    url = f"sqlite:///{work}/claude.db"
    if fresh:
        for leftover in work.glob("claude.db*"):
            if leftover.is_file():
                leftover.unlink()
        subprocess.run([*EVSTORE, "--url", url, "init"], check=True, capture_output=True, cwd=work)
        if spooled is not None:
            shutil.rmtree(work / "spool", ignore_errors=True)
            shutil.copytree(spooled, work / "spool")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([*EVSTORE, "--url", url, "ingest", "claude", str(folder), *extra], capture_output=True,
                          text=True, env={**os.environ, "EVSTORE_SCRUB_KEY": "bench",
                                          "EVSTORE_SPOOL_DIR": str(work / "spool")}, cwd=work)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"ingest claude failed: {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stderr.strip()


def claude_main(args: argparse.Namespace) -> None:
    """The transcript targets: ingest of a 50 MB folder >= 20 MB/s; re-ingest of an unchanged folder
    <= 1 s per 1,000 files."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "projects"
        size, files = write_claude_projects(folder, target=int(args.claude_mb * 1e6))
        log(f"generated {size / 1e6:.1f} MB in {files} transcript files")
        spooled = None
        if args.claude_hooks:
            spooled = work / "spooled"
            hooks = spool_hook_calls(folder, spooled)
            spool_mb = sum(p.stat().st_size for p in spooled.iterdir()) / 1e6
            log(f"spooled {hooks} PostToolUse hook calls ({spool_mb:.1f} MB)")
        extra = ("--blob-threshold", str(args.blob_threshold)) if args.blob_threshold is not None else ()
        first, again = [], []
        for _ in range(args.repeat):
            first.append(claude_once(folder, work, fresh=True, extra=extra, spooled=spooled))
            again.append(claude_once(folder, work, fresh=False, extra=extra))
        db = sum(p.stat().st_size for p in work.glob("claude.db*"))
        log(first[-1][2].splitlines()[-1] if first[-1][2] else "")
        wall = statistics.median(r[0] for r in first)
        cpu = statistics.median(r[1] for r in first)
        rewall = statistics.median(r[0] for r in again)
        print(f"{'claude transcripts':<24} {'files':>6} {'MB':>6} {'ingest s':>9} {'cpu s':>6} {'MB/s':>6} "
              f"{'target':>7} {'re-ingest s':>11} {'s/1k files':>10} {'target':>7} {'store MB':>8}")
        print(f"{'generated (seeded)':<24} {files:>6} {size / 1e6:>6.1f} {wall:>9.2f} {cpu:>6.2f} "
              f"{size / 1e6 / wall:>6.1f} {'>= 20':>7} {rewall:>11.2f} {rewall / files * 1000:>10.2f} {'<= 1':>7} "
              f"{db / 1e6:>8.1f}")


def run_once(folder: Path, work: Path) -> tuple[float, float] | None:
    """(wall, cpu) seconds of one ingest, None if evstore refused the history."""
    url = f"sqlite:///{work}/bench.db"
    for leftover in work.glob("bench.db*"):
        leftover.unlink()
    subprocess.run([*EVSTORE, "--url", url, "init"], check=True, capture_output=True, cwd=work)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([*EVSTORE, "--url", url, "ingest", "generic", "--stream", "h", str(folder)],
                          capture_output=True, cwd=work)
    if done.returncode != 0:
        return None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def simulated_runs(name: str, runs: int) -> list[list[Any]]:
    """``runs`` simulated runs of dialect ``name``, their versions as bytes parsed back."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import parse_json_document

    d = get_dialect(name)
    out = []
    for seed in range(1, runs + 1):
        run = []
        for snap in d.simulate(random.Random(seed), run_id=f"{name.upper()}-{seed}", start=START):
            if snap.doc is not None:
                snap.raw = json.dumps(snap.doc, indent=2).encode()
                snap.doc = parse_json_document(snap.raw, "simulated")
            run.append(snap)
        out.append(run)
    return out


def ingest_runs(name: str, runs: list[list[Any]], work: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, events) to ingest ``runs`` (one ingest_all each) into a fresh
    SQLite store."""
    import copy

    from eventstore import migrate
    from eventstore.dialects import get_dialect
    from eventstore.ingest import Ingestor
    from eventstore.store import EventStore
    from projections.runs import IndexedEventStore

    for leftover in work.glob("sim.db*"):
        leftover.unlink()
    url = f"sqlite:///{work}/sim.db"
    with EventStore(url, check_schema=False) as fresh:
        migrate.upgrade(fresh.engine)
    runs = copy.deepcopy(runs)  # ingest marks snapshots (their stream); each pass gets its own
    d = get_dialect(name)
    with IndexedEventStore(url) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        events = sum(r.events for run in runs for r in Ingestor(store, d).ingest_all(run))
        return time.perf_counter() - t0, time.process_time() - c0, events


def count_calls(name: str) -> tuple[dict[str, int], Callable[[], None]]:
    """Counters around the dialect's apply/evolve and encode_event/decode_event wherever evstore's
    modules hold them; returns the counts and a function that puts the originals back."""
    from eventstore import events as events_module
    from eventstore.dialects import get_dialect

    counts = dict.fromkeys(("apply", "evolve", "encode_event", "decode_event"), 0)
    undo: list[tuple[Any, str, Any, bool]] = []

    def patch(owner: Any, attr: str, fn: Any, key: str) -> None:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return fn(*args, **kwargs)
        undo.append((owner, attr, owner.__dict__.get(attr), attr in owner.__dict__))
        setattr(owner, attr, wrapper)

    cls = type(get_dialect(name))
    for attr in ("apply", "evolve"):
        patch(cls, attr, getattr(cls, attr), attr)
    for attr in ("encode_event", "decode_event"):
        fn = getattr(events_module, attr)
        for module in [m for m in list(sys.modules.values())
                       if getattr(m, "__name__", "").partition(".")[0] in ("eventstore", "projections")]:
            if getattr(module, attr, None) is fn:
                patch(module, attr, fn, attr)

    def restore() -> None:
        for owner, attr, old, had in reversed(undo):
            if had:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
    return counts, restore


def simulated(runs: int, repeat: int) -> None:
    from eventstore.dialects import available, get_dialect
    from eventstore.dialects.base import Dialect

    names = [n for n in available() if type(get_dialect(n)).simulate is not Dialect.simulate]
    print(f"{'dialect':<12} {'runs':>5} {'versions':>8} {'events':>7} {'events/wall s':>14} {'events/CPU s':>13} "
          f"{'apply/ev':>9} {'evolve/ev':>9} {'encode/ev':>9} {'decode/ev':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in names:
            history = simulated_runs(name, runs)
            versions = sum(1 for run in history for s in run if s.doc is not None)
            timings = [ingest_runs(name, history, work) for _ in range(repeat)]
            events = timings[0][2]
            counts, restore = count_calls(name)
            try:
                ingest_runs(name, history, work)
            finally:
                restore()
            wall = statistics.median(events / t for t, _, _ in timings)
            cpu = statistics.median(events / c for _, c, _ in timings)
            per = [counts[k] / events for k in ("apply", "evolve", "encode_event", "decode_event")]
            print(f"{name:<12} {runs:>5} {versions:>8} {events:>7} {wall:>14,.0f} {cpu:>13,.0f} "
                  + " ".join(f"{x:>9.2f}" for x in per))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--simulated", type=int, default=0, metavar="RUNS",
                    help="Measure in-process ingest of RUNS simulated runs per dialect instead (see above).")
    ap.add_argument("--claude", action="store_true", help="Measure Claude transcript ingest instead (issue 14 targets).")
    ap.add_argument("--claude-mb", type=float, default=50, help="Size of the generated transcript folder (MB).")
    ap.add_argument("--blob-threshold", type=int, default=None, help="Pass --blob-threshold to ingest claude.")
    ap.add_argument("--claude-hooks", action="store_true",
                    help="With --claude: also spool each tool call's PostToolUse hook call (drained by the ingest).")
    args = ap.parse_args()
    if args.simulated:
        simulated(args.simulated, args.repeat)
        return
    if args.claude:
        claude_main(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        generated = work / "task-list-124"
        generated.mkdir()
        log(f"generated {write_task_list_history(generated) / 1e6:.1f} MB")
        histories = [generated, *sorted(p for p in REAL.iterdir() if p.is_dir())]
        print(f"{'history':<32} {'versions':>8} {'MB':>6} {'wall s (median)':>16} {'cpu s (median)':>15}")
        for folder in histories:
            files = [p for p in folder.iterdir() if p.is_file()]
            runs = [r for r in (run_once(folder, work) for _ in range(args.repeat)) if r is not None]
            head = f"{folder.name:<32} {len(files):>8} {sum(p.stat().st_size for p in files) / 1e6:>6.1f} "
            if not runs:
                print(head + f"{'refused':>16} {'-':>15}")
                continue
            print(head + f"{statistics.median(r[0] for r in runs):>16.2f} {statistics.median(r[1] for r in runs):>15.2f}")


if __name__ == "__main__":
    main()
