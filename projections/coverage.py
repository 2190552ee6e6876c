"""What the store has seen of each source: ``evstore coverage`` and the serve page ``/coverage``.

A *source* is where a stream's versions came from, as the capture recorded it in ``meta``: a state
file (``meta.source.file``; the files of one folder ingested as one stream are one source, their
folder), a git path (``meta.source.git``: the repository and the file), a transcript
(``meta.transcript.file``).  Per source: the stream, the versions recorded, how many were
unreadable, the first and last capture (store time), the last source identity (what
``meta.source`` says of the last version: path, SHA-256, commit, ...) and whether the source is
gone: a recorded file that no longer exists when coverage looks (a transcript its agent deleted
after 30 days, a state file removed).  The record stays; the store says the source is gone and
when it first noticed: that notice is itself recorded, once, as an event of the stream
:data:`NOTICES` (``source.gone``: the source, the stream, its last version, the time noticed), so
the next look, or another machine's, says the same time.  A source that comes back is no longer
gone (a later notice is written if it goes again).

    >>> rows = coverage(store)               # notices newly gone sources
    >>> [r.to_dict() for r in rows if r.gone]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from eventstore import codec
from eventstore.ingest import short_source_id
from eventstore.store import EventStore, NewEvent, RecordedEvent, utcnow

#: The stream recording the sources the store noticed gone (not a run: the runs index skips it).
NOTICES = "evstore:sources"
GONE = "source.gone"


@dataclass
class SourceCoverage:
    source: str  # the file, folder, repo:path or transcript
    kind: str  # "file", "folder", "git" or "transcript"
    stream: str
    versions: int = 0
    unreadable: int = 0
    first_capture: str | None = None
    last_capture: str | None = None
    last_version: int = 0
    last_identity: dict[str, Any] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)  # the recorded files (a folder: each version's file)
    paths: dict[str, str] = field(default_factory=dict)  # a recorded file -> the absolute path to look for
    missing: list[str] = field(default_factory=list)  # recorded files that no longer exist
    gone: bool = False
    gone_noticed_at: str | None = None
    checked: bool = True  # False: the source is no file (git), or recorded by a relative path alone (before abspath)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "stream": self.stream, "versions": self.versions,
                "unreadable": self.unreadable, "first_capture": self.first_capture,
                "last_capture": self.last_capture, "last_version": self.last_version,
                "last_identity": self.last_identity, "gone": self.gone, "gone_noticed_at": self.gone_noticed_at,
                "missing_files": len(self.missing), "checked": self.checked}


def _identity(meta: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """What identifies a captured version, from whatever its meta holds (path and git details today;
    the identity fields a newer capture adds are kept as they are)."""
    out: dict[str, Any] = {k: v for k, v in source.items()
                           if k not in ("git", "time", "abspath") and isinstance(v, (str, int))}
    git = source.get("git")
    if isinstance(git, dict):
        out.update({k: git[k] for k in ("repo", "commit") if isinstance(git.get(k), str)})
    snapshot = meta.get("snapshot")
    if isinstance(snapshot, dict) and "sha256" not in out and isinstance(snapshot.get("sha256"), str):
        out["sha256"] = snapshot["sha256"]
    return out


def _origin(meta: dict[str, Any]) -> tuple[str, str, str | None, dict[str, Any], str | None] | None:
    """(kind, source, file, identity, path) of an event closing a capture, or None; ``path`` is where
    to look for the file: ``meta.source.abspath`` (the absolute path a capture by a relative one
    recorded beside it), else the file as recorded."""
    source = meta.get("source")
    if isinstance(source, dict):
        file = source.get("file")
        git = source.get("git")
        if isinstance(git, dict):
            return "git", f"{git.get('repo')}:{file}", None, _identity(meta, source), None
        where = file if isinstance(file, str) else source.get("dir")
        if isinstance(where, str):
            path = source.get("abspath")
            return ("file", where, where if isinstance(file, str) else None, _identity(meta, source),
                    path if isinstance(path, str) else where)
        return None
    transcript = meta.get("transcript")
    if isinstance(transcript, dict) and isinstance(transcript.get("file"), str):
        ident = {k: transcript[k] for k in ("file", "end", "lines", "prefix_sha256", "prefix_hmac") if k in transcript}
        return "transcript", transcript["file"], transcript["file"], ident, transcript["file"]
    return None


def _events(store: EventStore, streams: Iterable[str] | None) -> Iterator[RecordedEvent]:
    """The whole log in position order, or the notices and then each of ``streams``."""
    if streams is not None:
        for sid in (NOTICES, *streams):
            if store.stream_info(sid) is not None:
                yield from store.read_stream(sid)
        return
    after = 0
    while True:
        batch = store.read_all(after_position=after, limit=5000)
        if not batch:
            return
        after = batch[-1].position
        yield from batch


def _scan(store: EventStore, streams: Iterable[str] | None = None,
          ) -> tuple[dict[tuple[str, str], SourceCoverage], dict[tuple[str, str], dict[str, Any]]]:
    """Every capture in the log (or in ``streams``), by (stream, source); the notices of sources
    gone, latest per source."""
    found: dict[tuple[str, str], SourceCoverage] = {}
    by_stream: dict[str, SourceCoverage] = {}  # a stream's file source, to fold a folder's files into
    notices: dict[tuple[str, str], dict[str, Any]] = {}
    for e in _events(store, streams):
        raw = e.meta
        if e.stream_id == NOTICES:
            if e.type == GONE:
                data = codec.decode(e.data)
                notices[(str(data.get("stream")), str(data.get("source")))] = {**data, "at": e.recorded_at}
            continue
        if b'"source"' not in raw and b'"transcript"' not in raw:
            continue
        meta = codec.decode(raw)
        if not isinstance(meta, dict):
            continue
        origin = _origin(meta)
        if origin is None:
            continue
        kind, source, file, ident, path = origin
        row = found.get((e.stream_id, source))
        if row is None and kind == "file":
            row = by_stream.get(e.stream_id)
            if row is not None and source not in row.files:  # another file of the stream: their folder
                if row.kind == "file":
                    del found[(e.stream_id, row.source)]
                    row.kind, row.source = "folder", os.path.dirname(row.source) or "."
                    found[(e.stream_id, row.source)] = row
        if row is None:
            row = found[(e.stream_id, source)] = SourceCoverage(source, kind, e.stream_id)
            if kind == "file":
                by_stream[e.stream_id] = row
        if file is not None:
            row.files.add(file)
            row.paths[file] = path or file
        row.versions += 1 if kind != "transcript" else max(int(ident.get("lines", 0)) - _lines(row), 0)
        row.unreadable += e.type == "document.unreadable"
        row.first_capture = row.first_capture or e.recorded_at
        row.last_capture, row.last_version, row.last_identity = e.recorded_at, e.version, ident
    return found, notices


def _lines(row: SourceCoverage) -> int:
    return int(row.last_identity.get("lines", 0)) if row.kind == "transcript" else 0


def coverage(store: EventStore, *, notice: bool = True, streams: Iterable[str] | None = None) -> list[SourceCoverage]:
    """Every source the store has captured (of ``streams``, if given), by stream and source, newest
    capture first; sources gone are noticed (recorded in :data:`NOTICES`, once per going) unless
    ``notice`` is False.  A capture calls it with the streams it wrote: a file it recorded earlier
    that is gone now is noticed at that capture."""
    found, notices = _scan(store, streams)
    new: list[NewEvent] = []
    now = utcnow()
    for (sid, source), row in sorted(found.items()):
        if row.kind == "git" or not row.files or not all(os.path.isabs(p) for p in row.paths.values()):
            row.checked = False  # a relative path alone names a file only from where it was captured
            continue
        row.missing = sorted(f for f, p in row.paths.items() if not os.path.exists(p))
        # A file or transcript: it is gone; a folder of versions: every file of it is.
        row.gone = len(row.missing) == len(row.files) if row.kind == "folder" else bool(row.missing)
        if not row.gone:
            continue
        seen = notices.get((sid, source))
        if seen is not None and int(seen.get("last_version", 0)) >= row.last_version:
            row.gone_noticed_at = str(seen.get("noticed_at") or seen["at"])
            continue
        row.gone_noticed_at = now
        new.append(NewEvent(GONE, {"stream": sid, "source": source, "kind": row.kind,
                                   "last_version": row.last_version, "noticed_at": now}))
    if new and notice:
        store.append(NOTICES, new)
    return sorted(found.values(), key=lambda r: (r.last_capture or "", r.stream, r.source), reverse=True)


def identity_text(ident: dict[str, Any]) -> str:
    """A source identity in a few characters, as ``evstore log`` shows the capture-once identity
    (``meta.source.id``: its digest or commit cut to 12 hex digits); without one, the commit and
    SHA-256 cut to 12 and the rest as recorded."""
    ident_id = ident.get("id")
    if isinstance(ident_id, str):
        return short_source_id(ident_id)
    parts = []
    for key, value in ident.items():
        if key in ("file", "repo", "dir"):
            continue
        text = str(value)
        parts.append(f"{key} {text[:12] if key in ('sha256', 'commit', 'prefix_sha256', 'prefix_hmac') else text}")
    return ", ".join(parts)


__all__ = ["GONE", "NOTICES", "SourceCoverage", "coverage", "identity_text"]
