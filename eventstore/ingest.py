"""Ingest state-file snapshots: derive events with a dialect, check the lens law, append.

    >>> results = list(ingest(store, get_dialect("mapipe"), [Path("agent-state.json")]))
    >>> results[0].to_dict()
    {'file': 'agent-state.json', 'stream': 'PROJ-1', 'version': 1, 'events': 1}

Each snapshot is one atomic append at the stream's current version (optimistic concurrency),
so a concurrent writer makes the ingest fail cleanly instead of interleaving.  The last event
of a snapshot's group carries in ``meta``: the source (file, git commit), the snapshot's
SHA-256 and how to reproduce its exact bytes (a ``json.dumps`` format, or the raw bytes
zlib-compressed when no format reproduces them), and the dialect's validation findings.  The
same document again with the same bytes appends nothing; with other bytes (re-indented, say) it
appends one empty ``document.patched`` whose meta records the new bytes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from eventstore import chain, documents, replay_cache
from eventstore.dialects.base import Dialect, Finding, Snapshot, parse_json_document
from eventstore.errors import IngestError, InvalidEvent
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
    for base in _FORMATS:
        fmt = {**base, "newline": newline}
        if render(doc, fmt) == raw:
            return fmt
    return None


def raw_record(doc: Any, raw: bytes | None) -> dict[str, Any] | None:
    """What meta keeps so ``replay --raw`` reproduces ``raw`` byte for byte."""
    if raw is None:
        return None
    rec: dict[str, Any] = {"sha256": chain.digest(raw).hex(), "bytes": len(raw)}
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

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "stream": self.stream, "version": self.version, "events": self.events}


def current_document(store: EventStore, dialect: Dialect, stream_id: str) -> tuple[int, Any]:
    """(version, document) of a stream, folded from its newest usable replay-cache row. (0, None) if absent."""
    info = store.stream_info(stream_id)
    if info is None:
        return 0, None
    doc, _, _ = replay_cache.fold(store, info[0], dialect, info[1])
    return info[1], doc


class Ingestor:
    """Keeps each stream's current document in memory across snapshots of one run."""

    def __init__(self, store: EventStore, dialect: Dialect, *, stream: str | None = None) -> None:
        self.store, self.dialect, self.stream = store, dialect, stream
        self._docs: dict[str, tuple[int, Any]] = {}
        self._raw_sha: dict[str, str | None] = {}  # SHA-256 of each stream's last recorded snapshot bytes

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

    def stream_for(self, snap: Snapshot) -> str:
        sid = self.stream or snap.stream_hint or (self.dialect.stream_id(snap.doc) if snap.doc is not None else None)
        if not sid:
            raise IngestError(f"{_where(snap)}: the document names no task id; pass --stream ID.")
        try:
            return check_stream_id(sid)
        except InvalidEvent as exc:
            raise IngestError(f"{_where(snap)}: {exc} Pass --stream ID.") from exc

    def events_for(self, stream_id: str, prev: Any, snap: Snapshot) -> list[Event]:
        where = _where(snap, stream_id)
        events = list(snap.events)
        if snap.doc is None:
            return events
        if prev is not None:
            old_id, new_id = self.dialect.stream_id(prev), self.dialect.stream_id(snap.doc)
            if old_id and new_id and old_id != new_id:
                raise IngestError(f'{where}: the snapshot is for task "{new_id}" but stream "{stream_id}" '
                                  f'records task "{old_id}"; pass the right --stream.')
        observed = self.dialect.observe(prev, snap.doc)
        # The lens law, checked before anything is written; fall back to one exact patch.
        doc = documents.copy(prev) if prev is not None else None
        base = doc
        try:
            for ev in events:
                base = self.dialect.evolve(base, ev)
            got = self.dialect.fold(base, observed)
            ok = documents.same(got, snap.doc)
        except Exception:
            ok = False
        if not ok:
            from eventstore.dialects.base import DocumentObserved, DocumentPatched

            if prev is None:
                observed = [DocumentObserved(doc=documents.copy(snap.doc))]
            else:
                observed = [DocumentPatched(ops=documents.diff(prev, snap.doc))]
        return events + observed

    def prepare(self, snap: Snapshot) -> tuple[IngestResult, int, list[NewEvent]]:
        """Derive a snapshot's events against the in-memory document; writes nothing.

        Returns the result it will have, the stream version it expects, and the events.  The
        cached document moves on as if the append happened (call :meth:`forget` if it does not).
        """
        self.dialect.check_identity(snap.doc, _where(snap))  # before the task id: a wrong dialect says so
        stream_id = self.stream_for(snap)
        version, prev = self._current(stream_id)
        events = self.events_for(stream_id, prev, snap)
        file = snap.source.get("file") or snap.source.get("dir")
        if not events and snap.doc is not None and snap.raw is not None and version \
                and chain.digest(snap.raw).hex() != self._last_raw_sha(stream_id, version):
            # Same document, other bytes (re-indented, keys re-spaced...): history keeps the new
            # bytes too, as an empty patch whose meta records them (``replay --raw`` gives them back).
            from eventstore.dialects.base import DocumentPatched

            events = [DocumentPatched(ops=[])]
        if not events:
            return IngestResult(file, stream_id, version, 0), version, []
        where = _where(snap, stream_id)

        def new_event(ev: Event, meta: dict[str, Any]) -> NewEvent:
            try:  # the limits of any append (EVSTORE_MAX_EVENT_BYTES), named by file
                return NewEvent(None, ev, meta=meta, occurred_at=snap.occurred_at)
            except InvalidEvent as exc:
                raise IngestError(f"{where}: {exc} Nothing was written.") from exc

        # Every event's data checked before the costlier steps below (validation, raw bytes);
        # the last one is made again with the snapshot's meta.
        new = [new_event(ev, {"dialect": self.dialect.name}) for ev in events]
        findings = self.dialect.validate(snap.doc) if snap.doc is not None else []
        meta_last: dict[str, Any] = {"dialect": self.dialect.name, "source": snap.source}
        rec = raw_record(snap.doc, snap.raw) if snap.doc is not None else None
        if rec is not None:
            meta_last["snapshot"] = rec
        if findings:
            meta_last["findings"] = [f.to_dict() for f in findings]
        new[-1] = new_event(events[-1], meta_last)
        doc = prev if snap.doc is None else documents.copy(snap.doc)
        self._raw_sha[stream_id] = rec["sha256"] if rec is not None else None
        self._docs[stream_id] = (version + len(new), doc)
        return IngestResult(file, stream_id, version + len(new), len(new), findings), version, new

    def forget(self) -> None:
        """Drop the cached documents (after a failed write)."""
        self._docs.clear()
        self._raw_sha.clear()

    def ingest(self, snap: Snapshot) -> IngestResult:
        """Derive and append one snapshot's events (one atomic append at the expected version)."""
        result, version, new = self.prepare(snap)
        if new:
            try:
                self.store.append(result.stream, new, expected_version=version, dialect=self.dialect.name)
            except BaseException:
                self.forget()
                raise
        return result

    def ingest_all(self, snaps: Iterable[Snapshot]) -> list[IngestResult]:
        """Ingest several snapshots all-or-nothing: every event in one transaction."""
        planned = []
        items: list[tuple[str, NewEvent, Any]] = []
        try:
            for snap in snaps:
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


def _stamp_file_times(snaps: list[Snapshot]) -> None:
    for snap in snaps:
        if snap.occurred_at is None and "file" in snap.source:
            try:
                snap.occurred_at = datetime.fromtimestamp(os.stat(snap.source["file"]).st_mtime, UTC)
            except OSError:
                pass


def ingest(store: EventStore, dialect: Dialect, paths: Iterable[Path], *,
           stream: str | None = None) -> list[IngestResult]:
    """Ingest every snapshot under ``paths`` (a directory: its files in name order), all-or-nothing."""
    loaded: list[Snapshot] = []
    for path in paths:  # read and parse everything first
        if not path.exists():
            raise IngestError(f"{path}: no such file or directory.")
        loaded.extend(dialect.load(path))
    _stamp_file_times(loaded)
    return Ingestor(store, dialect, stream=stream).ingest_all(loaded)


def git_snapshots(spec: str) -> Iterator[Snapshot]:
    """Every committed version of ``REPO_DIR:FILE``, oldest first."""
    if ":" not in spec:
        raise IngestError(f'--git expects REPO_DIR:FILE, got "{spec}".')
    repo, file = spec.rsplit(":", 1)

    def git(*args: str) -> bytes:
        try:
            return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout
        except FileNotFoundError as exc:
            raise IngestError("git is not installed.") from exc
        except subprocess.CalledProcessError as exc:
            raise IngestError(f"git {' '.join(args)} failed in {repo}: {exc.stderr.decode(errors='replace').strip()}") from exc

    log = git("log", "--reverse", "--format=%H %cI", "--", file).decode().split("\n")
    commits = [line.split(" ", 1) for line in log if line.strip()]
    if not commits:
        raise IngestError(f"{repo}: no commits touch {file}.")
    for sha, when in commits:
        try:
            raw = git("show", f"{sha}:{file}")
        except IngestError:
            continue  # deleted in this commit
        where = f"{repo}:{file}@{sha[:12]}"
        yield Snapshot(doc=parse_json_document(raw, where), raw=raw,
                       source={"file": file, "git": {"repo": str(Path(repo).resolve()), "commit": sha}},
                       occurred_at=datetime.fromisoformat(when))


def ingest_git(store: EventStore, dialect: Dialect, spec: str, *, stream: str | None = None) -> list[IngestResult]:
    """Every committed version of ``REPO_DIR:FILE``, oldest first, all-or-nothing."""
    return Ingestor(store, dialect, stream=stream).ingest_all(list(git_snapshots(spec)))


__all__ = ["IngestResult", "Ingestor", "current_document", "detect_format", "git_snapshots",
           "ingest", "ingest_git", "raw_bytes", "raw_record", "render"]
