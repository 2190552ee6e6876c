"""Who wrote this state?  Each ingested state version linked to the agent session, message and
tool call that wrote it (inline projection ``writers``, tables ``proj_file_writes`` and
``proj_state_versions``).

Two indexes, kept inline with every append like the runs index:

* ``proj_file_writes``: one row per tool call of a session that wrote a *state file* (a file
  whose name some dialect lists in ``Dialect.state_file_names``), from the events a session
  dialect describes with :meth:`~eventstore.dialects.base.Dialect.file_writes` (the claude
  dialect: ``Write``/``Edit``/``MultiEdit`` tool uses and their results): the session stream, the
  call id (``tool_use_id``), the message (line uuid) holding it, the path, and the SHA-256 of the
  file right after the call when the transcript gives it (Write's ``content``; Edit/MultiEdit:
  ``toolUseResult.originalFile`` with the edits applied).
* ``proj_state_versions``: one row per ingested state version (the event closing a snapshot, its
  ``meta.source``): stream, version, file, the SHA-256 of its bytes, its time, and the session
  and tool call a Claude Code hook recorded with it (``meta.source.claude``).

Nothing is rewritten: events stay as they were, and the link is computed from the two indexes
when it is read (:func:`writers`), so a transcript ingested after its state versions, or state
versions ingested after their transcript, give the same answer.  For each version, in order:

1. **hook**: the hook that ingested it named the session and tool call (the message is found
   in the transcript, once ingested, by the call id);
2. **content**: a call on the same path (equal, or one a suffix of the other at a ``/``) whose
   resulting file has this version's SHA-256 (the latest such call made at or before the
   version's time, else the earliest after it); a call serves one version only.  Then, for the
   versions still unlinked, the same with CRLF turned into LF on both sides: Claude Code hands
   its tools a file's text with LF line endings and writes it back in the file's own style, so a
   ``Write`` of LF content can leave a CRLF file (and the reverse).  Such a link says so
   (``line_endings_normalised``): the bytes are the call's but for their line endings;
3. **path+time**: otherwise, the latest call on the same path made after the previous version
   and at or before this one, among calls whose result the transcript does not give (a call
   whose result is known and differs wrote something else, and is never used this way).

A call that reported an error wrote nothing and is never used.

    >>> writers(store, "PROJ-7")[3].to_dict()
    {'session_id': '7f0c…', 'stream': '7f0c…', 'message': 'a9', 'tool_use_id': 'toolu_05',
     'tool_name': 'Write', 'established_by': 'content'}
"""

from __future__ import annotations

import bisect
import functools
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from eventstore import codec
from eventstore.backends import Backend
from eventstore.dialects import available, get_dialect, registered
from eventstore.dialects.base import Dialect, FileWrite, parse_time
from eventstore.errors import EvstoreError
from eventstore.events import decode_event
from eventstore.store import EventStore, RecordedEvent
from projections import engine

if TYPE_CHECKING:
    from sqlalchemy import MetaData, Table


#: proj_file_writes' indexes (name, columns); version 3 added them in place of one on ``name`` alone.
_FILE_WRITES_INDEXES = (("ix_proj_file_writes_name_sha256", ("name", "sha256")),
                        ("ix_proj_file_writes_call_id", ("call_id",)),
                        ("ix_proj_file_writes_sha256", ("sha256",)),
                        ("ix_proj_file_writes_lf_sha256", ("lf_sha256",)))
#: proj_state_versions' indexes; version 4 added the two by content (bytes' SHA-256, then the file name), by
#: which the versions every stream's writers can take are looked up (``_matchable``) instead of read all.
#: Two are partial (the rows whose column is set): searched for ``hook_session IS NOT NULL``, and never for the
#: versions whose ``lf_sha256`` IS NULL (most of them, which an index on it would offer to read by that).
_STATE_VERSIONS_INDEXES = (("ix_proj_state_versions_name", ("name",), None),
                           ("ix_proj_state_versions_hook_session", ("hook_session",), "hook_session IS NOT NULL"),
                           ("ix_proj_state_versions_sha256_name", ("sha256", "name"), None),
                           ("ix_proj_state_versions_lf_sha256_name", ("lf_sha256", "name"), "lf_sha256 IS NOT NULL"))


@functools.cache
def _metadata() -> MetaData:
    """The two tables as SQLAlchemy Core describes them: built on first use (creating the tables,
    the readers below), so an append that keeps the index current never imports SQLAlchemy."""
    from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, SmallInteger, String, Table, text

    from eventstore.schema import NAMING

    md = MetaData(naming_convention=NAMING)
    file_writes = Table(
        "proj_file_writes",
        md,
        Column("stream_id", String(255), primary_key=True),  # the session's stream
        Column("call_id", String(255), primary_key=True),
        Column("name", String(255), nullable=True),  # the path's last component
        Column("path", String(4000), nullable=True),
        Column("sha256", String(64), nullable=True),
        Column("lf_sha256", String(64), nullable=True),  # sha256 with CRLF as LF, when that differs
        Column("how", String(16), nullable=True),
        Column("tool", String(64), nullable=True),
        Column("message", String(255), nullable=True),
        Column("at", String(64), nullable=True),
        Column("failed", SmallInteger, nullable=True),
        Column("position", BigInteger, nullable=False),
    )
    # The look-ups of one run's writers (_load): by call id (the hook's), by the bytes' SHA-256 (plain
    # and with CRLF as LF), by file name among calls whose result is unknown (name, sha256 IS NULL).
    for index in _FILE_WRITES_INDEXES:
        Index(index[0], *(file_writes.c[c] for c in index[1]))
    state_versions = Table(
        "proj_state_versions",
        md,
        Column("stream_id", String(255), primary_key=True),
        Column("version", Integer, primary_key=True),
        Column("name", String(255), nullable=True),
        Column("path", String(4000), nullable=True),
        Column("sha256", String(64), nullable=True),
        Column("lf_sha256", String(64), nullable=True),  # sha256 with CRLF as LF, when that differs
        Column("at", String(32), nullable=False),
        Column("hook_session", String(255), nullable=True),
        Column("hook_call", String(255), nullable=True),
        Column("hook_tool", String(64), nullable=True),
        Column("position", BigInteger, nullable=False),
    )
    for name, cols, where in _STATE_VERSIONS_INDEXES:
        partial: dict[str, Any] = {} if where is None else {"sqlite_where": text(where), "postgresql_where": text(where)}
        Index(name, *(state_versions.c[c] for c in cols), **partial)
    return md


def __getattr__(name: str) -> Any:  # file_writes_table, state_versions_table: made on first use
    if name in ("file_writes_table", "state_versions_table"):
        return _metadata().tables["proj_" + name.removesuffix("_table")]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_WRITE_COLUMNS = ("stream_id", "call_id", "name", "path", "sha256", "lf_sha256", "how", "tool", "message", "at",
                  "failed", "position")
_UPSERT_WRITE = (
    "INSERT INTO proj_file_writes ({cols}) VALUES ({marks}) ON CONFLICT (stream_id, call_id) DO UPDATE SET "
    "name = COALESCE(excluded.name, proj_file_writes.name), path = COALESCE(excluded.path, proj_file_writes.path), "
    "how = CASE WHEN excluded.sha256 IS NULL THEN proj_file_writes.how ELSE excluded.how END, "
    "sha256 = COALESCE(excluded.sha256, proj_file_writes.sha256), "
    "lf_sha256 = CASE WHEN excluded.sha256 IS NULL THEN proj_file_writes.lf_sha256 ELSE excluded.lf_sha256 END, "
    "tool = COALESCE(excluded.tool, proj_file_writes.tool), "
    "message = COALESCE(excluded.message, proj_file_writes.message), "
    "at = COALESCE(proj_file_writes.at, excluded.at), failed = COALESCE(excluded.failed, proj_file_writes.failed)"
)
_FAIL_WRITE = "UPDATE proj_file_writes SET failed = 1 WHERE stream_id = {p} AND call_id = {p}"
_VERSION_COLUMNS = ("stream_id", "version", "name", "path", "sha256", "lf_sha256", "at", "hook_session", "hook_call",
                    "hook_tool", "position")
_INSERT_VERSION = ("INSERT INTO proj_state_versions ({cols}) VALUES ({marks}) "
                   "ON CONFLICT (stream_id, version) DO NOTHING")


@functools.cache
def _sql(template: str, columns: tuple[str, ...], p: str) -> str:
    return template.format(cols=", ".join(columns), marks=", ".join([p] * len(columns)), p=p)


def _short(value: Any, length: int) -> str | None:
    """A string as its column holds it on every backend (no NUL, cut to length), else None."""
    if not isinstance(value, str) or not value:
        return None
    return value.replace("\x00", "\ufffd")[:length]


def _name(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/"))


def state_file_names() -> frozenset[str]:
    """Every file name some dialect recognises as its state file."""
    names: set[str] = set()
    for name in available():
        try:
            names.update(get_dialect(name).state_file_names)
        except EvstoreError:  # a plugin that fails to import names nothing
            continue
    return frozenset(names)


class WritersIndex(engine.Projection):
    """Inline projection maintaining ``proj_file_writes`` and ``proj_state_versions``."""

    name = "writers"
    version = 4  # 2: lf_sha256 in both tables; 3: proj_file_writes' indexes; 4: proj_state_versions' (in place)
    event_types = None  # state versions close snapshots of every dialect
    inline = True

    def __init__(self) -> None:
        self._types: dict[str, Dialect | None] = {}
        self._names: frozenset[str] | None = None

    def tables(self) -> list[Table]:
        return list(_metadata().sorted_tables)

    def upgrade_ddl(self, backend: str, stored_version: int) -> list[str] | None:
        if stored_version not in (2, 3):
            return None  # version 1 had no lf_sha256: rebuild
        added = [("proj_file_writes", name, cols, None) for name, cols in _FILE_WRITES_INDEXES]
        added += [("proj_state_versions", *index) for index in _STATE_VERSIONS_INDEXES]
        return ["DROP INDEX IF EXISTS ix_proj_file_writes_name",
                "DROP INDEX IF EXISTS ix_proj_state_versions_hook_session",  # partial since version 4
                *(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({', '.join(cols)})"
                  + ("" if where is None else f" WHERE {where}") for table, name, cols, where in added)]

    def _dialect_for(self, event_type: str) -> Dialect | None:
        """The dialect describing the file writes of ``event_type`` events, if any.  Only the
        dialect the type is named after (``<dialect>.<kind>``) is imported: an ingest of state
        files never loads the session dialects."""
        try:
            return self._types[event_type]
        except KeyError:
            pass
        found = None
        prefix = event_type.split(".", 1)[0]
        if prefix in registered():
            try:
                d = get_dialect(prefix)
            except EvstoreError:  # a broken plugin describes nothing
                d = None
            if d is not None and event_type in d.file_write_types:
                found = d
        self._types[event_type] = found
        return found

    def _state_names(self) -> frozenset[str]:
        if self._names is None:
            self._names = state_file_names()
        return self._names

    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        writes: list[tuple[Any, ...]] = []
        failed: list[tuple[str, str]] = []
        versions: list[tuple[Any, ...]] = []
        for e in events:
            if e.erased:  # purged or erased: nothing left to read who wrote what
                continue
            d = self._dialect_for(e.type)
            if d is not None:
                for w in d.file_writes(decode_event(e.type, e.schema_version, e.data)):
                    self._write_row(e, w, writes, failed)
            elif b'"source"' in e.meta and e.type != "document.removed":
                row = self._version_row(e)
                if row is not None:
                    versions.append(row)
        p = backend.p
        if writes:
            cur.executemany(_sql(_UPSERT_WRITE, _WRITE_COLUMNS, p), writes)
        if failed:
            cur.executemany(_sql(_FAIL_WRITE, (), p), failed)
        if versions:
            cur.executemany(_sql(_INSERT_VERSION, _VERSION_COLUMNS, p), versions)

    def _write_row(self, e: RecordedEvent, w: FileWrite, rows: list[tuple[Any, ...]],
                   failed: list[tuple[str, str]]) -> None:
        call = _short(w.call_id, 255)
        if call is None:
            return
        if w.path is None:  # completes a call recorded before (its result): only its failure matters
            if w.failed:
                failed.append((e.stream_id, call))
            return
        name = _name(w.path)
        if name not in self._state_names():
            return
        at = parse_time(w.at)
        rows.append((e.stream_id, call, _short(name, 255), _short(w.path, 4000), _short(w.sha256, 64),
                     _short(w.lf_sha256, 64) if w.sha256 else None, _short(w.how, 16), _short(w.tool, 64), _short(w.message, 255),
                     None if at is None else at.isoformat(), None if w.failed is None else int(w.failed),
                     e.position))

    @staticmethod
    def _version_row(e: RecordedEvent) -> tuple[Any, ...] | None:
        meta = codec.decode(e.meta)
        source = meta.get("source") if isinstance(meta, dict) else None
        if not isinstance(source, dict):
            return None
        snapshot = meta.get("snapshot")
        hook = source.get("claude")
        hook = hook if isinstance(hook, dict) else {}
        path = source.get("file")
        if not isinstance(path, str) and not hook:
            return None
        sha = snapshot.get("sha256") if isinstance(snapshot, dict) else hook.get("sha256")
        lf = snapshot.get("lf_sha256") if isinstance(snapshot, dict) else None
        name = _name(path) if isinstance(path, str) else None
        return (e.stream_id, e.version, _short(name, 255), _short(path, 4000), _short(sha, 64), _short(lf, 64),
                e.occurred_at or e.recorded_at, _short(hook.get("session_id"), 255),
                _short(hook.get("tool_use_id"), 255), _short(hook.get("tool_name"), 64), e.position)


WRITERS = engine.register(WritersIndex())


def attach(store: EventStore) -> WritersIndex:
    """Keep the writers index current on every append through ``store`` (creates it if needed)."""
    proj = WritersIndex()
    engine.attach(store, proj)
    return proj


def refresh(store: EventStore) -> int:
    """Apply events appended without the index attached; returns their count."""
    with engine.ProjectionRunner(store) as runner:
        return runner.catch_up(WRITERS)


# ---------------------------------------------------------------- matching


#: How ``evstore log`` words each way a writer is established.
HOW = {"hook": "from the hook", "content": "content match", "path+time": "path and time only"}


@dataclass(frozen=True)
class Writer:
    """Who wrote one state version, and how that was established ("hook", "content", "path+time";
    ``line_endings_normalised``: a content match of the bytes with CRLF turned into LF, not of the
    bytes themselves)."""

    session_id: str | None
    stream: str | None  # the transcript stream holding the call (a subagent's is ``<session>/agent-<id>``)
    message: str | None
    tool_use_id: str | None
    tool_name: str | None
    established_by: str
    line_endings_normalised: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "stream": self.stream, "message": self.message,
                "tool_use_id": self.tool_use_id, "tool_name": self.tool_name,
                "established_by": self.established_by, "line_endings_normalised": self.line_endings_normalised}

    def how(self) -> str:
        """How it was established, in ``evstore log``'s words."""
        how = HOW.get(self.established_by, self.established_by)
        return f"{how}, line endings normalised" if self.line_endings_normalised else how

    def line(self) -> str:
        """How ``evstore log`` says it."""
        return (f"written by session {self.session_id}, message {self.message or '?'}, tool call "
                f"{self.tool_use_id or '?'} ({self.tool_name or '?'}; {self.how()})")


@dataclass(frozen=True)
class _Version:
    stream_id: str
    version: int
    path: str | None
    sha256: str | None
    at: datetime | None
    hook_session: str | None
    hook_call: str | None
    hook_tool: str | None
    lf_sha256: str | None = None  # sha256 of the bytes with CRLF as LF (None: the same as sha256)


@dataclass(frozen=True)
class _Call:
    stream_id: str
    call_id: str
    path: str | None
    sha256: str | None
    tool: str | None
    message: str | None
    at: datetime | None
    failed: bool
    lf_sha256: str | None = None  # as _Version's


def session_of(stream_id: str) -> str:
    """The session a transcript stream belongs to (a subagent's stream ``<session>/agent-<id>``)."""
    return stream_id.split("/", 1)[0]


def same_file(a: str | None, b: str | None) -> bool:
    """Whether two recorded paths can name one file: equal, or (one relative) one ends with the
    other at a ``/`` (``/home/ana/p/agent-state.json`` and ``p/agent-state.json``)."""
    if not a or not b:
        return False
    a, b = posixpath.normpath(a.replace("\\", "/")), posixpath.normpath(b.replace("\\", "/"))
    if a == b:
        return True
    if a.startswith("/") and b.startswith("/"):
        return False
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return not shorter.startswith("/") and longer.endswith("/" + shorter.removeprefix("./"))


def _when(t: datetime | None) -> tuple[int, float]:
    return (0, 0.0) if t is None else (1, t.timestamp())


def match(versions: Sequence[_Version], calls: Sequence[_Call]) -> dict[tuple[str, int], Writer]:
    """The writer of each version of ``versions`` (one or more streams, in version order) among
    ``calls`` (see the module docstring for the rules, applied in that order)."""
    by_call: dict[str, list[_Call]] = {}
    by_sha: dict[str, list[_Call]] = {}
    by_lf: dict[str, list[_Call]] = {}  # by the SHA-256 of the bytes with CRLF as LF
    unknown: dict[str, list[_Call]] = {}  # calls whose result the transcript does not give, by file name
    for c in calls:
        if c.failed:
            continue
        by_call.setdefault(c.call_id, []).append(c)
        if c.sha256 is not None:
            by_sha.setdefault(c.sha256, []).append(c)
            by_lf.setdefault(c.lf_sha256 or c.sha256, []).append(c)
        elif c.at is not None and c.path:
            unknown.setdefault(_name(c.path), []).append(c)
    for group in unknown.values():
        group.sort(key=lambda c: _when(c.at))
    times = {name: [_when(c.at) for c in group] for name, group in unknown.items()}
    out: dict[tuple[str, int], Writer] = {}
    taken: set[tuple[str, str]] = set()

    def writer(c: _Call, how: str, normalised: bool = False) -> Writer:
        taken.add((c.stream_id, c.call_id))
        return Writer(session_of(c.stream_id), c.stream_id, c.message, c.call_id, c.tool, how, normalised)

    for v in versions:  # 1. the hook said so
        if v.hook_session is None and v.hook_call is None:
            continue
        found = [c for c in by_call.get(v.hook_call or "", []) if session_of(c.stream_id) == v.hook_session]
        if found:
            c = found[0]
            taken.add((c.stream_id, c.call_id))
            out[(v.stream_id, v.version)] = Writer(v.hook_session, c.stream_id, c.message, v.hook_call,
                                                   v.hook_tool or c.tool, "hook")
        else:
            out[(v.stream_id, v.version)] = Writer(v.hook_session, v.hook_session, None, v.hook_call, v.hook_tool,
                                                   "hook")
    for normalised in (False, True):  # 2. the bytes the call left are the version's (then but for CRLF/LF)
        for v in versions:
            if (v.stream_id, v.version) in out or v.sha256 is None:
                continue
            found = by_lf.get(v.lf_sha256 or v.sha256, []) if normalised else by_sha.get(v.sha256, [])
            same = [c for c in found if (c.stream_id, c.call_id) not in taken and same_file(c.path, v.path)
                    and (c.sha256 != v.sha256) == normalised]
            if not same:
                continue
            at = _when(v.at)
            before = [c for c in same if _when(c.at) <= at]
            best = (max(before, key=lambda c: (_when(c.at), c.path == v.path)) if before
                    else min(same, key=lambda c: (_when(c.at), c.path != v.path)))
            out[(v.stream_id, v.version)] = writer(best, "content", normalised)
    previous: dict[str, datetime | None] = {}
    for v in versions:  # 3. the same path, between the previous version and this one
        prev_at = previous.get(v.stream_id)
        previous[v.stream_id] = v.at
        if (v.stream_id, v.version) in out or v.at is None:
            continue
        name = _name(v.path or "")
        group = unknown.get(name, [])
        # The calls made after the previous version and at or before this one, latest first.
        hi = bisect.bisect_right(times.get(name, []), _when(v.at))
        lo = 0 if prev_at is None else bisect.bisect_right(times[name], _when(prev_at)) if group else 0
        for c in reversed(group[lo:hi]):
            if (c.stream_id, c.call_id) not in taken and same_file(c.path, v.path):
                out[(v.stream_id, v.version)] = writer(c, "path+time")
                break
    return out


def _chunks(items: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


#: Rows of one read of this projection's tables (plain SQL: ``log`` shows writers).
_rows = engine.read_rows


def _marks(p: str, n: int) -> str:
    return ", ".join([p] * n)


_CALL_COLUMNS = "stream_id, call_id, path, sha256, tool, message, at, failed, lf_sha256"
#: Calls in the order they were first recorded (the order ties are broken in, whichever rows are read).
_CALL_ORDER = " ORDER BY position, stream_id, call_id"
_VERSION_SELECT = ("SELECT stream_id, version, path, sha256, at, hook_session, hook_call, hook_tool, lf_sha256 "
                   "FROM proj_state_versions")


def _call(r: Sequence[Any]) -> _Call:
    return _Call(r[0], r[1], r[2], r[3], r[4], r[5], parse_time(r[6]), bool(r[7]), r[8])


def _version(r: Sequence[Any]) -> _Version:
    return _Version(r[0], r[1], r[2], r[3], parse_time(r[4]), r[5], r[6], r[7], r[8])


#: The versions :func:`match` can give a writer, of every stream, are chosen in the database
#: (:func:`_matchable`): a hook named its session; or a call wrote a file of its name and either left the
#: version's bytes (rule 2, then but for line endings) or the stream has a version of a name a call of unknown
#: result wrote (rule 3 reads each version's previous one in its stream, so every such version of those
#: streams is read).  The others take no call and are no previous version of one that can: reading every
#: version of a state file's name (every orchestrator run's) cost each report of a store with sessions what
#: the whole store costs.
_NAMED = "name IN (SELECT name FROM proj_file_writes)"
_WRITTEN = "SELECT DISTINCT {key} FROM proj_file_writes WHERE sha256 IS NOT NULL"


def _matchable(store: EventStore) -> list[tuple[Any, ...]]:
    """The rows of the versions :func:`match` can give a writer, of every stream, in (stream, version) order.

    The calls' keys are read first (a few per session), then the versions each key names, by an index
    (the hook's session; the bytes' SHA-256 and the name; the stream), as lists of values: as one
    condition of ORs and subqueries over the calls, SQLite read every version of the store to test it
    (0.2 s at 10^6 events), and PostgreSQL, whose statistics of a store of copied runs say that each
    SHA-256 is in hundreds of versions, hashed them all (0.6 s, most of it compiling that plan)."""
    p = store.backend.p
    found: dict[tuple[str, int], tuple[Any, ...]] = {}

    def add(condition: str, params: Sequence[Any] = ()) -> None:
        for r in _rows(store, f"{_VERSION_SELECT} WHERE {condition}", params):
            found[(r[0], r[1])] = tuple(r)

    add("hook_session IS NOT NULL")
    plain = [r[0] for r in _rows(store, _WRITTEN.format(key="sha256"), ())]
    either = [r[0] for r in _rows(store, _WRITTEN.format(key="COALESCE(lf_sha256, sha256)"), ())]
    for column, keys, more in (("sha256", plain, ""),
                               # COALESCE(lf_sha256, sha256) among ``either``, in the halves an index searches
                               ("lf_sha256", either, ""), ("sha256", either, " AND lf_sha256 IS NULL")):
        for chunk in _chunks(sorted(keys)):
            add(f"{column} IN ({_marks(p, len(chunk))}){more} AND {_NAMED}", chunk)
    unknown = [r[0] for r in _rows(store, "SELECT DISTINCT name FROM proj_file_writes WHERE sha256 IS NULL AND "
                                          "at IS NOT NULL AND name IS NOT NULL", ())]
    streams: set[str] = set()
    for chunk in _chunks(sorted(unknown)):
        streams.update(r[0] for r in _rows(store, "SELECT DISTINCT stream_id FROM proj_state_versions WHERE name IN "
                                                  f"({_marks(p, len(chunk))})", chunk))
    for chunk in _chunks(sorted(streams)):
        add(f"stream_id IN ({_marks(p, len(chunk))}) AND {_NAMED}", chunk)
    return [found[key] for key in sorted(found)]


def _load(store: EventStore, stream_ids: Sequence[str] | None) -> tuple[list[_Version], list[_Call]]:
    """The versions of ``stream_ids`` (None: every stream) that a call could have written, and the
    calls :func:`match` can give them: of given streams, only the calls one of their versions can
    look up (by the hook's call id, by SHA-256, by file name among calls whose result is unknown),
    each an indexed look-up, so one run's writers cost the same in a store of many sessions."""
    p = store.backend.p
    if stream_ids is None:
        calls = [_call(r) for r in _rows(store, f"SELECT {_CALL_COLUMNS} FROM proj_file_writes{_CALL_ORDER}", ())]
        return [_version(r) for r in _matchable(store)], calls
    # A version some call could have written: the hook named one, or some call wrote a file of its name.
    where = ("(hook_session IS NOT NULL OR EXISTS (SELECT 1 FROM proj_file_writes f "
             "WHERE f.name = proj_state_versions.name))")
    rows = []
    for chunk in _chunks(sorted(set(stream_ids))):
        rows.extend(_rows(store, f"{_VERSION_SELECT} WHERE stream_id IN ({_marks(p, len(chunk))}) AND {where}", chunk))
    rows.sort(key=lambda r: (r[0], r[1]))
    versions = [_version(r) for r in rows]
    found: dict[tuple[str, str], tuple[Any, ...]] = {}
    for i in range(0, len(versions), 150):  # at most 750 parameters a statement
        some = versions[i:i + 150]
        keys = {  # what match() looks calls up by, for these versions
            "call_id": {v.hook_call for v in some if v.hook_call},
            "sha256": {k for v in some if v.sha256 for k in (v.sha256, v.lf_sha256) if k},
            "lf_sha256": {v.lf_sha256 or v.sha256 for v in some if v.sha256},
        }
        file_names = {_name(v.path) for v in some if v.path and v.at is not None} - {""}
        terms, params = [], []
        for column, values in keys.items():
            if values:
                terms.append(f"{column} IN ({_marks(p, len(values))})")
                params.extend(sorted(values))
        if file_names:
            terms.append(f"(name IN ({_marks(p, len(file_names))}) AND sha256 IS NULL)")
            params.extend(sorted(file_names))
        if terms:
            for r in _rows(store, f"SELECT {_CALL_COLUMNS}, position FROM proj_file_writes WHERE "
                                  + " OR ".join(terms), params):
                found[(r[0], r[1])] = tuple(r)
    ordered = sorted(found.values(), key=lambda r: (r[9], r[0], r[1]))
    return versions, [_call(r) for r in ordered]


def attribute(store: EventStore, stream_ids: Sequence[str] | None = None, *,
              fresh: bool = True) -> dict[tuple[str, int], Writer]:
    """The writer of every state version of ``stream_ids`` (None: of every stream) where known,
    keyed by (stream, version)."""
    if fresh:
        refresh(store)
    versions, calls = _load(store, stream_ids)
    return match(versions, calls)


def writers(store: EventStore, stream_id: str, *, fresh: bool = True) -> dict[int, Writer]:
    """The writer of each version of ``stream_id`` where known, keyed by version."""
    return {version: w for (_, version), w in attribute(store, [stream_id], fresh=fresh).items()}


def wrote(store: EventStore, session_stream: str, *, fresh: bool = True) -> dict[str, list[tuple[str, int, Writer]]]:
    """The other way round: for each tool call of ``session_stream`` (a transcript) that wrote a
    state version, ``[(stream, version, writer), ...]``, keyed by call id."""
    if fresh:
        refresh(store)
    out: dict[str, list[tuple[str, int, Writer]]] = {}
    streams = _streams_written(store, session_stream)
    if not streams:
        return out
    for (sid, version), found in sorted(attribute(store, streams, fresh=False).items()):
        if found.stream == session_stream and found.tool_use_id:
            out.setdefault(found.tool_use_id, []).append((sid, version, found))
    return out


def _streams_written(store: EventStore, session_stream: str) -> list[str]:
    """The streams with a version a call of ``session_stream`` can be the writer of (:func:`match`): one its
    hook named; one whose bytes (or with CRLF as LF) a call left, of a name the session wrote; or one of a name
    a call of unknown result wrote (rule 3, by time).  Each an index search from the session's calls: every
    stream with a version of a name the session wrote (every orchestrator run's state file) grew with the
    store, 1.7 s of a session's ``log`` at 10^6 events."""
    p = store.backend.p
    calls = _rows(store, f"SELECT name, sha256, lf_sha256, at FROM proj_file_writes WHERE stream_id = {p}",
                  (session_stream,))
    keys = sorted({k for _name, sha, lf, _at in calls if sha for k in (sha, lf or sha)})
    unknown = sorted({name for name, sha, _lf, at in calls if name and sha is None and at is not None})
    named = f"name IN (SELECT name FROM proj_file_writes WHERE stream_id = {p})"
    found = {r[0] for r in _rows(store, f"SELECT DISTINCT stream_id FROM proj_state_versions WHERE hook_session = {p}",
                                 (session_of(session_stream),))}
    for where, values, more in ((f"sha256 IN ({{marks}}) AND {named}", keys, [session_stream]),
                                (f"lf_sha256 IN ({{marks}}) AND {named}", keys, [session_stream]),
                                ("name IN ({marks})", unknown, [])):
        for chunk in _chunks(values):
            found.update(r[0] for r in _rows(store, "SELECT DISTINCT stream_id FROM proj_state_versions WHERE "
                                                    + where.format(marks=_marks(p, len(chunk))), [*chunk, *more]))
    return sorted(found)


def state_versions(store: EventStore, stream_id: str, *, upto_version: int | None = None,
                   fresh: bool = True) -> list[dict[str, Any]]:
    """Each ingested state version of ``stream_id`` (up to ``upto_version``): its version, time,
    file, SHA-256 and ``written_by`` (:class:`Writer`, None when unknown)."""
    found = writers(store, stream_id, fresh=fresh)
    p = store.backend.p
    sql = f"SELECT version, at, path, sha256 FROM proj_state_versions WHERE stream_id = {p}"
    params: list[Any] = [stream_id]
    if upto_version is not None:
        sql += f" AND version <= {p}"
        params.append(upto_version)
    rows = _rows(store, sql + " ORDER BY version", params)
    return [{"version": r[0], "at": r[1], "file": r[2], "sha256": r[3],
             "written_by": found[r[0]].to_dict() if r[0] in found else None} for r in rows]


def run_sessions(store: EventStore, stream_ids: Sequence[str] | None = None, *,
                 fresh: bool = True) -> dict[str, list[str]]:
    """The sessions that wrote some version of each run (stream), in order of first appearance."""
    out: dict[str, list[str]] = {}
    for (sid, _), w in sorted(attribute(store, stream_ids, fresh=fresh).items()):
        if w.session_id and w.session_id not in out.setdefault(sid, []):
            out[sid].append(w.session_id)
    return out


__all__ = ["HOW", "WRITERS", "Writer", "WritersIndex", "attach", "attribute", "match", "refresh", "run_sessions",
           "same_file", "session_of", "state_file_names", "state_versions", "writers", "wrote"]
# and file_writes_table, state_versions_table: made on first use (__getattr__)
