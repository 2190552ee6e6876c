"""Ingest state-file snapshots: derive events with a dialect, check the lens law, append.

    >>> results = list(ingest(store, get_dialect("mapipe"), [Path("agent-state.json")]))
    >>> results[0].status, results[0].stream, results[0].version, results[0].source_id
    ('new', 'PROJ-1', 1, 'file:agent-state.json@9f86d081884c7d65…')

Each source version is recorded once per stream (capture-once, docs/capture.md): a snapshot's
identity (``source["id"]``: ``file:<path relative to what was named>@<SHA-256>``,
``git:<commit>:<path>``, ``spool:<record>``) goes into the meta of its last event and into
``source_versions``; :meth:`Ingestor.plan` reads what the streams of a capture recorded (one
query) and passes over what is there, so the same capture again writes nothing.

Each snapshot is one atomic append at the stream's current version (optimistic concurrency),
so a concurrent writer makes the ingest fail cleanly instead of interleaving.  The last event
of a snapshot's group carries in ``meta``: the source (file, git commit), the snapshot's
SHA-256 and how to reproduce its exact bytes (a ``json.dumps`` format, or the raw bytes
zlib-compressed when no format reproduces them), and the dialect's validation findings.  The
same document again with the same bytes appends nothing; with other bytes (re-indented, say) it
appends one empty ``document.patched`` whose meta records the new bytes.

Real histories hold broken writes.  A version that is not UTF-8, not JSON or not a document of
the dialect is an observation too: one ``document.unreadable`` event carrying its exact bytes and
the error (line, column), with an ``unreadable-*`` finding; the document stays the last valid one,
and the next valid version is diffed against that.  ``strict=True`` refuses such input instead, and
an input with no readable version at all (for a stream that does not exist yet) is refused either
way: that is the wrong dialect or the wrong file, not a history.  A version whose file was deleted
(a git commit removing it) is a ``document.removed``; a later version re-creates the document.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from eventstore import chain, codec, documents, reading, replay_cache
from eventstore.dialects.base import (
    Dialect,
    DocumentObserved,
    DocumentPatched,
    DocumentRemoved,
    DocumentUnreadable,
    Finding,
    Snapshot,
    Unreadable,
    natural_key,
    read_snapshot,
)
from eventstore.errors import IngestError, InvalidEvent, SourceConflict
from eventstore.events import Event
from eventstore.store import EventStore, NewEvent, check_stream_id

# Serialisations tried, in order, to reproduce a snapshot's bytes without storing them.  msgspec's
# formatter first: with an indent, json.dumps falls back to its pure-Python encoder (20x slower).
_FORMATS: list[dict[str, Any]] = [
    {"renderer": "msgspec", "indent": 2}, {"renderer": "msgspec", "indent": 4},
    {"indent": 2, "ensure_ascii": False}, {"indent": 2, "ensure_ascii": True},
    {"indent": 4, "ensure_ascii": False}, {"indent": None, "ensure_ascii": False},
    {"indent": None, "ensure_ascii": False, "compact": True}, {"indent": "\t", "ensure_ascii": False},
    {"indent": 4, "ensure_ascii": True}, {"indent": None, "ensure_ascii": True},
]


def render(doc: Any, fmt: dict[str, Any]) -> bytes:
    """Serialise ``doc`` with a recorded format (the inverse of :func:`detect_format`)."""
    if fmt.get("renderer") == "msgspec":
        out: bytes = msgspec.json.format(msgspec.json.encode(doc), indent=fmt["indent"])
        return out + str(fmt.get("newline", "")).encode("ascii")
    seps = (",", ":") if fmt.get("compact") else None
    text = json.dumps(doc, indent=fmt.get("indent"), ensure_ascii=fmt.get("ensure_ascii", False), separators=seps)
    newline: str = fmt.get("newline", "")
    return (text + newline).encode("utf-8")


def detect_format(doc: Any, raw: bytes) -> dict[str, Any] | None:
    newline = "\r\n" if raw.endswith(b"\r\n") else "\n" if raw.endswith(b"\n") else ""
    # A format that cannot write these bytes is not tried (json.dumps with an indent runs in pure
    # Python, several times a version otherwise): escaped output is ASCII, and unescaped output of
    # a document holding non-ASCII text is not.
    ascii_raw = raw.isascii()
    ascii_doc = ascii_raw and codec.encode(doc).isascii()
    for base in _FORMATS:
        escapes = bool(base.get("ensure_ascii"))
        if (escapes and not ascii_raw) or (not escapes and ascii_raw and not ascii_doc):
            continue
        fmt = {**base, "newline": newline}
        if render(doc, fmt) == raw:
            return fmt
    return None


def raw_record(doc: Any, raw: bytes | None) -> dict[str, Any] | None:
    """What meta keeps so ``replay --raw`` reproduces ``raw`` byte for byte (and, when ``raw``
    has CRLF line endings, ``lf_sha256``: its SHA-256 with them turned into LF, which the writers
    index matches against what a tool call wrote)."""
    if raw is None:
        return None
    rec: dict[str, Any] = {"sha256": chain.digest(raw).hex(), "bytes": len(raw)}
    if b"\r\n" in raw:  # who wrote it may have written LF line endings (projections.writers)
        rec["lf_sha256"] = chain.digest(raw.replace(b"\r\n", b"\n")).hex()
    fmt = detect_format(doc, raw)
    if fmt is not None:
        rec["format"] = fmt
    else:
        rec["raw_zlib_b64"] = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    return rec


def raw_bytes(doc: Any, rec: dict[str, Any]) -> bytes:
    if "raw_zlib_b64" in rec:
        return bytes(zlib.decompress(base64.b64decode(rec["raw_zlib_b64"])))
    return render(doc, rec["format"])


def _where(snap: Snapshot, default: str = "snapshot") -> str:
    return str(snap.source.get("file") or snap.source.get("dir") or default)


@dataclass
class IngestResult:
    file: str | None
    stream: str
    version: int
    events: int
    findings: list[Finding] = field(default_factory=list)
    unreadable: str | None = None  # the error, when this version was recorded as unreadable
    removed: bool = False
    lens_failures: int = 0  # 1: the dialect's lens failed; recorded exactly, with a lens-failed finding
    #: "recorded": this source version was recorded before (``version`` is where), nothing written;
    #: otherwise "new" (events appended) or "unchanged" (the stream's bytes already: no version).
    recorded: bool = False
    source_id: str | None = None  # the source version's identity (``meta.source.id``)
    #: recorded: the version it was matched with was erased, so its content was not compared (by
    #: place and order only: an erased version's identity keeps where it was, not which bytes it had)
    erased_match: bool = False

    @property
    def status(self) -> str:
        return "recorded" if self.recorded else "new" if self.events else "unchanged"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "stream": self.stream, "version": self.version,
                               "events": self.events, "lens_failures": self.lens_failures, "status": self.status}
        if self.source_id is not None:
            out["source_id"] = self.source_id
        if self.unreadable is not None:
            out["unreadable"] = self.unreadable
        if self.removed:
            out["removed"] = True
        if self.erased_match:
            out["erased_match"] = True
        return out


def _source_id(snap: Snapshot) -> str | None:
    ident = snap.source.get("id")
    return ident if isinstance(ident, str) and ident else None


def _locator(ident: str) -> str:
    """Where a source version is, without which version it is: ``file:<path>`` of
    ``file:<path>@<sha256>``, ``git:<path>`` of ``git:<commit>:<path>``."""
    kind, _, rest = ident.partition(":")
    if kind == "file":
        return "file:" + rest.rpartition("@")[0]
    if kind == "git":
        return "git:" + rest.partition(":")[2]
    return ident


#: What an erased version's identity says instead of which version it was (:func:`erased_source_id`).
ERASED = "erased"


def erased_source_id(ident: str) -> str:
    """The identity a source version keeps once its event is erased: where it was, not which bytes it
    had (the SHA-256 of a file, a spooled record or a request body would confirm a guess of them).

        >>> erased_source_id("file:state.json@9f86d081884c7d65"), erased_source_id("git:0123abcd:a/state.json")
        ('file:state.json@erased', 'git:erased:a/state.json')
    """
    kind, _, rest = ident.partition(":")
    if kind == "file" and "@" in rest:
        return f"file:{rest.rpartition('@')[0]}@{ERASED}"
    if kind == "git" and ":" in rest:
        return f"git:{ERASED}:{rest.partition(':')[2]}"
    return f"{kind}:{ERASED}"


def is_erased_source_id(ident: str) -> bool:
    """Whether ``ident`` is what :func:`erased_source_id` leaves."""
    return erased_source_id(ident) == ident


def _named(snap: Snapshot) -> str:
    """Which version a snapshot is, for a message: its file, or ``REPO:FILE@COMMIT``."""
    git = snap.source.get("git")
    if isinstance(git, dict) and isinstance(git.get("commit"), str):
        return f"{git.get('repo')}:{snap.source.get('file')}@{git['commit'][:12]}"
    return _where(snap)


def _describe(ident: str | None) -> str:
    """A source identity in a message: which file or commit, shortened."""
    kind, _, rest = (ident or "").partition(":")
    if kind == "file":
        where, _, sha = rest.rpartition("@")
        return f"{where} sha256 {sha[:12]}"
    if kind == "git":
        commit, _, path = rest.partition(":")
        return f"{path} at commit {commit[:12]}"
    return ident or "no identity"


def _content_sha(snap: Snapshot) -> str:
    """The SHA-256 of what a snapshot holds: its bytes, else its canonical document; "" if it
    holds nothing (a removal)."""
    if snap.raw is not None:
        return chain.digest(snap.raw).hex()
    if snap.doc is not None:
        return chain.digest(codec.encode(snap.doc)).hex()
    return "removed" if snap.removed else ""


def file_identity(snap: Snapshot, named: Path) -> str | None:
    """``file:<path relative to what was named>@<SHA-256>`` of a snapshot read from ``named``."""
    where = snap.source.get("file") or snap.source.get("dir")
    if not isinstance(where, str):
        return None
    path = Path(where)
    if named.is_dir():
        try:  # a loader names a folder's files under the path it was given: no need to resolve
            rel = path.relative_to(named).as_posix()
        except ValueError:
            try:
                rel = path.resolve().relative_to(named.resolve()).as_posix()
            except ValueError:
                rel = path.name
        if rel == ".":
            rel = named.resolve().name
    else:
        rel = path.name
    return f"file:{rel}@{_content_sha(snap)}"


def short_source_id(ident: str) -> str:
    """A source identity with its digest or commit cut to 12 hex digits, as ``evstore log`` and
    ``evstore coverage`` show it (``log --json`` has it whole).

        >>> short_source_id("git:0123456789abcdef0123:state.json")
        'git:0123456789ab:state.json'
    """
    kind, _, rest = ident.partition(":")
    if kind == "file" and "@" in rest:
        where, _, sha = rest.rpartition("@")
        return f"file:{where}@{sha[:12]}"
    if kind == "git":
        commit, _, path = rest.partition(":")
        return f"git:{commit[:12]}:{path}"
    if kind in ("spool", "http"):
        return f"{kind}:{rest[:12]}"
    return ident


def legacy_source_id(meta: dict[str, Any]) -> str | None:
    """The identity migration 0006 gave a version recorded before capture-once, from its event's
    meta: ``git:<commit>:<path>``, or ``file:<name>@<SHA-256>`` (not a hook's: its ids are keyed)."""
    source = meta.get("source")
    if not isinstance(source, dict):
        return None
    git, file, snap = source.get("git"), source.get("file"), meta.get("snapshot")
    if isinstance(git, dict) and isinstance(git.get("commit"), str) and isinstance(file, str):
        return f"git:{git['commit']}:{file}"
    if isinstance(file, str) and "claude" not in source and isinstance(snap, dict) \
            and isinstance(snap.get("sha256"), str):
        return f"file:{os.path.basename(file)}@{snap['sha256']}"
    return None


def current_document(store: EventStore, dialect: Dialect, stream_id: str) -> tuple[int, Any]:
    """(version, document) of a stream, folded from its newest usable replay-cache row. (0, None) if absent."""
    info = store.stream_info(stream_id)
    if info is None:
        return 0, None
    doc, _, _ = replay_cache.fold(store, info.stream_pk, dialect, info.version)
    return info.version, doc


#: Namespace of the event ids :meth:`Ingestor.ingest` derives from a ``key``.
_KEYED_IDS = uuid.UUID("0b7f6c1e-52a4-4d0e-9a51-7c3f2e8d4b60")


def keyed_event_id(key: str | None, index: int) -> str | None:
    """The id of a keyed snapshot's ``index``-th event (None without a key)."""
    return None if key is None else str(uuid.uuid5(_KEYED_IDS, f"{key}\0{index}"))


def _new_event(snap: Snapshot, stream_id: str, event: Event, meta: dict[str, Any],
               event_id: str | None = None) -> NewEvent:
    """``event`` as a NewEvent, held to the limits of any append (EVSTORE_MAX_EVENT_BYTES), named by file."""
    try:
        return NewEvent(None, event, meta=meta, occurred_at=snap.occurred_at, event_id=event_id)
    except InvalidEvent as exc:
        raise IngestError(f"{_where(snap, stream_id)}: {exc} Nothing was written.") from exc


def _set_meta(snap: Snapshot, stream_id: str, event: NewEvent, meta: dict[str, Any]) -> None:
    """Give ``event`` (encoded already) the snapshot's meta, held to the same limits, named by file."""
    try:
        event.set_meta(meta)
    except InvalidEvent as exc:
        raise IngestError(f"{_where(snap, stream_id)}: {exc} Nothing was written.") from exc


def unreadable_event(raw: bytes, why: Unreadable) -> DocumentUnreadable:
    return DocumentUnreadable(reason=why.reason, error=why.error, line=why.line, column=why.column, size=len(raw),
                              sha256=chain.digest(raw).hex(),
                              content_zlib_b64=base64.b64encode(zlib.compress(raw, 9)).decode("ascii"))


class Ingestor:
    """Keeps each stream's current document in memory across snapshots of one run.

    ``strict``: a version that is no readable document of the dialect, or on which the dialect's
    lens fails, is refused (IngestError) instead of being recorded (as ``document.unreadable``, or
    exactly with a ``lens-failed`` finding).
    """

    def __init__(self, store: EventStore, dialect: Dialect, *, stream: str | None = None,
                 strict: bool = False, force_new_stream: bool = False) -> None:
        self.store, self.dialect, self.stream, self.strict = store, dialect, stream, strict
        self.force_new_stream = force_new_stream
        self._renamed: dict[str, str] = {}  # a stream whose recorded history conflicts -> its new stream
        self._docs: dict[str, tuple[int, Any]] = {}
        self._raw_sha: dict[str, str | None] = {}  # SHA-256 of each stream's last recorded snapshot bytes
        self._last_stream: str | None = None  # where a version that names no stream goes (watch)

    def _current(self, stream_id: str) -> tuple[int, Any]:
        cached = self._docs.get(stream_id)
        if cached is None:
            cached = current_document(self.store, self.dialect, stream_id)
        return cached

    def _last_raw_sha(self, stream_id: str, version: int) -> str | None:
        """The recorded SHA-256 of the bytes behind ``stream_id``'s latest version, if an
        ingested snapshot produced it (its last event's meta says so)."""
        if stream_id not in self._raw_sha:
            sha = None
            if version:
                for rec in self.store.read_stream(stream_id, after_version=version - 1):
                    meta = rec.metadata
                    snap = meta.get("snapshot") if isinstance(meta, dict) else None
                    sha = snap.get("sha256") if isinstance(snap, dict) else None
            self._raw_sha[stream_id] = sha if isinstance(sha, str) else None
        return self._raw_sha[stream_id]

    def classify(self, snap: Snapshot) -> Snapshot:
        """Mark a document that is not the dialect's as unreadable; under ``strict``, refuse any
        unreadable version.  Returns ``snap`` (changed in place)."""
        if snap.unreadable is None and snap.doc is not None:
            problem = self.dialect.identity_problem(snap.doc, _where(snap))
            if problem:
                if self.strict or snap.raw is None:  # no bytes to keep: nothing to record but the refusal
                    raise IngestError(problem + " Nothing was written.")
                snap.doc, snap.unreadable = None, Unreadable("dialect", problem)
        if snap.unreadable is not None and self.strict:
            raise IngestError(f"{snap.unreadable.error} Nothing was written (--strict refuses unreadable versions).")
        return snap

    def _stream_of(self, snap: Snapshot) -> str | None:
        """The stream a snapshot names (--stream, the source, its document); None for a version
        without a document, whose history decides (:meth:`stream_for`, :meth:`_place_docless`)."""
        sid = self.stream or snap.stream_hint or (self.dialect.stream_id(snap.doc) if snap.doc is not None else None)
        if not sid and snap.doc is not None and self.dialect.streams_by_source:
            sid = snap.source_stream
        return sid or None

    def _fallback_stream(self, snap: Snapshot) -> str | None:
        """Where a version without a document goes when nothing around it names a stream: the
        stream this Ingestor wrote last (watch), else the source's name (generic)."""
        return self._last_stream or (snap.source_stream if self.dialect.streams_by_source else None)

    def stream_for(self, snap: Snapshot) -> str:
        sid = self._stream_of(snap)
        if not sid and (snap.unreadable is not None or snap.removed):
            sid = self._fallback_stream(snap)  # a broken or deleted version belongs to its history
        if not sid:
            raise IngestError(f"{_where(snap)}: the document names no task id; pass --stream ID.")
        sid = self._renamed.get(sid, sid)
        try:
            return check_stream_id(sid)
        except InvalidEvent as exc:
            raise IngestError(f"{_where(snap)}: {exc} Pass --stream ID.") from exc

    def events_for(self, stream_id: str, prev: Any, snap: Snapshot) -> tuple[list[Event], Finding | None, Any]:
        """The snapshot's events, a ``lens-failed`` finding if the dialect's lens failed on it, and
        the stream's document after them.

        The lens law is checked once, before anything is written, on the document the observed
        events fold ``prev`` into (:meth:`Dialect.observe_folded` folds them while deriving them);
        that document is the stream's next one, so nothing is folded twice.  A lens that raises
        or breaks the law is a dialect bug: the snapshot is then recorded exactly anyway (one
        ``document.observed`` or ``document.patched``) and the finding says so; under ``strict``
        it is an IngestError.
        """
        where = _where(snap, stream_id)
        events = list(snap.events)
        if snap.doc is None:  # the loader's events only (a rejected turn, ...)
            return events, None, self._after(prev, events, where) if events else prev
        if prev is not None:
            old_id, new_id = self.dialect.stream_id(prev), self.dialect.stream_id(snap.doc)
            if old_id and new_id and old_id != new_id:
                raise IngestError(f'{where}: the snapshot is for task "{new_id}" but stream "{stream_id}" '
                                  f'records task "{old_id}"; pass the right --stream.')
        try:
            base = self._after(prev, events, where) if events else prev  # observe_folded leaves it as it is
            observed, folded = self.dialect.observe_folded(base, snap.doc)
            self.dialect.check_lens_law(folded, snap.doc)
            return events + observed, None, folded
        except IngestError:
            raise
        except Exception as exc:  # any exception out of a lens is a bug in it, to record (never to hide)
            failure = exc
        reason = f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
        if self.strict:
            raise IngestError(f"{where}: the {self.dialect.name} lens failed ({reason}). Nothing was written "
                              "(without --strict the snapshot is recorded as an exact document event with a "
                              "lens-failed finding).") from failure
        base = self._after(prev, events, where)  # afresh: the failed attempt may have changed it
        exact: Event = (DocumentObserved(doc=documents.copy(snap.doc)) if base is None
                        else DocumentPatched(ops=documents.diff(base, snap.doc)))
        kind = exact.event_type()
        return events + [exact], Finding(
            path="", code="lens-failed", severity="error",
            message=f"the {self.dialect.name} lens failed ({reason[:500]}); recorded as an exact {kind} instead "
                    "of domain events (a dialect bug: please report it)"), documents.copy(snap.doc)

    def _after(self, prev: Any, events: list[Event], where: str) -> Any:
        """A copy of ``prev`` with the loader's own events (a rejected turn, ...) folded in."""
        doc = documents.copy(prev) if prev is not None else None
        if not events:
            return doc
        try:
            return self.dialect.fold(doc, events)
        except Exception as exc:  # the loader's events are the record itself: no exact fallback exists
            raise IngestError(f"{where}: the {self.dialect.name} events read with this snapshot do not fold "
                              f"({type(exc).__name__}: {exc}). Nothing was written.") from exc

    def _prepare_unreadable(self, snap: Snapshot, stream_id: str, version: int, prev: Any,
                            key: str | None) -> tuple[IngestResult, int, list[NewEvent]]:
        """A version that is no document: one ``document.unreadable`` (or ``document.removed``)
        event; the stream's document does not move on (removed: it becomes null)."""
        file = snap.source.get("file") or snap.source.get("dir")
        meta: dict[str, Any] = {"dialect": self.dialect.name, "source": snap.source}
        if snap.removed:
            if prev is None:  # nothing recorded, or removed already: nothing to observe
                return IngestResult(file, stream_id, version, 0, source_id=_source_id(snap)), version, []
            new = _new_event(snap, stream_id, DocumentRemoved(), meta, keyed_event_id(key, 0))
            sha, doc = None, None
            result = IngestResult(file, stream_id, version + 1, 1, removed=True, source_id=_source_id(snap))
        else:
            why, raw = snap.unreadable, snap.raw
            assert why is not None and raw is not None
            sha = chain.digest(raw).hex()
            if version and sha == self._last_raw_sha(stream_id, version):  # the same bytes again
                return IngestResult(file, stream_id, version, 0, source_id=_source_id(snap)), version, []
            finding = Finding("", f"unreadable-{why.reason}", why.error, "error")
            meta["snapshot"] = {"sha256": sha, "bytes": len(raw), "unreadable": True}
            meta["findings"] = [finding.to_dict()]
            new = _new_event(snap, stream_id, unreadable_event(raw, why), meta, keyed_event_id(key, 0))
            doc = prev
            result = IngestResult(file, stream_id, version + 1, 1, [finding], unreadable=why.error,
                                  source_id=_source_id(snap))
        new.document = doc
        self._raw_sha[stream_id] = sha
        self._docs[stream_id] = (version + 1, doc)
        return result, version, [new]

    def prepare(self, snap: Snapshot, *, key: str | None = None) -> tuple[IngestResult, int, list[NewEvent]]:
        """Derive a snapshot's events against the in-memory document; writes nothing.  With a
        ``key``, the events' ids derive from it (see :meth:`ingest`).

        Returns the result it will have, the stream version it expects, and the events.  The
        cached document moves on as if the append happened (call :meth:`forget` if it does not).
        """
        self.classify(snap)  # before the task id: a wrong dialect says so
        stream_id = self.stream_for(snap)
        self._last_stream = stream_id
        version, prev = self._current(stream_id)
        if snap.unreadable is not None or snap.removed:
            return self._prepare_unreadable(snap, stream_id, version, prev, key)
        events, lens_failure, doc = self.events_for(stream_id, prev, snap)
        file = snap.source.get("file") or snap.source.get("dir")
        if not events and snap.doc is not None and snap.raw is not None and version \
                and chain.digest(snap.raw).hex() != self._last_raw_sha(stream_id, version):
            # Same document, other bytes (re-indented, keys re-spaced...): history keeps the new
            # bytes too, as an empty patch whose meta records them (``replay --raw`` gives them back).
            events = [DocumentPatched(ops=[])]
        if not events:
            return IngestResult(file, stream_id, version, 0, source_id=_source_id(snap)), version, []
        # Every event encoded (once) and its data checked before the costlier steps below
        # (validation, raw bytes); the last one then takes the snapshot's meta.
        new = [_new_event(snap, stream_id, ev, {"dialect": self.dialect.name}, keyed_event_id(key, i))
               for i, ev in enumerate(events)]
        findings = ([lens_failure] if lens_failure is not None else []) + snap.findings
        if snap.doc is not None:
            findings += self.dialect.validate(snap.doc)
        meta_last: dict[str, Any] = {"dialect": self.dialect.name, "source": snap.source}
        rec = raw_record(snap.doc, snap.raw) if snap.doc is not None else None
        if rec is not None:
            meta_last["snapshot"] = rec
        if findings:
            meta_last["findings"] = [f.to_dict() for f in findings]
        _set_meta(snap, stream_id, new[-1], meta_last)
        new[-1].document = doc  # inline projections (the runs index) take it instead of folding again
        self._raw_sha[stream_id] = rec["sha256"] if rec is not None else None
        self._docs[stream_id] = (version + len(new), doc)
        return IngestResult(file, stream_id, version + len(new), len(new), findings,
                            lens_failures=int(lens_failure is not None), source_id=_source_id(snap)), version, new

    def forget(self) -> None:
        """Drop the cached documents (after a failed write)."""
        self._docs.clear()
        self._raw_sha.clear()

    def _refuse_if_nothing_readable(self, snaps: list[Snapshot]) -> None:
        """Input with no readable version, for streams that hold no document yet, is the wrong
        dialect or the wrong file rather than a history: refuse it, naming the first problem."""
        broken = [s for s in snaps if s.unreadable is not None]
        if not broken or len(broken) < sum(1 for s in snaps if not s.removed):
            return
        sid = self._stream_of(broken[0]) or self._fallback_stream(broken[0])
        if sid is None or self._current(sid)[1] is None:
            why = broken[0].unreadable
            assert why is not None
            more = f" (and {len(broken) - 1} more unreadable file(s))" if len(broken) > 1 else ""
            raise IngestError(f"{why.error}{more} No readable version to start a stream from; nothing was written.")

    def ingest(self, snap: Snapshot, *, key: str | None = None) -> IngestResult:
        """Derive and append one snapshot's events (one atomic append at the expected version).

        ``key`` names the observation (a hook call, say) so that a retry is no second version:
        the events' ids derive from it, so the same snapshot again at the same version is an
        idempotent no-op, and at another version (the stream moved on since) a
        :class:`DuplicateEventId`, which the caller takes as "recorded already".
        """
        self._refuse_if_nothing_readable([self.classify(snap)])
        result, version, new = self.prepare(snap, key=key)
        if new:
            try:
                self.store.append(result.stream, new, expected_version=version, dialect=self.dialect.name)
            except BaseException:
                self.forget()
                raise
        return result

    def ingest_all(self, snaps: Iterable[Snapshot]) -> list[IngestResult]:
        """Ingest several snapshots all-or-nothing: every event in one transaction.

        A snapshot whose source version (``source["id"]``) its stream recorded already is not
        recorded again (its result says ``recorded``); see :meth:`plan`."""
        planned = []
        items: list[tuple[str, NewEvent, Any]] = []
        try:
            snaps = [self.classify(s) for s in snaps]
            self._refuse_if_nothing_readable(snaps)
            self._place_docless(snaps)
            known = self.plan(snaps)
            for snap, before in zip(snaps, known, strict=True):
                if before is not None:
                    planned.append(before)
                    continue
                result, version, new = self.prepare(snap)
                planned.append(result)
                for i, event in enumerate(new):
                    items.append((result.stream, event, version if i == 0 else None))
            if items:
                self.store.append_many(items, dialect=self.dialect.name)
        except BaseException:
            self.forget()
            raise
        return planned

    def plan(self, snaps: list[Snapshot]) -> list[IngestResult | None]:
        """What each snapshot is against what its stream recorded of the same source: an
        IngestResult for one recorded already (``recorded``) or one the source itself wrote with
        the bytes of the version before it (``unchanged``), None for one to ingest.  One query
        reads every stream's recorded source versions (:meth:`EventStore.recorded_sources`).

        A *live* source's snapshot (one file named alone, ``watch``) is recorded unless it is the
        last version recorded from the same place.  The snapshots of a *history* (a folder, a file
        list, a git range) in one stream must begin with what that stream recorded of it (in
        order; a version whose bytes equal the one before it was never a version and is passed
        over): what follows is new.  A version that differs from the recorded one at its place
        raises :class:`SourceConflict` naming both, unless ``force_new_stream``: then the stream's
        snapshots all go to a new stream (``<stream>~2``, ``~3``, ...).
        """
        out: list[IngestResult | None] = [None] * len(snaps)
        groups: dict[str, list[int]] = {}
        for i, snap in enumerate(snaps):
            if _source_id(snap) is not None:
                groups.setdefault(self.stream_for(snap), []).append(i)
        if not groups:
            return out
        recorded = self.store.recorded_sources(groups)
        for sid, indexes in groups.items():
            rows = recorded.get(sid, [])
            if not rows:
                continue
            live = len(indexes) == 1 and snaps[indexes[0]].live
            try:
                found = self._match_live(snaps[indexes[0]], rows) if live else self._match_history(
                    [snaps[i] for i in indexes], rows, sid)
            except SourceConflict:
                if not self.force_new_stream:
                    raise
                self._renamed[sid] = self._fresh_stream(sid)
                continue
            idents = dict(rows)
            for i, hit in zip(indexes, found, strict=True):
                if hit is not None:
                    snap = snaps[i]
                    out[i] = IngestResult(snap.source.get("file") or snap.source.get("dir"), sid, hit[0], 0,
                                          recorded=hit[1], source_id=_source_id(snap),
                                          erased_match=hit[1] and is_erased_source_id(idents.get(hit[0], "")))
        return out

    @staticmethod
    def _match_live(snap: Snapshot, rows: list[tuple[int, str]]) -> list[tuple[int, bool] | None]:
        ident = _source_id(snap)
        assert ident is not None
        place = _locator(ident)
        last = next((r for r in reversed(rows) if _locator(r[1]) == place), None)
        if last is not None and is_erased_source_id(last[1]):
            # Which bytes the erased version had is gone on purpose: taken as this one (recording it
            # again could bring the erased content back; the stream cannot take a new version anyway,
            # its document no longer folds past the erased change).
            return [(last[0], True)]
        return [(last[0], True) if last is not None and last[1] == ident else None]

    def _match_history(self, snaps: list[Snapshot], rows: list[tuple[int, str]],
                       sid: str) -> list[tuple[int, bool] | None]:
        """(version, recorded?) of each snapshot the stream holds already, None for the new ones."""
        places = {_locator(i) for s in snaps if (i := _source_id(s)) is not None}
        ours = [r for r in rows if _locator(r[1]) in places]  # what this source recorded (not another's)
        found: list[tuple[int, bool] | None] = []
        j, before = 0, ""
        for snap in snaps:
            ident = _source_id(snap)
            content = _content_sha(snap)
            if j < len(ours) and (ident == ours[j][1] or (
                    is_erased_source_id(ours[j][1]) and ident is not None and _locator(ident) == _locator(ours[j][1]))):
                found.append((ours[j][0], True))  # an erased version: matched by place and order, not bytes
                j += 1
            elif before and content == before:  # the same bytes as the version before it: never a version
                found.append((ours[j - 1][0] if j else 0, False))
            elif j < len(ours):
                version, was = ours[j]
                raise SourceConflict(
                    f'{_named(snap)} differs from version {version} of stream "{sid}" (recorded {_describe(was)}, '
                    f"now {_describe(ident)}): the source's history was rewritten or a version in it changed; "
                    "nothing was written — pass --force-new-stream to record this capture as a new stream.")
            else:
                found.append(None)
            before = content
        return found

    def _fresh_stream(self, sid: str) -> str:
        n = 2
        while self.store.stream_info(f"{sid}~{n}") is not None or f"{sid}~{n}" in self._renamed.values():
            n += 1
        return f"{sid}~{n}"

    def _place_docless(self, snaps: list[Snapshot]) -> None:
        """An unreadable or removed version that names no stream joins the stream of the version
        before it (the first ones: of the version after them)."""
        known = [self._stream_of(s) for s in snaps]
        previous: str | None = None
        for i, sid in enumerate(known):
            known[i] = sid or previous
            previous = known[i]
        following: str | None = None
        for i in range(len(snaps) - 1, -1, -1):
            known[i] = known[i] or following
            following = known[i]
            if snaps[i].doc is None and (snaps[i].unreadable is not None or snaps[i].removed) \
                    and self._stream_of(snaps[i]) is None:
                snaps[i].stream_hint = known[i]


# ------------------------------------------------------------------ where versions come from and when


ORDERS = ("name", "mtime")


def order_files(files: list[Path], order: str = "name") -> tuple[list[Path], list[str]]:
    """The files of one folder in history order, and notes on how (and how surely) it was found.

    ``name``: natural name order (``2-x`` before ``10-x``); ``mtime``: modification time, ties
    in natural name order.  An order the names and times do not settle is reported."""
    if order not in ORDERS:
        raise IngestError(f'--order must be one of {", ".join(ORDERS)}, got "{order}".')
    stamps = {f: f.stat().st_mtime_ns for f in files}
    if order == "mtime":
        out = sorted(files, key=lambda f: (stamps[f], natural_key(f)))
    else:
        out = sorted(files, key=natural_key)
    if len(out) < 2:
        return out, []
    where = out[0].parent
    notes = [f"{where}: {len(out)} files in {'natural name order (2-x before 10-x)' if order == 'name' else 'modification-time order'}"]
    unnumbered = [f for f in out if not re.search(r"\d", f.name)]
    tied = len(set(stamps.values())) < len(stamps)
    if order == "name" and unnumbered and tied:
        notes.append(f"warning: {where}: the order is ambiguous: {len(unnumbered)} file name(s) carry no number "
                     "and files share a modification time, so name order may not be the order they were written")
    elif order == "name" and unnumbered:
        notes.append(f"warning: {where}: {len(unnumbered)} file name(s) carry no number; "
                     "pass --order mtime if modification time is the history order")
    elif order == "mtime" and tied:
        notes.append(f"warning: {where}: the order is ambiguous: files share a modification time "
                     "(taken in name order)")
    return out, notes


def stamp_times(dialect: Dialect, snaps: Iterable[Snapshot]) -> None:
    """``occurred_at`` of each snapshot that has none: the document's own time when the dialect
    knows one, else the git commit time, else the file's modification time; ``source["time"]``
    says which."""
    for snap in snaps:
        if snap.occurred_at is not None:
            continue
        found = dialect.document_time(snap.doc) if snap.doc is not None else None
        git = snap.source.get("git")
        if found is not None:
            snap.source["time"] = f"document:{found[0]}"
            snap.occurred_at = found[1]
        elif isinstance(git, dict) and isinstance(git.get("committer"), dict):
            snap.source["time"] = "git:committer"
            snap.occurred_at = datetime.fromisoformat(git["committer"]["time"])
        elif "file" in snap.source:
            try:
                snap.occurred_at = datetime.fromtimestamp(os.stat(snap.source["file"]).st_mtime, UTC)
                snap.source["time"] = "mtime"
            except OSError:
                pass


def load_paths(dialect: Dialect, paths: Iterable[Path], *, order: str = "name",
               report: Callable[[str], None] | None = None) -> list[Snapshot]:
    """Every snapshot under ``paths`` (a folder of versions: in ``order``), with its times."""
    paths = list(paths)
    parents = {p.resolve().parent for p in paths if not p.is_dir()}
    loaded: list[Snapshot] = []
    for path in paths:  # read and parse everything first
        if not path.exists():
            raise IngestError(f"{path}: no such file or directory.")
        if path.is_dir() and dialect.versions_in_folders:
            files, notes = order_files([p for p in reading.entries(path)[0] if not p.name.startswith(".")], order)
            for note in notes:
                if report is not None:
                    report(note)
            batch = [snap for f in files for snap in dialect.load(f)]
        else:
            batch = list(dialect.load(path))
        # The stream a version takes when nothing names one (generic): a folder's name, a file's
        # name, or for several files from one folder, that folder's name.
        name = path.resolve().name if len(paths) == 1 or path.is_dir() or len(parents) > 1 else path.resolve().parent.name
        # Each version's identity (capture-once): where it is relative to what was named, and its
        # bytes' SHA-256.  Only a folder of versions is a history by itself; a file, or a folder of
        # task folders, is the current state of live sources (unless several of its snapshots go to
        # one stream: Ingestor.plan).
        live = not (path.is_dir() and dialect.versions_in_folders)
        seen: dict[str, int] = {}
        for snap in batch:
            snap.source_stream = snap.source_stream or name
            ident = file_identity(snap, path)
            if ident is not None:
                n = seen[ident] = seen.get(ident, 0) + 1
                snap.source["id"] = ident if n == 1 else f"{ident}#{n}"  # one file, several snapshots
            snap.live = live
            for key in ("file", "dir"):  # a relative path names a file only from here: coverage checks this one
                where = snap.source.get(key)
                if isinstance(where, str) and not os.path.isabs(where):
                    snap.source["abspath"] = os.path.abspath(where)
        loaded.extend(batch)
    stamp_times(dialect, loaded)
    return loaded


def ingest(store: EventStore, dialect: Dialect, paths: Iterable[Path], *, stream: str | None = None,
           order: str = "name", strict: bool = False, force_new_stream: bool = False,
           report: Callable[[str], None] | None = None) -> list[IngestResult]:
    """Ingest every snapshot under ``paths`` (a folder: its files in ``order``), all-or-nothing;
    source versions recorded before are not recorded again (:meth:`Ingestor.plan`)."""
    snaps = load_paths(dialect, paths, order=order, report=report)
    return Ingestor(store, dialect, stream=stream, strict=strict, force_new_stream=force_new_stream).ingest_all(snaps)


GIT_ORDER = "commit time, a parent never after its child (git log --date-order --reverse)"
_GIT_FIELDS = "%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1e"  # unit and record separators


def git_snapshots(spec: str, *, first_parent: bool = False) -> Iterator[Snapshot]:
    """Every committed version of ``REPO_DIR:FILE``, in commit-time order, a parent never after its child.

    Walks every commit that changed the file (``--full-history``: side branches a merge later
    overrode, and merges whose result differs from a parent, included; ``first_parent``: only
    the main line).  A commit without the file is a removal; a later one re-creates it."""
    if ":" not in spec:
        raise IngestError(f'--git expects REPO_DIR:FILE, got "{spec}".')
    repo, file = spec.rsplit(":", 1)

    def git(*args: str, stdin: bytes | None = None) -> bytes:
        try:
            return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, input=stdin).stdout
        except FileNotFoundError as exc:
            raise IngestError("git is not installed.") from exc
        except subprocess.CalledProcessError as exc:
            raise IngestError(f"git {' '.join(args)} failed in {repo}: {exc.stderr.decode(errors='replace').strip()}") from exc

    walk = ["--first-parent"] if first_parent else []
    out = git("log", "--full-history", *walk, "--date-order", "--reverse", f"--format={_GIT_FIELDS}", "--", file)
    records = out.decode("utf-8", errors="replace").split("\x1e")
    commits = [r.strip("\n").split("\x1f") for r in records if r.strip("\n")]
    if not commits:
        raise IngestError(f"{repo}: no commits touch {file}.")
    # One `git cat-file --batch` for every version instead of a `git show` per commit.
    blobs = git("cat-file", "--batch", stdin="".join(f"{c[0]}:{file}\n" for c in commits).encode())
    repo_path = str(Path(repo).resolve())
    pos = 0
    seen = False
    for sha, parents, an, ae, at, cn, ce, ct in commits:
        end = blobs.index(b"\n", pos)
        header = blobs[pos:end].split(b" ")
        pos = end + 1
        source: dict[str, Any] = {"file": file, "id": f"git:{sha}:{file}", "git": {
            "repo": repo_path, "commit": sha, "parents": parents.split(),
            "author": {"name": an, "email": ae, "time": at}, "committer": {"name": cn, "email": ce, "time": ct},
            "walk": "first-parent" if first_parent else "full-history", "order": GIT_ORDER}}
        found = len(header) == 3 and header[-1] != b"missing"
        size = int(header[2]) if found else 0
        raw = blobs[pos:pos + size]
        pos += size + 1 if found else 0  # an object's content follows its header, whatever its type
        if not found or header[1] != b"blob":  # no file here (a folder of that name is no file either)
            if seen:
                yield Snapshot(doc=None, raw=None, source=source, removed=True, source_stream=file)
            continue
        seen = True
        snap = read_snapshot(raw, f"{repo}:{file}@{sha[:12]}", source)
        snap.source_stream = file
        yield snap


def ingest_git(store: EventStore, dialect: Dialect, spec: str, *, stream: str | None = None,
               first_parent: bool = False, strict: bool = False, force_new_stream: bool = False) -> list[IngestResult]:
    """Every committed version of ``REPO_DIR:FILE`` (see :func:`git_snapshots`), all-or-nothing;
    commits recorded before are not recorded again (:meth:`Ingestor.plan`)."""
    snaps = list(git_snapshots(spec, first_parent=first_parent))
    stamp_times(dialect, snaps)
    return Ingestor(store, dialect, stream=stream, strict=strict, force_new_stream=force_new_stream).ingest_all(snaps)


__all__ = ["GIT_ORDER", "ORDERS", "IngestResult", "Ingestor", "current_document", "detect_format", "file_identity", "git_snapshots",
           "ingest", "ingest_git", "load_paths", "order_files", "raw_bytes", "raw_record", "render", "stamp_times"]
