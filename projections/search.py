"""Full-text search over the log (``evstore search``, the search box of ``evstore serve``).

An async projection, ``search``, keeps one row per event in ``proj_search``: where it is (stream,
version, transcript line), what it is (type, dialect, kind: ``prompt``, ``assistant``,
``tool_use``, ``tool_result``, ``hook`` or ``event``), when, and its words as the event's dialect
says (:meth:`~eventstore.dialects.base.Dialect.search_text`: a transcript line's prompt, assistant
text, tool input or output with its blobs put back; a hook call's input; a snapshot's or a patch's
values, so a state document is searched version by version through the changes that made it).

The databases' own full-text engines index it: SQLite FTS5 (a contentless table, the ``unicode61``
tokenizer with diacritics folded; snippets made from the hits' events) and PostgreSQL ``tsvector``
(a stored ``to_tsvector('simple', ...)`` column of the text cut into letters and digits, with a GIN
index on it: no stemming, and words as FTS5 sees them).  The projection catches up
like the others, writes rows and checkpoint in one transaction, and ``evstore projections rebuild
search`` rebuilds it from the log; a query never scans payloads.

Queries are words (all must occur), ``"quoted phrases"`` and ``prefix*``; hits come newest first
(most recently recorded), each with a snippet whose matches are marked by :data:`MARK_START` and
:data:`MARK_END`.

    >>> hits = search(store, "discount field", stream="PROJ-42")
    >>> hits[0].stream_id, hits[0].version, hits[0].lineno
    ('7f0c2a52-...', 14, 12)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore.backends import Backend
from eventstore.dialects import get_dialect, registered
from eventstore.dialects.base import json_words
from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent
from projections.engine import Projection, ProjectionRunner, register

if TYPE_CHECKING:
    from sqlalchemy import MetaData, Table

MARK_START, MARK_END = "\x02", "\x03"
#: Characters of an event's words indexed (a larger payload is indexed up to here).
MAX_BODY = 200_000
_meta = msgspec.json.Decoder()


@functools.cache
def _metadata() -> MetaData:
    from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

    from eventstore.schema import NAMING

    md = MetaData(naming_convention=NAMING)
    Table("proj_search", md,
          # on SQLite INTEGER PRIMARY KEY: the position is the table's rowid (one b-tree, not a table
          # and an index beside it)
          Column("position", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=False),
          Column("stream_id", String(500), nullable=False),
          Column("version", BigInteger, nullable=False),
          Column("lineno", BigInteger),
          Column("type", String(200), nullable=False),
          Column("dialect", String(100)),
          Column("kind", String(40), nullable=False),
          Column("occurred_at", String(40)),  # ISO 8601 UTC (the source's time, else when recorded)
          # the words (PostgreSQL: what its GIN index and ts_headline read); NULL on SQLite, whose FTS5
          # index is contentless and whose snippets are made from the events of the hits (_Sqlite)
          Column("body", Text),
          Index("ix_proj_search_stream", "stream_id", "position"))
    return md


#: ``proj_search`` written out as SQLAlchemy compiles :func:`_metadata` (``tests/test_search.py`` checks
#: they agree), so that building the index need not import SQLAlchemy.
_TABLE_DDL = """CREATE TABLE proj_search (
\tposition {position} NOT NULL, \n\tstream_id VARCHAR(500) NOT NULL, \n\tversion BIGINT NOT NULL, \n\tlineno BIGINT, \n\ttype VARCHAR(200) NOT NULL, \n\tdialect VARCHAR(100), \n\tkind VARCHAR(40) NOT NULL, \n\toccurred_at VARCHAR(40), \n\tbody TEXT, \n\tCONSTRAINT pk_proj_search PRIMARY KEY (position)
)"""
_INDEX_DDL = "CREATE INDEX ix_proj_search_stream ON proj_search (stream_id, position)"

_META_DIALECT = b'{"dialect":"'


class _Loadable:
    """The dialects that load (:func:`eventstore.dialects.available`), each imported when first asked
    about: a rebuild imports the dialects its events name, not every one registered."""

    def __init__(self) -> None:
        self.registered = frozenset(registered())
        self.known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self.registered:
            return False
        ok = self.known.get(name)
        if ok is None:
            try:
                get_dialect(name)
                ok = True
            except EvstoreError:  # a plugin that does not load: as if it were not registered
                ok = False
            self.known[name] = ok
        return ok


def _dialect_of(e: RecordedEvent, names: _Loadable) -> str | None:
    if e.meta.startswith(_META_DIALECT):  # as evstore writes it: the dialect its first key, no parse
        end = e.meta.find(b'"', len(_META_DIALECT))
        first = e.meta[len(_META_DIALECT):end].decode("utf-8", "replace") if end > 0 else ""
        if first in names:
            return first
    if e.meta != b"{}":
        meta = _meta.decode(e.meta)
        d = meta.get("dialect") if isinstance(meta, dict) else None
        if isinstance(d, str) and d in names:
            return d
    prefix = e.type.split(".", 1)[0]
    return prefix if prefix in names else None


class SearchIndex(Projection):
    """The ``search`` projection (see the module docstring)."""

    name = "search"
    # 2: contentless FTS5 on SQLite (the words no longer stored in proj_search.body); 3: on SQLite the
    # position is proj_search's rowid, FTS5 keeps no column sizes, an event without words has no FTS5 row
    # (an index built before FTS5's hashsize and pgsz were set works as it is: no new version); 4: on
    # PostgreSQL the words' tsvector is a stored column (_PG_WORDS), not recomputed by every query's recheck
    version = 4
    event_types = None
    caught_up_by = "evstore search and serve's search (each catches up first), evstore projections run"

    def tables(self) -> list[Table]:
        return list(_metadata().sorted_tables)

    def table_ddl(self, backend: str) -> tuple[list[str], list[str]] | None:
        position = {"sqlite": "INTEGER", "postgresql": "BIGINT"}.get(backend)
        return None if position is None else (["proj_search"], [_TABLE_DDL.format(position=position), _INDEX_DDL])

    def extra_ddl(self, backend: str) -> tuple[list[str], list[str]]:
        drops, creates = _ENGINES[backend].ddl()
        return list(drops), list(creates)

    def apply(self, cur: Any, backend: Backend, events: Sequence[RecordedEvent]) -> None:
        names = _Loadable()
        blob = _blob_reader(cur, backend)
        # an event's dialect depends on its meta and type only: a batch has a handful of those
        dialects: dict[tuple[bytes, str], str | None] = {}
        line_based: dict[str | None, bool] = {None: False}
        rows = []
        for e in events:
            if e.erased:  # purged or erased: nothing of it may be found again
                continue
            key = (e.meta, e.type)
            if key not in dialects:
                dialects[key] = _dialect_of(e, names)
            dialect = dialects[key]
            kind, body = _words_of(e, dialect, blob)
            if dialect is not None and dialect not in line_based:
                line_based[dialect] = get_dialect(dialect).line_based
            found = _LINENO.search(e.data, 0, 200) if line_based[dialect] else None
            rows.append((e.position, e.stream_id, e.version, int(found.group(1)) if found else None, e.type, dialect,
                         kind, _utc(e.occurred_at or e.recorded_at), body))
        if rows:
            _ENGINES[backend.name].insert(cur, rows)


#: Bytes of blobs a batch keeps once read (a transcript line often holds one output twice: in its
#: message and its ``toolUseResult``; a file read again and again is one blob).
_BLOB_CACHE = 32 << 20


def _blob_reader(cur: Any, backend: Backend) -> Callable[[str], bytes]:
    """``blob(sha)``: a blob's bytes through ``cur``, each read once while they fit :data:`_BLOB_CACHE`."""
    cache: dict[str, bytes] = {}
    size = 0

    def blob(sha: str) -> bytes:
        nonlocal size
        data = cache.get(sha)
        if data is not None:
            return data
        found = backend.read_blob(cur, bytes.fromhex(sha))
        if found is None:
            raise EvstoreError(f"Blob {sha} is missing; run `evstore verify`.")
        if size + len(found.data) <= _BLOB_CACHE:
            cache[sha] = found.data
            size += len(found.data)
        return found.data

    return blob


def _words(e: RecordedEvent, names: _Loadable, blob: Callable[[str], bytes]) -> tuple[str | None, str, str]:
    """(dialect, kind, words) of an event: what the index holds of it (the snippets of the SQLite
    index are made from the same words, derived again)."""
    dialect = _dialect_of(e, names)
    return (dialect, *_words_of(e, dialect, blob))


def _words_of(e: RecordedEvent, dialect: str | None, blob: Callable[[str], bytes]) -> tuple[str, str]:
    """(kind, words) of an event whose dialect is known (:func:`_words`)."""
    if dialect is not None:
        kind, body = get_dialect(dialect).search_text(e.type, e.data, blob=blob)
    else:
        kind, body = "event", json_words(e.data)
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY]
    return kind, body.replace("\x00", "") if "\x00" in body else body


# The transcript line an event records (a line-based dialect's events start with "lineno"; a
# look at the first bytes of the stored JSON, not a parse).
_LINENO = re.compile(rb'"lineno":(\d+)')
_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _utc(at: str) -> str:
    """An ISO time as ``YYYY-MM-DDTHH:MM:SS...Z`` (UTC), so times compare as strings."""
    from datetime import UTC, datetime

    if at.endswith("Z") and _UTC.fullmatch(at):
        return at
    try:
        t = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return at
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


SEARCH = register(SearchIndex())


# ------------------------------------------------------------------ the two engines


_WORD = re.compile(r'"([^"]*)"|(\S+)')


def terms(query: str) -> list[tuple[str, bool]]:
    """(text, prefix) of each term: a "quoted phrase", or a word (``word*``: a prefix)."""
    out = []
    for phrase, word in _WORD.findall(query):
        if phrase:
            if phrase.strip():
                out.append((phrase.strip(), False))
        elif word:
            prefix = word.endswith("*") and len(word) > 1
            out.append((word.rstrip("*") if prefix else word, prefix))
    return [t for t in out if re.search(r"\w", t[0])]  # punctuation alone is no word to look for


_FTS5_TOKENIZE = "tokenize='unicode61 remove_diacritics 2'"
_FTS5_CONFIG = (("hashsize", 8 << 20), ("pgsz", 16000))


class _Sqlite:
    """SQLite FTS5, contentless: the index holds the words' tokens, no copy of the words.  A hit's
    snippet is made from its event's words derived again (:func:`_words`, ``limit`` events at most)
    by FTS5's own ``snippet()`` over an in-memory index of just those (:meth:`snippets`), so it reads
    as an index holding the words would give it.  Storing the words beside the index (external
    content) wrote every event's text a second time: most of what building the index cost."""

    def ddl(self) -> tuple[list[str], list[str]]:
        return (["DROP TABLE IF EXISTS proj_search_fts"],
                # columnsize=0: no table of each row's token count (only ranking by bm25 reads it;
                # hits come newest first)
                [f"CREATE VIRTUAL TABLE proj_search_fts USING fts5(body, content='', columnsize=0, {_FTS5_TOKENIZE})",
                 # kept in the table's config: 8 MB of words gathered in memory before they are written
                 # as a segment (1 MB by default: eight times the segments, merged again and again), and
                 # leaves of 16,000 bytes (1,000 by default)
                 *(f"INSERT INTO proj_search_fts (proj_search_fts, rank) VALUES ('{k}', {v})" for k, v in _FTS5_CONFIG)])

    def insert(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        cur.executemany("INSERT INTO proj_search (position, stream_id, version, lineno, type, dialect, kind, "
                        "occurred_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [r[:8] for r in rows])
        # an event without words has nothing to be found by: no row in the index
        cur.executemany("INSERT INTO proj_search_fts (rowid, body) VALUES (?, ?)", [(r[0], r[8]) for r in rows if r[8]])

    def snippets(self, cur: Any, backend: Backend, hits: list[list[Any]], match: str) -> None:
        """Fill each hit's snippet (its last item) from its event's words; a hit whose words cannot be
        derived again (a blob gone) keeps an empty snippet."""
        import sqlite3

        names = _Loadable()
        blob = _blob_reader(cur, backend)
        bodies = []
        for e in backend.read_positions(cur, [h[0] for h in hits]):
            if not e.erased:
                try:
                    bodies.append((e.position, _words(e, names, blob)[2]))
                except EvstoreError:
                    pass
        if not bodies:
            return
        mem = sqlite3.connect(":memory:")
        try:
            mem.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, {_FTS5_TOKENIZE})")
            mem.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", bodies)
            got = dict(mem.execute("SELECT rowid, snippet(t, 0, char(2), char(3), '…', 24) FROM t WHERE t MATCH ?",
                                   (match,)).fetchall())
        finally:
            mem.close()
        for h in hits:
            h[-1] = got.get(h[0], "")

    def match(self, query: str) -> tuple[str, list[Any]]:
        # every term a quoted FTS5 string (a user's query never becomes FTS5 syntax it did not mean)
        found = terms(query)
        text = " ".join('"' + t.replace('"', '""') + '"' + ("*" if prefix else "") for t, prefix in found)
        return ("?", [text]) if found else ("", [])

    def select(self, match: str, where: list[str], *, by_stream: bool = False) -> str:
        cond = "".join(f" AND {w}" for w in where)
        # Within a stream, its rows (by the stream index, newest first) are the outer loop and each is
        # looked up in the index by rowid (CROSS JOIN fixes that order): a common word matches far more
        # rows in the whole log than one stream holds.  Otherwise the full-text index drives, newest first.
        source = ("proj_search s INDEXED BY ix_proj_search_stream CROSS JOIN proj_search_fts "
                  "ON proj_search_fts.rowid = s.position" if by_stream else
                  "proj_search_fts JOIN proj_search s ON s.position = proj_search_fts.rowid")
        order = "s.position" if by_stream else "proj_search_fts.rowid"
        return ("SELECT s.position, s.stream_id, s.version, s.lineno, s.type, s.dialect, s.kind, s.occurred_at, "
                f"'' FROM {source} "
                f"WHERE proj_search_fts MATCH {match}{cond} ORDER BY {order} DESC LIMIT ?")


_NOT_WORD = re.compile(r"[\W_]+")
# The words as a stored, generated ``tsvector`` column with a GIN index on it.  An index on the expression
# alone (search's version 3) stored nothing twice, but every candidate row a query rechecked (a phrase,
# which GIN cannot answer from the index; the newest hits of a common word) ran ``to_tsvector`` over its
# body again: two common words took 13 to 19 s over the 60 MB benchmark store.
_PG_WORDS = "to_tsvector('simple', regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'))"


class _Postgres:
    """PostgreSQL ``tsvector`` with a GIN index on the expression (nothing stored twice)."""

    def ddl(self) -> tuple[list[str], list[str]]:
        return ([], [f"ALTER TABLE proj_search ADD COLUMN words tsvector GENERATED ALWAYS AS ({_PG_WORDS}) STORED",
                     "CREATE INDEX ix_proj_search_fts ON proj_search USING gin (words)"])

    def insert(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        # COPY: one stream of rows, not a statement per row (psycopg 3's cursor; executemany otherwise)
        columns = "position, stream_id, version, lineno, type, dialect, kind, occurred_at, body"
        if hasattr(cur, "copy"):
            with cur.copy(f"COPY proj_search ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        cur.executemany(f"INSERT INTO proj_search ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)

    def match(self, query: str) -> tuple[str, list[Any]]:
        # Words as FTS5's unicode61 sees them: letters and digits, everything else a separator (the
        # index expression cuts the text the same way, so "test_checkout.py" is three words in both,
        # where PostgreSQL's own parser would keep a path whole).  A term is a phrase of its words.
        parts, params = [], []
        for text, prefix in terms(query):
            words = [w.lower() for w in _NOT_WORD.split(text) if w]
            if not words:
                continue
            lexemes = ["'" + w.replace("'", "''") + "'" for w in words]
            if prefix:
                lexemes[-1] += ":*"
            parts.append("to_tsquery('simple', %s)")
            params.append(" <-> ".join(lexemes))
        return " && ".join(parts), params

    def select(self, match: str, where: list[str], *, by_stream: bool = False) -> str:
        cond = "".join(f" AND {w}" for w in where)
        return (f"WITH q AS (SELECT {match} AS q), hits AS ("
                "SELECT s.position, s.stream_id, s.version, s.lineno, s.type, s.dialect, s.kind, s.occurred_at, s.body "
                f"FROM proj_search s, q WHERE s.words @@ q.q{cond} "
                "ORDER BY s.position DESC LIMIT %s) "
                "SELECT h.position, h.stream_id, h.version, h.lineno, h.type, h.dialect, h.kind, h.occurred_at, "
                "ts_headline('simple', h.body, q.q, 'StartSel=\"\x02\", StopSel=\"\x03\", MaxWords=30, MinWords=12, "
                "MaxFragments=1, FragmentDelimiter=\" … \"') FROM hits h, q ORDER BY h.position DESC")


_ENGINES: dict[str, Any] = {"sqlite": _Sqlite(), "postgresql": _Postgres()}


# ------------------------------------------------------------------ querying


@dataclass(frozen=True)
class Hit:
    """One event matching a query: where (stream, version, transcript line), what, when, and a
    snippet with the matches between :data:`MARK_START` and :data:`MARK_END`."""

    position: int
    stream_id: str
    version: int
    lineno: int | None
    type: str
    dialect: str | None
    kind: str
    at: str | None
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        plain, marks = unmark(self.snippet)
        return {"stream": self.stream_id, "version": self.version, "line": self.lineno, "type": self.type,
                "dialect": self.dialect, "kind": self.kind, "at": self.at, "position": self.position,
                "snippet": plain, "highlights": marks}


def unmark(snippet: str) -> tuple[str, list[list[int]]]:
    """The snippet without marks, and the [start, end) character spans that were marked."""
    out: list[str] = []
    marks: list[list[int]] = []
    size = 0
    start = None
    for part in re.split(f"([{MARK_START}{MARK_END}])", snippet):
        if part == MARK_START:
            start = size
        elif part == MARK_END:
            if start is not None:
                marks.append([start, size])
            start = None
        else:
            out.append(part)
            size += len(part)
    return "".join(out), marks


def search(store: EventStore, query: str, *, dialect: str | None = None, stream: str | None = None,
           type: str | None = None, since: str | None = None, limit: int = 50, refresh: bool = True,
           progress: Callable[[int, int], None] | None = None) -> list[Hit]:
    """The events matching ``query``, newest first (the index caught up first unless ``refresh`` is
    False).  ``stream`` also matches a session's subagent streams (``<stream>/...``); ``type`` an
    event type or a prefix ending in ``.`` (``document.``); ``since`` an ISO date or time; ``progress(done,
    total)`` while the index catches up (the first search of a large store builds it)."""
    engine = _ENGINES[store.backend.name]
    match, params = engine.match(query)
    if not match:
        raise EvstoreError(f'Nothing to search for in "{query}" — give at least one word.')
    p = store.backend.p
    where: list[str] = []
    if dialect is not None:
        where.append(f"s.dialect = {p}")
        params.append(dialect)
    if stream is not None:
        # the stream, or one of its subagents' (<stream>/...); the range first, for the stream index
        # ("<stream>" up to "<stream>0" holds both: "/" comes just before "0")
        where.append(f"s.stream_id >= {p} AND s.stream_id < {p} AND (s.stream_id = {p} OR substr(s.stream_id, 1, {p}) = {p})")
        params += [stream, stream + "0", stream, len(stream) + 1, stream + "/"]
    if type is not None:
        if type.endswith("."):
            where.append(f"substr(s.type, 1, {p}) = {p}")
            params += [len(type), type]
        else:
            where.append(f"s.type = {p}")
            params.append(type)
    if since is not None:
        from projections.runs import parse_since

        where.append(f"s.occurred_at >= {p}")
        params.append(_utc(parse_since(since).isoformat()))
    params.append(limit)
    with ProjectionRunner(store) as runner:
        if refresh:
            runner.catch_up(SEARCH, progress=progress)
        else:
            runner.ensure(SEARCH)

        def read(cur: Any) -> list[Hit]:
            try:
                cur.execute(engine.select(match, where, by_stream=stream is not None), tuple(params))
            except Exception as exc:  # a query FTS5 or PostgreSQL refuses: say which, never a traceback
                if type_name(exc) in ("OperationalError", "SyntaxError", "DataError"):
                    raise EvstoreError(f'Cannot search for "{query}": {exc} — use words, "phrases" and prefix*.') from exc
                raise
            rows = [list(r) for r in cur.fetchall()]
            if hasattr(engine, "snippets"):
                engine.snippets(cur, store.backend, rows, params[0])
            return [Hit(*r) for r in rows]

        hits: list[Hit] = runner.read(read)
    return hits


def type_name(exc: BaseException) -> str:
    return type(exc).__name__


__all__ = ["MARK_END", "MARK_START", "SEARCH", "Hit", "SearchIndex", "search", "terms", "unmark"]
