"""The runs index: one row per stream (inline projection ``runs``, table ``proj_runs``).

Each row says what the stream's *current* document is about, as its dialect describes it
(``Dialect.describe``: task id, project, title, status, phase), plus when the run started
and when it was last active (its earliest and latest event time: never a start after the end), how many events it has and its findings: the validation findings
of the latest snapshot (``meta["findings"]`` of the event that closes an ingested snapshot) plus
every version of the history that was recorded unreadable (``document.unreadable``) or whose
lens failed (a ``lens-failed`` finding): those are facts of one version, not of the document,
so a later valid version does not make them go away (:func:`version_finding`).

Keeping ``describe`` current needs the current document.  The projection keeps a bounded cache
of folded documents keyed by stream and validated against the hash chain: a cached entry is
used only if the batch's first event extends it (same version + 1 and ``prev_hash`` equal to
the cached head), so a rolled-back append or a write by another process can never leave a stale
document in use; on a miss the stream is folded from its newest usable folded document (the index's
own, below, or a replay-cache row) and the log, inside the same transaction.  Every
:data:`STATE_EVERY` versions a stream's document is kept in ``projection_states`` in the append's
transaction, bound to the log as a replay-cache row is (the hash of the event at its version, the
SHA-256 of the stored state; a row that disagrees with either is not used): so a process that has
not seen a stream yet (a server's worker just started) folds at most that many of its events on its
first append, not the whole history.  The rows are the index's own cache and trusted no more than its
rows: whoever may append may write both, and ``evstore verify`` re-derives the index from the first
event of each stream, never from them.  A writer that knows the document its events make (ingest, which
folded them to check the lens law) gives it with them (``InlineBatch.documents``): those events
are then neither decoded nor folded here.

    >>> store = IndexedEventStore(url)            # appends keep proj_runs current
    >>> [r.task_id for r in list_runs(store, dialect="mytool")]
    >>> find_streams_by_task(store, "PROJ-42")     # -> ["PROJ-42"]

A store opened without the index (plain ``EventStore``) still works: the next indexed append,
or :func:`refresh` (called by every reader here), applies the missed events first.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from eventstore import chain, codec, documents, replay_cache
from eventstore.backends import Backend
from eventstore.backends.base import conjunction, where
from eventstore.dialects import Dialect, get_dialect
from eventstore.errors import EvstoreError
from eventstore.events import decode_event
from eventstore.store import EventStore, InlineBatch, RecordedEvent, iso
from projections import engine, writers
from projections.coverage import NOTICES

if TYPE_CHECKING:
    from sqlalchemy import MetaData, Table

_FIELDS = ("project", "task_id", "title", "status", "phase")
#: The ``describe`` fields' column lengths (the table below and :func:`_text` share them).
_LENGTHS: dict[str, int] = {"project": 500, "task_id": 255, "title": 2000, "status": 200, "phase": 200}
_COLUMNS = ("stream_id", "dialect", *_FIELDS, "started_at", "last_event_at", "events", "findings", "version",
            "described", "unreadable", "lens_failures")


def version_finding(finding: Any) -> str | None:
    """``"unreadable"`` or ``"lens_failures"`` for a recorded finding that is about its version
    (the bytes could not be read, the dialect's lens failed on them), else None (a validation
    finding of the document, which the next version revalidates)."""
    code = finding.get("code") if isinstance(finding, dict) else None
    if not isinstance(code, str):
        return None
    if code.startswith("unreadable-"):
        return "unreadable"
    return "lens_failures" if code == "lens-failed" else None


@functools.cache
def _runs_metadata() -> MetaData:
    """``proj_runs`` as SQLAlchemy Core describes it: built on first use (creating the table,
    the readers below), so an append that keeps the index current never imports SQLAlchemy."""
    from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, SmallInteger, String, Table

    from eventstore.schema import NAMING

    md = MetaData(naming_convention=NAMING)
    t = Table(
        "proj_runs",
        md,
        Column("stream_id", String(255), primary_key=True),
        Column("dialect", String(64), nullable=True),
        *(Column(f, String(_LENGTHS[f]), nullable=True) for f in _FIELDS),
        Column("started_at", String(32), nullable=True),
        Column("last_event_at", String(32), nullable=True),
        Column("events", BigInteger, nullable=False),
        Column("findings", Integer, nullable=True),
        Column("version", Integer, nullable=False),  # the stream version the row reflects
        Column("described", SmallInteger, nullable=False),  # 1: describe() of the current document
        # Versions of the whole history recorded unreadable / with a failed lens (see version_finding).
        Column("unreadable", Integer, nullable=False),
        Column("lens_failures", Integer, nullable=False),
    )
    assert tuple(t.c.keys()) == _COLUMNS
    Index("ix_proj_runs_last_event_at", t.c.last_event_at)
    Index("ix_proj_runs_task_id", t.c.task_id)
    return md


def _runs_table() -> Table:
    return _runs_metadata().tables["proj_runs"]


def __getattr__(name: str) -> Any:  # runs_table, built (and SQLAlchemy imported) on first use
    if name == "runs_table":
        return _runs_table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_UPSERT = (
    "INSERT INTO proj_runs (" + ", ".join(_COLUMNS) + ") VALUES ({marks}) "
    "ON CONFLICT (stream_id) DO UPDATE SET "
    "dialect = COALESCE(excluded.dialect, proj_runs.dialect), "
    + ", ".join(f"{f} = CASE WHEN excluded.described = 1 THEN excluded.{f} ELSE proj_runs.{f} END" for f in _FIELDS)
    # A run starts at its earliest event time and was last active at its latest: source times can
    # run backwards (file times of copied snapshots), and a start after the last event reads as nonsense.
    + ", started_at = CASE WHEN proj_runs.started_at IS NULL OR excluded.started_at < proj_runs.started_at "
    "THEN excluded.started_at ELSE proj_runs.started_at END, "
    "last_event_at = CASE WHEN proj_runs.last_event_at IS NULL OR excluded.last_event_at > proj_runs.last_event_at "
    "THEN excluded.last_event_at ELSE proj_runs.last_event_at END, events = proj_runs.events + excluded.events, "
    "findings = COALESCE(excluded.findings, proj_runs.findings), version = excluded.version, "
    "described = excluded.described, unreadable = proj_runs.unreadable + excluded.unreadable, "
    "lens_failures = proj_runs.lens_failures + excluded.lens_failures"
)


@functools.cache
def _upsert_sql(p: str) -> str:
    return _UPSERT.format(marks=", ".join([p] * len(_COLUMNS)))


class _Doc:
    """A stream's folded document as of ``version`` whose last event hashes to ``head``."""

    __slots__ = ("dialect", "lens", "version", "head", "doc", "ok", "shared")

    def __init__(self, dialect: str | None, lens: Dialect | None, version: int, head: bytes, doc: Any) -> None:
        self.dialect, self.lens, self.version, self.head, self.doc = dialect, lens, version, head, doc
        self.ok = lens is not None  # False once an event could not be folded (the row is then not described)
        self.shared = False  # True: ``doc`` is the writer's (InlineBatch.documents), copied before a fold changes it


#: A stream's document is kept (``projection_states``) each time its version passes a multiple of this:
#: a cold load folds fewer events than this (at ~35 us an event, under 5 ms), and a long stream's
#: appends write one small row per this many events.
STATE_EVERY = 128


class _Touched:
    """What one batch changed for one stream."""

    __slots__ = ("entry", "from_version", "events", "started_at", "last_at", "findings", "unreadable",
                 "lens_failures")

    def __init__(self, entry: _Doc) -> None:
        self.entry = entry
        self.from_version = entry.version  # the stream's version before the batch
        self.events = 0
        self.started_at: str | None = None
        self.last_at: str | None = None
        self.findings: int | None = None  # the latest snapshot's findings of the document
        self.unreadable = 0
        self.lens_failures = 0

    def saw(self, e: RecordedEvent, meta: Any) -> None:
        """``e`` (its decoded ``meta``) counted: the run's events, first and last times, the snapshot an
        ingest closed with it."""
        self.events += 1
        when = e.occurred_at or e.recorded_at
        if self.started_at is None or when < self.started_at:
            self.started_at = when
        if self.last_at is None or when > self.last_at:
            self.last_at = when
        if type(meta) is dict and "source" in meta:  # the event closing an ingested snapshot
            _note_snapshot(self, meta, e.type)


def _text(value: Any, column: str) -> str | None:
    """A ``describe`` field as its column can hold it on every backend: without NUL (PostgreSQL
    text cannot hold it) and cut to the column's length (the index shows; the log keeps all)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text[:_LENGTHS[column]]


def _note_snapshot(t: _Touched, meta: dict[str, Any], event_type: str) -> None:
    """The findings of the event closing an ingested snapshot (``meta`` has its ``source``)."""
    found = meta.get("findings")
    kinds = [version_finding(f) for f in found] if isinstance(found, list) else []
    # A version counts once however many findings say so (an unreadable version is one);
    # the document stays the last valid one, and so do its findings.
    if "unreadable" in kinds or event_type == "document.unreadable":
        t.unreadable += 1
    else:
        t.findings = kinds.count(None)
        t.lens_failures += "lens_failures" in kinds


def _batch_row(sid: str, t: _Touched) -> tuple[Any, ...]:
    """The ``proj_runs`` row one batch upserts for stream ``sid`` (``_UPSERT`` merges it)."""
    entry = t.entry
    info = None
    if entry.ok and entry.doc is not None and entry.lens is not None:
        try:
            info = entry.lens.describe(entry.doc)
        except Exception:  # noqa: BLE001 - a describe bug must not block appends
            info = None
    fields = ((None,) * 5 if info is None else
              (_text(info.project, "project"), _text(info.task_id, "task_id") or sid,
               _text(info.title, "title"), _text(info.status, "status"), _text(info.phase, "phase")))
    return (sid, entry.dialect, *fields, t.started_at, t.last_at, t.events, t.findings,
            entry.version, 0 if info is None else 1, t.unreadable, t.lens_failures)


class RunsIndex(engine.Projection):
    """Inline projection maintaining ``proj_runs`` (see the module docstring)."""

    name = "runs"
    version = 2  # 2: unreadable and lens_failures
    event_types = None
    inline = True

    def __init__(self, *, cache_size: int = 4096, trust_cache: bool = True) -> None:
        self.trust_cache = trust_cache  # False: a stream's document is folded from its first event (check_index)
        self.cache: OrderedDict[str, _Doc] = OrderedDict()
        self.cache_size = cache_size
        self._dialects: dict[str, Dialect | None] = {}

    def tables(self) -> list[Table]:
        return list(_runs_metadata().sorted_tables)

    def reset(self) -> None:
        self.cache.clear()

    def _dialect(self, name: str | None) -> Dialect | None:
        if name is None:
            return None
        if name not in self._dialects:
            try:
                self._dialects[name] = get_dialect(name)
            except EvstoreError:
                self._dialects[name] = None
        return self._dialects[name]

    @staticmethod
    def _fold(entry: _Doc, e: RecordedEvent) -> None:
        if entry.ok:
            if entry.shared:
                entry.doc, entry.shared = documents.copy(entry.doc), False
            try:
                entry.doc = entry.lens.evolve(entry.doc, decode_event(e.type, e.schema_version, e.data))  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - an event the dialect cannot fold must not block appends
                entry.ok = False
                entry.doc = None
        entry.version, entry.head = e.version, e.hash

    def _load(self, cur: Any, be: Backend, e: RecordedEvent, dialect: str | None) -> _Doc:
        """The stream's document just before ``e`` (cache miss): folded from its newest usable
        replay-cache row, through the append transaction's own cursor."""
        if dialect and e.version <= 1:  # a stream's first event names its dialect: nothing to read or fold
            return _Doc(dialect, self._dialect(dialect), e.version - 1, e.prev_hash, None)
        head = be.stream_head(cur, e.stream_id)
        name = dialect or (head.dialect if head else None)
        entry = _Doc(name, self._dialect(name), e.version - 1, e.prev_hash, None)
        if entry.lens is None or head is None or e.version <= 1:
            return entry  # nothing to fold (no dialect: the row is not described anyway)
        start = 0
        if self.trust_cache:
            target = e.version - 1
            cached = replay_cache.usable(be.latest_projection_state(cur, head.stream_pk, self._state_name(entry.lens),
                                                                    target))
            if cached is None or target - cached[0] >= STATE_EVERY:  # a replay-cache row may be nearer
                replayed = replay_cache.usable(be.latest_cached_state(cur, head.stream_pk,
                                                                      replay_cache.cache_name(entry.lens), target))
                if replayed is not None and (cached is None or replayed[0] > cached[0]):
                    cached = replayed
            if cached is not None:
                start, entry.doc = cached
        evolve = entry.lens.evolve
        payloads = be.read_payloads(cur, head.stream_pk, start, e.version - 1)
        try:
            for p in payloads:
                entry.doc = evolve(entry.doc, decode_event(p.type, p.schema_version, p.data))
        except Exception:  # noqa: BLE001 - an event the dialect cannot fold must not block appends
            entry.ok, entry.doc = False, None
        return entry

    def _state_name(self, lens: Dialect) -> str:
        """The name the index keeps a stream's documents under in ``projection_states``: a new version
        of the index or of the dialect's lens makes older rows invisible instead of wrong."""
        return f"{self.name}.v{self.version}.{replay_cache.cache_name(lens)}"

    def _states(self, touched: dict[str, _Touched]) -> list[tuple[str, str, int, bytes, bytes, bytes]]:
        """The ``projection_states`` rows of the streams whose version passed a multiple of
        :data:`STATE_EVERY` in this batch (their document as of the batch's last event)."""
        rows = []
        for sid, t in touched.items():
            entry = t.entry
            if (entry.version // STATE_EVERY > t.from_version // STATE_EVERY and entry.ok
                    and entry.doc is not None and entry.lens is not None):
                state = replay_cache.encode_state(entry.doc)
                rows.append((sid, self._state_name(entry.lens), entry.version, entry.head, state,
                             chain.digest(state)))
        return rows

    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        with documents.owned_events():  # events decoded here from bytes: fold without copies
            self._apply(cur, backend, events)

    def _apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        touched: dict[str, _Touched] = {}
        cache = self.cache
        # Documents the writer gave with its events (ingest folded them already): a stream's events
        # up to the last one with a document are not decoded or folded, nor its history loaded.
        given: dict[int, Any] = events.documents if isinstance(events, InlineBatch) else {}
        known_upto: dict[str, int] = {}
        if given:
            for e in events:
                if e.position in given:
                    known_upto[e.stream_id] = e.position
        for e in events:
            if e.stream_id == NOTICES:  # the store's own notices of sources gone: no run
                continue
            t = touched.get(e.stream_id)
            # Decode meta only where it can matter: a stream's first event here (its dialect) and
            # events closing an ingested snapshot (their findings); a byte probe is 10x cheaper.
            raw_meta = e.meta
            meta = (codec.decode(raw_meta) if raw_meta and raw_meta != b"{}"  # (empty: purged or erased)
                    and (t is None or b'"source"' in raw_meta)
                    else None)
            superseded = e.position <= known_upto.get(e.stream_id, 0)
            if t is None:
                entry = cache.get(e.stream_id)
                if entry is None or entry.version != e.version - 1 or entry.head != e.prev_hash:
                    dialect = meta.get("dialect") if type(meta) is dict else None
                    dialect = dialect if isinstance(dialect, str) else None
                    entry = (_Doc(dialect, self._dialect(dialect), e.version - 1, e.prev_hash, None)
                             if superseded and dialect is not None else self._load(cur, backend, e, dialect))
                    cache[e.stream_id] = entry
                else:
                    cache.move_to_end(e.stream_id)
                t = touched[e.stream_id] = _Touched(entry)
            if superseded:
                entry = t.entry
                if e.position in given:
                    entry.doc, entry.shared, entry.ok = given[e.position], True, entry.lens is not None
                entry.version, entry.head = e.version, e.hash
            else:
                self._fold(t.entry, e)
            t.saw(e, meta)
        rows = [_batch_row(sid, t) for sid, t in touched.items()]
        if rows:
            cur.executemany(_upsert_sql(backend.p), rows)
        if self.trust_cache:  # (an index that folds from the first event checks the log: it writes nothing more)
            states = self._states(touched)
            if states:
                backend.save_projection_states(cur, states)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)


RUNS = engine.register(RunsIndex())


def attach(store: EventStore) -> RunsIndex:
    """Keep the runs index current on every append through ``store`` (creates it if needed)."""
    proj = RunsIndex()
    engine.attach(store, proj)
    return proj


class IndexedEventStore(EventStore):
    """An :class:`EventStore` whose appends keep the runs index current (what the CLI uses)."""

    def __init__(self, url: str | None = None, *, synchronous: str | None = None, check_schema: bool = True) -> None:
        super().__init__(url, synchronous=synchronous, check_schema=check_schema)
        self.runs_index: RunsIndex | None = attach(self) if check_schema else None
        self.writers_index = writers.attach(self) if check_schema else None


def refresh(store: EventStore) -> int:
    """Apply events appended without the index (by a plain EventStore); returns their count."""
    with engine.ProjectionRunner(store) as runner:
        return runner.catch_up(RUNS)


def rebuild(store: EventStore, *, progress: engine.Progress | None = None) -> int:
    """Drop and rebuild ``proj_runs`` from the whole log; returns events applied."""
    with engine.ProjectionRunner(store) as runner:
        return runner.rebuild(RUNS, progress=progress)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class RunRow:
    stream_id: str
    dialect: str | None
    project: str | None
    task_id: str | None
    title: str | None
    status: str | None
    phase: str | None
    started_at: str | None
    last_event_at: str | None
    events: int
    #: The latest snapshot's validation findings plus the versions of the history recorded
    #: unreadable or with a failed lens (None: no ingested snapshot, nothing recorded either way).
    findings: int | None
    #: The agent sessions that wrote the run's state versions (``projections.writers``).
    sessions: tuple[str, ...] = ()
    #: Versions recorded as ``document.unreadable`` / with a ``lens-failed`` finding (in ``findings``).
    unreadable: int = 0
    lens_failures: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "dialect": self.dialect, "project": self.project,
                "task_id": self.task_id, "title": self.title, "status": self.status, "phase": self.phase,
                "started_at": self.started_at, "last_event_at": self.last_event_at, "events": self.events,
                "findings": self.findings, "unreadable": self.unreadable, "lens_failures": self.lens_failures,
                "sessions": list(self.sessions)}


def parse_since(value: str) -> datetime:
    """``--since``: an ISO date or time (naive means UTC)."""
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise EvstoreError(f'--since expects an ISO date or time such as 2025-01-31T12:00, got "{value}".') from exc
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def normalize_since(value: str) -> str:
    """An ISO date/time as the index stores times (UTC, ``...Z``) for string comparison."""
    return str(iso(parse_since(value), what="--since"))


def _conditions(store: EventStore, dialect: str | None, project: str | None, status: str | None,
                since: str | None, q: str | None) -> tuple[list[str], list[Any]]:
    """The filters as SQL conditions on ``proj_runs`` and their bound values (plain SQL, as the log's
    readers send it: listing runs imports no SQLAlchemy, whose import and dialect set-up were most of a
    ``runs`` command's CPU)."""
    p = store.backend.p
    conds = [f"{col} = {p}" for col, value in (("dialect", dialect), ("project", project), ("status", status))
             if value]
    params: list[Any] = [value for value in (dialect, project, status) if value]
    if since:
        conds.append(f"last_event_at >= {p}")
        params.append(normalize_since(since))
    if q:  # a literal match, any case: % _ and the escape character in the query are plain characters
        pattern = "%" + q.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
        conds.append("(" + " OR ".join(f"lower({col}) LIKE lower({p}) ESCAPE '/'"
                                       for col in ("stream_id", "task_id", "title", "project")) + ")")
        params.extend([pattern] * 4)
    return conds, params


_LISTED = ("stream_id", "dialect", "project", "task_id", "title", "status", "phase", "started_at", "last_event_at",
           "events", "findings", "unreadable", "lens_failures")


def list_runs(store: EventStore, *, dialect: str | None = None, project: str | None = None,
              status: str | None = None, since: str | None = None, q: str | None = None,
              limit: int | None = None, offset: int = 0, fresh: bool = True, sessions: bool = False,
              after: tuple[str, str] | None = None) -> list[RunRow]:
    """Rows of the runs index, newest activity first; ``since`` keeps runs active since then,
    ``q`` those whose stream id, task id, title or project contains it (any case);
    ``sessions``: with the sessions that wrote each run's state versions; ``after``: only the rows
    listed after the row with this (last_event_at, stream_id) (keyset paging: :func:`iter_runs`)."""
    if fresh:
        refresh(store)
    p = store.backend.p
    conds, params = _conditions(store, dialect, project, status, since, q)
    order, columns = "ORDER BY last_event_at DESC, stream_id", ", ".join(_LISTED)
    if after is None:
        sql = f"SELECT {columns} FROM proj_runs{where(conds)} {order}"
    else:
        # The order continued after that row, as two reads the index on last_event_at gives in order: the rows
        # of its time after its stream id, then the earlier times.  One condition with an OR is no range of
        # the index: a batch of `runs --json` read more of it the further the listing had come (207,760 runs
        # on PostgreSQL: 48-90 ms a batch against 5-8 ms).
        bound = [limit + offset] if limit else []
        cut = f" LIMIT {p}" if limit else ""
        same = f"SELECT {columns} FROM proj_runs{where([*conds, f'last_event_at = {p}', f'stream_id > {p}'])}"
        earlier = f"SELECT {columns} FROM proj_runs{where([*conds, f'last_event_at < {p}'])}"
        sql = (f"SELECT * FROM (SELECT * FROM ({same} ORDER BY stream_id{cut}) AS same_time UNION ALL "
               f"SELECT * FROM ({earlier} {order}{cut}) AS earlier) AS listed {order}")
        params = [*params, after[0], after[1], *bound, *params, after[0], *bound]
    if limit or offset:  # LIMIT -1 / ALL is not portable: a bound past any count instead
        sql += f" LIMIT {p} OFFSET {p}"
        params.extend([limit or 2**62, offset])
    rows = engine.read_rows(store, sql, params)
    links = writers.run_sessions(store, [r[0] for r in rows], fresh=fresh) if sessions and rows else {}
    out = []
    for r in rows:
        stream_id, dialect_, project_, task_id, title, status_, phase, started, last, events, findings, unreadable, \
            lens = r
        out.append(RunRow(stream_id=stream_id, dialect=dialect_, project=project_, task_id=task_id, title=title,
                          status=status_, phase=phase, started_at=started, last_event_at=last, events=int(events),
                          findings=_findings(findings, unreadable, lens), sessions=tuple(links.get(stream_id, ())),
                          unreadable=int(unreadable), lens_failures=int(lens)))
    return out


def _findings(document: int | None, unreadable: int, lens_failures: int) -> int | None:
    if document is None and not (unreadable or lens_failures):
        return None
    return (document or 0) + int(unreadable) + int(lens_failures)


def iter_runs(store: EventStore, *, dialect: str | None = None, project: str | None = None,
              status: str | None = None, since: str | None = None, limit: int | None = None, offset: int = 0,
              after: str | None = None, sessions: bool = False, batch: int = 1000) -> Iterator[RunRow]:
    """:func:`list_runs`' rows streamed in batches of ``batch`` (memory holds one batch, whatever the
    index's size), each batch continuing after the last row of the one before (keyset, not OFFSET);
    ``after`` names the stream the listing starts after (``evstore runs --after``)."""
    refresh(store)
    start = cursor = _position_of(store, after) if after is not None else None
    first, done, left = offset, 0, limit
    while left is None or left > 0:
        size = batch if left is None else min(batch, left)
        rows = list_runs(store, dialect=dialect, project=project, status=status, since=since, limit=size,
                         offset=offset, fresh=False, sessions=sessions, after=cursor)
        yield from rows
        if len(rows) < size:
            return
        done += len(rows)
        left = None if left is None else left - len(rows)
        last = rows[-1]
        if last.last_event_at is None:  # no time to continue after: count from where the listing began
            cursor, offset = start, first + done
        else:
            cursor, offset = (last.last_event_at, last.stream_id), 0


def _position_of(store: EventStore, stream_id: str) -> tuple[str, str]:
    """Where ``stream_id`` is in the runs' order (its last_event_at and id), for ``--after``."""
    sql = f"SELECT last_event_at, stream_id FROM proj_runs WHERE stream_id = {store.backend.p}"
    rows = engine.read_rows(store, sql, (stream_id,))
    if not rows:
        raise EvstoreError(f'No run "{stream_id}" for --after; pass a stream id `evstore runs` lists.')
    if rows[0][0] is None:
        raise EvstoreError(f'Run "{stream_id}" has no activity time to list after; use --page instead.')
    return str(rows[0][0]), str(rows[0][1])


def count_runs(store: EventStore, *, dialect: str | None = None, project: str | None = None,
               status: str | None = None, since: str | None = None, q: str | None = None) -> int:
    """How many rows :func:`list_runs` gives for these filters (without a limit)."""
    conds, params = _conditions(store, dialect, project, status, since, q)
    return int(engine.read_rows(store, f"SELECT count(*) FROM proj_runs{where(conds)}", params)[0][0])


def run_choices(store: EventStore) -> dict[str, list[str]]:
    """The distinct dialects and statuses in the index, sorted."""
    sql = "SELECT DISTINCT {col} FROM proj_runs WHERE {col} IS NOT NULL ORDER BY {col}"
    return {col: [v for (v,) in engine.read_rows(store, sql.format(col=col), ())] for col in ("dialect", "status")}


def find_streams_by_task(store: EventStore, task_id: str) -> list[str]:
    """Streams whose task id (or stream id) is ``task_id``, newest activity first."""
    refresh(store)
    p = store.backend.p
    sql = f"SELECT stream_id FROM proj_runs WHERE task_id = {p} OR stream_id = {p} ORDER BY last_event_at DESC, stream_id"
    return [r[0] for r in engine.read_rows(store, sql, (task_id, task_id))]


__all__ = ["RUNS", "IndexedEventStore", "RunRow", "RunsIndex", "attach", "count_runs", "find_streams_by_task",
           "iter_runs", "list_runs", "rebuild", "refresh", "run_choices",
           "version_finding"]  # and runs_table, made on first use (__getattr__)


# ------------------------------------------------------------------ checking the index against the log


class _Capture:
    """A cursor that keeps the rows :class:`RunsIndex` would upsert and runs everything else."""

    def __init__(self, cur: Any) -> None:
        self.cur, self.rows = cur, []  # type: Any, list[tuple[Any, ...]]

    def executemany(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        self.rows.extend(rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cur, name)


def _merge(old: tuple[Any, ...] | None, new: tuple[Any, ...]) -> tuple[Any, ...]:
    """``new`` upserted over ``old``, as ``_UPSERT`` does in the database."""
    if old is None:
        return new
    o, n = dict(zip(_COLUMNS, old, strict=True)), dict(zip(_COLUMNS, new, strict=True))
    out = dict(n)
    out["dialect"] = n["dialect"] if n["dialect"] is not None else o["dialect"]
    for f in _FIELDS:
        out[f] = n[f] if n["described"] == 1 else o[f]
    times = [t for t in (o["started_at"], n["started_at"]) if t is not None]
    out["started_at"] = min(times) if times else None
    lasts = [t for t in (o["last_event_at"], n["last_event_at"]) if t is not None]
    out["last_event_at"] = max(lasts) if lasts else None
    out["events"] = o["events"] + n["events"]
    out["findings"] = n["findings"] if n["findings"] is not None else o["findings"]
    out["unreadable"] = o["unreadable"] + n["unreadable"]
    out["lens_failures"] = o["lens_failures"] + n["lens_failures"]
    return tuple(out[c] for c in _COLUMNS)


def expected_rows(store: EventStore, upto_position: int, *, batch: int = 5000) -> dict[str, tuple[Any, ...]]:
    """The ``proj_runs`` rows the log gives (its events up to ``upto_position``), computed by the
    index's own code in memory in one pass in position order, as a rebuild would write them; a
    document is never taken from the replay cache."""
    index = RunsIndex(trust_cache=False)
    rows: dict[str, tuple[Any, ...]] = {}
    after = 0
    while after < upto_position:
        with store.reading() as cur:
            events = [e for e in engine.read_events(cur, store.backend, after, batch, None)
                      if e.position <= upto_position]
            if not events:
                break
            capture = _Capture(cur)
            index.apply(capture, store.backend, events)
        for r in capture.rows:
            rows[r[0]] = _merge(rows.get(r[0]), r)
        after = events[-1].position
    return rows


def expected_row(store: EventStore, stream_id: str, upto_position: int, *, batch: int = 1000) -> tuple[Any, ...] | None:
    """:func:`expected_rows` for one stream (its events only)."""
    index = RunsIndex(cache_size=2, trust_cache=False)
    row: tuple[Any, ...] | None = None
    events: list[RecordedEvent] = []

    def apply() -> None:
        nonlocal row
        with store.reading() as cur:
            capture = _Capture(cur)
            index.apply(capture, store.backend, events)
        for r in capture.rows:
            row = _merge(row, r)
        events.clear()

    for e in store.read_stream(stream_id):
        if e.position > upto_position:
            break
        events.append(e)
        if len(events) >= batch:
            apply()
    if events:
        apply()
    return row


#: How many derived rows :class:`IndexCheck` compares with the stored ones at a time, and how many stored
#: rows one read brings: ``evstore verify`` holds about this many of each, whatever the number of runs.
CHUNK = 2000


class _StreamedComparison:
    """Derived rows, handed over in the order of verify's scan, compared with the stored rows a chunk
    at a time (:func:`_row_problem` for each stream, as the whole-index comparison does).

    The scan sorts the streams by stream id in the database's collation (``chain_rows``), and so
    does ``proj_runs``' key: a chunk whose last stream is ``hi`` is compared with the stored rows
    after the previous chunk's last stream, up to ``hi``, read in pages by that key.  Only the
    database compares stream ids for order (Python's order may not be its collation's); here they are
    matched by equality.  Were the two orders ever to disagree, a stream would be reported missing and
    not derived, and :func:`_recheck` looking at both again one by one clears it."""

    def __init__(self, backend: Backend) -> None:
        self.p = backend.p
        self.pending: list[tuple[Any, ...]] = []
        self.after: str | None = None  # the last stream of the chunks compared
        self.problems: list[tuple[str, int, str]] = []

    def add(self, cur: Any, row: tuple[Any, ...]) -> None:
        self.pending.append(row)
        if len(self.pending) >= CHUNK:
            self._compare(cur, last=False)

    def finish(self, cur: Any) -> list[tuple[str, int, str]]:
        """The problems, once the last derived row was added (and every stored row after it read)."""
        self._compare(cur, last=True)
        self.problems.sort(key=_first)  # by stream id, code point order, as the whole-index comparison
        return self.problems

    def _compare(self, cur: Any, *, last: bool) -> None:
        """The pending rows against the stored ones up to their last stream (``last``: and every
        stored row after it)."""
        wanted = {r[0]: r for r in self.pending}
        hi = None if last or not self.pending else self.pending[-1][0]
        lo, page = self.after, CHUNK
        while True:
            within, params = conjunction((f"stream_id > {self.p}", (lo,)) if lo is not None else None,
                                         (f"stream_id <= {self.p}", (hi,)) if hi is not None else None)
            cur.execute(f"SELECT {', '.join(_COLUMNS)} FROM proj_runs{within} ORDER BY stream_id LIMIT {page}", params)
            stored = cur.fetchall()
            for r in stored:
                found = _row_problem(r[0], wanted.pop(r[0], None), tuple(r))
                if found is not None:
                    self.problems.append(found)
            if len(stored) < page:
                break
            lo = stored[-1][0]
        for sid, want in wanted.items():  # derived, not stored
            missing = _row_problem(sid, want, None)
            assert missing is not None
            self.problems.append(missing)
        if hi is not None:
            self.after = hi
        self.pending = []


def _first(problem: tuple[str, int, str]) -> str:
    return problem[0]


class IndexCheck:
    """The ``proj_runs`` rows the log gives, derived in ``evstore verify``'s own scan of the log (an
    :class:`eventstore.verify.EventSink`: each stream's events are folded as the chain walk reads
    them, instead of a second pass over the log), and compared with the stored rows as the scan goes
    (:data:`CHUNK` streams at a time: memory holds a chunk, not the index); :meth:`problems` says
    what differs, as :func:`check_index` does.

    The rows are the ones :class:`RunsIndex` upserts when it is given each stream's events in
    batches of ``batch`` (its ``_apply``), merged as ``_UPSERT`` merges them; the fold is the index's
    own (the same meta reads, ``_load`` on a stream's first event or a chain that does not extend,
    ``_note_snapshot``, ``_batch_row``) without the per-batch bookkeeping an append needs (a batch of
    event objects, the document cache, documents given by the writer): the scan hands over one
    stream at a time, in version order."""

    def __init__(self, store: EventStore, *, batch: int = 1000) -> None:
        with engine.ProjectionRunner(store) as runner:
            cp = runner.checkpoint(RUNS.name)
        self.store, self.batch = store, batch
        self.upto = 0 if cp is None else cp.position  # the rows are as of the index's checkpoint
        self.index = RunsIndex(cache_size=2, trust_cache=False)  # its dialects and _load
        self.scanned = False
        #: What differs from the stored rows, before :func:`_recheck` (set when the scan ends).
        self.found: list[tuple[str, int, str]] = []
        self._comparison = _StreamedComparison(store.backend)
        self._row: tuple[Any, ...] | None = None  # the row of the stream being scanned, as of its last batch
        self._sid: str | None = None  # the stream of the batch being folded
        self._n = 0  # its events so far
        self._t: _Touched | None = None
        self._last: tuple[str, _Doc] | None = None  # the stream and document of the last batch (the next extends it)

    def event(self, cur: Any, e: RecordedEvent) -> None:
        if e.position > self.upto:
            return
        sid = e.stream_id
        if sid != self._sid or self._n >= self.batch:  # a new batch, as RunsIndex.apply would be given it
            self._flush(cur)
            self._sid, self._n = sid, 0
        if sid == NOTICES:  # the store's own notices of sources gone: no run
            return
        self._n = n = self._n + 1
        # Meta decoded where the index decodes it: a batch's first event, and a snapshot's closing event.
        raw_meta = e.meta
        meta = (codec.decode(raw_meta) if raw_meta and raw_meta != b"{}"
                and (n == 1 or b'"source"' in raw_meta) else None)
        t = self._t
        if t is None:
            last = self._last  # RunsIndex's cache: used if this batch's first event extends it
            entry = last[1] if last is not None and last[0] == sid else None
            if entry is None or entry.version != e.version - 1 or entry.head != e.prev_hash:
                dialect = meta.get("dialect") if type(meta) is dict else None
                entry = self.index._load(cur, self.store.backend, e, dialect if isinstance(dialect, str) else None)
            t = self._t = _Touched(entry)
            self._last = (sid, entry)
        RunsIndex._fold(t.entry, e)
        t.saw(e, meta)

    def _flush(self, cur: Any) -> None:
        """The batch folded so far upserted into its stream's row; the row of the stream before it,
        complete (a stream's events come together), handed on."""
        t = self._t
        if t is not None:
            sid = self._sid
            assert sid is not None
            row = self._row
            if row is not None and row[0] == sid:
                self._row = _merge(row, _batch_row(sid, t))
            else:
                if row is not None:
                    self._derived(cur, row)
                self._row = _batch_row(sid, t)
            self._t = None

    def _derived(self, cur: Any, row: tuple[Any, ...]) -> None:
        """A stream's row, complete: compared with the stored one (a chunk at a time)."""
        self._comparison.add(cur, row)

    def end(self, cur: Any) -> None:
        self._flush(cur)
        if self._row is not None:
            self._derived(cur, self._row)
            self._row = None
        self._last = None
        self.found = self._comparison.finish(cur)
        self.scanned = True

    def problems(self) -> list[tuple[str, int, str]]:
        """What :func:`check_index` reports, from the rows derived in the scan (none if the scan did
        not run to its end: a damaged file, reported as such)."""
        if not self.scanned:
            return []
        return _recheck(self.store, self.found)


class ForkedIndexCheck:
    """The runs index derived from the log by a forked process of this one, beside ``evstore verify``'s
    own scan (on two cores the command takes the longer of the two, not their sum): the child reads
    the log in its own read transaction, folds it with :class:`IndexCheck` as of the checkpoint the
    parent read, compares the rows with the stored ones as it goes and hands back what differs through
    a pipe; the parent looks at those streams again (:meth:`problems`, as :func:`check_index` does).
    :func:`fork_index_check` starts it.

    The child compares, not the parent: the parent reads the pipe only once its own scan is over, and
    a child sending rows would stop at the pipe's first 64 KB until then (the two scans one after the
    other); holding them for later is the memory the chunks save."""

    def __init__(self, store: EventStore, upto: int, pid: int, fd: int) -> None:
        self.store, self.upto, self.pid, self.fd = store, upto, pid, fd
        self.cpu = 0.0  # the child's CPU seconds, once its word is read

    def _found(self) -> list[tuple[str, int, str]]:
        """What the child found differing (before :func:`_recheck`)."""
        from projections.prefork import child_outcome

        said, _code, self.cpu = child_outcome(self.pid, self.fd)
        self.pid = 0
        outcome: Any = said or ("error", "the process deriving it ended without a word")
        if outcome[0] != "ok":
            raise EvstoreError(f"Could not derive the runs index from the log: {outcome[1]}")
        found: list[tuple[str, int, str]] = outcome[1]
        return found

    def problems(self) -> list[tuple[str, int, str]]:
        return _recheck(self.store, self._found())

    def close(self) -> None:
        """Stop the child if its word was not read (the scan failed, or the file is damaged)."""
        import os
        import signal

        if self.pid:
            os.close(self.fd)
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0


def fork_index_check(store: EventStore, *, batch: int = 1000) -> ForkedIndexCheck | None:
    """A :class:`ForkedIndexCheck` running, or None where the index is better derived in verify's own
    scan (:class:`IndexCheck`): one CPU, no ``fork``, a store another process cannot open (in-memory
    SQLite), threads running in this process (a fork copies their locks in whatever state), or
    ``EVSTORE_VERIFY_FORK=0``."""
    import os
    from functools import partial

    from projections.prefork import may_fork, run_in_child

    if os.environ.get("EVSTORE_VERIFY_FORK", "1") == "0" or (os.cpu_count() or 1) < 2 or not may_fork(store.url):
        return None
    check = IndexCheck(store, batch=batch)  # the checkpoint, read here: the child derives the rows as of it
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        run_in_child(write_end, partial(_derive_own, store.url, check, parent))
    os.close(write_end)
    return ForkedIndexCheck(store, check.upto, pid, read_end)


def _derive_own(url: str, check: IndexCheck, parent: int) -> list[tuple[str, int, str]]:
    """:func:`fork_index_check`'s child's work: its own connections (none of the parent's), what differs."""
    import os

    with EventStore(url, check_schema=False) as own:
        check.store = own
        with own.reading() as cur, documents.owned_events():
            for (sid, _hv, _hh, version, event_id, type_, schema_version, data, meta, occurred_at, recorded_at,
                 _ds, _ms, prev_hash, h, position, _salt) in own.backend.chain_rows(cur):
                if position % 4096 == 0 and os.getppid() != parent:
                    os._exit(1)  # verify was killed: no derivation outlives it (where PR_SET_PDEATHSIG is not)
                if version is not None:
                    check.event(cur, RecordedEvent(position, sid, version, event_id, type_, schema_version,
                                                   data, meta, occurred_at, recorded_at, prev_hash, h))
            check.end(cur)
    return check.found


def check_index(store: EventStore, stream_id: str | None = None, *,
                streams: Sequence[str] | None = None) -> list[tuple[str, int, str]]:
    """``(stream, version, what differs)`` for each run whose ``proj_runs`` row is not what its
    events give (as of the index's checkpoint).  Whoever may append may write the index (the
    PostgreSQL writer role too: it is kept in the append's transaction), so ``evstore verify``
    re-derives it instead of trusting it.  ``streams``: those runs only (``verify --since``: the
    runs with new events), with one read of the checkpoint and of their rows.

    The checkpoint and the rows are two reads: an append between them moves a row past the
    checkpoint read first, so a stream that differs is looked at again (twice at most), each time
    with the checkpoint read afresh; a row that was written by hand differs every time."""
    some = [stream_id] if stream_id is not None else None if streams is None else list(streams)
    return _recheck(store, _check_index_once(store, some))


def _recheck(store: EventStore, problems: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The streams of ``problems`` looked at again (twice at most), the checkpoint read afresh each time."""
    for _ in range(2):
        if not problems:
            break
        problems = _check_index_once(store, sorted({p[0] for p in problems}))
    return problems


def _check_index_once(store: EventStore, stream_ids: list[str] | None) -> list[tuple[str, int, str]]:
    """The differences for ``stream_ids`` (None: every stream), the checkpoint read and the rows derived here."""
    if stream_ids is not None and not stream_ids:
        return []
    be = store.backend
    query = f"SELECT {', '.join(_COLUMNS)} FROM proj_runs"
    stored: dict[str, tuple[Any, ...]] = {}
    # The checkpoint and the rows in one snapshot: the append that moves a row moves the checkpoint in
    # the same transaction, so they agree (read apart, an append between them made a row look forged
    # under concurrent appends on PostgreSQL's READ COMMITTED).
    with store.reading(snapshot=True) as cur:
        cp = be.read_checkpoint(cur, RUNS.name)
        upto = 0 if cp is None else cp.position
        if stream_ids is None:
            cur.execute(query)
            stored = {r[0]: tuple(r) for r in cur.fetchall()}
        for i in range(0, len(stream_ids or ()), 500):
            chunk = (stream_ids or [])[i:i + 500]
            cur.execute(f"{query} WHERE stream_id IN ({', '.join([be.p] * len(chunk))})", chunk)
            stored.update({r[0]: tuple(r) for r in cur.fetchall()})
    if stream_ids is not None:
        wanted = {}
        for sid in stream_ids:
            one = expected_row(store, sid, upto) if store.stream_head(sid) is not None else None
            if one is not None:
                wanted[sid] = one
    else:
        wanted = expected_rows(store, upto)
    return _differences(wanted, stored)


def _differences(wanted: dict[str, tuple[Any, ...]], stored: dict[str, tuple[Any, ...]]) -> list[tuple[str, int, str]]:
    """:func:`_row_problem` for every stream of either, by stream id."""
    problems = []
    for sid in sorted(set(wanted) | set(stored)):
        found = _row_problem(sid, wanted.get(sid), stored.get(sid))
        if found is not None:
            problems.append(found)
    return problems


_VERSION = _COLUMNS.index("version")


def _row_problem(sid: str, want: tuple[Any, ...] | None, have: tuple[Any, ...] | None) -> tuple[str, int, str] | None:
    """How stream ``sid``'s stored row ``have`` differs from the row its events give, ``want`` (None:
    no such row), or None if it does not."""
    if want is None or have is None:
        return (sid, 0 if want is None else int(want[_VERSION]),
                "runs index: a row for a stream the log does not hold" if want is None
                else "runs index: the stream's row is missing")
    differs = [c for c, a, b in zip(_COLUMNS, have, want, strict=True)
               if (int(a) if isinstance(a, int) else a) != b]
    if not differs:
        return None
    shown = ", ".join(f"{c} {have[_COLUMNS.index(c)]!r} (the log gives {want[_COLUMNS.index(c)]!r})"
                      for c in differs[:3])
    return (sid, int(want[_VERSION]), f"runs index (proj_runs) differs from the log: {shown}; "
                                      "`evstore projections rebuild runs` rewrites it from the log")
