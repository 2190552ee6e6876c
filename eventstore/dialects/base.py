"""The dialect interface shared by every source system.

A dialect bundles

* a catalog of frozen, tagged :class:`~eventstore.events.Event` Structs (``catalog``);
* ``evolve(doc, event) -> doc``: rebuild the state document one event at a time;
* ``observe(prev, next) -> [event]``: derive events from two snapshots;
* a simulator of realistic runs (``simulate``), yielding the snapshots a real orchestrator
  would have written;
* ``validate(doc)``: findings for what the source system's spec says is wrong, never fatal.

The lens law holds for every pair of snapshots::

    same(fold(evolve, copy(prev), observe(prev, next)), next)

``observe`` emits the domain events the subclass recognises (:meth:`Dialect.derive`) and a
:class:`DocumentPatched` for the residual.  A lens that raises, or whose events do not reproduce
``next``, is a bug: ``observe`` lets it show (the exception, or :class:`LensError`), and ingest
records the snapshot as one exact document event with a ``lens-failed`` finding instead of
hiding it.  The first snapshot of a stream is a :class:`DocumentObserved` (unless
:meth:`Dialect.start` opens it otherwise).

Ingest does each thing once: :meth:`Dialect.observe_folded` folds the events while it derives
them (the residual is the diff against that fold) and hands the folded document back, so the law
is checked once on it (:meth:`Dialect.check_lens_law`) and it becomes the stream's current
document, without folding the events a second time.

``evolve`` may mutate the ``doc`` it is given (the caller owns it) and returns the result.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from eventstore import documents
from eventstore.errors import EvstoreError, IngestError, JSONSyntaxError, LensError
from eventstore.events import Event

if TYPE_CHECKING:
    from eventstore.dialects.analytics import Analytics

JSON = Any


# ------------------------------------------------------------------ document events


class DocumentObserved(Event, frozen=True, tag="document.observed"):
    """The first full snapshot of a stream (or a reset to a new document)."""

    doc: Any


class DocumentPatched(Event, frozen=True, tag="document.patched"):
    """RFC 6902 operations for whatever no domain event explains."""

    ops: list[dict[str, Any]]


class DocumentUnreadable(Event, frozen=True, tag="document.unreadable"):
    """A version of the source that is no readable document: not UTF-8 (``reason`` "utf-8"), not
    JSON ("json") or not a document of the dialect ("dialect").  It carries the exact bytes
    (zlib, base64) and the error with its line and column; the document stays the last valid one."""

    reason: str
    error: str
    line: int | None
    column: int | None
    size: int
    sha256: str
    content_zlib_b64: str

    def content(self) -> bytes:
        import base64
        import zlib

        return zlib.decompress(base64.b64decode(self.content_zlib_b64))


class DocumentRemoved(Event, frozen=True, tag="document.removed"):
    """The source file was deleted (a commit removed it): the document is ``null`` until a later
    version re-creates it, which continues the stream."""


# ------------------------------------------------------------------ helper records


@dataclass(frozen=True)
class Finding:
    """A validation finding: the source system's spec is not met at ``path``."""

    path: str  # JSON Pointer into the document ("" = the whole document)
    code: str  # stable, kebab-case, e.g. "status-not-in-enum"
    message: str
    severity: str = "warning"  # "warning" | "error"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message, "severity": self.severity}


@dataclass(frozen=True)
class RunInfo:
    """What the runs index shows about a document (all optional)."""

    task_id: str | None = None
    project: str | None = None
    title: str | None = None
    status: str | None = None
    phase: str | None = None


@dataclass(frozen=True)
class Unreadable:
    """Why a source version is no readable document (see :class:`DocumentUnreadable`)."""

    reason: str  # "utf-8" | "json" | "dialect"
    error: str  # the message, naming the file
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class StateVersion:
    """One state version as a file held it, for :meth:`Dialect.simulate_writers`: the run's stream and
    version, when it was recorded, the file's path (relative) and its bytes."""

    stream_id: str
    version: int
    at: datetime
    path: str
    content: bytes


@dataclass(frozen=True)
class FileWrite:
    """A tool call that wrote (or tried to write) a file, as an event of a session records it
    (:meth:`Dialect.file_writes`).  Several events may describe one call (its use, then its
    result): ``call_id`` joins them, later facts completing earlier ones.

    ``sha256`` is the SHA-256 of the file's bytes right after the call, when the record gives
    them (``how``: "content", the bytes written; "edit", the file before the call with the
    edit applied); None when it does not.  ``lf_sha256``: the SHA-256 of those bytes with every
    CRLF turned into LF, when that differs (None: the same as ``sha256``), so a file whose line
    endings the tool converted (or whose style it kept) still matches.  ``failed``: the call
    reported an error, so it wrote nothing.  ``path`` None: the event only completes a call
    recorded before (its result)."""

    call_id: str
    path: str | None
    sha256: str | None = None
    how: str | None = None  # "content" | "edit"
    tool: str | None = None
    message: str | None = None  # the id of the message (line) holding the call
    at: str | None = None  # ISO 8601, when the call was made
    failed: bool | None = None
    lf_sha256: str | None = None


@dataclass
class HookAnswer:
    """A dialect's answer to an http hook call: the status, the response headers (no body), and
    warnings for the server's log."""

    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Snapshot:
    """One observed state document, as read from a file or produced by a simulator."""

    doc: JSON  # None: no new document (e.g. a rejected turn; only ``events`` are appended)
    raw: bytes | None = None  # the exact bytes read (None: simulated)
    source: dict[str, Any] = field(default_factory=dict)  # file, commit, ...
    occurred_at: datetime | None = None
    stream_hint: str | None = None  # a stream id the source itself names
    # Extra events the loader recognised that do not change the document (a rejected turn, ...);
    # ingest appends them before the events observed for ``doc``.
    events: list[Event] = field(default_factory=list)
    # Set when ``raw`` is no readable document (``doc`` is then None): ingest records a
    # DocumentUnreadable, or refuses the input under --strict.
    unreadable: Unreadable | None = None
    removed: bool = False  # the source file was deleted in this version (``doc`` None, ``raw`` None)
    # A stream id from where the snapshot came from (the file's name, the repository path), used
    # when the dialect allows it and neither --stream nor the document names one.
    source_stream: str | None = None
    # Findings the loader made about this version (a turn whose JSON it could not read): recorded
    # with the snapshot's events like the document's own.
    findings: list[Finding] = field(default_factory=list)
    # The current state of one live source (a file named alone, a task folder, what ``watch``
    # sees), not one version of a history: capture-once compares it with the last version recorded
    # from the same place, not with the whole recorded history (see eventstore.ingest).
    live: bool = False


# ------------------------------------------------------------------ the interface


class Dialect:
    """Base class; subclasses set ``name`` and ``catalog`` and override the hooks."""

    name: ClassVar[str] = ""
    catalog: ClassVar[tuple[type[Event], ...]] = ()
    description: ClassVar[str] = ""
    #: Bump when ``evolve`` changes meaning: stored replay snapshots of older lenses are ignored.
    lens_version: ClassVar[int] = 1
    #: Whether snapshots must be JSON objects (every orchestrator's state file is one).
    requires_object: ClassVar[bool] = True
    #: Top-level keys every document of this dialect has; a snapshot without them is not this
    #: dialect's document (:meth:`identity_problem`): recorded as document.unreadable in a history,
    #: refused when nothing else is readable or under --strict.  Everything else out of spec is only a finding.
    identity_keys: ClassVar[tuple[str, ...]] = ()
    #: File names this dialect's state file has (a Claude Code hook seeing a Write/Edit of such a
    #: file records its new version at once; see eventstore.capture).
    state_file_names: ClassVar[tuple[str, ...]] = ()
    #: Whether the source is a file recorded line by line (its events carry the bytes, see
    #: :meth:`file_bytes`) rather than snapshots of one document.
    line_based: ClassVar[bool] = False
    #: Why this dialect's snapshots have no file bytes to give back (``replay --raw``), if it never
    #: reads them from one state file (e.g. they are parsed out of transcripts); "" otherwise.
    no_raw_bytes: ClassVar[str] = ""

    #: Event types whose events may describe tool calls writing files (:meth:`file_writes`); they
    #: are named ``<this dialect's name>.<kind>`` (the writers index loads a dialect by that prefix).
    file_write_types: ClassVar[tuple[str, ...]] = ()

    #: Whether a folder holds versions of one file (ingest orders them, ``--order``); False for
    #: dialects whose folders are the document (taskflow) or that read folders their own way.
    versions_in_folders: ClassVar[bool] = True
    #: Whether a snapshot may take its stream id from its source (the file's name, the repository
    #: path) when neither --stream nor the document names one.
    streams_by_source: ClassVar[bool] = False
    #: Top-level keys holding the time the source wrote the document (ISO 8601), tried in order:
    #: ingest takes ``occurred_at`` from them before git's commit time or the file's mtime.
    time_keys: ClassVar[tuple[str, ...]] = ()
    #: For a dialect of agent sessions: what each of its event types is in a timeline (``prompt``,
    #: ``assistant``, ``tool_use``, ``tool_result``, ``hook``, or ``subagent``: the link to a subagent's
    #: transcript); the timeline and session pages show these events as turns.
    session_kinds: ClassVar[dict[str, str]] = {}
    #: Relative weight of this dialect's runs in ``evstore demo`` (0: not in the demo).
    demo_weight: ClassVar[int] = 0
    #: For a dialect whose sources are no state-file snapshots (e.g. transcripts read line by line):
    #: ``"module:function"`` that ``evstore ingest DIALECT`` calls instead of ingesting snapshots,
    #: as ``f(ctx, paths, stream=, as_json=, scrub=)``, and the one ``evstore watch DIALECT`` calls,
    #: as ``f(ctx, path, interval=, as_json=)``.  Named, not imported: they live in the dialect's
    #: command module (``<dialect>/commands.py``), the only part of a dialect that may import click.
    ingest_command: ClassVar[str] = ""
    watch_command: ClassVar[str] = ""

    #: The path segment of the http hook calls this dialect's source system sends
    #: (``evstore serve`` answers ``POST /hooks/<http_hook>`` with :meth:`record_http_hook`; "" none).
    http_hook: ClassVar[str] = ""
    #: That endpoint's OpenAPI operation (summary, requestBody, the 2xx/400 responses) for
    #: ``/openapi.json``; the server adds the security and its own error responses.
    http_hook_openapi: ClassVar[dict[str, Any]] = {}

    def http_hook_key(self, body: bytes) -> str:
        """The key of the calls ``body``'s must be recorded one at a time with (e.g. its session);
        :class:`~eventstore.errors.InvalidEvent` naming the problem when the body is no such call
        (the server answers 400 and writes nothing)."""
        raise EvstoreError(f"The {self.name} dialect receives no http hook.")

    def record_http_hook(self, store: Any, body: bytes, *, files: tuple[Path, ...] | None = None) -> HookAnswer:
        """Record one http hook call in ``store``; ``files``: the folders the call may read files
        it names from (None: the source system's own)."""
        raise EvstoreError(f"The {self.name} dialect receives no http hook.")

    def raw_note(self, doc: JSON) -> str | None:
        """What ``replay --raw`` says (on stderr) about how the stored bytes of a run whose state
        is ``doc`` differ from what the source wrote (None: they do not)."""
        return None

    def identity_problem(self, doc: JSON, where: str) -> str | None:
        """Why ``doc`` cannot be this dialect's document (None: it can)."""
        if doc is None:
            return None
        if self.requires_object and type(doc) is not dict:
            from eventstore.codec import json_type

            return f"{where}: {self.name} state documents are JSON objects, got {json_type(doc)}."
        missing = [k for k in self.identity_keys if k not in doc]
        if missing:
            names = ", ".join(f'"{k}"' for k in missing)
            article = "an" if self.name[:1] in "aeiou" else "a"
            return f"{where}: not {article} {self.name} document: required field(s) {names} missing (wrong dialect?)."
        return None

    def check_identity(self, doc: JSON, where: str) -> None:
        """Raise IngestError if ``doc`` cannot be this dialect's document."""
        problem = self.identity_problem(doc, where)
        if problem:
            raise IngestError(problem + " Nothing was written.")

    def document_time(self, doc: JSON) -> tuple[str, datetime] | None:
        """(key, time) of the first of :attr:`time_keys` that holds a zoned ISO 8601 time."""
        if type(doc) is not dict:
            return None
        for key in self.time_keys:
            value = doc.get(key)
            if isinstance(value, str) and value:
                try:
                    when = datetime.fromisoformat(value)
                except ValueError:
                    continue
                if when.tzinfo is not None:
                    return key, when
        return None

    # -- the lens ---------------------------------------------------------------

    def evolve(self, doc: JSON, event: Event) -> JSON:
        if isinstance(event, DocumentObserved):
            return documents.take(event.doc)
        if isinstance(event, DocumentPatched):
            return documents.apply(doc, event.ops)
        if isinstance(event, DocumentUnreadable):
            return doc
        if isinstance(event, DocumentRemoved):
            return None
        return self.apply(doc, event)

    def apply(self, doc: JSON, event: Event) -> JSON:
        """Fold one domain event into ``doc`` (subclasses)."""
        raise TypeError(f'Dialect "{self.name}" cannot apply {type(event).__name__}')

    def derive(self, prev: JSON, next_doc: JSON) -> list[Event]:
        """Domain events explaining the change ``prev -> next`` (subclasses; may be partial)."""
        return []

    def start(self, prev: JSON | None, next_doc: JSON) -> list[Event] | None:
        """Events to fold into ``prev`` before :meth:`derive` explains the rest of ``next_doc``, or
        None for the base rules: a new stream opens with one :class:`DocumentObserved`, and a
        document equal to the previous one is no event.  ``[]``: derive even then (a dialect
        whose repeated document is itself a fact)."""
        return None

    def observe(self, prev: JSON | None, next_doc: JSON) -> list[Event]:
        """Events turning ``prev`` into ``next``; ``prev is None`` means a new stream.  Raises
        LensError when they do not rebuild ``next`` (the law, checked here)."""
        events, folded = self._observe_folded(prev, next_doc)
        self.check_lens_law(folded, next_doc)
        return events

    def observe_folded(self, prev: JSON | None, next_doc: JSON) -> tuple[list[Event], JSON]:
        """:meth:`observe`'s events and the document they fold a copy of ``prev`` into, folded
        once and not yet checked: the caller checks it with :meth:`check_lens_law` (ingest, which
        keeps it as the stream's document).  ``prev`` is left as it is; the document shares
        nothing with the events or ``next_doc``, but is ``prev`` itself when nothing changed."""
        if type(self).observe is not _BASE_OBSERVE:  # a dialect with its own observe: fold what it says
            events = self.observe(prev, next_doc)
            return events, self.fold(documents.copy(prev), events)
        return self._observe_folded(prev, next_doc)

    def _observe_folded(self, prev: JSON | None, next_doc: JSON) -> tuple[list[Event], JSON]:
        opening = self.start(prev, next_doc)
        if opening is None:
            if prev is None:
                first = DocumentObserved(doc=documents.copy(next_doc))
                return [first], self.evolve(None, first)
            if documents.same(prev, next_doc):
                return [], prev
            events: list[Event] = []
            basis, doc = prev, documents.copy(prev)
        else:
            events = list(opening)
            basis = self.fold(documents.copy(prev), events) if events else prev
            doc = documents.copy(basis)  # derive may hand out parts of its inputs; the fold below changes doc
        derived = self.derive(basis, next_doc)  # what raises here is a lens bug: the caller records it
        for ev in derived:
            doc = self.evolve(doc, ev)
        events += derived
        residual = documents.diff(doc, next_doc)
        if residual:
            events.append(DocumentPatched(ops=residual))
            doc = documents.apply(doc, residual)
        return events, doc

    def check_lens_law(self, folded: JSON, next_doc: JSON) -> None:
        """The lens law's check: ``folded`` (the events observed for ``next_doc`` folded into the
        previous document) must be ``next_doc`` exactly; else LensError."""
        if not documents.same(folded, next_doc):
            raise LensError(f"the {self.name} events observed for this snapshot do not rebuild it")

    def fold(self, doc: JSON, events: list[Event]) -> JSON:
        for ev in events:
            doc = self.evolve(doc, ev)
        return doc

    # -- reading sources --------------------------------------------------------

    def load(self, path: Path) -> Iterator[Snapshot]:
        """Snapshots found at ``path`` (a JSON file by default; directories: files in natural name
        order).  A file that is no readable document is a snapshot with ``unreadable`` set."""
        from eventstore import reading

        if path.is_dir():
            for child in sorted(reading.entries(path)[0], key=natural_key):
                yield from self.load(child)
            return
        yield read_snapshot(reading.read_bounded(path), str(path), {"file": str(path)})

    def file_bytes(self, events: Iterator[Event], *, blob: Callable[[str], bytes] | None = None) -> bytes:
        """The recorded file of a line-based dialect, from its stream's events in order (``blob``:
        the store's content-addressed bytes by SHA-256 hex, for events that refer to them)."""
        raise EvstoreError(f'The {self.name} dialect records snapshots, not lines.')

    def shown_data(self, event_type: str, data: Any, *, blob: Callable[[str], bytes]) -> Any:
        """A stored event's ``data`` as ``evstore log --json`` and ``evstore serve``'s API show it:
        with whatever the dialect stored out of line put back (``blob``: the store's
        content-addressed bytes by SHA-256 hex).  Default: ``data`` as stored.

            >>> dialect.shown_data(rec.type, rec.payload, blob=store.read_blob)  # doctest: +SKIP
        """
        return data

    def search_text(self, event_type: str, data: bytes, *, blob: Callable[[str], bytes]) -> tuple[str, str]:
        """What ``evstore search`` indexes of one event, from its stored ``data`` (canonical JSON):
        (kind, text).  Default: ``"event"`` and the payload's values (a snapshot's, a patch's) without
        its keys and punctuation (:func:`json_words`); a dialect of agent sessions says what a line
        holds (a prompt, assistant text, a tool's input or output).

            >>> dialect.search_text("document.observed", b'{"doc":{"title":"Fix login"}}', blob=store.read_blob)
            ('event', '  Fix login  ')
        """
        return "event", json_words(data)

    def stream_id(self, doc: JSON) -> str | None:
        """The stream id a document names (its task id), if any."""
        return None

    def restore(self, doc: JSON, target: Path) -> list[Path]:
        """Write the files a document describes into ``target`` (dialects whose source is a folder)."""
        raise EvstoreError(f'The {self.name} dialect records a single file; use `evstore replay --raw` instead.')

    def file_writes(self, event: Event) -> list[FileWrite]:
        """Files ``event`` says a tool call wrote (dialects of agent sessions; see :class:`FileWrite`).
        Matched against ingested state versions to say who wrote each (``projections.writers``)."""
        return []

    # -- describing -------------------------------------------------------------

    def describe(self, doc: JSON) -> RunInfo:
        return RunInfo()

    def validate(self, doc: JSON) -> list[Finding]:
        return []

    def summary(self, event: Event) -> str | None:
        """The dialect's own line for one of its events (None or "": the generic line)."""
        return None

    def summarize(self, event: Event) -> str:
        """One line for ``evstore log``: document events, then :meth:`summary`, then the fields."""
        if isinstance(event, DocumentObserved):
            d = event.doc
            return f"snapshot observed ({len(d)} top-level keys)" if isinstance(d, dict) else "snapshot observed"
        if isinstance(event, DocumentPatched):
            paths = ", ".join(op["path"] or "/" for op in event.ops[:4])
            more = f" (+{len(event.ops) - 4})" if len(event.ops) > 4 else ""
            return f"{len(event.ops)} change(s): {paths}{more}"
        if isinstance(event, DocumentUnreadable):
            at = f" at line {event.line}, column {event.column}" if event.line is not None else ""
            return f"UNREADABLE version ({event.reason}{at}, {event.size} bytes kept); document unchanged"
        if isinstance(event, DocumentRemoved):
            return "file removed"
        line = self.summary(event)
        if line:
            return line
        fields = msgspec.structs.asdict(event)
        parts = [f"{k}={v}" for k, v in fields.items() if isinstance(v, (str, int, float)) and v != ""]
        return " ".join(parts[:4])

    # -- analytics --------------------------------------------------------------

    def analytics(self) -> Analytics | None:
        """This dialect's fact tables, views and metric sections (None: only the shared ``events``
        rows).  Declared as data (:mod:`eventstore.dialects.analytics`); subclasses import their
        declaration here, lazily, so commands that never query pay nothing for it."""
        return None

    # -- simulating -------------------------------------------------------------

    def simulate_writers(self, store: Any, rng: random.Random, versions: list[StateVersion]) -> int:
        """A dialect of agent sessions: record sessions that wrote ``versions`` (one run's state
        versions, in order) into ``store``, as ``evstore demo`` shows them; the number of sessions.
        Default: none."""
        return 0

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        """Snapshots of one realistic run (subclasses)."""
        return iter(())


_BASE_OBSERVE = Dialect.observe  # as defined here, whatever a subclass (or a test) puts in its place


def natural_key(path: Path | str) -> tuple[tuple[Any, ...], str]:
    """Sort key ordering names naturally: digit runs compare as numbers (``2-x`` before ``10-x``)."""
    name = path.name if isinstance(path, Path) else path
    parts = re.split(r"(\d+)", name)  # text, digits, text, ...: an int never meets a str
    return tuple(int(t) if i % 2 else t for i, t in enumerate(parts)), name


class UnreadableError(IngestError):
    """Bytes that are no readable document; ``unreadable`` says why and where."""

    def __init__(self, unreadable: Unreadable) -> None:
        super().__init__(unreadable.error)
        self.unreadable = unreadable


def read_snapshot(raw: bytes, where: str, source: dict[str, Any]) -> Snapshot:
    """A snapshot of ``raw``: its document, or (not UTF-8, not JSON) marked unreadable."""
    try:
        doc = parse_json_document(raw, where)
    except UnreadableError as exc:
        return Snapshot(doc=None, raw=raw, source=source, unreadable=exc.unreadable)
    return Snapshot(doc=doc, raw=raw, source=source)


def parse_json_document(raw: bytes, where: str) -> JSON:
    """Decode a snapshot strictly: UTF-8, valid JSON, no NaN; errors name file and line.

    Raises :class:`UnreadableError` for bytes that are no JSON document (with line and column),
    a plain IngestError for a file over the snapshot size limit."""
    from eventstore import codec, config

    if len(raw) > config.MAX_SNAPSHOT_BYTES:
        raise IngestError(f"{where}: {len(raw)} bytes exceeds the snapshot limit of {config.MAX_SNAPSHOT_BYTES} "
                          "bytes (EVSTORE_MAX_SNAPSHOT_BYTES).")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        err = codec.utf8_error(raw, exc, where)
        raise UnreadableError(Unreadable("utf-8", str(err), err.line, err.column)) from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        doc = codec.parse_json_text(text, where)  # str: the size and UTF-8 checks above are the snapshot's own
        codec.check_value(doc, where)
        codec.encode(doc)  # e.g. a lone surrogate "\ud800" parses but cannot be stored as UTF-8
    except JSONSyntaxError as exc:
        raise UnreadableError(Unreadable("json", str(exc), exc.line, exc.column)) from exc
    except EvstoreError as exc:
        raise UnreadableError(Unreadable("json", str(exc))) from exc
    except (UnicodeEncodeError, msgspec.EncodeError) as exc:
        raise UnreadableError(Unreadable("json", f"{where}: cannot be stored as UTF-8 JSON ({exc}).")) from exc
    return doc


def parse_time(value: object) -> datetime | None:
    """An ISO-8601 time a source document or transcript carries (``Z`` accepted), or None if it is
    missing or not a time: a source's odd timestamp is never a reason to refuse what it recorded."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def strings(value: Any, limit: int = 1_000_000) -> list[str]:
    """The strings (and numbers) inside a JSON value, depth first, up to ``limit`` characters in all."""
    out: list[str] = []
    size = 0
    todo = [value]
    while todo and size < limit:
        v = todo.pop()
        if isinstance(v, str):
            if v:
                out.append(v)
                size += len(v)
        elif isinstance(v, dict):
            todo.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            todo.extend(reversed(v))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(str(v))
    return out


# Keys that look like identifiers (nearly all); escapes that would glue a letter to the next word.
_JSON_KEY = re.compile(rb'"[A-Za-z_$@][A-Za-z0-9_$@.-]*":')
_JSON_ESCAPES = (b"\\\\", b'\\"', b"\\n", b"\\t", b"\\r", b"\\/")
_JSON_PUNCT = bytes.maketrans(b'{}[],":', b"       ")


def json_words(data: bytes) -> str:
    """The words of a JSON text's values: keys, escapes and punctuation become spaces (a regular
    expression, replaces and a translate over the bytes, no parse: search indexes every event, and
    decoding and walking each payload was most of the index's cost)."""
    text = _JSON_KEY.sub(b" ", data)
    for escape in _JSON_ESCAPES:
        if escape in text:
            text = text.replace(escape, b"  ")
    return text.translate(_JSON_PUNCT).decode("utf-8", "replace")
