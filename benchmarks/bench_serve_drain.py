"""How soon a hook call spooled by ``evstore hook claude-code`` is in the store while ``evstore
serve`` drains the spool, against real processes on a SQLite store.

    python benchmarks/bench_serve_drain.py                    # the default --drain-interval (1 s)
    python benchmarks/bench_serve_drain.py --interval 0.1 --hooks 50

Each call is fired after a random pause (so calls land anywhere in the drain cycle) and timed from
the hook process's exit to the call's event being readable in the store; it should never be much
more than the interval plus one drain.  A benchmark, not a timed test: it prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eventstore.store import EventStore

EVSTORE = str(Path(sys.executable).parent / "evstore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=1.0, help="serve --drain-interval (seconds)")
    parser.add_argument("--hooks", type=int, default=30, help="hook calls to time")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/events.db"
        env = {**os.environ, "EVSTORE_SCRUB_KEY": "bench"}
        env.pop("EVSTORE_SPOOL_DIR", None)
        subprocess.run([EVSTORE, "--url", url, "init"], check=True, capture_output=True, env=env)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen([EVSTORE, "--url", url, "serve", "--port", str(port), "--drain-interval",
                                   str(args.interval)], env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)  # the server up and its first drain done
            took = []
            with EventStore(url) as store:
                for i in range(args.hooks):
                    time.sleep(rng.uniform(0, args.interval))
                    body = json.dumps({"session_id": "S", "hook_event_name": "PreToolUse", "tool_use_id": f"t{i}"})
                    subprocess.run([EVSTORE, "--url", url, "hook", "claude-code"], input=body.encode(), env=env,
                                   check=True)
                    fired = time.monotonic()
                    while store.stream_version("S") < i + 1:
                        time.sleep(0.002)
                    took.append(time.monotonic() - fired)
        finally:
            server.terminate()
            server.wait()
    took.sort()
    print(f"--drain-interval {args.interval:g} s, {len(took)} hooks: hook exit -> in the store: "
          f"median {statistics.median(took) * 1000:.0f} ms, p90 {took[int(len(took) * 0.9) - 1] * 1000:.0f} ms, "
          f"max {took[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
