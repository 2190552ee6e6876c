"""Live replay: fold a stream through its dialect's ``evolve`` from the newest cached document.

    >>> result = replay(store, "PROJ-1", upto_version=12)
    >>> result.doc["currentPhase"]

Cost grows with the events since the nearest usable cache row: after folding more than
``CACHE_EVERY`` events past it, replay caches the document (``eventstore.replay_cache``; a row
that disagrees with the log is never used).  A caller that cannot write (a read-only database
role) still replays, without caching.  Events are streamed in batches, so memory stays
proportional to the document, not to the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventstore import chain, documents, replay_cache
from eventstore.dialects import FALLBACK, Dialect, get_dialect
from eventstore.dialects.base import DocumentUnreadable
from eventstore.errors import ContentErased, EvstoreError, StreamNotFound, UnknownEventType
from eventstore.events import Event
from eventstore.ingest import raw_bytes
from eventstore.records import RecordedEvent
from eventstore.store import EventStore, iso
from projections.runs import find_streams_by_task

CACHE_EVERY = 200
_UNFOLDED: Any = object()  # replay_raw's "no document given" (None is a document)


class NoStateDocument(EvstoreError):
    """The stream's events are not document or dialect events: there is nothing to fold."""


@dataclass
class ReplayResult:
    stream_id: str
    dialect: str
    version: int  # the version the document is at
    stream_version: int  # the stream's latest version
    doc: Any
    # The version of the replay-cache row the fold started from (None: folded from the first event).  A
    # cached row is checked against the log's event hash and its own digest, which someone who can
    # write the database can recompute: a reader is told, and ``use_cache=False`` folds every event.
    cached_from: int | None = None


def dialect_of(store: EventStore, stream_id: str) -> Dialect:
    head = store.stream_head(stream_id)
    return get_dialect((head.dialect if head else None) or FALLBACK)


def resolve(store: EventStore, task: str) -> str:
    """A stream id for ``task`` (a stream id or a task id); ambiguous task ids list candidates."""
    if store.stream_info(task) is not None:
        return task
    candidates = find_streams_by_task(store, task)
    if not candidates:
        candidates = store.streams_ending(task)  # "DIALECT/T-1" or "SESSION:T-1" for "T-1", found by the database
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise StreamNotFound(f'No stream or task "{task}"; `evstore runs` lists them.')
    raise EvstoreError(f'Task "{task}" is ambiguous; it names {len(candidates)} streams: '
                       + ", ".join(candidates) + ". Pass one of them.")


def _version_at(store: EventStore, stream_pk: int, stream_version: int, at: datetime | str) -> int:
    """The last version whose event occurred (or, lacking a source time, was recorded) at or before ``at``."""
    when = iso(at)
    assert when is not None
    version = 0
    for e in store.read_payloads(stream_pk, after_version=0, upto_version=stream_version):
        if (e.occurred_at or e.recorded_at) <= when:
            version = e.version
    return version


def replay(store: EventStore, stream_id: str, *, upto_version: int | None = None,
           at: datetime | str | None = None, use_cache: bool = True) -> ReplayResult:
    """The document of ``stream_id`` at ``upto_version`` (or time ``at``; default: latest)."""
    head = store.stream_head(stream_id)
    if head is None:
        raise StreamNotFound(f'No stream "{stream_id}"; `evstore runs` lists the streams.')
    stream_pk, stream_version, dialect_name = head.stream_pk, head.version, head.dialect
    if at is not None:
        upto_version = _version_at(store, stream_pk, stream_version, at)
    target = stream_version if upto_version is None else upto_version
    if target < 0 or target > stream_version:
        raise EvstoreError(f'Stream "{stream_id}" has versions 1..{stream_version}; there is no version {target}.')
    dialect = get_dialect(dialect_name or FALLBACK)
    try:
        doc, last, folded = replay_cache.fold(store, stream_pk, dialect, target,
                                              use_cache=use_cache and target > CACHE_EVERY)
    except ContentErased as exc:
        raise ContentErased(f'Stream "{stream_id}": {exc}') from exc
    except UnknownEventType as exc:
        if dialect_name is not None:
            raise
        raise NoStateDocument(
            f'Stream "{stream_id}" holds free-form events (recorded with `evstore append`, no dialect), so it has '
            f"no state document to rebuild; `evstore log {stream_id}` shows its events.") from exc
    if use_cache and folded > CACHE_EVERY and last is not None:
        try:  # a cache: losing a race with another writer, or having no right to write, must not fail the read
            replay_cache.save(store, stream_pk, replay_cache.cache_name(dialect), last, doc)
        except Exception:  # noqa: BLE001
            pass
    start = target - folded  # versions are contiguous: the fold began after this one
    return ReplayResult(stream_id, dialect.name, target, stream_version, doc, cached_from=start if start > 0 else None)


def replay_raw(store: EventStore, stream_id: str, version: int | None = None, *, doc: Any = _UNFOLDED) -> bytes:
    """The exact bytes of the snapshot file whose ingest ended at ``version`` (default: latest);
    ``doc``: the document at that version when the caller has already replayed it."""
    head = store.stream_head(stream_id)
    if head is None:
        raise StreamNotFound(f'No stream "{stream_id}".')
    target = head.version if version is None else version
    dialect = get_dialect(head.dialect or FALLBACK)
    if dialect.line_based:  # a file recorded line by line (transcripts): its events hold the bytes
        return dialect.file_bytes((_event(store, rec) for rec in store.read_stream(stream_id, upto_version=target)),
                                  blob=store.read_blob)
    # The snapshot producing version V is the first event at or after V that ends a snapshot group.
    for rec in store.read_stream(stream_id, after_version=max(target - 1, 0)):
        if rec.erased and rec.version == target:
            raise _refused(store, rec)
        if rec.type == "document.unreadable" and rec.version == target:
            event = rec.to_event()
            assert isinstance(event, DocumentUnreadable)
            out = event.content()
            if chain.digest(out).hex() != event.sha256:
                raise EvstoreError(f'The kept bytes of "{stream_id}" version {target} do not match their SHA-256; '
                                   "run `evstore verify`.")
            return out
        if rec.type == "document.removed" and rec.version == target:
            raise EvstoreError(f'Version {target} of "{stream_id}" records that the file was removed; it has no bytes.')
        meta = rec.metadata
        if isinstance(meta, dict) and isinstance(meta.get("snapshot"), dict):
            if rec.version != target:
                raise EvstoreError(f'Version {target} of "{stream_id}" is inside the snapshot that ends at version '
                                   f"{rec.version}; use --upto {rec.version} (or --json for version {target}).")
            if doc is _UNFOLDED:
                doc = replay(store, stream_id, upto_version=rec.version).doc
            out = raw_bytes(doc, meta["snapshot"])
            if chain.digest(out).hex() != meta["snapshot"].get("sha256"):
                raise EvstoreError(f'The rebuilt bytes of "{stream_id}" version {target} do not match the recorded '
                                   "SHA-256; run `evstore verify`.")
            return out
        if isinstance(meta, dict) and "source" in meta:
            break
    d = dialect_of(store, stream_id)
    if type(d).restore is not Dialect.restore:  # a folder of files, not one file's bytes
        raise EvstoreError(f'"{stream_id}" records a {d.name} folder, not one file: '
                           f"`evstore replay {stream_id} --restore DIR` writes its files (or use --json).")
    if d.no_raw_bytes:  # e.g. snapshots parsed out of transcripts
        raise EvstoreError(f'"{stream_id}" {d.no_raw_bytes}: there are no file bytes to give back (use --json).')
    raise EvstoreError(f'Version {target} of "{stream_id}" was not produced by an ingested file; '
                       "only ingested snapshots have raw bytes (use --json).")


def _refused(store: EventStore, rec: RecordedEvent) -> ContentErased:
    from eventstore.erasure import refuse

    return refuse(store, rec.stream_id, rec.version, rec.position)


def _event(store: EventStore, rec: RecordedEvent) -> Event:
    """``rec`` decoded; a purged or erased one refuses, saying when and why (never a partial file)."""
    if rec.erased:
        raise _refused(store, rec)
    return rec.to_event()


def unreadable_tail(store: EventStore, stream_id: str, version: int) -> list[tuple[int, Event]]:
    """The versions at and just before ``version`` that recorded no document (unreadable or removed
    file), oldest first: what the document at ``version`` (the last valid one) is not."""
    out: list[tuple[int, Event]] = []
    v = version
    while v > 0:
        rec = next(store.read_stream(stream_id, after_version=v - 1, upto_version=v), None)
        if rec is None or rec.type not in ("document.unreadable", "document.removed"):
            break
        out.append((v, rec.to_event()))
        v -= 1
    return out[::-1]


def tail_code(event: Event) -> str:
    return f"unreadable-{event.reason}" if isinstance(event, DocumentUnreadable) else "file-removed"


def tail_message(event: Event) -> str:
    if isinstance(event, DocumentUnreadable):
        return f"unreadable ({event.error})"
    return "the file was removed"


@dataclass
class HistoryFinding:
    """A finding recorded with the snapshots of versions ``first``..``last`` (the same finding
    on consecutive snapshots is one: a document's validation finding is found again at every
    version until it is fixed)."""

    first: int
    last: int
    path: str
    code: str
    message: str
    severity: str

    def versions(self) -> str:
        return f"version {self.first}" if self.first == self.last else f"versions {self.first}-{self.last}"

    def line(self) -> str:
        return f"{self.versions()}: {self.path or '/'}: [{self.code}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"first_version": self.first, "last_version": self.last, "path": self.path, "code": self.code,
                "message": self.message, "severity": self.severity}


def history_findings(store: EventStore, stream_id: str, *, current: list[Any] | None = None) -> list[HistoryFinding]:
    """Every finding recorded with the snapshots of ``stream_id`` (``meta["findings"]``), with the
    versions that carried it, oldest first; ``current`` (the dialect's findings of the latest
    document, revalidated now) adds those the last snapshot did not record.  An unreadable version
    does not end the findings of the document before it: that document is still the current one."""
    keyed: dict[tuple[str, str, str], HistoryFinding] = {}
    out: list[HistoryFinding] = []
    last_snapshot = 0
    version = 0
    for rec in store.read_stream(stream_id):
        version = rec.version
        meta = rec.metadata
        if not isinstance(meta, dict) or "source" not in meta:
            continue
        found = [f for f in meta.get("findings") or () if isinstance(f, dict)]
        seen = set()
        for f in found:
            key = (str(f.get("path") or ""), str(f.get("code")), str(f.get("message")))
            seen.add(key)
            open_ = keyed.get(key)
            if open_ is not None and open_.last == last_snapshot:
                open_.last = rec.version
            else:
                keyed[key] = h = HistoryFinding(rec.version, rec.version, *key, str(f.get("severity") or "warning"))
                out.append(h)
        if rec.type == "document.unreadable":  # the document before it is still current: its findings go on
            for key, h in keyed.items():
                if key not in seen and h.last == last_snapshot:
                    h.last = rec.version
        last_snapshot = rec.version
    for f in current or ():
        key = (f.path, f.code, f.message)
        known = keyed.get(key)
        if known is None or known.last != last_snapshot:
            out.append(HistoryFinding(version, version, *key, f.severity))
    return out


def tail_notes(hidden: list[tuple[int, Event]]) -> list[str]:
    """One sentence per version of :func:`unreadable_tail`: what it was, and what is shown instead."""
    out = []
    for hv, e in hidden:
        shown = ("the document is null until a later version re-creates the file" if tail_code(e) == "file-removed"
                 else f"the document shown is the last valid one (version {hidden[0][0] - 1})")
        out.append(f"version {hv}: {tail_message(e)}; {shown}")
    return out


def diff_versions(store: EventStore, stream_id: str, v1: int, v2: int) -> list[dict[str, Any]]:
    """The RFC 6902 JSON Patch from version ``v1`` to ``v2``."""
    a = replay(store, stream_id, upto_version=v1).doc
    b = replay(store, stream_id, upto_version=v2).doc
    return documents.diff(a, b)


def validate_against(doc: Any, schema_path: str) -> list[dict[str, str]]:
    """JSON Schema violations of ``doc`` with their JSON paths."""
    import json

    import jsonschema

    try:
        with open(schema_path, encoding="utf-8") as fh:
            schema = json.load(fh)
    except (OSError, ValueError) as exc:
        raise EvstoreError(f"Cannot read schema {schema_path}: {exc}") from exc
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema)
    except (jsonschema.SchemaError, TypeError, AttributeError) as exc:
        msg = getattr(exc, "message", str(exc))
        raise EvstoreError(f"{schema_path} is not a valid JSON Schema: {msg}") from exc
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append({"path": "$" + path, "message": err.message})
    return out
