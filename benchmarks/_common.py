"""Shared helpers for the store benchmarks: deterministic payloads, stream layout, timing,
results and the table/target printing.  No evstore imports here: the helpers must not bias
any contender."""

from __future__ import annotations

import gc
import json
import os
import random
import statistics
import string
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

EVENT_TYPE = "bench.noted"
_enc = msgspec.json.Encoder()
_WORDS = [
    "".join(random.Random(i).choices(string.ascii_lowercase, k=random.Random(i + 7).randint(3, 9)))
    for i in range(400)
]


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays the report."""
    print(msg, file=sys.stderr, flush=True)


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- data ---------------------------------------------------------------------------

def _template(rng: random.Random, target: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "run_id": f"PROJ-{rng.randint(1, 9999)}",
        "phase": rng.choice(["plan", "implement", "review", "test", "merge"]),
        "agent": f"coder-{rng.randint(1, 8)}",
        "model": rng.choice(["model-a-2025", "model-b-mini", "model-c-large"]),
        "status": rng.choice(["ok", "retry", "failed", "skipped"]),
        "tokens": {"input": rng.randint(100, 200_000), "output": rng.randint(10, 20_000)},
        "duration_ms": rng.randint(5, 900_000),
        "cost_usd": round(rng.random() * 3, 4),
        "files": [f"src/pkg_{rng.randint(0, 99)}/mod_{rng.randint(0, 999)}.py" for _ in range(rng.randint(1, 4))],
        "summary": "",
    }
    # Grow the free text until the encoded event (with the "seq" added later) is ~target bytes.
    words: list[str] = []
    while len(_enc.encode(doc)) + 14 < target:
        words.append(rng.choice(_WORDS))
        doc["summary"] = " ".join(words)
    return doc


def make_payloads(n: int, *, seed: int = 20240601, size: int = 500, distinct: int = 1000) -> list[dict[str, Any]]:
    """``n`` JSON objects of ~``size`` encoded bytes, identical for every contender.

    Built from ``distinct`` templates plus a unique ``seq`` so memory stays small (the strings
    are shared) while every event's bytes differ."""
    rng = random.Random(seed)
    templates = [_template(rng, size) for _ in range(min(distinct, max(n, 1)))]
    return [{**templates[i % len(templates)], "seq": i} for i in range(n)]


def mean_size(payloads: list[dict[str, Any]]) -> float:
    sample = payloads[: min(len(payloads), 2000)]
    return sum(len(_enc.encode(p)) for p in sample) / max(len(sample), 1)


@dataclass(frozen=True)
class Slice:
    """One append call: events ``lo:hi`` go to stream number ``stream`` at ``version`` (before)."""

    stream: int
    lo: int
    hi: int
    version: int


def plan(n: int, batch: int, stream_size: int) -> Iterator[Slice]:
    """Fill streams of ``stream_size`` events one after another, ``batch`` events per call.

    A run's stream is written by one orchestrator, in order: this is the realistic layout and
    the same for every contender.  A call never spans two streams."""
    stream_size = max(stream_size, batch)
    pos, stream = 0, 0
    while pos < n:
        end = min(n, pos + stream_size)
        version = 0
        while pos < end:
            hi = min(end, pos + batch)
            yield Slice(stream, pos, hi, version)
            version += hi - pos
            pos = hi
        stream += 1


# -- results ------------------------------------------------------------------------

@dataclass
class Result:
    backend: str  # "sqlite" | "postgresql"
    op: str  # "append" | "read"
    contender: str
    batch: int  # events per call (append) or per stream read (read)
    events: int  # events per timed run
    seconds: list[float] = field(default_factory=list)  # wall clock, one per repeat
    note: str = ""
    cpu: list[float] = field(default_factory=list)  # this process's CPU seconds, one per repeat

    @property
    def cpu_us(self) -> float:
        """Median CPU microseconds per event spent in this process (driver and SQLite
        included; a PostgreSQL server's work is not).  Robust to other load on the machine."""
        return statistics.median(self.cpu) / self.events * 1e6 if self.cpu else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        return self.events / self.median if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["events_per_s"] = self.rate
        d["cpu_us_per_event"] = self.cpu_us
        return d


LAST_CPU: list[float] = [0.0]  # CPU seconds of the latest ``timed`` call


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn`` once with a clean heap; returns (wall seconds, fn's value) and leaves the
    process CPU seconds it took in ``LAST_CPU[0]``."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    value = fn()
    t1, c1 = time.perf_counter(), time.process_time()
    LAST_CPU[0] = c1 - c0
    return t1 - t0, value


def best_of(fn: Callable[[], int], reps: int, want: int) -> tuple[float, float]:
    """(wall, cpu) seconds of the fastest of ``reps`` runs of ``fn``, which must return ``want``."""
    best: tuple[float, float] | None = None
    for _ in range(reps):
        secs, got = timed(fn)
        if got != want:
            raise AssertionError(f"read {got} events, expected {want}")
        if best is None or secs < best[0]:
            best = (secs, LAST_CPU[0])
    assert best is not None
    return best


def fmt_rate(r: float) -> str:
    if r <= 0:
        return "-"
    if r >= 1e6:
        return f"{r / 1e6:.2f}M"
    if r >= 1e4:
        return f"{r / 1e3:.1f}k"
    if r >= 1e3:
        return f"{r / 1e3:.2f}k"
    return f"{r:.0f}"


def print_table(results: list[Result], title: str, ops: tuple[str, ...]) -> None:
    rows = [r for r in results if r.op in ops]
    if not rows:
        return
    print(f"\n{title}")
    head = f"{'backend':<11} {'op':<6} {'contender':<28} {'per call':>8} {'events':>8} {'events/s':>10} {'spread':>7} {'cpu µs/ev':>9}  note"
    print(head)
    print("-" * len(head))
    for r in rows:
        spread = ""
        if len(r.seconds) > 1:
            spread = f"±{(max(r.seconds) - min(r.seconds)) / 2 / r.median * 100:.0f}%"
        print(f"{r.backend:<11} {r.op:<6} {r.contender:<28} {r.batch:>8} {r.events:>8} {fmt_rate(r.rate):>10} "
              f"{spread:>7} {r.cpu_us:>9.1f}  {r.note}")


@dataclass
class Target:
    label: str
    num: Result | None
    den: Result | None
    minimum: float

    @property
    def ratio(self) -> float | None:
        if self.num is None or self.den is None or not self.num.rate or not self.den.rate:
            return None
        return self.num.rate / self.den.rate

    @property
    def met(self) -> bool | None:
        r = self.ratio
        return None if r is None else r >= self.minimum

    def line(self) -> str:
        r = self.ratio
        if r is None:
            return f"  [ n/a ] {self.label}: not measured"
        mark = "met" if self.met else "NOT met"
        assert self.num is not None and self.den is not None
        return (f"  [{mark:^7}] {self.label}: {r:.2f}x (target >= {self.minimum:g}x)  "
                f"[{self.num.contender} {fmt_rate(self.num.rate)}/s vs {self.den.contender} {fmt_rate(self.den.rate)}/s]")

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "ratio": self.ratio, "minimum": self.minimum, "met": self.met}


def write_json(path: str, meta: dict[str, Any], results: list[Result], targets: list[Target]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "results": [r.to_json() for r in results],
                   "targets": [t.to_json() for t in targets]}, fh, indent=2)


def _bench_pg_url() -> str:
    import os

    base_url = os.environ.get("EVSTORE_BENCH_PG_URL") or os.environ.get("EVSTORE_TEST_POSTGRES_URL")
    if not base_url:
        raise SystemExit("set EVSTORE_BENCH_PG_URL (or EVSTORE_TEST_POSTGRES_URL) to a PostgreSQL server")
    return base_url


@contextmanager
def pg_schema(prefix: str) -> Iterator[str]:
    """A store URL on a new PostgreSQL schema of ``$EVSTORE_BENCH_PG_URL`` (or the tests' URL),
    dropped with everything in it when the block ends (the benchmarks that need a server)."""
    import uuid

    import psycopg

    base_url = _bench_pg_url()
    schema = prefix + uuid.uuid4().hex[:8]
    admin_url = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{base_url}{'&' if '?' in base_url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """A store URL on a new database of ``$EVSTORE_BENCH_PG_URL``'s server, dropped afterwards: a team's
    store has its database to itself (the append lock is one per database: a schema of a shared one
    would also wait for whatever else appends there, such as other test runs)."""
    import uuid

    import psycopg

    base_url = _bench_pg_url()
    name = prefix + uuid.uuid4().hex[:8]
    admin = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    head, _, query = base_url.partition("?")
    try:
        yield head.rsplit("/", 1)[0] + "/" + name + (f"?{query}" if query else "")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server a benchmark starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_of(pids: list[int], *, reaped: bool = False) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used, read from /proc; with ``reaped``
    also what their children that have ended used (a server's workers forked and gone)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15 if reaped else 13]) / tick
    return total
