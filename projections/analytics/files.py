"""The Parquet directory: data files, the manifest that is the checkpoint, refresh and compaction.

See the package docstring for the protocol (exactly once, bound to one store's log, one refresher
at a time across processes, bounded memory).
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore import config
from eventstore.errors import EvstoreError
from eventstore.records import FactEvent
from eventstore.store import EventStore
from projections.analytics.facts import Flattener, built, catalog, code_stamp, stamp_holds
from projections.engine import gc_paused

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "analytics"
MANIFEST = "manifest.json"
#: Held (exclusively, across processes) by the one refresh that may write a directory at a time.
LOCK = ".refresh.lock"
#: A refresh writes the facts of this many events at a time (one file per table, and the manifest), so a
#: full build's memory does not grow with the store (benchmarks/bench_analytics.py --memory); the
#: ``events`` table's files then hold at least :data:`SMALL_ROWS` rows and are never compacted.
FLUSH_EVENTS = 200_000
#: The facts of this many events are held as Python rows at a time, then as Arrow columns (a tenth of
#: the memory) until the flush.  Writing each chunk to a file of its own cost 2x the Parquet CPU (a
#: file and a row group per table per chunk, and the compaction of the small files afterwards).
CHUNK_EVENTS = 20_000
#: A table with more small files than this is compacted at the end of a refresh.
COMPACT_AT = 16
#: Files with fewer rows than this count as small (merged by compaction): the blocks of a parallel
#: build of 400,000 events or more (FLUSH_EVENTS / MAX_WORKERS events each) are not.
SMALL_ROWS = 100_000


class AnalyticsIOError(EvstoreError):
    """Reading or writing analytics or export files failed (disk full, missing or read-only directory)."""


def sql_string(text: str) -> str:
    """``text`` as a DuckDB string literal, for what DuckDB takes no parameter in (a file path in ATTACH,
    COPY or a view's scan, a SET value): quotes doubled, the one escape standard SQL strings have."""
    return "'" + text.replace("'", "''") + "'"


def io_error(action: str, path: str | os.PathLike[str], exc: BaseException) -> AnalyticsIOError:
    """``exc`` (an OSError or DuckDB IO error) as a one-line message naming the action and the path."""
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC:
            reason = "no space left on the device"
        elif exc.filename and str(exc.filename) != str(path) and not str(exc.filename).endswith(".tmp"):
            reason = f"{reason} ({exc.filename})"
    else:
        reason = str(exc).strip().splitlines()[0]
        if "No space left on device" in reason:
            reason = "no space left on the device"
    return AnalyticsIOError(f"cannot {action} {path}: {reason}")


@dataclass
class Manifest:
    """``manifest.json``: the checkpoint and the list of live files, bound to one store's log.

    ``store_id`` is the store's identity (:meth:`EventStore.store_id`), ``position`` the last event
    applied and ``hash`` that event's hash (hex): files built from another store, a deleted and
    recreated store, or a log that no longer holds that event are never read as this store's
    (:func:`mismatch`)."""

    version: str = field(default_factory=lambda: catalog().version)
    store_id: str = ""
    position: int = 0
    hash: str = ""
    files: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {t: [] for t in catalog().tables})
    #: The stamp of the code that built the catalog of ``version`` (:func:`facts.code_stamp`; None: not known).
    code: Any = None
    #: Which build of the tables this is: new when they are built from the first event (:func:`_init`: a
    #: rebuild, another store's or log's files), kept by a refresh and a compaction, which add and merge files
    #: of the same facts ("": a manifest written before it was kept).  The kept run views hold to it.
    build: str = ""

    @classmethod
    def load(cls, directory: Path, *, lean: bool = False) -> Manifest | None:
        """The manifest in ``directory`` (None if there is none, or it is not one this code wrote).  ``lean``:
        without building the catalog if this process has not, its files listed under the manifest's own table
        names (a reader of its checkpoint and version only)."""
        try:
            data = json.loads((directory / MANIFEST).read_bytes())
            files = data["files"]
            tables = list(files) if lean and not built() else catalog().tables
            return cls(str(data["version"]), str(data.get("store_id", "")), int(data["position"]),
                       str(data.get("hash", "")), {t: list(files.get(t, [])) for t in tables}, data.get("code"),
                       str(data.get("build", "")))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # not a manifest of ours: a refresh rebuilds, a reader says there are no tables
        except OSError as exc:
            raise io_error("read the analytics manifest in", directory, exc) from exc

    def save(self, directory: Path) -> None:
        # A unique temporary name: no process ever renames another's half-written manifest.
        # msgspec, not json.dump: with an indent the stdlib encodes in Python, 20x slower (a refresh
        # saves the manifest at every flush, and it lists every file)
        # The code the catalog came from, when this is its version: a caught-up reader takes the version here
        # while that code is unchanged, without importing every dialect (current_version)
        self.code = _stamp() if self.version == catalog().version else None
        data = msgspec.json.encode({"name": NAME, "version": self.version, "store_id": self.store_id,
                                    "position": self.position, "hash": self.hash, "files": self.files,
                                    "code": self.code, "build": self.build})
        with replacing(directory / MANIFEST) as tmp, open(tmp, "wb") as fh:
            fh.write(msgspec.json.format(data, indent=1))
            fh.flush()
            os.fsync(fh.fileno())

    def rows(self) -> int:
        """The fact rows of every listed file, all tables together."""
        return sum(int(f["rows"]) for files in self.files.values() for f in files)

    def paths(self, directory: Path, table: str) -> list[Path]:
        return [directory / table / f["file"] for f in self.files[table]]


_stamps: dict[str, list[Any]] = {}


def _stamp() -> list[Any]:
    """:func:`code_stamp`, once per process and catalog (a refresh saves its manifest at every flush)."""
    version = catalog().version
    if version not in _stamps:
        _stamps[version] = code_stamp()
    return _stamps[version]


def current_version(m: Manifest | None) -> str:
    """The catalog's version: ``m``'s, while the code stamp it keeps holds (no dialect imported: this process
    has not built the catalog, and the code that built it is the code installed); else the version of the
    catalog built here."""
    return m.version if m is not None and not built() and stamp_holds(m.code) else catalog().version


def mismatch(store: EventStore, m: Manifest) -> str | None:
    """Why the tables of manifest ``m`` are not ``store``'s log up to ``m.position`` (None: they are)."""
    current = current_version(m)
    if m.version != current:
        return (f"they were built by flatten version {m.version}, this is version {current} (the tables the "
                "installed dialects declare)")
    sid = store.store_id()
    if m.store_id != sid:
        return f"they were built from store {m.store_id or '(unnamed)'}, not from this store ({sid})"
    if m.position:
        at = store.hash_at(m.position)
        if at is None:
            return f"the log has no event at their checkpoint (position {m.position}) any more"
        if at.hex() != m.hash:
            return f"the event at their checkpoint (position {m.position}) is not the one they were built from"
    return None


@dataclass
class RefreshResult:
    events: int  # log events read after the checkpoint
    position: int  # checkpoint afterwards
    rows: dict[str, int]
    files_written: int
    compacted: list[str]
    rebuilt: bool
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "position": self.position, "rows": self.rows,
                "files_written": self.files_written, "compacted": self.compacted, "rebuilt": self.rebuilt,
                "seconds": round(self.seconds, 3)}


def analytics_dir(store: EventStore, override: str | os.PathLike[str] | None = None) -> Path:
    """``override``, else ``$EVSTORE_ANALYTICS_DIR``, else the store's own folder
    (:func:`eventstore.config.analytics_directory`: beside a SQLite file, or keyed by store id)."""
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("EVSTORE_ANALYTICS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return config.analytics_directory(store.url, store.store_id())


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A uniquely named temporary path beside ``path`` that replaces ``path`` atomically when the
    block succeeds and is removed when it fails: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


#: How the fact files are written (and compacted): zstd, with dictionary pages.  Without them a build
#: wrote 20 % less CPU and 12 % smaller files on the demo's facts, but the metrics report over those files
#: took 25 % more CPU (DuckDB keeps dictionary-encoded strings as dictionaries while it groups and filters).
PARQUET = {"compression": "zstd", "use_dictionary": True}
#: Rows per row group: one per file held the whole column's dictionary pages in memory at once (the
#: build of 430,007 events of one simulated dialect peaked at 277 MB, against 235 MB with these, for the same CPU).
ROW_GROUP = 65_536


def _write(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq  # here, not at the top: a command that only reads never imports pyarrow

    with replacing(path) as tmp:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP, **PARQUET)


def _part(table: str, after: int, upto: int, tag: str = "") -> str:
    # Every file name is new (random suffix): a file, once listed, is never rewritten in place, so a
    # reader holding it open reads what the manifest it loaded promised.
    return f"part-{after}-{upto}{tag}-{uuid.uuid4().hex[:8]}.parquet"


def _remove_unlisted(directory: Path, manifest: Manifest) -> None:
    """Delete files the manifest does not list (a crash's leftovers, compacted or rebuilt files).

    Only the refresh-lock holder calls this, after its manifest is in place, so nothing deleted is
    still being written; readers that opened a deleted file keep reading it (see :func:`connect`)."""
    for table in catalog().tables:
        live = {f["file"] for f in manifest.files[table]}
        folder = directory / table
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name not in live:
                    p.unlink(missing_ok=True)


#: What reports keep beside the tables, derived from them: the run views' rows (:mod:`.kept`) and the kept
#: reports and renderings (``projections.metrics.REPORTS``).  Deleted with the tables they came from, when
#: those are built anew (an erasure rebuilds them: nothing derived from an erased payload may stay).
KEPT = "kept.duckdb"
DERIVED = (KEPT, f"{KEPT}.wal", "reports")


def _init(directory: Path, store_id: str) -> Manifest:
    """A fresh manifest with an empty file per table (so every view has its columns), and nothing left of
    what was derived from the tables before it (:data:`DERIVED`)."""
    from projections.analytics import columns

    for name in DERIVED:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    m = Manifest(store_id=store_id, build=uuid.uuid4().hex)
    for table, schema in catalog().schemas.items():
        (directory / table).mkdir(exist_ok=True)
        name = _part(table, 0, 0)
        _write(columns.empty(schema), directory / table / name)
        m.files[table].append({"file": name, "after": 0, "upto": 0, "rows": 0})
    m.save(directory)
    return m


@contextmanager
def _refresh_lock(directory: Path) -> Iterator[None]:
    """One refresher per directory at a time, across processes (released if the holder dies)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock  # here: a caught-up refresh takes no lock (filelock imports secrets)

        lock = FileLock(directory / LOCK)
        lock.acquire()
    except OSError as exc:
        raise io_error("write the analytics tables in", directory, exc) from exc
    try:
        yield
    finally:
        lock.release()


def refresh(store: EventStore, directory: str | os.PathLike[str] | None = None, *, batch_size: int = 20_000,
            rebuild: bool = False, compact: bool = True, compact_at: int = COMPACT_AT, upto: int | None = None,
            progress: Callable[[int, int], None] | None = None, flush_events: int = FLUSH_EVENTS,
            workers: int | None = None) -> RefreshResult:
    """Bring the Parquet tables up to the end of the log (or position ``upto``); returns what was written.

    Tables of another store, of a recreated store or of a log that lost their checkpoint's event
    are rebuilt (:func:`mismatch`).  Facts are written every ``flush_events`` events, so memory
    stays bounded however far behind the tables are.  ``workers``: processes to flatten on (default:
    two for a refresh of :data:`PARALLEL_EVENTS` events or more on a machine of two cores or more, else
    one; see :func:`_parallel`)."""
    started = time.perf_counter()
    out = analytics_dir(store, directory)
    if not rebuild and upto is None:
        caught_up = _caught_up(store, out, started)
        if caught_up is not None:
            return caught_up
    with _refresh_lock(out):
        try:
            return _refresh(store, out, started, batch_size=batch_size, rebuild=rebuild, compact=compact,
                            compact_at=compact_at, upto=upto, progress=progress, flush_events=flush_events,
                            workers=workers)
        except OSError as exc:
            raise io_error("write the analytics tables in", out, exc) from exc


def _caught_up(store: EventStore, out: Path, started: float) -> RefreshResult | None:
    """The result of a refresh of tables caught up already (what most `metrics`, `query` and page views
    find), else None: no lock, no directory listing, no read of the log; the manifest and the hash at its
    checkpoint say so."""
    current = Manifest.load(out, lean=True)  # the catalog is not built while the manifest's code stamp holds
    if current is not None and current.position == store.max_position() and mismatch(store, current) is None:
        return RefreshResult(0, current.position, {}, 0, [], False, time.perf_counter() - started)
    return None


def refresh_apart(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
                  meanwhile: Callable[[], None] | None = None) -> RefreshResult:
    """:func:`refresh`, in a child process where this one may fork; the same tables and result.

    A refresh imports pyarrow and the dialects' flatteners (a `metrics` of the 10^7-event demo store after
    1,000 new events went from 41 to 115 MB before DuckDB opened), which the process then holds beside the
    report's DuckDB and rows; a child gives them back when it exits.  It refreshes here where a fork is not
    safe or not possible: threads in this process (`evstore serve`; a fork copies their locks as they are),
    a store another process cannot open (in-memory SQLite), no ``fork``, or ``EVSTORE_ANALYTICS_FORK=0``.
    The child dies with this process (``PR_SET_PDEATHSIG``): a refresh killed midway leaves the tables
    at their last checkpoint, as one killed in this process does.

    ``meanwhile``: work this process does while its child refreshes (never when there is nothing to refresh, nor
    where the refresh runs here); it must not depend on the refresh, and what it raises is not raised: it is work
    done ahead that will be done again if it failed (:func:`projections.metrics._while_refreshing`)."""
    from projections.prefork import child_outcome, may_fork, run_in_child

    started = time.perf_counter()
    out = analytics_dir(store, directory)
    caught_up = _caught_up(store, out, started)
    if caught_up is not None:
        return caught_up
    if os.environ.get("EVSTORE_ANALYTICS_FORK", "1") == "0" or not may_fork(store.url):
        return refresh(store, out)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        run_in_child(write_end, partial(_refresh_own, store.url, out))
    os.close(write_end)
    try:
        if meanwhile is not None:
            meanwhile()
    except Exception:  # noqa: BLE001 - done ahead only: done again, and said then, if it matters
        pass
    finally:
        outcome, code, _cpu = child_outcome(pid, read_end)
    if outcome is None:
        raise EvstoreError(f"the process bringing the analytics tables in {out} up to date ended without a result "
                           f"(exit status {code}); they are at their last checkpoint: run the command again")
    kind, value = outcome
    if kind == "error":
        raise EvstoreError(value)
    return RefreshResult(**value)


def _refresh_own(url: str, out: Path) -> dict[str, Any]:
    """:func:`refresh_apart`'s child's work: its own connections (none of its parent's), the result's fields.

    numpy is made unimportable here unless the parent had it: pyarrow imports it when it is installed, for
    nothing a refresh does (pyarrow runs without numpy since version 16: this child is as in an install without
    it), and the import cost a refresh of one event 0.05 s of its 0.17 and 0.06-0.09 s more CPU in the threads
    OpenBLAS starts (``tests/test_analytics_columns.py`` runs this in a process and checks the facts are written with
    numpy unimportable)."""
    import sys

    sys.modules.setdefault("numpy", None)  # type: ignore[arg-type]  # None: an import of it raises ImportError
    with EventStore(url, check_schema=False) as own:
        result = refresh(own, out)
    return {k: getattr(result, k) for k in RefreshResult.__dataclass_fields__}


def _refresh(store: EventStore, out: Path, started: float, *, batch_size: int, rebuild: bool, compact: bool,
             compact_at: int, upto: int | None, progress: Callable[[int, int], None] | None,
             flush_events: int, workers: int | None = None) -> RefreshResult:
    manifest = None if rebuild else Manifest.load(out)
    fresh = manifest is None or mismatch(store, manifest) is not None
    if manifest is None or fresh:
        manifest = _init(out, store.store_id())
    elif not manifest.build:  # written by an older evstore: a build from here on (the kept rows, built once more,
        manifest.build = uuid.uuid4().hex  # then hold to it), saved with the first files this refresh lists
    _remove_unlisted(out, manifest)
    high = store.max_position() if upto is None else min(upto, store.max_position())
    total = max(high - manifest.position, 0)
    rows = {t: 0 for t in catalog().tables}
    written = read = 0
    n = _workers(total) if workers is None else workers
    with gc_paused():  # many live row tuples: young collections would walk them all
        if n > 1 and total:
            read, written = _parallel(store, out, manifest, high, rows, batch_size=batch_size,
                                      block=max(flush_events // n, 1), workers=n, progress=progress)
        else:
            def flushed(after: int, chunks: list[dict[str, pa.Table]], last: FactEvent) -> None:
                nonlocal written
                files = _write_files(out, after, last.position, chunks, rows)
                written += len(files)
                _apply(store, out, manifest, files, last.position)

            def step(count: int) -> None:
                if progress:
                    progress(min(count, total), total)

            read = _flatten(store, manifest.position, high, batch_size=batch_size, flush_events=flush_events,
                            flushed=flushed, step=step)
    compacted = compact_tables(out, manifest, at=compact_at) if compact else []
    return RefreshResult(read, manifest.position, rows if read else {}, written, compacted, fresh,
                         time.perf_counter() - started)


def _flatten(store: EventStore, after: int, high: int, *, batch_size: int, flush_events: int,
             flushed: Callable[[int, list[dict[str, pa.Table]], FactEvent], None],
             step: Callable[[int], None] | None = None) -> int:
    """Flatten the events after ``after`` up to ``high``; every ``flush_events`` events (and at the end)
    hand their facts to ``flushed(after, chunks, last event)``.  Returns the events read."""
    read = 0
    flat = Flattener()
    chunks: list[dict[str, pa.Table]] = []  # Arrow tables of the events since the last flush
    last: FactEvent | None = None
    chunk = min(CHUNK_EVENTS, flush_events)
    # The lean read: no event ids, schema versions or hashes (the checkpoint's hash is read at each flush)
    for batch in store.iter_fact_batches(after_position=after, upto_position=high, batch_size=batch_size):
        while batch:  # a chunk's rows become Arrow columns; every flush_events events are written
            take = min(chunk - read % chunk, flush_events - read % flush_events)
            part, batch = (batch, []) if take >= len(batch) else (batch[:take], batch[take:])
            flat.add_batch(part)
            last = part[-1]
            read += len(part)
            if read % chunk == 0 or read % flush_events == 0:
                chunks.append(flat.tables())
                flat = Flattener()
            if read % flush_events == 0:
                flushed(after, chunks, last)
                after, chunks = last.position, []
        if step:
            step(read)
    if last is not None and last.position > after:
        chunks.append(flat.tables())
        flushed(after, chunks, last)
    return read


def _write_files(out: Path, after: int, upto: int, chunks: list[dict[str, pa.Table]],
                 rows: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Write the facts of the events after ``after`` up to ``upto`` (one file per table that has rows);
    returns each table's manifest entry (and adds the rows to ``rows``)."""
    import pyarrow as pa

    files = {}
    for table in catalog().tables:
        parts = [c[table] for c in chunks if c[table].num_rows]
        if not parts:
            continue
        data = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        rows[table] += data.num_rows
        name = _part(table, after, upto)
        _write(data, out / table / name)
        files[table] = {"file": name, "after": after, "upto": upto, "rows": data.num_rows}
    return files


def _apply(store: EventStore, out: Path, manifest: Manifest, files: dict[str, dict[str, Any]], upto: int) -> None:
    """List ``files`` and move the checkpoint to ``upto`` (the manifest: the commit point, files and
    checkpoint become visible together)."""
    for table, entry in files.items():
        manifest.files[table].append(entry)
    at = store.hash_at(upto)
    if at is None:  # the log is append-only: the event just read is there
        raise EvstoreError(f"the log has no event at position {upto}, which the refresh just read")
    manifest.position, manifest.hash = upto, at.hex()
    manifest.save(out)


# -- a build on several processes ---------------------------------------------------------------------

#: A refresh with at least this many events to apply flattens on several processes (one per core, at
#: most :data:`MAX_WORKERS`); below it, starting them costs more than they save.
PARALLEL_EVENTS = 150_000
MAX_WORKERS = 2


def _workers(total: int) -> int:
    """How many processes a refresh of ``total`` events flattens on: one per core (at most
    :data:`MAX_WORKERS`) for a large one, where processes can be forked (not from a process that runs
    other threads: a fork copies their locks as they are); ``EVSTORE_ANALYTICS_WORKERS`` overrides it."""
    env = os.environ.get("EVSTORE_ANALYTICS_WORKERS")
    if env:
        try:
            return max(int(env), 1)
        except ValueError:
            raise EvstoreError(f"EVSTORE_ANALYTICS_WORKERS must be a number of processes, not {env!r}") from None
    from projections.prefork import may_fork

    if total < PARALLEL_EVENTS or not may_fork():
        return 1
    return max(min(os.cpu_count() or 1, MAX_WORKERS), 1)


def _parallel(store: EventStore, out: Path, manifest: Manifest, high: int, rows: dict[str, int], *,
              batch_size: int, block: int, workers: int,
              progress: Callable[[int, int], None] | None) -> tuple[int, int]:
    """Flatten the events after the checkpoint up to ``high`` on ``workers`` forked processes.

    The positions are cut into blocks of at most ``block`` positions (at least two a worker); each
    worker takes the next block, flattens it and writes its files (holding one block's facts at a time:
    ``block`` is the flush size over the workers, so together they hold what one process's flush holds),
    and this process lists each block's files and moves the checkpoint as soon as every block before it
    is listed: the manifest is committed in position order, as a serial refresh commits it, so a crash
    loses at most the blocks not yet listed.
    Flattening is stateless (each event's rows depend on that event alone), so the facts are those of
    a serial refresh (``tests/test_fact_tables.py`` compares them table by table).  Returns (events
    read, files written)."""
    import multiprocessing
    import queue as queues

    start = manifest.position
    # at least two blocks a worker, so that the last ones end nearer together (more, smaller blocks balance
    # better but leave more files: 8 blocks at 300,000 events left 199 files, 4 blocks 100)
    block = min(block, max(-(-(high - start) // (2 * workers)), 1))
    blocks = [(lo, min(lo + block, high)) for lo in range(start, high, block)]
    ctx = multiprocessing.get_context("fork")
    tasks: Any = ctx.Queue()
    results: Any = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(store.url, out, tasks, k, batch_size, results), daemon=True)
             for k in range(min(workers, len(blocks)))]
    for p in procs:  # forked before the first put starts the queue's feeder thread in this process
        p.start()
    for b in blocks:
        tasks.put(b)
    for _ in procs:
        tasks.put(None)  # no more blocks
    done: dict[int, tuple[int, int, dict[str, dict[str, Any]], dict[str, int]]] = {}
    index = {b: i for i, b in enumerate(blocks)}
    following = read = written = 0
    try:
        while following < len(blocks):
            try:
                message = results.get(timeout=1.0)
            except queues.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) or all(p.exitcode is not None for p in procs):
                    raise EvstoreError("an analytics worker process ended without its facts") from None
                continue
            if message[0] == "error":
                raise EvstoreError(f"an analytics worker process failed: {message[1]}")
            _, lo_hi, count, last, files, counts = message
            done[index[lo_hi]] = (count, last, files, counts)
            while following in done:  # list the blocks in position order
                count, last, files, counts = done.pop(following)
                following += 1
                read += count
                if last:
                    for table, n in counts.items():
                        rows[table] += n
                    written += len(files)
                    _apply(store, out, manifest, files, last)
                if progress:
                    progress(read, high - start)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
        tasks.close()
        results.close()
    return read, written


def _worker(url: str, out: Path, tasks: Any, k: int, batch_size: int, results: Any) -> None:
    """One worker of :func:`_parallel`: its own connection to the store (a forked process must not use
    its parent's), each block it takes from ``tasks`` flattened and written (until a None), what it
    wrote put on ``results``.  It stops when its parent is gone (killed: what it would list is lost
    anyway), instead of waiting for blocks or a None that will never come."""
    import queue as queues

    parent = os.getppid()
    try:
        store = EventStore(url, check_schema=False)
        try:
            written: list[tuple[dict[str, dict[str, Any]], dict[str, int], int]] = []

            def flushed(after: int, chunks: list[dict[str, pa.Table]], last: FactEvent) -> None:
                counts = {t: 0 for t in catalog().tables}
                files = _write_files(out, after, last.position, chunks, counts)
                written.append((files, counts, last.position))

            while True:
                try:
                    task = tasks.get(timeout=1.0)  # the next block; a block is one flush
                except queues.Empty:
                    if os.getppid() != parent:
                        return
                    continue
                if task is None or os.getppid() != parent:
                    break
                lo, hi = task
                written.clear()
                count = _flatten(store, lo, hi, batch_size=batch_size, flush_events=max(hi - lo, 1), flushed=flushed)
                files, counts, last = written[0] if written else ({}, {}, 0)
                results.put(("block", (lo, hi), count, last, files, {t: n for t, n in counts.items() if n}))
        finally:
            store.close()
    except BaseException as exc:  # the parent raises it
        results.put(("error", f"worker {k}: {type(exc).__name__}: {exc}"))
        raise


def compact_tables(directory: Path, manifest: Manifest, *, at: int = COMPACT_AT) -> list[str]:
    """Merge the small files of every table that has more than ``at`` of them (refresh lock held),
    streaming: memory holds one small file (under :data:`SMALL_ROWS` rows) at a time."""
    done = []
    for table in catalog().tables:
        small = [f for f in manifest.files[table] if f["rows"] < SMALL_ROWS]
        if len(small) <= at:
            continue
        import pyarrow.parquet as pq  # only when there is something to merge (see _write)

        schema = catalog().schemas[table]
        lo, hi = min(f["after"] for f in small), max(f["upto"] for f in small)
        name = _part(table, lo, hi, "-c")
        rows = 0
        # One small file in memory at a time; the files cover disjoint ranges in manifest order, each
        # in position order, so the merged file is in position order too.
        with replacing(directory / table / name) as tmp, pq.ParquetWriter(tmp, schema, **PARQUET) as out:
            for f in sorted(small, key=lambda f: (f["after"], f["upto"])):
                # ParquetFile.read, not pq.read_table: that imports pandas (projections/analytics/columns.py)
                data = pq.ParquetFile(directory / table / f["file"]).read().cast(schema)
                out.write_table(data, row_group_size=ROW_GROUP)
                rows += data.num_rows
        keep = [f for f in manifest.files[table] if f["rows"] >= SMALL_ROWS]
        manifest.files[table] = sorted(keep + [{"file": name, "after": lo, "upto": hi, "rows": rows}],
                                       key=lambda f: (f["after"], f["upto"]))
        done.append(table)
    if done:
        manifest.save(directory)
        _remove_unlisted(directory, manifest)
    return done


def status(store: EventStore, directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Checkpoint and lag of the Parquet tables; tables that are not this store's count as empty
    (``stale`` says why), since the next refresh rebuilds them."""
    out = analytics_dir(store, directory)
    m = Manifest.load(out, lean=True)
    high = store.max_position()
    base = {"name": NAME, "directory": str(out), "version": current_version(m)}
    if m is None:
        return {**base, "stored_version": None, "checkpoint": 0, "lag": high, "files": 0, "updated_at": None,
                "stale": None}
    try:  # the last refresh wrote the manifest (its mtime, as the runs index's updated_at is spelled)
        mtime = (out / MANIFEST).stat().st_mtime
        updated: str | None = datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="microseconds")[:-6] + "Z"
    except OSError:
        updated = None
    stale = mismatch(store, m)
    checkpoint = 0 if stale else m.position
    return {**base, "stored_version": m.version, "checkpoint": checkpoint, "lag": max(high - checkpoint, 0),
            "files": sum(len(v) for v in m.files.values()), "updated_at": updated, "stale": stale}


