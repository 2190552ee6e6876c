"""Peak memory of ``evstore ingest`` against the size of what it is given (issue 32, item 8).

    python benchmarks/bench_bounds.py                 # transcripts of 20 and 100 MB
    python benchmarks/bench_bounds.py --mb 20 200     # the issue's 200 MB transcript
    python benchmarks/bench_bounds.py --line-mb 150   # one line of 150 MB (default 100)

Each case is one whole ``evstore`` process into a fresh SQLite store; its peak RSS (``ru_maxrss``)
is reported beside a bare ``python -c 'import eventstore.cli'`` (the floor) and, for transcripts,
beside the size of the file:

- Claude transcripts of each ``--mb`` size (generated, seeded, ~1 KB lines): streamed, so the peak
  must stay flat as the file grows (the bound in docs/capture.md: one batch of
  ``capture.BATCH_BYTES`` = 4 MiB of lines and what it becomes, plus the longest line);
- a transcript of one ``--line-mb`` line between two short ones, under the default line limit
  (``EVSTORE_MAX_LINE_BYTES``, 64 MiB: the line is over it, read through and hashed, never held), and
  the same line under a limit above its size (held whole, as every line was before the limit:
  about five times its size);
- a 200 MB generic file (a sparse file: it costs no disk) refused over the 64 MiB limit;
- a tasks/ folder holding a 300 MB unrelated file, refused as no task folder;
- ``ingest taskflow /``: refused at its first folder (wall seconds).

Another checkout's code: ``PYTHONPATH=/that/checkout python benchmarks/bench_bounds.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log  # noqa: E402

MB = 1_000_000
RUN = ("import atexit, resource, sys\n"
       "atexit.register(lambda: print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
       "from eventstore.cli import main\nsys.argv[0] = 'evstore'\nmain()")


def evstore(work: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, float, int, str]:
    """(exit code, wall seconds, peak RSS in KiB, last error line) of one evstore process."""
    url = f"sqlite:///{work / 'events.db'}"
    started = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", RUN, "--url", url, *args], capture_output=True, text=True, cwd=work,
                       env={**os.environ, **(env or {})})
    took = time.perf_counter() - started
    rss = [int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("maxrss ")]
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error")]
    return p.returncode, took, rss[-1] if rss else -1, errors[-1][:100] if errors else ""


def floor() -> int:
    p = subprocess.run([sys.executable, "-c", "import resource, eventstore.cli, sqlalchemy; "
                        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"], capture_output=True, text=True)
    return int(p.stdout.strip())


def write_transcript(path: Path, size: int) -> int:
    """A seeded session of ~1 KB user and assistant lines, ``size`` bytes or just over."""
    written, i = 0, 0
    with open(path, "w") as f:
        while written < size:
            line = json.dumps({"type": "user" if i % 2 else "assistant", "uuid": f"u{i}", "sessionId": "bench",
                               "timestamp": f"2026-12-03T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                               "message": {"role": "assistant", "content": f"turn {i} " + "lorem ipsum " * 80}})
            f.write(line + "\n")
            written += len(line) + 1
            i += 1
    return os.path.getsize(path)


def write_long_line(path: Path, size: int) -> int:
    """A session whose second line is one user message of ``size`` bytes or just over."""
    head = json.dumps({"type": "user", "uuid": "u1", "sessionId": "bench", "message": {"content": "before"}})
    tail = json.dumps({"type": "assistant", "uuid": "u3", "sessionId": "bench", "message": {"content": "after"}})
    with open(path, "wb") as f:
        f.write(head.encode() + b"\n" + b'{"type":"user","uuid":"u2","message":{"content":"')
        block = b"lorem ipsum " * 87381  # ~1 MiB
        for _ in range(size // len(block) + 1):
            f.write(block)
        f.write(b'"}}\n' + tail.encode() + b"\n")
    return os.path.getsize(path)


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[20, 100], help="Transcript sizes (MB).")
    ap.add_argument("--line-mb", type=float, default=100, help="The single long line's size (MB; 0: skip).")
    args = ap.parse_args()
    base = floor()
    rows: list[tuple[str, str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        peaks = []
        for mb in args.mb:
            work = root / f"t{mb:g}"
            work.mkdir()
            size = write_transcript(work / "s.jsonl", int(mb * MB))
            log(f"transcript of {size / MB:.0f} MB ...")
            rc, took, rss, err = evstore(work, "ingest", "claude", str(work / "s.jsonl"))
            peaks.append(rss)
            rows.append((f"ingest claude, {size / MB:.0f} MB transcript", "ok" if rc == 0 else err,
                         f"{rss / 1024:.0f}", f"{(rss - base) / 1024:.0f}", f"{took:.1f}"))
            (work / "s.jsonl").unlink()
        if args.line_mb:
            work = root / "line"
            work.mkdir()
            size = write_long_line(work / "s.jsonl", int(args.line_mb * MB))
            log(f"one line of {size / MB:.0f} MB ...")
            for env, what in (({}, "over the 64 MiB line limit"),
                              ({"EVSTORE_MAX_LINE_BYTES": str(2 * size)}, "held whole (limit raised)")):
                (work / "events.db").unlink(missing_ok=True)
                rc, took, rss, err = evstore(work, "ingest", "claude", str(work / "s.jsonl"), env=env)
                rows.append((f"ingest claude, one {size / MB:.0f} MB line, {what}", "ok" if rc == 0 else err,
                             f"{rss / 1024:.0f}", f"{(rss - base) / 1024:.0f}", f"{took:.1f}"))
            (work / "s.jsonl").unlink()
        work = root / "generic"
        work.mkdir()
        big = sparse(work / "big.json", 200 * MB)
        rc, took, rss, err = evstore(work, "ingest", "generic", str(big))
        rows.append(("ingest generic, 200 MB file (limit 64 MiB)", err or f"exit {rc}", f"{rss / 1024:.0f}",
                     f"{(rss - base) / 1024:.0f}", f"{took:.2f}"))
        work = root / "taskflow"
        sparse(work / "tasks" / "downloads" / "disk.img", 300 * MB)
        (work / "tasks" / "T-1").mkdir(parents=True)
        (work / "tasks" / "T-1" / "SPEC.md").write_text("# T-1\n")
        rc, took, rss, err = evstore(work, "ingest", "taskflow", str(work / "tasks"))
        rows.append(("ingest taskflow, tasks/ with a 300 MB unrelated file", err or f"exit {rc}", f"{rss / 1024:.0f}",
                     f"{(rss - base) / 1024:.0f}", f"{took:.2f}"))
        rc, took, rss, err = evstore(work, "ingest", "taskflow", "/")
        rows.append(("ingest taskflow /", err or f"exit {rc}", f"{rss / 1024:.0f}", f"{(rss - base) / 1024:.0f}",
                     f"{took:.2f}"))
    print(f"floor (python -c 'import eventstore.cli, sqlalchemy'): {base / 1024:.0f} MiB peak RSS")
    print(f"{'case':<55} {'peak MiB':>9} {'over floor':>10} {'wall s':>7}  result")
    for case, result, rss_s, over, took_s in rows:
        print(f"{case:<55} {rss_s:>9} {over:>10} {took_s:>7}  {result}")
    if len(peaks) >= 2:
        print(f"peak RSS, largest / smallest transcript: {peaks[-1] / peaks[0]:.2f}x for "
              f"{args.mb[-1] / args.mb[0]:.1f}x the bytes (flat: streamed)")


if __name__ == "__main__":
    main()
