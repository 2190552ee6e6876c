"""evstore append/read throughput side by side with raw drivers and the eventsourcing library.

    python benchmarks/bench_store.py                   # 100,000 events, SQLite and PostgreSQL
    python benchmarks/bench_store.py --quick           # 10,000 events, ~1 minute
    python benchmarks/bench_store.py --backend sqlite --synchronous NORMAL

One run, one machine, one data set (N JSON objects of ~500 encoded bytes, identical for every
contender), every measurement on a fresh database.  See benchmarks/README.md for what each
contender does and what the columns mean.  Prints a table of events/s and the ratios named by
the targets of issue 2, each marked met / NOT met.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # and the checkout's eventstore

from _common import (  # noqa: E402
    EVENT_TYPE,
    LAST_CPU,
    Result,
    Slice,
    Target,
    best_of,
    log,
    make_payloads,
    mean_size,
    plan,
    print_table,
    timed,
    utcnow,
    write_json,
)

_enc = msgspec.json.Encoder()
Payloads = list[dict[str, Any]]


@dataclass
class Config:
    n: int  # events per batched run (100 and 1000 per call)
    n_single: int  # events per 1-per-call run on SQLite
    n_single_pg: int  # ... on PostgreSQL (an fsync per commit: ~1k/s)
    n_read: int  # events in the stream read back
    read_reps: int
    repeat: int
    stream_size: int
    synchronous: str
    workdir: Path
    pg_url: str | None  # admin URL (psycopg form); None: PostgreSQL skipped


ES_APP = "eventsourcing Application"
ES_REC = "eventsourcing recorder"

# ===================================================================================
# eventsourcing: one aggregate class whose event carries the same JSON object
# ===================================================================================

_es_sync_seen: set[int] = set()


from eventsourcing.application import Application  # noqa: E402
from eventsourcing.domain import Aggregate, event  # noqa: E402


class BenchRun(Aggregate):
    """One stream; each ``note`` is one event carrying the same JSON object evstore gets."""

    @event("Noted")
    def note(self, data: dict) -> None:  # type: ignore[type-arg]
        pass


def _patch_es_sqlite(sync: str) -> None:
    """eventsourcing never sets ``synchronous`` (SQLite's default, FULL, applies).  Set it
    explicitly on each of its connections so every contender runs at the same durability,
    and remember what SQLite reports back."""
    from eventsourcing import sqlite as es_sqlite

    pool = es_sqlite.SQLiteConnectionPool
    original = getattr(pool, "_evbench_original", None) or pool._create_connection

    def create(self: Any) -> Any:
        conn = original(self)
        raw = conn._sqlite_conn
        raw.execute(f"PRAGMA synchronous={sync}")
        _es_sync_seen.add(raw.execute("PRAGMA synchronous").fetchone()[0])
        return conn

    pool._evbench_original = original  # type: ignore[attr-defined]
    pool._create_connection = create  # type: ignore[method-assign]


def _es_env_sqlite(path: Path) -> dict[str, str]:
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path), "CREATE_TABLE": "y"}


def _es_env_pg(url: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres", "CREATE_TABLE": "y",
        "POSTGRES_DBNAME": str(info.get("dbname", "")), "POSTGRES_HOST": str(info.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(info.get("port", "5432")), "POSTGRES_USER": str(info.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(info.get("password", "")),
    }


def es_append(env: dict[str, str], payloads: Payloads, n: int, batch: int, cfg: Config, *, low_level: bool) -> float:
    """Application: ``agg.note(data=...)`` per event, ``app.save(agg)`` per call.
    recorder: build the domain events, map them (``mapper.to_stored_event``) and
    ``app.recorder.insert_events`` them, one call per batch.  Both write through the
    application recorder (the one with a global notification id, as evstore has)."""
    app = Application(env=env)
    slices = list(plan(n, batch, cfg.stream_size))
    aggs: dict[int, Any] = {}
    for s in slices:  # creating the aggregates (their "Created" events) is not timed
        if s.stream not in aggs:
            aggs[s.stream] = BenchRun()
    app.save(*aggs.values())
    try:
        if low_level:
            mapper, recorder, noted = app.mapper, app.recorder, BenchRun.Noted
            stamp = noted.create_timestamp

            def run() -> None:
                for s in slices:
                    oid = aggs[s.stream].id
                    base = s.version + 1  # version 1 is the untimed Created event
                    recorder.insert_events([
                        mapper.to_stored_event(noted(originator_id=oid, originator_version=base + j - s.lo + 1,
                                                     timestamp=stamp(), data=payloads[j]))
                        for j in range(s.lo, s.hi)
                    ])
        else:
            def run() -> None:
                for s in slices:
                    agg = aggs[s.stream]
                    for j in range(s.lo, s.hi):
                        agg.note(data=payloads[j])
                    app.save(agg)
        secs, _ = timed(run)
        total = len(app.recorder.select_notifications(start=None, limit=n + len(aggs) + 10))
        if total != n + len(aggs):
            raise AssertionError(f"eventsourcing wrote {total} events, expected {n + len(aggs)}")
        return secs
    finally:
        app.close()


def es_read(env: dict[str, str], payloads: Payloads, cfg: Config) -> tuple[tuple[float, float], tuple[float, float]]:
    """(select_events + mapper.to_domain_event, repository.get) seconds for one stream."""
    app = Application(env=env)
    try:
        agg = BenchRun()
        for lo in range(0, cfg.n_read, 1000):
            for j in range(lo, min(cfg.n_read, lo + 1000)):
                agg.note(data=payloads[j])
            app.save(agg)
        oid, want = agg.id, cfg.n_read + 1

        def select() -> int:
            return len([app.mapper.to_domain_event(s) for s in app.recorder.select_events(oid)])

        def get() -> int:
            return int(app.repository.get(oid).version)

        return best_of(select, cfg.read_reps, want), best_of(get, cfg.read_reps, want)
    finally:
        app.close()


# ===================================================================================
# evstore
# ===================================================================================

def _stream_ids(slices: list[Slice]) -> list[str]:
    return [f"bench-{k:06d}" for k in range(slices[-1].stream + 1)]


def evstore_append(url: str, payloads: Payloads, n: int, batch: int, cfg: Config) -> float:
    """``store.append(stream, [NewEvent(type, dict), ...], expected_version=<exact>)`` per call:
    JSON validation and encoding, ids, hash chain, optimistic concurrency all inside the timer."""
    from eventstore.store import EventStore, NewEvent  # == `from eventstore import ...`, typed

    store = EventStore(url, synchronous=cfg.synchronous)
    try:
        slices = list(plan(n, batch, cfg.stream_size))
        sids = _stream_ids(slices)

        def run() -> None:
            append = store.append
            for s in slices:
                append(sids[s.stream], [NewEvent(EVENT_TYPE, payloads[j]) for j in range(s.lo, s.hi)],
                       expected_version=s.version)

        secs, _ = timed(run)
        if store.max_position() != n:
            raise AssertionError(f"evstore wrote {store.max_position()} events, expected {n}")
        return secs
    finally:
        store.close()


def evstore_build_read(url: str, payloads: Payloads, cfg: Config) -> None:
    from eventstore.store import EventStore, NewEvent  # == `from eventstore import ...`, typed

    with EventStore(url, synchronous=cfg.synchronous) as store:
        for lo in range(0, cfg.n_read, 1000):
            store.append("read-stream", [NewEvent(EVENT_TYPE, payloads[j])
                                         for j in range(lo, min(cfg.n_read, lo + 1000))])


def evstore_read(url: str, cfg: Config) -> tuple[float, float]:
    """``list(store.read_stream(id))``: RecordedEvent objects, stored bytes, in version order."""
    from eventstore.store import EventStore

    with EventStore(url, synchronous=cfg.synchronous) as store:
        def run() -> int:
            return len(list(store.read_stream("read-stream")))

        return best_of(run, cfg.read_reps, cfg.n_read)


READ_COLUMNS = ("position, version, event_id, type, schema_version, data, meta, occurred_at, recorded_at, "
                "prev_hash, hash")


# ===================================================================================
# raw sqlite3
# ===================================================================================

RAW_BA = "raw sqlite3, bytearray binds"
RAW_COLUMNS = "position, stream_pk, version, event_id, type, data, meta, recorded_at"
RAW_SQLITE_DDL = (
    "CREATE TABLE raw_events (position INTEGER PRIMARY KEY, stream_pk INTEGER NOT NULL, "
    "version INTEGER NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL, "
    "meta BLOB NOT NULL, recorded_at TEXT NOT NULL, UNIQUE (stream_pk, version))"
)


def _raw_rows(payloads: Payloads, s: Slice, position: int) -> list[tuple[Any, ...]]:
    """The row a hand-written log stores: JSON encoding, a UUID and a timestamp are part of
    the work (evstore does them too), no validation and no hash chain."""
    now = utcnow()
    enc, uuid4 = _enc.encode, uuid.uuid4
    return [(position + j - s.lo + 1, s.stream + 1, s.version + j - s.lo + 1, str(uuid4()), EVENT_TYPE,
             enc(payloads[j]), b"{}", now) for j in range(s.lo, s.hi)]


def raw_sqlite_append(path: Path, payloads: Payloads, n: int, batch: int, cfg: Config, *,
                      bytearray_blobs: bool = False) -> float:
    """``bytearray_blobs``: BLOBs bound as bytearray, as evstore binds them (CPython's sqlite3
    adapts every ``bytes`` parameter through its adapter registry first): the limit a
    hand-written log could reach with the same trick, reported for information."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={cfg.synchronous}")
        conn.execute(RAW_SQLITE_DDL)
        slices = list(plan(n, batch, cfg.stream_size))
        sql = f"INSERT INTO raw_events ({RAW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

        def run() -> None:
            position = 0
            execute = conn.execute
            for s in slices:
                rows = _raw_rows(payloads, s, position)
                if bytearray_blobs:
                    rows = [(*r[:5], bytearray(r[5]), bytearray(r[6]), r[7]) for r in rows]
                position += len(rows)
                execute("BEGIN")
                if len(rows) == 1:
                    execute(sql, rows[0])
                else:
                    conn.executemany(sql, rows)
                execute("COMMIT")

        secs, _ = timed(run)
        assert conn.execute("SELECT COUNT(*) FROM raw_events").fetchone()[0] == n
        return secs
    finally:
        conn.close()


def raw_sqlite_read(path: Path, cfg: Config) -> tuple[float, float]:
    """SELECT the same rows from evstore's own table by the stream's integer key, fetchall."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        pk = conn.execute("SELECT stream_pk FROM streams WHERE stream_id = 'read-stream'").fetchone()[0]
        sql = f"SELECT {READ_COLUMNS} FROM events WHERE stream_pk = ? ORDER BY version"

        def run() -> int:
            return len(conn.execute(sql, (pk,)).fetchall())

        return best_of(run, cfg.read_reps, cfg.n_read)
    finally:
        conn.close()


# ===================================================================================
# raw psycopg
# ===================================================================================

RAW_PG_DDL = (
    "CREATE TABLE raw_events (position BIGINT PRIMARY KEY, stream_pk BIGINT NOT NULL, "
    "version INTEGER NOT NULL, event_id VARCHAR(36) NOT NULL, type VARCHAR(200) NOT NULL, "
    "data BYTEA NOT NULL, meta BYTEA NOT NULL, recorded_at VARCHAR(32) NOT NULL, UNIQUE (stream_pk, version))"
)


def raw_pg_append(url: str, payloads: Payloads, n: int, batch: int, cfg: Config, *, copy: bool) -> float:
    import psycopg

    conn = psycopg.connect(url)
    try:
        conn.execute(RAW_PG_DDL)
        conn.commit()
        slices = list(plan(n, batch, cfg.stream_size))
        sql = f"INSERT INTO raw_events ({RAW_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        copy_sql = f"COPY raw_events ({RAW_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        types = ["int8", "int8", "int4", "text", "text", "bytea", "bytea", "text"]

        def run() -> None:
            position = 0
            cur = conn.cursor()
            for s in slices:
                rows = _raw_rows(payloads, s, position)
                position += len(rows)
                if copy:
                    with cur.copy(copy_sql) as cp:
                        cp.set_types(types)
                        for r in rows:
                            cp.write_row(r)
                elif len(rows) == 1:
                    cur.execute(sql, rows[0])
                else:
                    cur.executemany(sql, rows)
                conn.commit()

        secs, _ = timed(run)
        assert conn.execute("SELECT COUNT(*) FROM raw_events").fetchone()[0] == n  # type: ignore[index]
        return secs
    finally:
        conn.close()


def raw_pg_read(url: str, cfg: Config) -> tuple[float, float]:
    import psycopg

    with psycopg.connect(url) as conn:
        pk = conn.execute("SELECT stream_pk FROM streams WHERE stream_id = 'read-stream'").fetchone()[0]  # type: ignore[index]
        conn.commit()
        sql = f"SELECT {READ_COLUMNS} FROM events WHERE stream_pk = %s ORDER BY version"

        def run() -> int:
            rows = conn.execute(sql, (pk,)).fetchall()
            conn.commit()
            return len(rows)

        return best_of(run, cfg.read_reps, cfg.n_read)


# ===================================================================================
# databases
# ===================================================================================

class SQLiteDatabases:
    """A migrated evstore template copied per run (migrations are not what we time)."""

    def __init__(self, workdir: Path) -> None:
        from eventstore.db import make_engine
        from eventstore.migrate import upgrade

        self.dir = workdir / "sqlite"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.template = self.dir / "evstore-template.db"
        engine = make_engine(f"sqlite:///{self.template}")
        upgrade(engine)
        engine.dispose()  # last connection closes: WAL checkpointed into the main file
        self.count = 0

    def fresh(self, kind: str) -> Path:
        self.count += 1
        path = self.dir / f"{kind}-{self.count}.db"
        if kind == "evstore":
            shutil.copyfile(self.template, path)
        return path

    def drop(self, path: Path) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)


class PostgresDatabases:
    """A private database per run (``CREATE DATABASE ... TEMPLATE`` a migrated one), all
    dropped at the end."""

    def __init__(self, admin_url: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        from eventstore.db import make_engine
        from eventstore.migrate import upgrade

        self.admin = psycopg.connect(admin_url, autocommit=True)
        self.info = conninfo_to_dict(admin_url)
        self._make = make_conninfo
        self.prefix = f"evbench_{os.getpid()}_"
        self.created: list[str] = []
        self.count = 0
        self.template = self._create("template")
        engine = make_engine(self.sqlalchemy_url(self.template))
        upgrade(engine)
        engine.dispose()

    def _create(self, kind: str, template: str | None = None) -> str:
        self.count += 1
        name = f"{self.prefix}{self.count}_{kind.replace(' ', '_')}"[:63]
        tpl = f" TEMPLATE {template}" if template else ""
        self.admin.execute(f'CREATE DATABASE "{name}"{tpl}')
        self.created.append(name)
        return name

    def url(self, name: str) -> str:
        params: dict[str, Any] = {**self.info, "dbname": name}
        return str(self._make("", **params))

    def sqlalchemy_url(self, name: str) -> str:
        user = self.info.get("user", "postgres")
        pw = f":{self.info['password']}" if self.info.get("password") else ""
        host, port = self.info.get("host", "127.0.0.1"), self.info.get("port", "5432")
        return f"postgresql+psycopg://{user}{pw}@{host}:{port}/{name}"

    def fresh(self, kind: str) -> str:
        return self._create(kind, self.template if kind == "evstore" else None)

    def drop(self, name: str) -> None:
        self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def close(self) -> None:
        for name in list(self.created):
            try:
                self.drop(name)
            except Exception as exc:  # report, keep dropping the rest
                log(f"could not drop database {name}: {exc}")
        self.admin.close()


# ===================================================================================
# the runs
# ===================================================================================

Runner = Callable[[Any, int, int], float]  # (database, n, batch) -> seconds


def _record(results: dict[tuple[str, str, str, int], Result], backend: str, op: str, contender: str, batch: int,
            events: int, secs: float | tuple[float, float], note: str = "") -> None:
    """Add one measurement: wall seconds (CPU from the latest ``timed``) or (wall, cpu)."""
    cpu = LAST_CPU[0]
    if isinstance(secs, tuple):
        secs, cpu = secs
    key = (backend, op, contender, batch)
    r = results.setdefault(key, Result(backend, op, contender, batch, events, note=note))
    r.seconds.append(secs)
    r.cpu.append(cpu)


Contender = tuple[str, str, Runner, "set[int] | None"]  # (name, database kind, runner, batch sizes or all)


def _append_rounds(backend: str, dbs: Any, contenders: list[Contender], batches: list[int], n_single: int,
                   cfg: Config, results: dict[Any, Result]) -> None:
    """Every contender at every batch size, ``cfg.repeat`` times, a fresh database each, the
    order rotated per round so no contender always runs first."""
    for rep in range(cfg.repeat):
        for batch in batches:
            n = n_single if batch == 1 else cfg.n
            k = rep % len(contenders)
            for name, kind, fn, allowed in contenders[k:] + contenders[:k]:
                if allowed is not None and batch not in allowed:
                    continue
                db = dbs.fresh(kind)
                secs = fn(db, n, batch)
                dbs.drop(db)
                note = "expected_version exact" if name == "evstore" else ""
                _record(results, backend, "append", name, batch, n, secs, note)
                log(f"  {backend:<10} {name:<28} {batch:>5}/call  {n / secs:>10,.0f} events/s  (run {rep + 1})")


def run_sqlite(cfg: Config, payloads: Payloads, results: dict[Any, Result], batches: list[int]) -> None:
    dbs = SQLiteDatabases(cfg.workdir)
    _patch_es_sqlite(cfg.synchronous)
    contenders: list[Contender] = [
        ("evstore", "evstore", lambda db, n, b: evstore_append(f"sqlite:///{db}", payloads, n, b, cfg), None),
        ("raw sqlite3", "raw", lambda db, n, b: raw_sqlite_append(db, payloads, n, b, cfg), None),
        (RAW_BA, "raw", lambda db, n, b: raw_sqlite_append(db, payloads, n, b, cfg, bytearray_blobs=True), None),
        (ES_APP, "es", lambda db, n, b: es_append(_es_env_sqlite(db), payloads, n, b, cfg, low_level=False), None),
        (ES_REC, "es", lambda db, n, b: es_append(_es_env_sqlite(db), payloads, n, b, cfg, low_level=True), None),
    ]
    _append_rounds("sqlite", dbs, contenders, batches, cfg.n_single, cfg, results)
    # reads: one stream of n_read events
    db = dbs.fresh("evstore")
    evstore_build_read(f"sqlite:///{db}", payloads, cfg)
    for _rep in range(cfg.repeat):
        _record(results, "sqlite", "read", "evstore read_stream", cfg.n_read, cfg.n_read,
                evstore_read(f"sqlite:///{db}", cfg), "RecordedEvent objects")
        _record(results, "sqlite", "read", "raw sqlite3 SELECT", cfg.n_read, cfg.n_read,
                raw_sqlite_read(db, cfg), "fetchall() tuples, same table")
        es_db = dbs.fresh("es")
        t_sel, t_get = es_read(_es_env_sqlite(es_db), payloads, cfg)
        dbs.drop(es_db)
        _record(results, "sqlite", "read", "eventsourcing select+map", cfg.n_read, cfg.n_read, t_sel,
                "domain event objects")
        _record(results, "sqlite", "read", "eventsourcing repository.get", cfg.n_read, cfg.n_read, t_get,
                "aggregate replayed")
    dbs.drop(db)
    log(f"  sqlite reads done ({cfg.n_read} events, best of {cfg.read_reps})")


def run_postgres(cfg: Config, payloads: Payloads, results: dict[Any, Result], batches: list[int]) -> str:
    assert cfg.pg_url is not None
    dbs = PostgresDatabases(cfg.pg_url)
    version = str(dbs.admin.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    try:
        es_ok = True
        try:
            import eventsourcing.postgres  # noqa: F401  (needs psycopg_pool)
        except ImportError as exc:
            es_ok = False
            log(f"  eventsourcing on PostgreSQL skipped: {exc} (pip install psycopg-pool)")
        contenders: list[Contender] = [
            ("evstore", "evstore",
             lambda db, n, b: evstore_append(dbs.sqlalchemy_url(db), payloads, n, b, cfg), None),
            ("raw psycopg executemany", "raw",
             lambda db, n, b: raw_pg_append(dbs.url(db), payloads, n, b, cfg, copy=False), None),
            ("raw psycopg COPY binary", "raw",
             lambda db, n, b: raw_pg_append(dbs.url(db), payloads, n, b, cfg, copy=True), {100, 1000}),
        ]
        if es_ok:
            contenders += [
                (ES_APP, "es", lambda db, n, b: es_append(_es_env_pg(dbs.url(db)), payloads, n, b, cfg,
                                                          low_level=False), None),
                (ES_REC, "es", lambda db, n, b: es_append(_es_env_pg(dbs.url(db)), payloads, n, b, cfg,
                                                          low_level=True), None),
            ]
        _append_rounds("postgresql", dbs, contenders, batches, cfg.n_single_pg, cfg, results)
        db = dbs.fresh("evstore")
        evstore_build_read(dbs.sqlalchemy_url(db), payloads, cfg)
        for _rep in range(cfg.repeat):
            _record(results, "postgresql", "read", "evstore read_stream", cfg.n_read, cfg.n_read,
                    evstore_read(dbs.sqlalchemy_url(db), cfg), "RecordedEvent objects")
            _record(results, "postgresql", "read", "raw psycopg SELECT", cfg.n_read, cfg.n_read,
                    raw_pg_read(dbs.url(db), cfg), "fetchall() tuples, same table")
            if es_ok:
                es_db = dbs.fresh("es")
                t_sel, t_get = es_read(_es_env_pg(dbs.url(es_db)), payloads, cfg)
                dbs.drop(es_db)
                _record(results, "postgresql", "read", "eventsourcing select+map", cfg.n_read, cfg.n_read, t_sel,
                        "domain event objects")
                _record(results, "postgresql", "read", "eventsourcing repository.get", cfg.n_read, cfg.n_read,
                        t_get, "aggregate replayed")
        log(f"  postgresql reads done ({cfg.n_read} events, best of {cfg.read_reps})")
    finally:
        dbs.close()
    return version


def _find(results: dict[Any, Result], backend: str, op: str, contender: str, batch: int) -> Result | None:
    return results.get((backend, op, contender, batch))


def _best_es(results: dict[Any, Result], backend: str, batch: int) -> Result | None:
    """The faster of eventsourcing's two paths: the stricter comparison for evstore."""
    found = [r for r in (_find(results, backend, "append", c, batch) for c in (ES_APP, ES_REC)) if r is not None]
    return max(found, key=lambda r: r.rate) if found else None


def targets(results: dict[Any, Result], n_read: int) -> list[Target]:
    def ev(backend: str, batch: int) -> Result | None:
        return _find(results, backend, "append", "evstore", batch)

    def es(backend: str, batch: int, path: str) -> Result | None:
        return _find(results, backend, "append", path, batch)

    # The SQLite eventsourcing targets are printed twice: against the library's public API
    # (Application.save, the "per save" of the reference figures) and against its bare
    # recorder path, the stricter reading (the faster of the two on this kind of machine).
    return [
        Target("SQLite 100/call: evstore / eventsourcing Application.save", ev("sqlite", 100),
               es("sqlite", 100, ES_APP), 1.5),
        Target("SQLite 100/call: evstore / eventsourcing recorder (stricter)", ev("sqlite", 100),
               es("sqlite", 100, ES_REC), 1.5),
        Target("SQLite 100/call: evstore / raw sqlite3", ev("sqlite", 100),
               _find(results, "sqlite", "append", "raw sqlite3", 100), 0.75),
        Target("SQLite 1/call (OCC): evstore / eventsourcing Application.save", ev("sqlite", 1),
               es("sqlite", 1, ES_APP), 1.3),
        Target("SQLite 1/call (OCC): evstore / eventsourcing recorder (stricter)", ev("sqlite", 1),
               es("sqlite", 1, ES_REC), 1.3),
        Target("SQLite 1/call (OCC): evstore / raw sqlite3", ev("sqlite", 1),
               _find(results, "sqlite", "append", "raw sqlite3", 1), 0.60),
        Target("PostgreSQL 100/call: evstore / eventsourcing", ev("postgresql", 100),
               _best_es(results, "postgresql", 100), 2.0),
        Target("PostgreSQL 100/call: evstore / raw psycopg executemany", ev("postgresql", 100),
               _find(results, "postgresql", "append", "raw psycopg executemany", 100), 0.60),
        Target("SQLite read one stream: evstore / raw sqlite3 SELECT",
               _find(results, "sqlite", "read", "evstore read_stream", n_read),
               _find(results, "sqlite", "read", "raw sqlite3 SELECT", n_read), 0.50),
    ]


def informative(results: dict[Any, Result], n_read: int) -> list[str]:
    """Ratios no target names, printed for context."""
    lines = []
    pairs = [
        (f"SQLite 100/call: evstore / {RAW_BA}", ("sqlite", "append", "evstore", 100),
         ("sqlite", "append", RAW_BA, 100)),
        ("SQLite 1000/call: evstore / raw sqlite3", ("sqlite", "append", "evstore", 1000),
         ("sqlite", "append", "raw sqlite3", 1000)),
        ("PostgreSQL 1/call: evstore / raw psycopg", ("postgresql", "append", "evstore", 1),
         ("postgresql", "append", "raw psycopg executemany", 1)),
        ("PostgreSQL 1000/call: evstore / raw psycopg executemany", ("postgresql", "append", "evstore", 1000),
         ("postgresql", "append", "raw psycopg executemany", 1000)),
        ("PostgreSQL 1000/call: evstore / raw COPY", ("postgresql", "append", "evstore", 1000),
         ("postgresql", "append", "raw psycopg COPY binary", 1000)),
        ("PostgreSQL read: evstore / raw psycopg SELECT", ("postgresql", "read", "evstore read_stream", n_read),
         ("postgresql", "read", "raw psycopg SELECT", n_read)),
        ("SQLite read: evstore / eventsourcing select+map", ("sqlite", "read", "evstore read_stream", n_read),
         ("sqlite", "read", "eventsourcing select+map", n_read)),
    ]
    for label, a, b in pairs:
        ra, rb = results.get(a), results.get(b)
        if ra and rb and rb.rate:
            lines.append(f"  [  info ] {label}: {ra.rate / rb.rate:.2f}x")
    for backend, batch in (("sqlite", 1000), ("postgresql", 1), ("postgresql", 1000)):
        e, es = results.get((backend, "append", "evstore", batch)), _best_es(results, backend, batch)
        if e and es and es.rate:
            lines.append(f"  [  info ] {backend} {batch}/call: evstore / eventsourcing: {e.rate / es.rate:.2f}x")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=None, help="events per batched run (default 100000; --quick 10000)")
    ap.add_argument("--single-events", type=int, default=None,
                    help="events per 1-per-call run on SQLite (default min(N, 5000); --quick 1000)")
    ap.add_argument("--single-events-pg", type=int, default=None,
                    help="events per 1-per-call run on PostgreSQL (default min(N, 2000); --quick 500)")
    ap.add_argument("--read-events", type=int, default=None, help="events in the stream read back (default min(N, 20000))")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    ap.add_argument("--synchronous", choices=["FULL", "NORMAL", "OFF"], default="FULL",
                    help="SQLite durability for every SQLite contender (default FULL; OFF = CPU cost only)")
    ap.add_argument("--batches", default="1,100,1000", help="events per call to measure (default 1,100,1000)")
    ap.add_argument("--stream-size", type=int, default=1000, help="events per stream in the append runs")
    ap.add_argument("--repeat", type=int, default=1, help="measure each point N times (fresh database each), report the median")
    ap.add_argument("--quick", action="store_true", help="small N for a ~1 minute smoke run")
    ap.add_argument("--pg-url", default=None,
                    help="admin URL (default $EVSTORE_TEST_POSTGRES_URL or postgresql://postgres@127.0.0.1:5432/test)")
    ap.add_argument("--dir", default=None, help="where SQLite files go (default: a temp dir; must be a real disk)")
    ap.add_argument("--json", default=None, help="also write results as JSON to this file")
    args = ap.parse_args(argv)

    n = args.events or (10_000 if args.quick else 100_000)
    pg_url = None
    if args.backend in ("postgresql", "all"):
        pg_url = args.pg_url or os.environ.get("EVSTORE_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
        pg_url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    workdir = Path(tempfile.mkdtemp(prefix="evbench-", dir=args.dir))
    cfg = Config(
        n=n,
        n_single=args.single_events or min(n, 1_000 if args.quick else 5_000),
        n_single_pg=args.single_events_pg or min(n, 500 if args.quick else 2_000),
        n_read=args.read_events or min(n, 20_000),
        read_reps=3 if args.quick else 5,
        repeat=max(1, args.repeat),
        stream_size=args.stream_size,
        synchronous=args.synchronous,
        workdir=workdir,
        pg_url=pg_url,
    )
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    fs = _filesystem(workdir)
    if fs in ("tmpfs", "ramfs", "overlay"):
        log(f"warning: {workdir} is on {fs}: fsync may be free there, durability comparisons are meaningless")

    from importlib.metadata import version as dist_version

    log(f"generating {n} payloads ...")
    payloads = make_payloads(n)
    size = mean_size(payloads)
    meta: dict[str, Any] = {
        "events": cfg.n, "single_events_sqlite": cfg.n_single, "single_events_pg": cfg.n_single_pg,
        "read_events": cfg.n_read, "payload_bytes": round(size), "stream_size": cfg.stream_size,
        "synchronous": cfg.synchronous, "repeat": cfg.repeat, "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "eventsourcing": dist_version("eventsourcing"),
        "cpus": os.cpu_count(), "filesystem": fs,
    }
    results: dict[Any, Result] = {}
    try:
        if args.backend in ("sqlite", "all"):
            log(f"SQLite (WAL, synchronous={cfg.synchronous}) in {workdir}")
            run_sqlite(cfg, payloads, results, batches)
            if _es_sync_seen:
                meta["eventsourcing_sqlite_synchronous"] = sorted(_es_sync_seen)
        if pg_url is not None:
            log(f"PostgreSQL at {_redact(pg_url)}")
            try:
                meta["postgresql"] = run_postgres(cfg, payloads, results, batches)
            except Exception as exc:
                if "connect" not in str(exc).lower() and exc.__class__.__name__ != "OperationalError":
                    raise
                log(f"PostgreSQL skipped: {exc}")
                meta["postgresql"] = f"skipped: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    ordered = sorted(results.values(), key=lambda r: (r.backend != "sqlite", r.op != "append", r.batch,
                                                      _ORDER.get(r.contender, 9)))
    print(f"evstore store benchmark: {cfg.n} events of ~{size:.0f} bytes JSON "
          f"(1-per-call runs: {cfg.n_single} on SQLite, {cfg.n_single_pg} on PostgreSQL: an fsync per event), "
          f"streams of {cfg.stream_size} events, SQLite WAL synchronous={cfg.synchronous}, "
          f"PostgreSQL {meta.get('postgresql', 'not run')} (synchronous_commit as configured), "
          f"median of {cfg.repeat} run(s); reads: one stream of {cfg.n_read} events, best of {cfg.read_reps}.")
    print(f"python {meta['python']}, sqlite {meta['sqlite']}, eventsourcing {meta['eventsourcing']}, "
          f"{meta['cpus']} CPUs, files on {fs}")
    print_table(ordered, "Append (events/s, higher is better)", ("append",))
    print_table(ordered, "Read one stream back (events/s)", ("read",))
    tgs = targets(results, cfg.n_read)
    print("\nTargets (issue 2; PostgreSQL eventsourcing = the faster of its two paths at that batch size)")
    for t in tgs:
        print(t.line())
    for line in informative(results, cfg.n_read):
        print(line)
    if args.json:
        write_json(args.json, meta, ordered, tgs)
    return 0


_ORDER = {"evstore": 0, "raw sqlite3": 1, "raw psycopg executemany": 1, "raw psycopg COPY binary": 2,
          ES_APP: 3, ES_REC: 4, "evstore read_stream": 0, "raw sqlite3 SELECT": 1, "raw psycopg SELECT": 1,
          "eventsourcing select+map": 3, "eventsourcing repository.get": 4}


def _filesystem(path: Path) -> str:
    """The filesystem type holding ``path`` (from /proc/mounts; "?" elsewhere)."""
    try:
        best, fs = "", "?"
        real = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and real.startswith(parts[1]) and len(parts[1]) > len(best):
                best, fs = parts[1], parts[2]
        return fs
    except OSError:
        return "?"


def _redact(url: str) -> str:
    if "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]:
        scheme, rest = url.split("//", 1)
        user = rest.split("@", 1)[0].split(":", 1)[0]
        return f"{scheme}//{user}:***@{rest.split('@', 1)[1]}"
    return url


if __name__ == "__main__":
    raise SystemExit(main())
