"""Projections: named, versioned views over the log, kept by a checkpointed runner.

A :class:`Projection` declares a ``name``, a ``version``, the ``event_types`` it handles
(``None``: every event) and its tables (``proj_*``, in a ``MetaData`` of its own: projection
tables are rebuildable data, not owned by Alembic).  ``apply(cur, backend, events)`` folds a
batch of :class:`~eventstore.store.RecordedEvent` into those tables through a DBAPI cursor.

Two lifecycles (Marten's vocabulary):

* **inline** (``inline = True``): :func:`attach` registers the projection on a store with
  ``EventStore.add_inline``; it runs inside every append transaction, so its rows commit
  atomically with the events.  If events were appended by a store it was not attached to, the
  handler first applies the gap (from its checkpoint) in the same transaction.
* **async**: :class:`ProjectionRunner` reads the log after the projection's checkpoint in
  position order and applies one batch per transaction, writing rows *and* checkpoint in that
  same transaction.  A crash (even SIGKILL) rolls back the batch; the next run resumes from the
  committed checkpoint, so every event is applied exactly once.

Bumping ``version`` rebuilds: the runner drops and recreates the tables and resets the
checkpoint to 0 in one transaction, then catches up.  A bump that changes no row (an index added)
can say so with :meth:`Projection.upgrade_ddl`: the runner then runs those statements and keeps
the rows and the checkpoint's position, in one transaction, instead of reading the whole log again.

A third kind keeps its rows and checkpoint outside the database (:class:`ExternalProjection`: the
analytics Parquet files and their manifest); the runner asks it to catch up, rebuild and report
its status like the others, so ``evstore projections status|rebuild|run`` treat it as one of them.

Registry: projections are listed by name in :data:`REGISTRY`; add yours with
:func:`register` (e.g. ``register(MyProjection())`` at import of your module, and add the
module to :data:`PROJECTION_MODULES` so the CLI imports it).  ``evstore projections
status|rebuild|run`` act on every registered projection.

Example (an async projection counting events per type, :class:`EventCounts`)::

    runner = ProjectionRunner(store)
    runner.catch_up(EventCounts())       # applies every event after the checkpoint
    runner.status()                       # [ProjectionStatus(name="event_counts", ...)]
"""

from __future__ import annotations

import abc
import functools
import gc
import importlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from eventstore.backends import Backend
from eventstore.errors import EvstoreError
from eventstore.records import ProjectionCheckpoint
from eventstore.store import EventStore, RecordedEvent, utcnow

if TYPE_CHECKING:
    from sqlalchemy import MetaData, Table

Progress = Callable[[int, int], None]  # (events applied so far, total events to apply)

#: Modules that define and register projections; imported by :func:`registered`.
PROJECTION_MODULES: list[str] = ["projections.runs", "projections.writers", "projections.search",
                                  "projections.analytics.projection"]

REGISTRY: dict[str, Projection] = {}

#: The name of the advisory lock :meth:`ProjectionRunner.run` holds (one runner per PostgreSQL store).
RUNNER_LOCK = "projection-runner"


def register(projection: Projection) -> Projection:
    """Add ``projection`` to the registry the CLI and :meth:`ProjectionRunner.run` use."""
    if not projection.name.replace("_", "").isalnum():
        raise ValueError(f"projection name must be alphanumeric/underscore, got {projection.name!r}")
    REGISTRY[projection.name] = projection
    return projection


def registered() -> list[Projection]:
    """Every registered projection (imports :data:`PROJECTION_MODULES` that exist)."""
    for mod in PROJECTION_MODULES:
        importlib.import_module(mod)
    return list(REGISTRY.values())


def get_projection(name: str) -> Projection:
    """The registered projection ``name``: its own module (``projections.<name>``) imported first, the
    others only if that does not register it (a rebuild of one projection need not import them all)."""
    module = f"projections.{name}"
    if name not in REGISTRY and module in PROJECTION_MODULES:
        importlib.import_module(module)
    if name not in REGISTRY:
        registered()
    if name not in REGISTRY:
        raise EvstoreError(f'No projection "{name}"; `evstore projections status` lists them.')
    return REGISTRY[name]


def read_rows(store: EventStore, sql: str, params: Sequence[Any]) -> list[Any]:
    """The rows of one plain-SQL read of a projection's tables, on a DB-API connection of the store's own
    (:meth:`EventStore.reading_briefly`): a read command imports no SQLAlchemy (``runs``, ``log``'s writers)."""
    with store.reading_briefly() as cur:
        cur.execute(sql, tuple(params))
        return list(cur.fetchall())


class Projection(abc.ABC):
    """Base class of every projection (see the module docstring)."""

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    event_types: ClassVar[tuple[str, ...] | None] = None
    inline: ClassVar[bool] = False
    #: The commands that bring it up to date (``projections status`` says so beside its lag): an inline
    #: projection is kept by every append; an async one by ``projections run`` unless it names its own.
    caught_up_by: ClassVar[str | None] = None
    #: The projection's tables (None: none).  SQLAlchemy is needed only to create them, so a
    #: projection on the append path builds its MetaData on first use by overriding :meth:`tables`.
    metadata: ClassVar[MetaData | None] = None

    @abc.abstractmethod
    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        """Fold ``events`` (in position order, already filtered by type) into the tables."""

    def reset(self) -> None:
        """Forget in-memory caches (called before a rebuild and after a rolled-back batch)."""

    def tables(self) -> list[Table]:
        return [] if self.metadata is None else list(self.metadata.sorted_tables)

    def table_ddl(self, backend: str) -> tuple[list[str], list[str]] | None:
        """(table names, CREATE statements) of ``tables`` written out for ``backend``, so that building
        the projection does not import SQLAlchemy to compile them (a third of a second of a process
        that rebuilds an index); None (the default): compiled from ``tables``."""
        return None

    def extra_ddl(self, backend: str) -> tuple[list[str], list[str]]:
        """(drop, create) statements for what ``tables`` cannot declare on ``backend`` ("sqlite",
        "postgresql"): a full-text index, say.  Drops run before the tables are dropped, creates
        after they are created; every name must start with ``proj_``."""
        return [], []

    def upgrade_ddl(self, backend: str, stored_version: int) -> list[str] | None:
        """Statements that bring tables built at ``stored_version`` to :attr:`version` in place, keeping
        their rows (an index added: ``CREATE INDEX IF NOT EXISTS ...``); None (the default): rebuild
        from the first event.  Only for changes that leave every row as a rebuild would write it."""
        return None

    def catching_up(self) -> str:
        """Which commands catch it up (:attr:`caught_up_by`, else by its mode)."""
        if self.caught_up_by:
            return self.caught_up_by
        return "every append (inline)" if self.inline else "evstore projections run"


class ExternalProjection(Projection):
    """A projection whose rows and checkpoint live outside the database (files with a manifest of
    their own): :class:`ProjectionRunner` calls :meth:`catch_up`, :meth:`rebuild` and
    :meth:`status` instead of applying batches in database transactions."""

    storage: ClassVar[str] = "files"

    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        raise TypeError(f'Projection "{self.name}" keeps its own files; the runner calls catch_up, not apply.')

    def tables(self) -> list[Table]:
        return []  # no database table

    @abc.abstractmethod
    def catch_up(self, store: EventStore, *, progress: Progress | None = None) -> int:
        """Apply every event after the checkpoint; the number of events read."""

    @abc.abstractmethod
    def rebuild(self, store: EventStore, *, progress: Progress | None = None) -> int:
        """Rebuild from the first event; the number of events read."""

    @abc.abstractmethod
    def status(self, store: EventStore) -> ProjectionStatus:
        """Version, checkpoint and lag, as the runner reports them for every projection."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (process-wide) for one batch.

    A batch allocates thousands of short-lived objects (rows, RecordedEvents, decoded Structs)
    while projections such as the runs index hold thousands of folded documents; each young
    collection the allocations trigger then walks those too.  Batches are bounded, so pausing
    costs bounded memory, and the collector runs again as soon as the batch commits (measured
    on a full rebuild of the runs index over 1M demo events: 118k -> 152k events/s; the
    analytics refresh, which holds every fact row until it writes Parquet: 75k -> 119k).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def read_events(cur: Any, be: Backend, after: int, limit: int, types: Sequence[str] | None) -> list[RecordedEvent]:
    """Events after ``after`` read through ``cur`` (inside the caller's transaction)."""
    return be.read_all(cur, after, limit, types)


# ---------------------------------------------------------------- projection tables (DBAPI)


def _compiled_ddl(be: Backend, projection: Projection) -> tuple[list[str], list[str]]:
    """(table names, CREATE TABLE and CREATE INDEX statements) of ``projection.tables()`` on ``be``."""
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = be.engine.dialect
    names, statements = [], []
    for table in projection.tables():
        names.append(table.name)
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        statements.extend(str(CreateIndex(index).compile(dialect=dialect)) for index in table.indexes)
    return names, statements


def _recreate_tables(cur: Any, be: Backend, projection: Projection) -> None:
    names, statements = projection.table_ddl(be.name) or _compiled_ddl(be, projection)
    drops, creates = projection.extra_ddl(be.name)
    for statement in drops:
        cur.execute(statement)
    for name in reversed(names):
        cur.execute(f"DROP TABLE IF EXISTS {name}")
    for name in names:
        if not name.startswith("proj_"):
            raise EvstoreError(f'Projection table "{name}" must be named proj_* (Alembic ignores only those).')
    for statement in statements:
        cur.execute(statement)
    for statement in creates:
        cur.execute(statement)


# ---------------------------------------------------------------- inline lifecycle


class InlineHandler:
    """``EventStore.add_inline`` handler: gap catch-up, apply, checkpoint, in the append txn."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection

    def __call__(self, cur: Any, be: Backend, events: list[RecordedEvent]) -> None:
        proj = self.projection
        types = proj.event_types
        # The checkpoint at the position before these events, of this version (no gap): moved in the
        # statement that finds it so (one round trip an append, not two).  The append transaction
        # holds the append lock, which every writer of an inline projection's checkpoint takes
        # (ProjectionRunner._begin).
        if be.advance_checkpoint(cur, proj.name, proj.version, events[0].position - 1, events[-1].position, utcnow()):
            batch = events if types is None else [e for e in events if e.type in types]
            if batch:
                proj.apply(cur, be, batch)
            return
        claimed = be.read_checkpoint(cur, proj.name)
        if claimed is None or claimed.version != proj.version:
            # Not set up (or another version) on this database: leave it to the runner's rebuild
            # rather than write rows whose history is incomplete.
            return
        first = events[0].position
        pos = claimed.position
        while pos < first - 1:  # events appended without this projection attached
            gap = [e for e in read_events(cur, be, pos, 5000, proj.event_types) if e.position < first]
            if not gap:
                break
            proj.apply(cur, be, gap)
            pos = gap[-1].position
        batch = events if types is None else [e for e in events if e.type in types]
        if batch:
            proj.apply(cur, be, batch)
        be.set_checkpoint(cur, proj.name, proj.version, events[-1].position, utcnow())


def attach(store: EventStore, projection: Projection) -> InlineHandler:
    """Make ``projection`` inline on ``store`` (creates its tables on first use)."""
    with ProjectionRunner(store) as runner:
        runner.ensure(projection)
    handler = InlineHandler(projection)
    store.add_inline(handler)
    return handler


# ---------------------------------------------------------------- the runner


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    version: int | str  # the code's version
    stored_version: int | str | None  # the version the tables were built with (None: never run)
    position: int  # checkpoint
    lag: int  # events after the checkpoint that the projection handles
    inline: bool
    updated_at: str | None
    storage: str = "database"  # where rows and checkpoint live (ExternalProjection.storage otherwise)
    details: dict[str, Any] = field(default_factory=dict)  # what else an external projection reports
    caught_up_by: str = ""  # the commands that bring it up to date (Projection.catching_up)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "stored_version": self.stored_version,
                "checkpoint": self.position, "lag": self.lag, "mode": "inline" if self.inline else "async",
                "last_run": self.updated_at, "storage": self.storage, "caught_up_by": self.caught_up_by,
                **self.details}


class ProjectionRunner:
    """Applies projections batch by batch, rows and checkpoint in one transaction.

    The runner holds its own DBAPI connection (separate from the store's reader connection) so
    its write transactions never interleave with the store's reads.
    """

    def __init__(self, store: EventStore, *, batch_size: int = 5000) -> None:
        self.store = store
        self.be = store.backend
        self.batch_size = batch_size
        self._proxy: Any = None

    def _conn(self) -> Any:
        if self._proxy is None:
            self._proxy = self.store.connect()
        return self._proxy.driver_connection

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None

    def __enter__(self) -> ProjectionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _begin(self, raw: Any, projection: Projection) -> None:
        # Inline projections also take the append lock, so a concurrent append's inline handler
        # cannot interleave with the runner.  On SQLite every write transaction takes it anyway
        # (BEGIN IMMEDIATE); async projections on PostgreSQL only lock their checkpoint row.
        if projection.inline or self.be.name == "sqlite":
            self.be.begin_write(raw)

    def _transaction(self, projection: Projection, body: Callable[[Any], Any]) -> Any:
        raw = self._conn()
        cur = raw.cursor()
        try:
            self._begin(raw, projection)
            result = body(cur)
            self.be.commit(raw)
            return result
        except BaseException:
            self.be.rollback(raw)
            projection.reset()  # its caches may hold state of the rolled-back batch
            raise
        finally:
            cur.close()

    # -- lifecycle --------------------------------------------------------------

    def ensure(self, projection: Projection) -> bool:
        """Create the tables and checkpoint if absent; rebuild state on a version bump (or upgrade the
        tables in place, when :meth:`Projection.upgrade_ddl` says how).

        Returns True if the projection was (re)initialised (its checkpoint is now 0).
        """
        if isinstance(projection, ExternalProjection):
            return False  # its files are set up (or rebuilt) by its own catch_up
        cp = self.checkpoint(projection.name)
        if cp is not None and cp.version == projection.version:
            return False  # current: no write transaction (read-only commands call this)

        def body(cur: Any) -> bool:
            claimed = self.be.claim_checkpoint(cur, projection.name, utcnow())
            if claimed is not None and claimed.version == projection.version:
                return False
            upgrade = None if claimed is None else projection.upgrade_ddl(self.be.name, claimed.version)
            if claimed is not None and upgrade is not None:  # the rows stay; so does the position
                for statement in upgrade:
                    cur.execute(statement)
                self.be.set_checkpoint(cur, projection.name, projection.version, claimed.position, utcnow())
                return False
            _recreate_tables(cur, self.be, projection)
            self.be.set_checkpoint(cur, projection.name, projection.version, 0, utcnow())
            return True

        fresh = bool(self._transaction(projection, body))
        if fresh:
            projection.reset()
        return fresh

    def step(self, projection: Projection, *, limit: int | None = None) -> int:
        """Apply one batch after the checkpoint; the number of log events it covered (0: current)."""
        if isinstance(projection, ExternalProjection):
            raise TypeError(f'Projection "{projection.name}" keeps its own files; use catch_up.')
        limit = limit or self.batch_size
        types = projection.event_types

        def body(cur: Any) -> int:
            claimed = self.be.claim_checkpoint(cur, projection.name, utcnow())
            if claimed is None or claimed.version != projection.version:
                raise EvstoreError(f'Projection "{projection.name}" changed version while running; run it again.')
            pos = claimed.position
            # Commit order = position order, so nothing at or below ``high`` can still appear.
            high = self.be.max_position(cur)
            if high <= pos:
                return 0
            batch = [e for e in read_events(cur, self.be, pos, limit, types) if e.position <= high]
            if batch:
                projection.apply(cur, self.be, batch)
            full = len(batch) == limit
            new_pos = batch[-1].position if full else high
            self.be.set_checkpoint(cur, projection.name, projection.version, new_pos, utcnow())
            return new_pos - pos

        with gc_paused():
            return int(self._transaction(projection, body))

    def catch_up(self, projection: Projection, *, progress: Progress | None = None,
                 after_batch: Callable[[], None] | None = None) -> int:
        """Apply every batch up to the current end of the log; returns events covered."""
        if isinstance(projection, ExternalProjection):
            return projection.catch_up(self.store, progress=progress)
        if self._current(projection):
            return 0  # already current: no write transaction
        self.ensure(projection)
        total = self.lag(projection) if progress else 0
        done = 0
        while True:
            n = self.step(projection)
            if n == 0:
                break
            done += n
            if progress:
                progress(min(done, max(total, done)), max(total, done))
            if after_batch:
                after_batch()
        return done

    def rebuild(self, projection: Projection, *, progress: Progress | None = None) -> int:
        """Drop the projection's tables, rebuild them from the first event."""
        if isinstance(projection, ExternalProjection):
            return projection.rebuild(self.store, progress=progress)

        def body(cur: Any) -> None:
            _recreate_tables(cur, self.be, projection)
            self.be.set_checkpoint(cur, projection.name, projection.version, 0, utcnow())

        self._transaction(projection, body)
        projection.reset()
        return self.catch_up(projection, progress=progress)

    def run(self, projections: Iterable[Projection] | None = None, *, follow: bool = False,
            poll_interval: float = 0.5, stop: Any = None,
            on_standby: Callable[[str | None], None] | None = None) -> dict[str, int]:
        """Catch every projection up; with ``follow``, keep polling until ``stop`` is set.

        One runner at a time on a PostgreSQL store, whatever the processes and machines: the
        runner holds the advisory lock :data:`RUNNER_LOCK` (:class:`eventstore.locks.ExclusiveLock`)
        while it runs.  One that finds it taken calls ``on_standby(holder)`` (who holds it, as
        PostgreSQL sees that session); without ``follow`` it then returns with nothing applied,
        with ``follow`` it stands by, trying again every ``poll_interval``, and takes over as soon
        as the holder stops, dies or loses its connection.  A holder whose session was ended
        notices it at its next poll and stands by in turn.  (Each batch is safe without the lock
        too, its checkpoint row locked: the lock keeps the work in one place.)  On SQLite the
        store's write lock orders runners, as before."""
        from eventstore.locks import ExclusiveLock, default_label

        projs = list(projections) if projections is not None else registered()
        applied = {p.name: 0 for p in projs}
        lock = ExclusiveLock(self.store, RUNNER_LOCK, label=default_label("evstore projections run"))
        announced = False
        try:
            while True:
                if (lock.held and lock.still_held()) or lock.acquire():
                    announced = False
                    for p in projs:
                        applied[p.name] += self.catch_up(p)
                elif not announced:
                    announced = True
                    if on_standby is not None:
                        on_standby(lock.holder())
                if not follow or (stop is not None and stop.is_set()):
                    return applied
                if stop is not None:
                    stop.wait(poll_interval)
                else:
                    time.sleep(poll_interval)
        finally:
            lock.close()

    # -- reporting --------------------------------------------------------------

    def _read(self, read: Callable[[Any], Any]) -> Any:
        """``read(cursor)`` in a read transaction on the store's connection (:meth:`EventStore.reading_briefly`):
        the runner opens a connection of its own only to write, so a read command that finds its
        projections current runs on one connection."""
        with self.store.reading_briefly() as cur:
            return read(cur)

    def read(self, read: Callable[[Any], Any]) -> Any:
        """``read(cursor)`` in a read transaction (a projection's own queries over its ``proj_*`` tables)."""
        return self._read(read)

    def _current(self, projection: Projection) -> bool:
        """Whether ``projection``'s checkpoint is at this version and at the log's end (one read)."""
        def read(cur: Any) -> bool:
            cp = self.be.read_checkpoint(cur, projection.name)
            return cp is not None and cp.version == projection.version and cp.position >= self.be.max_position(cur)

        return bool(self._read(read))

    def checkpoint(self, name: str) -> ProjectionCheckpoint | None:
        """The stored checkpoint of projection ``name`` (its version and position), or None."""
        cp: ProjectionCheckpoint | None = self._read(lambda cur: self.be.read_checkpoint(cur, name))
        return cp

    def lag(self, projection: Projection, *, high: int | None = None) -> int:
        """Events after the checkpoint that ``projection`` handles (all of them if stale).

        A projection of every event type lags by the positions after its checkpoint: positions are
        allocated one by one under the append lock, so that is the count of events, read from the
        primary key's end (``high``, the log's last position, if the caller has it) instead of counted,
        which took seconds at millions of events.  One of some types only counts those."""
        if isinstance(projection, ExternalProjection):
            return projection.status(self.store).lag
        cp = self.checkpoint(projection.name)
        pos = 0 if cp is None or cp.version != projection.version else cp.position
        if projection.event_types is None:
            return max((self.store.max_position() if high is None else high) - pos, 0)
        return int(self._read(lambda cur: self.be.count_events(cur, pos, projection.event_types)))

    def status(self, projections: Iterable[Projection] | None = None) -> list[ProjectionStatus]:
        """Each projection's version, checkpoint, lag and the commands that catch it up; reads checkpoints
        and the log's last position only, so it costs the same at any size."""
        out = []
        high = self.store.max_position()
        for p in (list(projections) if projections is not None else registered()):
            if isinstance(p, ExternalProjection):
                out.append(replace(p.status(self.store), caught_up_by=p.catching_up()))
                continue
            cp = self.checkpoint(p.name)
            out.append(ProjectionStatus(
                name=p.name, version=p.version, stored_version=None if cp is None else cp.version,
                position=0 if cp is None else cp.position, lag=self.lag(p, high=high), inline=p.inline,
                updated_at=None if cp is None else cp.updated_at, caught_up_by=p.catching_up()))
        return out


# ---------------------------------------------------------------- a model async projection

@functools.cache
def _counts_metadata() -> MetaData:
    from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table

    from eventstore.schema import NAMING

    md = MetaData(naming_convention=NAMING)
    Table(
        "proj_event_counts",
        md,
        Column("type", String(200), primary_key=True),
        Column("events", BigInteger, nullable=False),
        Column("streams_started", Integer, nullable=False),  # streams whose first event has this type
        Column("last_position", BigInteger, nullable=False),
    )
    return md


def __getattr__(name: str) -> Any:  # event_counts_table, built (and SQLAlchemy imported) on first use
    if name == "event_counts_table":
        return _counts_metadata().tables["proj_event_counts"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EventCounts(Projection):
    """Events per type (async): the smallest complete projection, a model for others.

    ``apply`` aggregates the batch in Python, then upserts one row per type, adding to the
    stored counts.  It is additive, so applying a batch twice would double count: exactly-once
    comes from the runner writing rows and checkpoint in one transaction.
    """

    name = "event_counts"
    version = 1
    event_types = None

    def tables(self) -> list[Table]:
        return list(_counts_metadata().sorted_tables)

    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        agg: dict[str, list[int]] = {}
        for e in events:
            a = agg.get(e.type)
            if a is None:
                a = agg[e.type] = [0, 0, 0]
            a[0] += 1
            a[1] += e.version == 1
            a[2] = e.position
        p = backend.p
        cur.executemany(
            f"INSERT INTO proj_event_counts (type, events, streams_started, last_position) "
            f"VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (type) DO UPDATE SET events = proj_event_counts.events + excluded.events, "
            "streams_started = proj_event_counts.streams_started + excluded.streams_started, "
            "last_position = excluded.last_position",
            [(t, a[0], a[1], a[2]) for t, a in agg.items()])


def read_event_counts(store: EventStore) -> dict[str, tuple[int, int]]:
    """type -> (events, streams started by that type), from ``proj_event_counts``."""
    from sqlalchemy import select

    t = _counts_metadata().tables["proj_event_counts"]
    with store.engine.connect() as conn:
        rows = conn.execute(select(t.c.type, t.c.events, t.c.streams_started).order_by(t.c.type)).all()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


register(EventCounts())
