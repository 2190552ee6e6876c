"""How soon ``evstore serve --workers N`` answers after it is started, and the CPU its start costs.

    python benchmarks/bench_serve_start.py                             # 4 workers, 5 starts, this checkout
    python benchmarks/bench_serve_start.py --server-code OTHER_CHECKOUT  # the same for another checkout (A/B)

On a new database of ``$EVSTORE_BENCH_PG_URL``'s server (dropped afterwards).  Each start reports: when
the port first accepted a connection (a client connecting earlier is refused), when the first ``GET
/healthz`` was answered (sent as soon as the port accepts: it waits in the backlog), and the CPU time
(user + system) of the server's processes (the parent and its workers) 3 s after the start.  What a
restart costs the clients of a team server: every request due meanwhile waits that long.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_of, free_port, log, pg_database  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent




def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def start_once(url: str, workers: int, code: Path) -> tuple[float, float, float]:
    """(seconds until the port accepts, until the first /healthz answer, CPU seconds of the server)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    env["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "eventstore", "--url", url, "serve", "--port", str(port),
                             "--workers", str(workers), "--no-drain"], env=env, cwd=code, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    accepted = answered = None
    try:
        while answered is None and time.perf_counter() - started < 60:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                    if accepted is None:
                        accepted = time.perf_counter() - started
                    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    if conn.recv(64).startswith(b"HTTP/1.1 200"):
                        answered = time.perf_counter() - started
            except OSError:
                time.sleep(0.005)
        if accepted is None or answered is None:
            raise SystemExit("the server did not answer within 60 s")
        time.sleep(max(0.0, 3.0 - (time.perf_counter() - started)))
        cpu = cpu_of([proc.pid, *_children(proc.pid)], reaped=True)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return accepted, answered, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5, help="starts to measure")
    ap.add_argument("--server-code", type=Path, default=ROOT,
                    help="the evstore checkout the server runs (default: this one; another for an A/B comparison)")
    args = ap.parse_args()
    with pg_database("bench_start_") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        rows = []
        for k in range(args.rounds):
            rows.append(start_once(url, args.workers, args.server_code.resolve()))
            log(f"start {k + 1}: port accepting after {rows[-1][0]:.3f} s, /healthz answered after "
                f"{rows[-1][1]:.3f} s, server CPU {rows[-1][2]:.2f} s")
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    print(f"serve --workers {args.workers} ({args.server_code.resolve()}), median of {args.rounds} starts: port "
          f"accepting after {med[0]:.3f} s, first /healthz answered after {med[1]:.3f} s, server CPU {med[2]:.2f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
