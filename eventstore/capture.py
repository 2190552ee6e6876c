"""Capture Claude Code sessions: transcripts into the store, and the hook spool drained.

* :func:`ingest_transcript` records the new lines of one transcript file (see
  :mod:`eventstore.dialects.claude`), incrementally and all-or-nothing per file.
* :func:`drain` moves spooled hook calls (:mod:`eventstore.spool`) into the store: each becomes
  a ``claude.hook`` event in its session's stream; a ``PostToolUse`` of ``Write``/``Edit`` whose
  file is a state file some dialect recognises (``Dialect.state_file_names``) is ingested as
  that file's new version, with the session and tool call in ``meta.source.claude``; ``Stop``,
  ``SubagentStop``, ``SessionEnd`` and ``PreCompact`` record the new part of the transcript.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventstore import spool
from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import Finding, parse_time, read_snapshot
from eventstore.dialects.claude import (
    FILE_TOOLS,
    ClaudeDialect,
    digest,
    events_for_line,
    split_lines,
    stream_for,
    transcript_files,
)
from eventstore.dialects.claude import events as ev
from eventstore.dialects.claude.secrets import Scrubber
from eventstore.errors import EvstoreError, IngestError
from eventstore.store import EventStore, NewEvent

_NAMESPACE = uuid.UUID("6f1d0a52-6b1e-4c43-9d1a-3f3c2b7a9e10")
DRAIN_TRANSCRIPT_ON = ("Stop", "SubagentStop", "SessionEnd", "PreCompact")


@dataclass
class TranscriptResult:
    file: str
    stream: str
    version: int
    lines: int = 0
    bytes: int = 0
    events: int = 0
    findings: list[Finding] = field(default_factory=list)
    rewritten: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "stream": self.stream, "version": self.version, "events": self.events,
                "lines": self.lines, "bytes": self.bytes, "findings": len(self.findings),
                "rewritten": self.rewritten}


def transcript_state(store: EventStore, stream_id: str) -> tuple[int, dict[str, Any] | None]:
    """(stream version, the newest ``meta.transcript`` record) of a session stream."""
    info = store.stream_info(stream_id)
    if info is None:
        return 0, None
    version = info[1]
    step = 64
    upto = version
    while upto > 0:
        last = None
        for rec in store.read_stream(stream_id, after_version=max(upto - step, 0), upto_version=upto):
            meta = rec.metadata
            if isinstance(meta, dict) and isinstance(meta.get("transcript"), dict):
                last = meta["transcript"]
        if last is not None:
            return version, last
        upto -= step
        step *= 4
    return version, None


def ingest_transcript(store: EventStore, path: Path, *, scrubber: Scrubber | None,
                      stream: str | None = None, final: bool = False,
                      extra_meta: dict[str, Any] | None = None) -> TranscriptResult:
    """Record the lines of ``path`` not recorded yet (one atomic append)."""
    sid, parent = stream_for(path)
    sid = stream or sid
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc}).") from exc
    version, state = transcript_state(store, sid)
    result = TranscriptResult(str(path), sid, version)
    start = 0
    if state is not None:
        end = int(state.get("end", 0))
        if len(data) < end or digest(data[:end]) != state.get("prefix_sha256"):
            found = digest(data[:end]) if len(data) >= end else digest(data)
            event = ev.PrefixRewritten(file=str(path), recorded_bytes=end,
                                       recorded_sha256=str(state.get("prefix_sha256")), found_sha256=found)
            finding = Finding(path="", code="transcript-prefix-rewritten",
                              message=f"{path}: the first {end} bytes differ from what was recorded; "
                                      "the new content was not merged", severity="error")
            # The same rewrite seen again is the same event (idempotent by id), never a second one.
            eid = uuid.uuid5(_NAMESPACE, f"{sid}\0rewritten\0{found}\0{end}")
            r = store.append(sid, [NewEvent(None, event, event_id=eid, meta={
                "dialect": "claude", "findings": [finding.to_dict()]})], dialect="claude")
            result.version, result.rewritten, result.findings = r.version, True, [finding]
            result.events = 0 if r.version == version else 1
            return result
        start = end
    lines, covered = split_lines(data[start:], final=final)
    if not lines:
        return result
    planned: list[tuple[Any, dict[str, Any], datetime | None]] = []
    offset, lineno = start, int(state.get("lines", 0)) if state else 0
    for line in lines:
        lineno += 1
        got = events_for_line(line, lineno, offset, scrubber)
        meta: dict[str, Any] = {"dialect": "claude"}
        if got.findings:
            meta["findings"] = [f.to_dict() for f in got.findings]
            result.findings.extend(got.findings)
        when = parse_time(getattr(got.events[-1], "timestamp", None))
        planned.extend((e, meta, when) for e in got.events)
        offset += len(line)
    end = start + covered
    transcript: dict[str, Any] = {"file": str(path), "end": end, "lines": lineno, "prefix_sha256": digest(data[:end])}
    if parent:
        transcript["parent_session"] = parent
    last_event, last_meta, last_when = planned[-1]
    planned[-1] = (last_event, {**last_meta, **(extra_meta or {}), "transcript": transcript}, last_when)
    new = [NewEvent(None, e, meta=meta, occurred_at=when) for e, meta, when in planned]
    r = store.append(sid, new, expected_version=version if version else "no stream", dialect="claude")
    result.version, result.events, result.lines, result.bytes = r.version, len(new), len(lines), covered
    return result


def ingest_transcripts(store: EventStore, paths: Iterable[Path], *, scrub: bool = True,
                       progress: Callable[[int, int], None] | None = None,
                       stream: str | None = None) -> list[TranscriptResult]:
    """Every transcript under ``paths``; each file is its own atomic append."""
    files: list[Path] = []
    for p in paths:
        files.extend(transcript_files(p))
    if stream is not None and len(files) > 1:
        raise IngestError("--stream names one stream: give one transcript file.")
    scrubber = Scrubber() if scrub else None
    out = []
    for i, f in enumerate(files, 1):
        out.append(ingest_transcript(store, f, scrubber=scrubber, stream=stream))
        if progress is not None:
            progress(i, len(files))
    return out


# ----------------------------------------------------------------------------- hooks


@dataclass
class DrainResult:
    hooks: int = 0
    states: list[Any] = field(default_factory=list)
    transcripts: list[TranscriptResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"hooks": self.hooks, "states": [r.to_dict() for r in self.states],
                "transcripts": [t.to_dict() for t in self.transcripts], "errors": self.errors}


def state_dialect_for(path: str) -> str | None:
    """The dialect that recognises ``path`` as its state file, if any."""
    name = Path(path).name
    for dialect_name in available():
        if name in getattr(get_dialect(dialect_name), "state_file_names", ()):
            return dialect_name
    return None


def _hook_event(record: spool.Record, scrubber: Scrubber | None) -> tuple[dict[str, Any], ev.HookReceived, int]:
    try:
        payload = json.loads(record.stdin)
    except (ValueError, RecursionError):
        payload = None
    payload = payload if isinstance(payload, dict) else {}
    text: str | None
    try:
        text = record.stdin.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    secrets = 0
    if text is not None and scrubber is not None:
        text, found = scrubber.scrub(text)
        secrets = len(found)
    event = ev.HookReceived(
        hook_event_name=payload.get("hook_event_name") if isinstance(payload.get("hook_event_name"), str) else None,
        tool_name=payload.get("tool_name") if isinstance(payload.get("tool_name"), str) else None,
        tool_use_id=payload.get("tool_use_id") if isinstance(payload.get("tool_use_id"), str) else None,
        agent_id=payload.get("agent_id") if isinstance(payload.get("agent_id"), str) else None,
        agent_type=payload.get("agent_type") if isinstance(payload.get("agent_type"), str) else None,
        input=text, input_b64=None if text is not None else base64.b64encode(record.stdin).decode("ascii"),
        received_at=record.header.get("received_at") if isinstance(record.header.get("received_at"), float) else None,
        secrets=secrets)
    return payload, event, secrets


def drain(store: EventStore, directory: Path, *, scrub: bool = True) -> DrainResult:
    """Record every spooled hook call; a claimed spool file is deleted only once recorded."""
    result = DrainResult()
    lock = spool.drain_lock(directory)
    if lock is None:
        return result  # another drain is at it
    import os

    try:
        scrubber = Scrubber() if scrub else None
        for claimed in spool.claim(directory):
            for record in spool.read(claimed):
                _drain_one(store, record, scrubber, result)
            claimed.unlink()
    finally:
        os.close(lock)
    return result


def _drain_one(store: EventStore, record: spool.Record, scrubber: Scrubber | None, result: DrainResult) -> None:
    payload, event, secrets = _hook_event(record, scrubber)
    session = payload.get("session_id") if isinstance(payload.get("session_id"), str) else None
    sid = session or "claude-hooks"
    when = record.header.get("received_at")
    at = datetime.fromtimestamp(when, UTC) if isinstance(when, float) else None
    meta: dict[str, Any] = {"dialect": "claude", "spool": {"sha256": record.digest}}
    if secrets:
        meta["findings"] = [{"path": "/input", "code": "secret-scrubbed", "severity": "warning",
                             "message": f"{secrets} secret(s) replaced by markers"}]
    eid = uuid.uuid5(_NAMESPACE, f"hook\0{record.digest}")  # a re-drained record is a no-op
    store.append(sid, [NewEvent(None, event, event_id=eid, meta=meta, occurred_at=at)], dialect="claude")
    result.hooks += 1
    name = event.hook_event_name
    if name == "PostToolUse" and event.tool_name in FILE_TOOLS and record.file_bytes is not None:
        path = str(record.header.get("file") or "")
        dialect_name = state_dialect_for(path) if path else None
        if dialect_name is not None:
            try:
                result.states.append(_ingest_state(store, dialect_name, path, record, session, event, at))
            except EvstoreError as exc:
                result.errors.append(f"{path}: {exc}")
    if name in DRAIN_TRANSCRIPT_ON:
        transcript = payload.get("agent_transcript_path") if name == "SubagentStop" else None
        transcript = transcript or payload.get("transcript_path")
        if isinstance(transcript, str) and Path(transcript).is_file():
            try:
                result.transcripts.append(ingest_transcript(store, Path(transcript), scrubber=scrubber))
            except EvstoreError as exc:
                result.errors.append(f"{transcript}: {exc}")


def _ingest_state(store: EventStore, dialect_name: str, path: str, record: spool.Record, session: str | None,
                  event: ev.HookReceived, at: datetime | None) -> Any:
    from eventstore.ingest import Ingestor

    raw = record.file_bytes or b""
    source = {"file": path, "claude": {"session_id": session, "tool_use_id": event.tool_use_id,
                                       "tool_name": event.tool_name, "hook": "PostToolUse",
                                       "sha256": hashlib.sha256(raw).hexdigest()}}
    snap = read_snapshot(raw, path, source)  # a broken write is recorded as document.unreadable
    snap.occurred_at = at
    return Ingestor(store, get_dialect(dialect_name)).ingest(snap)


__all__ = ["ClaudeDialect", "DrainResult", "transcript_files", "TranscriptResult", "drain", "ingest_transcript", "ingest_transcripts",
           "state_dialect_for", "transcript_state"]
