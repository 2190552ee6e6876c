"""The event store: append with optimistic concurrency, read, subscribe.

    >>> store = EventStore("sqlite:///./.evstore/events.db")
    >>> result = store.append("PROJ-1", [NewEvent("demo.note", {"text": "hi"})], expected_version="no stream")
    >>> [e.type for e in store.read_stream("PROJ-1")]
    ['demo.note']

Guarantees (each proven by ``tests/test_store_contract.py`` on SQLite and PostgreSQL):

* every ``append`` is atomic; positions are global, strictly increasing and commit-ordered
  (a store-wide append lock serialises position allocation);
* ``expected_version`` is checked inside that lock: ``"any"``, ``"no stream"`` or an exact int;
* a client-supplied ``event_id`` makes retries idempotent (same content: no-op success,
  different content: :class:`DuplicateEventId`);
* every event extends its stream's SHA-256 hash chain (:mod:`eventstore.chain`), committing to
  digests of its data and meta salted with 16 random bytes of its own (``events.salt``), which an
  erasure destroys with the payload.

All SQL runs on DB-API connections (:meth:`EventStore.connect`): on a SQLite file, stdlib
``sqlite3`` connections opened by the backend, so appending and reading never import SQLAlchemy;
on PostgreSQL, psycopg connections from SQLAlchemy's pool.  SQLAlchemy owns the schema
(Alembic) and the PostgreSQL pool, and its engine is made only when something needs it
(:attr:`EventStore.engine`); the per-row work stays at driver speed (see benchmarks/).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from eventstore import chain, codec, config, tree
from eventstore.backends import Backend, backend_for
from eventstore.errors import (
    ConcurrencyError,
    DuplicateEventId,
    EvstoreError,
    IntegrityViolation,
    InvalidEvent,
    StorageFull,
    StreamNotFound,
    is_disk_full,
)
from eventstore.events import Event, encode_event
from eventstore.records import EventPayload, FactEvent, RecordedIdentity, StreamHead, StreamState, StreamSummary
from eventstore.records import RecordedEvent as RecordedEvent  # re-exported: part of the store's API
from eventstore.tree import TreeSource

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

ExpectedVersion = int | Literal["any", "no stream"]
_Row = TypeVar("_Row")
InlineHandler = Callable[[Any, Backend, "list[RecordedEvent]"], None]
ANY: Literal["any"] = "any"
NO_STREAM: Literal["no stream"] = "no stream"
_EMPTY_META = b"{}"
# Meta keys every event appended in a :func:`stamped` block carries (the writer of an HTTP append).
_STAMP: ContextVar[Mapping[str, Any] | None] = ContextVar("evstore_meta_stamp", default=None)


@contextmanager
def stamped(meta: Mapping[str, Any]) -> Iterator[None]:
    """Every event appended on this thread (or task) inside the block gets ``meta``'s keys in its
    meta, replacing the writer's own under those keys: ``evstore serve`` records who sent each event
    (``meta.sent_by``) however the request's events reach the store (an append, a hook call's
    capture), so the hash chain commits to it."""
    token = _STAMP.set(dict(meta))
    try:
        yield
    finally:
        _STAMP.reset(token)


def _stamp(event: NewEvent) -> NewEvent:
    stamp = _STAMP.get()
    if stamp:
        meta = msgspec.json.decode(event.meta)
        meta.update(stamp)
        event.set_meta(meta)
    return event
_EMPTY_META_SHA = chain.digest(_EMPTY_META)  # the plain digest of an empty meta (plain_digests)


def new_event_ids(n: int) -> list[str]:
    """``n`` time-ordered (version 7) UUID strings: 48-bit Unix milliseconds, then random bits.

    Random uuid4 keys land all over the ``UNIQUE(event_id)`` index and dirty about one page per
    row; time-ordered ids append to its right edge (measured: 1.4x CPU, 1.5x wall for 100-event
    appends on SQLite with synchronous=FULL).  One clock read and one ``os.urandom`` call per
    batch.  Hand-rolled because ``uuid.uuid7`` is Python 3.14+.
    """
    ts = (time.time_ns() // 1_000_000).to_bytes(6, "big").hex()
    rnd = os.urandom(10 * n).hex()
    head = f"{ts[:8]}-{ts[8:12]}-7"
    out = []
    for i in range(0, 20 * n, 20):
        r = rnd[i:i + 20]
        out.append(f"{head}{r[1:4]}-{_VARIANT[r[4]]}{r[5:8]}-{r[8:20]}")
    return out


_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}  # RFC 4122 variant nibble


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso(ts: datetime | str | None, *, what: str = "occurred_at") -> str | None:
    """A time as evstore stores it: UTC, microseconds, ``Z`` (naive times are taken as UTC).
    Errors name the time as ``what``."""
    if ts is None:
        return None
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts)  # Python >= 3.11 reads a "Z" suffix
        except ValueError:
            raise InvalidEvent(f"{what} {ts!r} is not an ISO-8601 time.") from None
    elif not isinstance(ts, datetime):
        raise InvalidEvent(f"{what} must be an ISO-8601 string, got {type(ts).__name__}.")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    try:
        ts = ts.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-05:00 is in year 10000 in UTC
        raise InvalidEvent(f"{what} {ts.isoformat()!r} is out of range: in UTC it falls outside the "
                           "years 1 to 9999.") from None
    # isoformat, not strftime: %Y writes year 999 as "999", and stored times must sort as text
    return ts.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def text_problem(value: str) -> str | None:
    """Why ``value`` (a stream id or event type) cannot be stored alike on every backend, or None.

    PostgreSQL text cannot hold NUL, and neither backend can store a lone surrogate: what Python
    makes of bytes that are not UTF-8 on the command line (``surrogateescape``)."""
    if "\x00" in value:
        return "contains a NUL character (U+0000), which PostgreSQL cannot store"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"is not valid UTF-8 text (character {exc.start + 1} stands for a byte that is not UTF-8, "
                    "e.g. an argument in another encoding)")
    return None


def check_stream_id(stream_id: object) -> str:
    """``stream_id`` if every backend can store it; else InvalidEvent saying why."""
    if not isinstance(stream_id, str) or not stream_id or len(stream_id) > 255:
        got = f"{len(stream_id)} characters ({stream_id[:40]!r}…)" if isinstance(stream_id, str) and stream_id \
            else repr(stream_id)
        raise InvalidEvent(f"stream id must be a non-empty string of at most 255 characters, got {got}.")
    problem = text_problem(stream_id)
    if problem is not None:
        raise InvalidEvent(f"stream id {stream_id!r} {problem}.")
    return stream_id


def _valid_stream(stream_id: object) -> bool:
    """:func:`check_stream_id` as a test (a group reads only valid ids ahead; an invalid one fails its item)."""
    try:
        check_stream_id(stream_id)
    except InvalidEvent:
        return False
    return True


def _schema_version(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= 32767:
        raise InvalidEvent(f"schema_version must be an integer from 1 to 32767, got {value!r}.")
    return value


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        # Unpickled as the module's UNKNOWN itself: writers test it by identity, and `evstore demo`'s
        # worker processes send their events through a pipe (a copy was taken for a given document,
        # and the runs index described it: every run without a title; `verify` now names such rows).
        return "UNKNOWN"


#: ``NewEvent.document`` of an event whose writer does not say what its stream's document becomes.
UNKNOWN: Any = _Unknown()


class NewEvent:
    """An event to append.  ``data`` is a JSON object (validated) or a typed :class:`Event`.

    ``document``: the stream's document once this event is folded in, when the writer knows it
    (ingest does: it folded the events to check the lens law); inline projections take it
    instead of decoding and folding the event again.  Not stored; ``UNKNOWN`` by default."""

    __slots__ = ("type", "data", "meta", "event_id", "occurred_at", "schema_version", "_client_id", "document",
                 "blob_refs", "source_id")

    def __init__(
        self,
        type: str | None,
        data: dict[str, Any] | Event | bytes,
        *,
        meta: dict[str, Any] | None = None,
        event_id: str | uuid.UUID | None = None,
        occurred_at: datetime | str | None = None,
        schema_version: int | None = None,
    ) -> None:
        self.schema_version: int
        if type.__class__ is str and data.__class__ is dict and 0 < len(type) <= 200 and type.isascii() \
                and "\x00" not in type:
            self.type = type  # the common case first: a JSON object under a valid type
            self.data = codec.encode_checked(data, type)
            self.schema_version = 1 if schema_version is None else (_schema_version(schema_version) or 1)
        elif isinstance(data, Event):
            self.type = type or data.event_type()
            # Our own Struct's canonical bytes (no validation pass), under the same size limit as
            # any JSON object: a dialect event carries documents of arbitrary size.
            self.data = codec.check_size(encode_event(data), self.type)
            self.schema_version = _schema_version(schema_version) or data.schema_version
        else:
            if not type or not isinstance(type, str) or len(type) > 200:
                raise InvalidEvent(f"event type must be a non-empty string of at most 200 characters, got {type!r}.")
            problem = text_problem(type)
            if problem is not None:
                raise InvalidEvent(f"event type {type!r} {problem}.")
            self.type = type
            if isinstance(data, (bytes, bytearray)):
                data = codec.parse_json_text(bytes(data), f'data of "{type}"')
            self.data = codec.encode_checked(data, type)
            self.schema_version = _schema_version(schema_version) or 1
        self.set_meta(meta)
        self.document = UNKNOWN
        self._client_id = event_id is not None
        if event_id is None:
            self.event_id: str | None = None  # generated in bulk when appended
        else:
            try:
                self.event_id = str(uuid.UUID(str(event_id)))
            except ValueError as exc:
                raise InvalidEvent(f"event_id {event_id!r} is not a UUID.") from exc
        self.occurred_at = None if occurred_at is None else iso(occurred_at)

    def set_meta(self, meta: dict[str, Any] | None) -> None:
        """Replace the meta (validated as the constructor does), keeping the encoded data.

        ``meta.blobs`` is the store's own key: the SHA-256 hex digests of the blobs the event
        refers to, which must be stored (given with the append, or stored before) — ``verify``
        fails an event naming a blob the store does not hold, so the store never writes one."""
        self.meta = codec.encode_checked(meta, self.type, part="meta") if meta else _EMPTY_META
        self.blob_refs = _blob_refs(meta["blobs"], self.type) if meta and "blobs" in meta else ()
        # ``meta.source.id``: the source version this event records (ingest's capture-once), kept
        # in ``source_versions`` too, where a capture finds a stream's recorded ones in one query.
        source = meta.get("source") if meta else None
        ident = source.get("id") if type(source) is dict else None
        self.source_id: str | None = ident if type(ident) is str and ident else None


class InlineBatch(list[RecordedEvent]):
    """What one append transaction wrote, in position order, as inline handlers get it, with
    ``documents``: the stream's document after the event at a position, where the writer gave it
    (``NewEvent.document``).  The documents are the writer's: a handler that keeps one must not
    change it in place."""

    __slots__ = ("documents",)

    def __init__(self) -> None:
        super().__init__()
        self.documents: dict[int, Any] = {}


class AppendResult(msgspec.Struct, frozen=True):
    stream_id: str
    version: int  # the stream's version after the append
    positions: list[int]
    duplicate: bool = False  # True: an idempotent retry, nothing was written


@dataclass
class GroupAppend:
    """One append of :meth:`EventStore.append_group`: what :meth:`EventStore.append` takes."""

    stream_id: str
    events: list[NewEvent]
    expected_version: ExpectedVersion = ANY
    blobs: Mapping[str, bytes] | None = None
    dialect: str | None = None

    @classmethod
    def of(cls, stream_id: str, events: Iterable[NewEvent], *, expected_version: ExpectedVersion = ANY,
           blobs: Mapping[str, bytes] | None = None, dialect: str | None = None) -> GroupAppend:
        """The events stamped (:func:`stamped`) as :meth:`EventStore.append` stamps them: call it
        inside the request's ``stamped`` block."""
        return cls(stream_id, [_stamp(e) for e in events], expected_version, blobs, dialect)


class EventStore:
    """The append-only, hash-chained log over SQLite or PostgreSQL (thread-safe)."""

    def __init__(self, url: str | None = None, *, synchronous: str | None = None, check_schema: bool = True,
                 plain_digests: bool = False) -> None:
        """``plain_digests``: append as evstore did before revision 0010 (no salt; digests the plain
        SHA-256 of data and meta), for a database at an older revision opened with ``check_schema=False``."""
        self.url = config.database_url(url)
        self.backend: Backend = backend_for(self.url, synchronous=synchronous)
        if plain_digests:
            self.backend.write_plain_digests()
        self._local = threading.local()
        self._conns: list[Any] = []
        self._lock = threading.Lock()
        #: The Merkle tree's right edge as this process last appended it (see tree.Frontier).
        self._tree_edge: tree.Frontier | None = None
        self._inline: list[InlineHandler] = []
        self._store_id: str | None = None
        if check_schema:
            from eventstore.migrate import ensure_current

            try:
                ensure_current(self)
            except BaseException:
                self.close()  # no connection left behind for the GC to warn about
                raise

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (made on first use: Alembic, SQLAlchemy Core queries).  The
        store's own SQL runs on DB-API connections (:meth:`connect`), which on a SQLite file
        are stdlib :mod:`sqlite3` connections that never import SQLAlchemy."""
        return self.backend.engine

    def add_inline(self, handler: InlineHandler) -> None:
        """Run ``handler(cursor, backend, events)`` inside every append transaction, before commit.

        Inline projections (e.g. the runs index) use it so their rows commit atomically with
        the events; an exception aborts the append.  ``events`` is an :class:`InlineBatch`,
        carrying the documents the writer gave with its events.
        """
        self._inline.append(handler)

    # -- connections --------------------------------------------------------------

    def connect(self) -> Any:
        """A new connection handle of the caller's own (``.driver_connection`` is the DB-API
        connection; ``.close()`` it when done): a stdlib ``sqlite3`` connection for a SQLite
        file, a checkout of SQLAlchemy's pool otherwise."""
        return self.backend.connect()

    def _raw(self) -> Any:
        """This thread's DBAPI connection (held: 1.5x faster than a checkout per call)."""
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self.backend.connect()
            self._local.handle = handle
            with self._lock:
                self._conns.append(handle)
        return handle.driver_connection

    def close(self) -> None:
        with self._lock:
            for handle in self._conns:
                try:
                    handle.close()
                except Exception:  # closing from another thread; the pool discards it
                    pass
            self._conns.clear()
        self._local = threading.local()
        self.backend.dispose()

    def _discard_connection(self) -> None:
        """Drop this thread's connection without a rollback on it: after Ctrl-C in the middle of a
        statement, a PostgreSQL connection is still busy with it and refuses any command ("another
        command is already in progress"), which would replace the interrupt.  Closing it is the
        rollback (the server ends the transaction when the connection goes)."""
        handle = getattr(self._local, "handle", None)
        if handle is None:
            return
        self._local.handle = None
        with self._lock:
            if handle in self._conns:
                self._conns.remove(handle)
        try:
            handle.invalidate()
        except Exception:  # already gone
            pass

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- append -------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        events: Iterable[NewEvent | Event],
        *,
        expected_version: ExpectedVersion = ANY,
        dialect: str | None = None,
        blobs: Mapping[str, bytes] | None = None,
    ) -> AppendResult:
        """Append ``events`` to ``stream_id`` atomically; returns the new version and positions.

        ``blobs``: content-addressed bytes the events refer to (SHA-256 hex digest -> bytes),
        written in the same transaction, each stored once however many events or streams name it
        (an event lists the digests it refers to in ``meta.blobs``; ``verify`` checks both)."""
        check_stream_id(stream_id)  # before the transaction looks the stream up
        batch = [_stamp(e if isinstance(e, NewEvent) else NewEvent(None, e)) for e in events]
        if not batch:
            raise InvalidEvent(f'Nothing to append to stream "{stream_id}".')
        digests = _checked_blobs(blobs) if blobs else None
        with _Transaction(self, dialect, stream_id) as txn:
            if any(e._client_id for e in batch):
                dup = txn.find_duplicates(stream_id, batch)
                if dup is not None:
                    txn.abandon()
                    return dup
            if digests:
                self.backend.insert_blobs(txn.cur, digests, txn.now)
            return txn.add(stream_id, batch, expected_version)

    def append_group(
        self, items: Sequence[GroupAppend], *, before: Callable[[Any], Mapping[int, Exception]] | None = None,
    ) -> list[AppendResult | Exception]:
        """Several independent appends in one transaction: one append lock, one commit (one fsync),
        the Merkle tree's nodes and the inline handlers once for all: what a server does with the
        requests that arrive while the previous group commits (group commit).

        Each item is what :meth:`append` takes, its events stamped by the caller; each succeeds or
        fails alone, as if appended by itself in list order: an item that fails (a concurrency
        conflict, a duplicate event id, a bad blob reference) is rolled back to a savepoint taken
        before it, and its place in the answer holds the exception.  ``before(cursor)``, called once the
        lock is held, names items to refuse (index -> exception) before anything is written: what has
        to be checked against the store's state at the commit (a token revoked a moment ago).
        An error of the whole transaction (the commit, an inline handler) raises for all."""
        try:
            return self._append_group(items, before, fast=True)
        except _GroupRetry:  # the database failed the one-pass way: item by item, each in its savepoint
            return self._append_group(items, before, fast=False)

    def _append_group(self, items: Sequence[GroupAppend], before: Callable[[Any], Mapping[int, Exception]] | None,
                      *, fast: bool) -> list[AppendResult | Exception]:
        """:meth:`append_group`.  ``fast``: the streams and the recorded ids of all items are read in one
        round trip each, and the events of all items written together at the end; an item is checked
        in Python before anything of it is written, so only an item that writes before its checks end
        (a new stream's row, blobs) takes a savepoint.  A failure of the database itself on that path
        raises :class:`_GroupRetry` (nothing written): the caller runs the group again with ``fast``
        off, one savepoint and its own round trips per item, each item failing alone."""
        out: list[AppendResult | Exception] = []
        recorded: dict[str, RecordedIdentity] = {}
        with _Transaction(self, None) as txn:
            refused = before(txn.cur) if before is not None else {}
            if fast:
                wanted = [item for index, item in enumerate(items) if index not in refused and _valid_stream(item.stream_id)]
                streams = list(dict.fromkeys(item.stream_id for item in wanted))
                ids = list(dict.fromkeys(e.event_id for item in wanted for e in item.events
                                         if e._client_id and e.event_id is not None))
                with self._retried_on_db_failure():
                    txn.known, found = self.backend.group_lookups(txn.cur, streams, ids)
                recorded = {r.event_id: r for r in found}
                txn.deferred = []
            for index, item in enumerate(items):
                if index in refused:
                    out.append(refused[index])
                    continue
                saved = txn.save()
                guarded = not fast or bool(item.blobs) or any(e.blob_refs for e in item.events) or (
                    item.stream_id not in txn.heads and item.stream_id not in (txn.known or {}))
                if guarded:
                    txn.cur.execute("SAVEPOINT evstore_group_item")
                try:
                    check_stream_id(item.stream_id)
                    if not item.events:
                        raise InvalidEvent(f'Nothing to append to stream "{item.stream_id}".')
                    txn.dialect = item.dialect
                    dup = None
                    if any(e._client_id for e in item.events):
                        # fast: the ids recorded before the group, and those its earlier items wrote
                        dup = txn.find_duplicates(item.stream_id, item.events,
                                                  collections.ChainMap(txn.written, recorded) if fast else None)
                    if dup is not None:
                        out.append(dup)
                        continue
                    if item.blobs:
                        self.backend.insert_blobs(txn.cur, _checked_blobs(item.blobs), txn.now)
                    out.append(txn.add(item.stream_id, item.events, item.expected_version))
                except _GroupRetry:
                    raise
                except Exception as exc:  # this item only: back to before it
                    if fast and self._db_failure(exc):
                        raise _GroupRetry from exc
                    if guarded:
                        txn.cur.execute("ROLLBACK TO SAVEPOINT evstore_group_item")
                    txn.restore(saved)
                    if self.backend.is_unique_violation(exc):
                        exc = EvstoreError(f"Append clashed with a concurrent write ({exc}); retry.")
                    out.append(exc)
            if fast:
                with self._retried_on_db_failure():
                    txn.flush()
            if not any(isinstance(r, AppendResult) and not r.duplicate for r in out):
                txn.abandon()  # nothing written: no commit
        return out

    @contextmanager
    def _retried_on_db_failure(self) -> Iterator[None]:
        """A failure of the database inside raises :class:`_GroupRetry` (run the group item by item)."""
        try:
            yield
        except Exception as exc:
            if self._db_failure(exc):
                raise _GroupRetry from exc
            raise

    def _db_failure(self, exc: BaseException) -> bool:
        """``exc`` is the driver's (or evstore's translation of one): the transaction may be aborted."""
        return self.backend.is_driver_error(exc) or (exc.__cause__ is not None
                                                     and self.backend.is_driver_error(exc.__cause__))

    def read_blob(self, sha256: str) -> bytes:
        """The bytes stored under ``sha256`` (hex), checked against it."""
        key = chain.parse_digest(sha256)
        if key is None:
            raise InvalidEvent(f"{sha256!r} is not a SHA-256 hex digest.")
        with self.reading() as cur:
            stored = self.backend.read_blob(cur, key)
        if stored is None:
            raise IntegrityViolation(f"Blob {sha256} is not in the store (an event refers to it); "
                                     "run `evstore verify`.")
        data = stored.data
        if chain.digest(data) != key:
            raise IntegrityViolation(f"Blob {sha256}: the stored bytes do not match their SHA-256; "
                                     "run `evstore verify`.")
        return data

    def append_many(
        self, items: Iterable[tuple[str, NewEvent, ExpectedVersion | None]], *, chunk: int = 1000,
        dialect: str | None = None,
    ) -> list[AppendResult]:
        """Append a stream of ``(stream_id, event, expected_version)`` all-or-nothing.

        ``items`` may be a generator (e.g. lines of a JSONL file): it is consumed in chunks, and
        if it raises, nothing is written.  ``expected_version`` None means "any".
        """
        results: dict[str, AppendResult] = {}
        with _Transaction(self, dialect) as txn:
            group: list[NewEvent] = []
            group_items: list[int] = []  # the item index of each event in group, for errors
            group_stream: str | None = None
            group_expected: ExpectedVersion = ANY

            def flush() -> None:
                try:
                    r = txn.add(group_stream, group, group_expected)  # type: ignore[arg-type]
                except EvstoreError as exc:
                    exc.item = group_items[exc.item or 0]  # add names an offset in group (or the stream: 0)
                    raise
                results[r.stream_id] = _merge(results.get(r.stream_id), r)

            for index, (stream_id, event, expected) in enumerate(items):
                _stamp(event)
                if group and (stream_id != group_stream or expected is not None or len(group) >= chunk):
                    flush()
                    group, group_items = [], []
                if not group:
                    group_stream, group_expected = stream_id, ANY if expected is None else expected
                if event._client_id:
                    try:
                        dup = txn.find_duplicates(stream_id, [event])
                    except EvstoreError as exc:
                        exc.item = index
                        raise
                    if dup is not None:
                        continue
                group.append(event)
                group_items.append(index)
            if group:
                flush()
        return list(results.values())

    # -- read ---------------------------------------------------------------------

    @contextmanager
    def reading(self, snapshot: bool = False) -> Iterator[Any]:
        """A cursor on this thread's connection inside a read transaction, for the recorder's
        methods (``store.backend``); the transaction ends when the block does.  With ``snapshot``
        every statement in the block sees the same committed state (concurrent appends are not seen).

            >>> with store.reading() as cur:
            ...     store.backend.count_events(cur, 0)
        """
        raw = self._raw()
        cur = raw.cursor()
        began = False
        try:
            began = self.backend.begin_read(raw, snapshot)
            yield cur
        finally:
            cur.close()
            self.backend.end_read(raw, began)

    @contextmanager
    def reading_briefly(self) -> Iterator[Any]:
        """As :meth:`reading` (no snapshot), on this thread's connection if it holds one, else on a
        connection checked out for the block and given back after it, so the thread does not come to
        hold one (a server's opening thread may never read again).  A read command thus runs on one
        connection: on PostgreSQL each is a server process started for it."""
        held = getattr(self._local, "handle", None)
        if held is not None and not self.backend.in_transaction(held.driver_connection):
            with self.reading() as cur:
                yield cur
            return
        # (inside a transaction of this thread's, a snapshot or a write, a read of its own: ending
        # this one must not end that one)
        handle = self.connect()
        try:
            raw = handle.driver_connection
            cur = raw.cursor()
            try:
                self.backend.begin_read(raw)
                yield cur
            finally:
                cur.close()
                self.backend.end_read(raw)
        finally:
            handle.close()

    @contextmanager
    def writing(self, what: str) -> Iterator[Any]:
        """A cursor in a write transaction that does not take the append lock (caches), committed
        when the block ends and rolled back if it raises; a driver error beginning or committing
        it is translated (``what`` says what was being written)."""
        raw = self._raw()
        cur = raw.cursor()
        be = self.backend
        try:
            be.begin_plain_write(raw)
            yield cur
            be.commit(raw)
        except BaseException as exc:
            be.rollback(raw)
            if be.is_driver_error(exc):
                raise be.translate(exc, what) from exc
            raise
        finally:
            cur.close()

    def stream_info(self, stream_id: str) -> StreamState | None:
        """The stream's key, version and head hash, or None."""
        check_stream_id(stream_id)
        with self.reading() as cur:
            return self.backend.stream_state(cur, stream_id)

    def recorded_sources(self, stream_ids: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
        """The source versions each of ``stream_ids`` recorded (``meta.source.id`` of its events),
        as ``(version, identity)`` in version order; one indexed query for all of them.

            >>> store.recorded_sources(["h"])  # doctest: +SKIP
            {'h': [(1, 'file:1-a.json@9f86d0…'), (2, 'file:2-b.json@60303a…')]}
        """
        ids = [check_stream_id(s) for s in dict.fromkeys(stream_ids)]
        if not ids:
            return {}
        with self.reading() as cur:
            return self.backend.recorded_sources(cur, ids)

    def stream_head(self, stream_id: str) -> StreamHead | None:
        """The stream's key, version and dialect, or None (one indexed lookup)."""
        check_stream_id(stream_id)
        with self.reading() as cur:
            return self.backend.stream_head(cur, stream_id)

    def read_payloads(self, stream_pk: int, *, after_version: int, upto_version: int,
                      batch_size: int = 2000) -> Iterator[EventPayload]:
        """Lean stream read for replay (no meta, ids or hashes), streamed in batches."""
        return self._batches(self.backend.read_payloads, stream_pk, after_version, upto_version, batch_size)

    def _batches(self, read: Callable[[Any, int, int, int], list[_Row]], stream_pk: int, after: int, upto: int,
                 batch_size: int) -> Iterator[_Row]:
        """What ``read(cursor, stream_pk, after, hi)`` gives for versions after..upto, one read per batch."""
        while after < upto:
            hi = min(upto, after + batch_size)
            with self.reading() as cur:
                rows = read(cur, stream_pk, after, hi)
            if not rows:
                return
            yield from rows
            after = hi

    def stream_version(self, stream_id: str) -> int:
        info = self.stream_info(stream_id)
        return 0 if info is None else info.version

    def read_stream(
        self, stream_id: str, *, after_version: int | None = None, upto_version: int | None = None,
        batch_size: int = 1000,
    ) -> Iterator[RecordedEvent]:
        """Events of ``stream_id`` in version order (streamed in batches). Raises StreamNotFound."""
        info = self.stream_info(stream_id)
        if info is None:
            raise StreamNotFound(f'No stream "{stream_id}"; `evstore runs` lists the streams.')
        return self._batches(self.backend.read_stream, info.stream_pk, after_version or 0,
                             upto_version if upto_version is not None else info.version, batch_size)

    def read_all(self, *, after_position: int = 0, limit: int = 1000,
                 types: Sequence[str] | None = None) -> list[RecordedEvent]:
        """Up to ``limit`` events with ``position > after_position``, in position order."""
        with self.reading() as cur:
            return self.backend.read_all(cur, after_position, limit, types)

    def iter_all(self, *, after_position: int = 0, upto_position: int | None = None,
                 batch_size: int = 5000, types: Sequence[str] | None = None) -> Iterator[RecordedEvent]:
        """Every event after ``after_position`` (up to ``upto_position``), streamed in batches."""
        pos = after_position
        while True:
            batch = self.read_all(after_position=pos, limit=batch_size, types=types)
            for e in batch:
                if upto_position is not None and e.position > upto_position:
                    return
                yield e
            if len(batch) < batch_size:
                return
            pos = batch[-1].position

    def iter_batches(self, *, after_position: int = 0, upto_position: int | None = None,
                     batch_size: int = 5000) -> Iterator[list[RecordedEvent]]:
        """:meth:`iter_all` a batch (a list, in position order, never empty) at a time: for readers that
        work on a batch's columns rather than event by event (the analytics facts)."""
        pos = after_position
        while True:
            batch = self.read_all(after_position=pos, limit=batch_size)
            full = len(batch) == batch_size
            if upto_position is not None and batch and batch[-1].position > upto_position:
                batch = [e for e in batch if e.position <= upto_position]
                full = False
            if batch:
                yield batch
            if not full:
                return
            pos = batch[-1].position

    def iter_fact_batches(self, *, after_position: int = 0, upto_position: int,
                          batch_size: int = 5000) -> Iterator[list[FactEvent]]:
        """:meth:`iter_batches` of :class:`FactEvent`: the events after ``after_position`` up to
        ``upto_position`` without their ids, schema versions and hashes (the analytics facts' read)."""
        pos = after_position
        while pos < upto_position:
            with self.reading() as cur:
                batch = self.backend.read_facts(cur, pos, upto_position, batch_size)
            if batch:
                yield batch
            if len(batch) < batch_size:
                return
            pos = batch[-1].position

    def subscribe(self, *, after_position: int = 0, batch_size: int = 500, poll_interval: float = 0.05,
                  stop: threading.Event | None = None) -> Iterator[RecordedEvent]:
        """Catch up from ``after_position``, then wait for new events (until ``stop`` is set)."""
        pos = after_position
        while stop is None or not stop.is_set():
            batch = self.read_all(after_position=pos, limit=batch_size)
            for e in batch:
                yield e
                pos = e.position
            if len(batch) < batch_size:
                if stop is not None:
                    stop.wait(poll_interval)
                else:
                    time.sleep(poll_interval)

    def store_id(self) -> str:
        """This store's identity: a UUID created with its schema, never changed (``store_identity``).

        Derived data kept outside the database (analytics files) is bound to it, so two stores
        never share it and a deleted-and-recreated store is a new store."""
        cached = self._store_id
        if cached is None:
            with self.reading() as cur:
                cached = self._store_id = self.backend.store_id(cur)
        return cached

    @contextmanager
    def tree(self, size: int | None = None) -> Iterator[tree.Tree]:
        """The log's Merkle tree of its first ``size`` leaves (default: all of them), read in one
        transaction while the block runs (``eventstore.tree.Tree``: ``root()``, ``subtree()``).

            >>> with store.tree() as t:
            ...     proof = merkle.inclusion_proof(0, t.size, t.subtree)
        """
        with self.reading() as cur:
            last = self.backend.max_position(cur)
            if size is None:
                size = last
            elif not 0 <= size <= last:
                raise IntegrityViolation(f"The log has {last} events, fewer than the {size} asked for "
                                         "(truncated, or another store).")
            yield tree.Tree(_CursorSource(self.backend, cur), size)

    def tree_source(self, cur: Any) -> TreeSource:
        """The stored tree read through ``cur`` (a cursor of :meth:`reading`), for a
        :class:`~eventstore.tree.Tree` that shares a transaction with other reads."""
        return _CursorSource(self.backend, cur)

    def max_position(self) -> int:
        """The position of the last committed event (0 for an empty store)."""
        with self.reading() as cur:
            return self.backend.max_position(cur)

    def hash_at(self, position: int) -> bytes | None:
        """The hash of the event at ``position``, None if the log has none there: what derived data
        bound to a log position (the analytics manifest) checks, without reading the event."""
        with self.reading() as cur:
            return self.backend.hash_at(cur, position)

    def list_streams(self) -> list[StreamSummary]:
        """Every stream (its id, dialect and version), by stream id."""
        with self.reading() as cur:
            return self.backend.list_streams(cur)

    def streams_ending(self, name: str) -> list[str]:
        """The ids of the streams whose id ends in ``/name`` or ``:name``, by stream id."""
        with self.reading() as cur:
            return self.backend.streams_ending(cur, name)


def _blob_refs(names: object, type: str) -> tuple[bytes, ...]:
    """``meta.blobs`` as raw digests: a list of SHA-256 hex digests (lowercase, 64 characters)."""
    if not isinstance(names, list):
        raise InvalidEvent(f'meta.blobs of "{type}" must be a list of SHA-256 hex digests, got {names!r:.60}.')
    refs = []
    for i, name in enumerate(names):
        ref = chain.parse_digest(name)
        if ref is None:
            raise InvalidEvent(f'meta.blobs[{i}] of "{type}" is not a SHA-256 hex digest (64 lowercase hex '
                               f"digits): {name!r:.80}.")
        refs.append(ref)
    return tuple(refs)


def _checked_blobs(blobs: Mapping[str, bytes]) -> dict[bytes, bytes]:
    """``blobs`` keyed by raw digest, each key checked against its bytes (a wrong key is refused)."""
    out: dict[bytes, bytes] = {}
    for hexdigest, data in blobs.items():
        digest = chain.digest(data)
        if digest.hex() != hexdigest:
            raise InvalidEvent(f"Blob key {hexdigest!r} is not the SHA-256 of its {len(data)} bytes.")
        out[digest] = data
    return out


def _merge(a: AppendResult | None, b: AppendResult) -> AppendResult:
    if a is None:
        return b
    return AppendResult(b.stream_id, b.version, a.positions + b.positions)


class _GroupRetry(Exception):
    """The one-pass way of a group of appends met a failure of the database: run it item by item."""


class _CursorSource:
    """The stored tree as :mod:`eventstore.tree` reads it, through one cursor (one transaction)."""

    __slots__ = ("be", "cur")

    def __init__(self, be: Backend, cur: Any) -> None:
        self.be, self.cur = be, cur

    def leaf_data(self, start: int, end: int) -> list[bytes]:
        return self.be.leaf_data(self.cur, start, end)

    def nodes(self, level: int, start: int, end: int) -> list[bytes]:
        return self.be.tree_nodes(self.cur, level, start, end)

    def many(self, node_ranges: Sequence[tuple[int, int, int]], leaf_ranges: Sequence[tuple[int, int]]
             ) -> tuple[dict[tuple[int, int], bytes], dict[int, bytes]]:
        return self.be.tree_ranges(self.cur, node_ranges, leaf_ranges)


class _Transaction:
    """One write transaction holding the append lock; caches stream heads while it runs."""

    def __init__(self, store: EventStore, dialect: str | None, stream_id: str | None = None) -> None:
        self.store, self.be, self.dialect = store, store.backend, dialect
        self.first_stream = stream_id  # looked up together with the max position (one round trip)
        self.raw = store._raw()
        self.cur: Any = None
        self.heads: dict[str, list[Any]] = {}  # stream_id -> [stream_pk, version, head_hash]
        self.position = 0
        self.now = ""
        self.done = False
        self.recorded = InlineBatch()  # only filled when inline handlers exist
        self.client_ids: dict[str, tuple[str, str, bytes, bytes]] = {}  # client ids written by this txn
        self.edge: tree.Frontier | None = None  # the tree's right edge at the current size, when known
        self.nodes: list[tuple[int, int, bytes]] = []  # the tree nodes this transaction's events complete
        #: The streams read ahead (a group's, :meth:`EventStore.append_group`): one not in it does not exist.
        self.known: dict[str, StreamState] | None = None
        #: The rows and source identities :meth:`add` leaves to :meth:`flush` (None: written at once).
        self.deferred: list[tuple[Any, ...]] | None = None
        self.deferred_sources: list[tuple[int, int, str]] = []
        self.written: dict[str, RecordedIdentity] = {}  # the client ids of the deferred rows, as recorded

    def __enter__(self) -> _Transaction:
        self.cur = self.raw.cursor()
        try:
            self.position, found = self.be.begin_locked_append(self.raw, self.cur, self.first_stream)
            if found is not None and self.first_stream is not None:
                self.heads[self.first_stream] = [found.stream_pk, found.version, found.head_hash]
        except BaseException as exc:
            self.be.rollback(self.raw)
            self.cur.close()
            self._raise_if_full(exc)
            raise
        self.now = utcnow()
        return self

    def _raise_if_full(self, exc: BaseException) -> None:
        """The driver's "no space" error (rolled back already) as StorageFull, naming the database."""
        path = config.sqlite_file(self.store.url)
        if is_disk_full(exc, path):
            where = f"the disk holding {path}" if path is not None else \
                f"the database server ({self.store.backend.display_url()})"
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageFull(f"No space left on {where} ({reason}); nothing of this append was written. "
                              "The disk is full: free space and retry.") from exc

    def abandon(self) -> None:
        self.be.rollback(self.raw)
        self.done = True

    def save(self) -> tuple[Any, ...]:
        """What :meth:`restore` puts back: this transaction's own state before one item of a group."""
        return (self.position, len(self.nodes), self.edge, {k: list(v) for k, v in self.heads.items()},
                dict(self.client_ids), len(self.recorded), self.dialect,
                None if self.deferred is None else len(self.deferred), len(self.deferred_sources), dict(self.written))

    def restore(self, saved: tuple[Any, ...]) -> None:
        """Back to :meth:`save`'s state (the database side: ROLLBACK TO SAVEPOINT)."""
        position, nodes, self.edge, heads, client_ids, recorded, self.dialect, deferred, sources, written = saved
        self.position, self.heads, self.client_ids, self.written = position, heads, client_ids, written
        if self.deferred is not None:
            del self.deferred[deferred:]
        del self.deferred_sources[sources:]
        del self.nodes[nodes:]  # the tree's edge is immutable (Frontier.advance makes a new one)
        del self.recorded[recorded:]
        for key in [k for k in self.recorded.documents if k > position]:
            del self.recorded.documents[key]

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if self.done:
                return
            failed = exc
            if failed is None:
                try:
                    # The Merkle tree's nodes these events complete (add() computed them), in the same
                    # transaction, with the streams' new heads.
                    self.be.end_append(self.cur, self.nodes, [(h[0], h[1], h[2]) for h in self.heads.values()])
                    if self.store._inline and self.recorded:
                        for handler in self.store._inline:
                            handler(self.cur, self.be, self.recorded)
                    self.be.commit(self.raw)
                    if self.edge is not None:
                        self.store._tree_edge = self.edge
                    return
                except BaseException as err:
                    failed = err
            if isinstance(failed, KeyboardInterrupt):
                self.store._discard_connection()
                raise failed
            self.be.rollback(self.raw)
            if self.be.is_unique_violation(failed):
                raise EvstoreError(f"Append clashed with a concurrent write ({failed}); retry.") from failed
            if self.be.is_permission_denied(failed):
                reason = str(failed).strip().splitlines()[0]
                raise EvstoreError(f"The database refused the append ({reason}); this database role may not append "
                                   "(`evstore db roles` creates one that may).") from failed
            self._raise_if_full(failed)
            if exc is None:
                raise failed  # the commit step failed: the body's with-block saw no exception
        finally:
            self.cur.close()

    def _tree_edge(self, size: int, count: int) -> tree.Frontier | None:
        """The tree's right edge at ``size`` leaves, before ``count`` more are written: the one this
        transaction advanced, or the one this process kept if it is of this size (no one else appended
        since), else read in one round trip if the ``count`` leaves complete a node (it would read part
        of it anyway), else none (nothing to read).  Called before the rows are sent: with an edge,
        :func:`tree.new_nodes` reads nothing, so it may run while PostgreSQL's COPY is still open."""
        for edge in (self.edge, self.store._tree_edge):
            if edge is not None and edge.size == size:
                return edge
        if self.deferred is None and size % tree.FAN + count < tree.FAN:
            return None
        # With rows deferred the edge is always kept (a later item has it: only a group's first item
        # loads it); rows not written yet would be leaves it reads (not expected: the slow way then).
        if self.deferred:
            raise _GroupRetry
        return tree.Frontier.load(size, _CursorSource(self.be, self.cur))

    def _grow_tree(self, size: int, leaves: list[Any], edge: tree.Frontier | None) -> None:
        """The nodes that appending ``leaves`` (chain hashes) to the tree of ``size`` leaves completes,
        and the edge after them; from ``edge`` alone (see :meth:`_tree_edge`)."""
        nodes = tree.new_nodes(size, leaves, tree.EdgeSource(edge))
        self.nodes += nodes
        self.edge = edge.advance(leaves, nodes) if edge is not None else None

    def flush(self) -> None:
        """Write what :meth:`add` deferred: every row in one statement (a COPY from 50 rows)."""
        if self.deferred:
            self.be.insert_events(self.cur, self.deferred)
            self.deferred.clear()
        if self.deferred_sources:
            self.be.insert_source_versions(self.cur, self.deferred_sources)
            self.deferred_sources.clear()

    def _head(self, stream_id: str) -> list[Any] | None:
        head = self.heads.get(stream_id)
        if head is None:
            found = self.be.stream_state(self.cur, stream_id) if self.known is None else self.known.get(stream_id)
            if found is not None:
                head = self.heads[stream_id] = [found.stream_pk, found.version, found.head_hash]
        return head

    def add(self, stream_id: str, batch: list[NewEvent], expected_version: ExpectedVersion) -> AppendResult:
        check_stream_id(stream_id)
        if not (expected_version in (ANY, NO_STREAM) or (type(expected_version) is int and expected_version >= 0)):
            raise InvalidEvent(f'expected_version must be "any", "no stream" or an int >= 0, got {expected_version!r}.')
        head = self._head(stream_id)
        if head is None:
            if type(expected_version) is int and expected_version != 0:
                raise ConcurrencyError(stream_id, expected_version, 0)
            pk = self.be.insert_stream(self.cur, stream_id, self.dialect, chain.GENESIS, self.now)
            head = self.heads[stream_id] = [pk, 0, chain.GENESIS]
        else:
            actual = head[1]
            if expected_version == NO_STREAM or (
                    type(expected_version) is int and expected_version != actual):
                raise ConcurrencyError(stream_id, expected_version, actual)
        batch = self._dedupe(stream_id, batch)
        stream_pk, version, prev = head[0], head[1], head[2]
        position, now = self.position, self.now
        rows: list[tuple[Any, ...]] = []
        recorded = self.recorded if self.store._inline else None
        deferred = self.deferred
        sha, event_hash, blob = chain.sha256, chain.event_hash, self.be.blob
        empty_meta = blob(_EMPTY_META)
        prev_param = blob(prev)  # each hash is bound twice (hash, then the next row's prev_hash)
        fresh = iter(new_event_ids(sum(1 for e in batch if e.event_id is None)))
        # Each event's digests are salted with 16 random bytes of its own (one urandom call for
        # the batch, sliced): a digest left after an erasure confirms no guess of the payload.
        plain = self.be.plain_digests
        salts = b"" if plain else chain.salts(len(batch))
        width = chain.SALT_BYTES
        offset = 0
        naming_blobs: list[tuple[int, NewEvent]] = []  # (version, event) of events whose meta.blobs name some
        sources: list[tuple[int, int, str]] = []  # (stream_pk, version, meta.source.id)
        for e in batch:
            event_id = e.event_id
            if e.blob_refs:
                naming_blobs.append((version + 1, e))
            if event_id is None:
                event_id = next(fresh)  # not written back: the same NewEvent may be appended again
            position += 1
            version += 1
            if e.source_id is not None:
                sources.append((stream_pk, version, e.source_id))
            data, meta = e.data, e.meta
            meta_param = empty_meta if meta is _EMPTY_META else blob(meta)
            prev_hash, prev_hash_param = prev, prev_param
            if plain:
                dsha, msha = sha(data).digest(), sha(meta).digest()
                prev = event_hash(prev_hash, stream_id, version, event_id, e.type, e.schema_version,
                                  e.occurred_at, now, dsha, msha)
                prev_param = blob(prev)
                rows.append((position, stream_pk, version, event_id, e.type, e.schema_version, blob(data),
                             meta_param, e.occurred_at, now, blob(dsha), blob(msha), prev_hash_param, prev_param))
            else:
                salt = salts[offset:offset + width]
                offset += width
                dsha, msha = sha(salt + data).digest(), sha(salt + meta).digest()
                prev = event_hash(prev_hash, stream_id, version, event_id, e.type, e.schema_version,
                                  e.occurred_at, now, dsha, msha)
                prev_param = blob(prev)
                rows.append((position, stream_pk, version, event_id, e.type, e.schema_version, blob(data),
                             meta_param, e.occurred_at, now, blob(dsha), blob(msha), prev_hash_param, prev_param,
                             blob(salt)))
            if deferred is not None and e._client_id:  # what find_duplicates would read once it is written
                self.written[event_id] = RecordedIdentity(event_id, stream_id, version, position, e.type, dsha, msha,
                                                          e.occurred_at, e.schema_version, None if plain else salt)
            if recorded is not None:
                recorded.append(RecordedEvent(position, stream_id, version, event_id, e.type, e.schema_version,
                                              data, meta, e.occurred_at, now, prev_hash, prev))
                if e.document is not UNKNOWN:
                    recorded.documents[position] = e.document
        if naming_blobs:  # before anything is written: the transaction then rolls back whole
            self._check_blob_refs(stream_id, head[1], naming_blobs)
        if rows:
            # The tree's nodes are computed while the database writes the rows (PostgreSQL's COPY has
            # them by then; the server's work and the hashing overlap), from an edge read before.
            size, leaves = self.position, [r[13] for r in rows]
            edge = self._tree_edge(size, len(leaves))
            if self.deferred is not None:
                self._grow_tree(size, leaves, edge)
                self.deferred += rows
            else:
                self.be.insert_events(self.cur, rows, lambda: self._grow_tree(size, leaves, edge))
        if sources:
            if self.deferred is not None:
                self.deferred_sources += sources
            else:
                self.be.insert_source_versions(self.cur, sources)
        first = self.position + 1
        self.position = position
        head[1], head[2] = version, prev
        return AppendResult(stream_id, version, list(range(first, position + 1)))

    def _check_blob_refs(self, stream_id: str, before: int, naming: list[tuple[int, NewEvent]]) -> None:
        """Every blob the ``(version, event)`` pairs' ``meta.blobs`` name is stored (this append's
        blobs are written before its events, in the same transaction); ``before``: the stream's
        version before them."""
        present = self.be.blobs_present(self.cur, list(dict.fromkeys(r for _, e in naming for r in e.blob_refs)))
        for version, e in naming:
            for ref in e.blob_refs:
                if ref not in present:
                    raise InvalidEvent(f'Event {version - before} of the append to stream "{stream_id}" (version '
                                       f"{version}, {e.type}) names blob {ref.hex()} in meta.blobs, "
                                       "which is neither given with the append nor stored.")

    def _dedupe(self, stream_id: str, batch: list[NewEvent]) -> list[NewEvent]:
        """Drop repeats of a client event id within this transaction; a changed repeat is an error."""
        if not any(e._client_id for e in batch):
            return batch
        out = []
        for offset, e in enumerate(batch):
            if e._client_id and e.event_id is not None:
                content = (stream_id, e.type, e.data, e.meta)
                seen = self.client_ids.get(e.event_id)
                if seen is not None:
                    if seen != content:
                        exc = DuplicateEventId(f"Event id {e.event_id} appears twice in one append with different "
                                               "content; give each event its own id.")
                        exc.item = offset
                        raise exc
                    continue
                self.client_ids[e.event_id] = content
            out.append(e)
        return out

    def find_duplicates(self, stream_id: str, batch: list[NewEvent],
                        recorded: Mapping[str, RecordedIdentity] | None = None) -> AppendResult | None:
        """An AppendResult if ``batch`` was already recorded unchanged (idempotent retry); ``recorded``:
        the recorded ids read ahead for a group (else they are read now)."""
        ids = [e.event_id for e in batch if e.event_id is not None]
        if recorded is None:
            found = {r.event_id: r for r in self.be.find_event_ids(self.cur, ids)}
        else:
            found = {i: recorded[i] for i in ids if i in recorded}
        if not found:
            return None
        for e in batch:
            r = found.get(e.event_id or "")
            if r is None:
                raise DuplicateEventId(
                    f'Batch for "{stream_id}" mixes new events with already-recorded event ids; '
                    "retry the original batch unchanged."
                )
            # An erased event's salt is gone with its payload: its digests confirm no content (by
            # design), so a retry matching its header is taken as the retry it is, never recorded again.
            same = (r.stream_id == stream_id and r.type == e.type and r.occurred_at == e.occurred_at
                    and r.schema_version == e.schema_version
                    and ((r.erased and r.salt is None) or (r.data_sha256 == chain.payload_digest(e.data, r.salt)
                                                           and r.meta_sha256 == chain.payload_digest(e.meta, r.salt))))
            if not same:
                raise DuplicateEventId(
                    f'Event id {e.event_id} was already recorded as "{r.type}" in stream "{r.stream_id}" '
                    f"version {r.version} with different content; use a new event id."
                )
        rows = sorted(found.values(), key=lambda r: r.position)
        return AppendResult(stream_id, max(r.version for r in rows), [r.position for r in rows], duplicate=True)
