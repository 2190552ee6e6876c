"""Capture Claude Code sessions: transcripts into the store, and hook calls recorded.

* :func:`ingest_transcript` records the new lines of one transcript file (see
  :mod:`eventstore.dialects.claude`), incrementally and streamed: one append per batch of lines,
  each a resumable point (peak memory does not grow with the file).
* :func:`record_hook` records one hook call from its JSON body: a ``claude.hook`` event in its
  session's stream; a ``PostToolUse`` of ``Write``/``Edit`` whose file is a state file some dialect
  recognises (``Dialect.state_file_names``) is ingested as that file's new version, with the
  session and tool call in ``meta.source.claude``; ``Stop``, ``SubagentStop``, ``SessionEnd`` and
  ``PreCompact`` record the new part of the transcript.  Both ways a call arrives use it:
* :func:`drain` moves spooled hook calls (:mod:`eventstore.spool`, what ``evstore hook
  claude-code`` writes) into the store, and ``POST /hooks/claude-code`` of ``evstore serve``
  records the body of an http hook.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from eventstore import codec, config, spool
from eventstore.codec import parse_json_text
from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import Finding, parse_time, read_snapshot
from eventstore.dialects.claude import events as ev
from eventstore.dialects.claude.dialect import (
    FILE_TOOLS,
    ClaudeDialect,
    LongStrings,
    apply_edits,
    cut_blobs,
    events_for_line,
    split_lines,
    stream_for,
    transcript_files,
)
from eventstore.dialects.claude.links import Linker
from eventstore.dialects.claude.secrets import Scrubber, local_key
from eventstore.errors import ConcurrencyError, DuplicateEventId, EvstoreError, IngestError, InvalidEvent
from eventstore.store import EventStore, NewEvent, check_stream_id

if TYPE_CHECKING:
    from eventstore.locks import ExclusiveLock

_NAMESPACE = uuid.UUID("6f1d0a52-6b1e-4c43-9d1a-3f3c2b7a9e10")
DRAIN_TRANSCRIPT_ON = ("Stop", "SubagentStop", "SessionEnd", "PreCompact")
#: Attempts at a state version or a transcript update when concurrent hooks move its stream.
_RETRIES = 10


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
    blobs: int = 0  # distinct blobs the new lines refer to (stored unless already there)
    blob_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "stream": self.stream, "version": self.version, "events": self.events,
                "lines": self.lines, "bytes": self.bytes, "findings": len(self.findings),
                "rewritten": self.rewritten, "blobs": self.blobs, "blob_bytes": self.blob_bytes}


def _kept_meta(store: EventStore, position: int) -> Any:
    """What an erasure kept of an event's meta (its ``transcript`` bookkeeping; eventstore.erasure)."""
    with store.reading() as cur:
        kept = store.backend.kept_meta(cur, position)
    return None if kept is None else codec.decode(kept.encode())


def transcript_state(store: EventStore, stream_id: str) -> tuple[int, dict[str, Any] | None]:
    """(stream version, the newest ``meta.transcript`` record) of a session stream."""
    info = store.stream_info(stream_id)
    if info is None:
        return 0, None
    version = info.version
    step = 64
    upto = version
    while upto > 0:
        last = None
        for rec in store.read_stream(stream_id, after_version=max(upto - step, 0), upto_version=upto):
            meta = rec.metadata if not rec.erased else _kept_meta(store, rec.position)
            if isinstance(meta, dict) and isinstance(meta.get("transcript"), dict):
                last = meta["transcript"]
        if last is not None:
            return version, last
        upto -= step
        step *= 4
    return version, None


#: Transcript lines recorded per append, in bytes: peak memory is this plus the longest line (at most
#: :data:`eventstore.config.MAX_LINE_BYTES`, about five times over while it is recorded), whatever the
#: size of the file (benchmarks/bench_bounds.py measures it).
BATCH_BYTES = 4 * 1024 * 1024
_CHUNK = 1024 * 1024
#: Bytes :func:`iter_lines` reads at a time (a chunk and its lines are held at once: kept small).
_LINE_CHUNK = 64 * 1024


@dataclass(frozen=True)
class LongLine:
    """A line over the line limit, read through in chunks and never held: its length (newline
    included) and SHA-256; ``prefix``: the file's prefix digest carried through it (a copy of the
    one given to :func:`iter_lines`), None when none was given."""

    size: int
    sha256: str
    prefix: Any = None


def iter_lines(f: BinaryIO, *, final: bool, limit: int | None = None, max_line: int | None = None,
               prefix: Callable[[], Any] | None = None) -> Iterator[bytes | LongLine]:
    """The lines :func:`split_lines` finds in the rest of ``f``, read in chunks of :data:`_LINE_CHUNK`
    bytes (``limit``: stop after that many bytes, the last line cut there).

    A line longer than ``max_line`` bytes is never held whole: the rest of it is read through and
    hashed, and it comes as a :class:`LongLine` (an unterminated one at the end only when ``final``).
    ``prefix``: gives the caller's running digest of the file, up to date with every line given
    before (a generator runs only when the next line is asked for); a long line's bytes go into a
    copy of it, the :class:`LongLine`'s ``prefix``, for the caller to carry on with."""
    # The start of the current line while it is within max_line and spans chunks: one growing buffer
    # (pieces kept apart would fragment the heap: memory the process keeps after the line is gone).
    held = bytearray()
    size = 0  # bytes of the current line so far
    line_h: Any = None  # the current line's SHA-256 once it is over max_line (then nothing is held)
    pre: Any = None
    taken = 0
    while True:
        want = _LINE_CHUNK if limit is None else min(_LINE_CHUNK, limit - taken)
        chunk = f.read(want) if want > 0 else b""
        taken += len(chunk)
        while chunk.endswith(b"\r") and (limit is None or taken < limit):  # a CRLF is never split
            more = f.read(1)
            if not more:
                break
            chunk += more
            taken += 1
        if not chunk:
            break
        pieces = chunk.splitlines(keepends=True)
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            if line_h is None and max_line is not None and size + len(piece) > max_line:
                line_h = hashlib.sha256()
                pre = prefix().copy() if prefix is not None else None
                line_h.update(held)
                if pre is not None:
                    pre.update(held)
                held = bytearray()
            size += len(piece)
            if line_h is not None:
                line_h.update(piece)
                if pre is not None:
                    pre.update(piece)
            if i < last or piece.endswith(b"\n"):  # the line ends here (a lone CR ends one too)
                if line_h is not None:
                    line: bytes | LongLine = LongLine(size, line_h.hexdigest(), pre)
                elif held:
                    held += piece
                    line = bytes(held)
                else:
                    line = piece  # the whole line in one chunk: no copy
                # The buffer is let go before the caller gets the line: a long line is held once, not twice.
                held, size, line_h, pre = bytearray(), 0, None, None
                yield line
            elif line_h is None:
                held += piece
    if not size:
        return
    final = final or limit is not None
    if line_h is not None:
        if final:
            yield LongLine(size, line_h.hexdigest(), pre)
        return
    tail = bytes(held)
    del held
    yield from split_lines(tail, final=final)[0]


def _digests_upto(f: BinaryIO, n: int, key: bytes) -> tuple[Any, Any, int]:
    """(SHA-256, HMAC-SHA256 under ``key``) of the first ``n`` bytes of ``f``, and how many there
    were, read in chunks."""
    plain, keyed = hashlib.sha256(), hmac.new(key, digestmod=hashlib.sha256)
    f.seek(0)
    left = n
    while left > 0:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            break
        plain.update(chunk)
        keyed.update(chunk)
        left -= len(chunk)
    return plain, keyed, n - left


def key_id(key: bytes) -> str:
    """Which local key a keyed prefix digest is under (a digest of the key, not of any content)."""
    return hmac.new(key, b"evstore transcript prefix key", hashlib.sha256).hexdigest()[:16]


def ingest_transcript(store: EventStore, path: Path, *, scrubber: Scrubber | None,
                      stream: str | None = None, final: bool = False,
                      extra_meta: dict[str, Any] | None = None,
                      blob_threshold: int | None = None) -> TranscriptResult:
    """Record the lines of ``path`` not recorded yet, streamed: one append per :data:`BATCH_BYTES` of
    lines, each carrying the offset and prefix digest it reached (``meta.transcript``), so an ingest
    stopped between two appends resumes where the last one ended.  Strings of ``blob_threshold`` bytes
    or more (default :data:`eventstore.config.BLOB_THRESHOLD`; 0: none) are stored once as
    content-addressed blobs."""
    threshold = config.BLOB_THRESHOLD if blob_threshold is None else blob_threshold
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below; the generators read it)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc}).") from exc
    with f:
        return _ingest_open_transcript(store, path, f, scrubber=scrubber, stream=stream, final=final,
                                       extra_meta=extra_meta, threshold=threshold)


def _ingest_open_transcript(store: EventStore, path: Path, f: BinaryIO, *, scrubber: Scrubber | None,
                            stream: str | None, final: bool, extra_meta: dict[str, Any] | None,
                            threshold: int) -> TranscriptResult:
    max_line = config.MAX_LINE_BYTES
    first = f.readline(max_line + 1) if path.stem.startswith("agent-") else None
    if first is not None:  # as data[:data.find(b"\n")]; a first line over the limit names no session
        first = first[:-1] if len(first) <= max_line else b""
    sid, parent = stream_for(path, first)
    sid = stream or sid
    version, state = transcript_state(store, sid)
    result = TranscriptResult(str(path), sid, version)
    start = 0
    # The prefix read is recorded keyed with the local key (HMAC-SHA256), not as its plain SHA-256: a
    # later batch's meta stays when an earlier line is erased, and a plain digest of a prefix holding
    # that line would confirm a guess of it to whoever reads the store.
    key = local_key()
    h = hmac.new(key, digestmod=hashlib.sha256)
    if state is not None:
        end = int(state.get("end", 0))
        plain, h, have = _digests_upto(f, end, key)
        found = h.hexdigest()
        if isinstance(state.get("prefix_hmac"), str) and state.get("key_id") == key_id(key):
            recorded = state["prefix_hmac"]
        elif isinstance(state.get("prefix_sha256"), str):  # recorded before keyed prefixes
            recorded, found = state["prefix_sha256"], plain.hexdigest()
        else:
            # Kept by an erasure (which keeps no digest of what was read), or under another local key:
            # the file is taken to begin as it did if it is still that long.
            recorded = found
        if have < end or found != recorded:
            event = ev.PrefixRewritten(file=str(path), recorded_bytes=end,
                                       recorded_sha256=str(recorded), found_sha256=found)
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
    f.seek(start)
    offset, lineno = start, int(state.get("lines", 0)) if state else 0

    def earlier() -> Iterator[bytes]:
        with open(path, "rb") as g:
            for line in iter_lines(g, final=True, limit=start, max_line=max_line):
                yield line if isinstance(line, bytes) else b""  # a line over the limit: nothing to link

    linker = Linker(sid, subagent=parent is not None, earlier=earlier if start else None)
    link_meta: dict[str, Any] = {"dialect": "claude"}
    seen_blobs: dict[str, int] = {}
    planned: list[tuple[Any, dict[str, Any], datetime | None]] = []
    blobs: dict[str, bytes] = {}
    batch = 0

    def flush(last: bool) -> None:
        nonlocal planned, blobs, batch
        transcript: dict[str, Any] = {"file": str(path), "end": offset, "lines": lineno,
                                      "prefix_hmac": h.hexdigest(), "key_id": key_id(key)}
        if parent:
            transcript["parent_session"] = parent
        last_event, last_meta, last_when = planned[-1]
        planned[-1] = (last_event, {**last_meta, **((extra_meta or {}) if last else {}), "transcript": transcript},
                       last_when)
        new = [NewEvent(None, e, meta=meta, occurred_at=when) for e, meta, when in planned]
        r = store.append(sid, new, expected_version=result.version if result.version else "no stream",
                         dialect="claude", blobs=blobs or None)
        result.version = r.version
        result.events += len(new)
        planned, blobs, batch = [], {}, 0

    def running() -> Any:
        return h  # the prefix digest as it is now (a line over the limit moves it on: below)

    for line in iter_lines(f, final=final, max_line=max_line, prefix=running):
        lineno += 1
        if isinstance(line, LongLine):  # never held: recorded as a finding with its length and digest
            skipped, finding = _long_line(path, line, lineno, offset, max_line)
            planned.append((skipped, {"dialect": "claude", "findings": [finding.to_dict()]}, None))
            result.findings.append(finding)
            offset += line.size
            h = line.prefix
            result.lines += 1
            result.bytes += line.size
            continue
        got = events_for_line(line, lineno, offset, scrubber, linker, threshold)
        meta: dict[str, Any] = {"dialect": "claude"}
        if got.findings:
            meta["findings"] = [x.to_dict() for x in got.findings]
            result.findings.extend(got.findings)
        if got.blobs:
            meta["blobs"] = list(got.blobs)
            blobs.update(got.blobs)
            seen_blobs.update((k, len(v)) for k, v in got.blobs.items())
        when = parse_time(getattr(got.events[-1], "timestamp", None))
        planned.extend((e, meta, when) for e in got.events)
        planned.extend((e, link_meta, when) for e in got.links)
        offset += len(line)
        h.update(line)
        result.lines += 1
        result.bytes += len(line)
        batch += len(line)
        if batch >= BATCH_BYTES:
            flush(last=False)
    if planned:
        flush(last=True)
    result.blobs, result.blob_bytes = len(seen_blobs), sum(seen_blobs.values())
    return result


def _long_line(path: Path, line: LongLine, lineno: int, offset: int, limit: int) -> tuple[ev.UnreadableLine, Finding]:
    """The event and finding that record a line over the line limit in its place."""
    error = (f"line of {line.size} bytes exceeds the line limit of {limit} bytes (EVSTORE_MAX_LINE_BYTES); "
             f"not stored, SHA-256 {line.sha256}")
    event = ev.UnreadableLine(lineno=lineno, offset=offset, error=error, size=line.size, sha256=line.sha256)
    finding = Finding(path=f"/line/{lineno}", code="unreadable-line-over-limit",
                      message=f"{path}: line {lineno} at byte {offset}: {error}", severity="error")
    return event, finding


def ingest_transcripts(store: EventStore, paths: Iterable[Path], *, scrub: bool = True,
                       progress: Callable[[int, int], None] | None = None,
                       stream: str | None = None, blob_threshold: int | None = None) -> list[TranscriptResult]:
    """Every transcript under ``paths``; each file is its own atomic append."""
    files: list[Path] = []
    for p in paths:
        files.extend(transcript_files(p))
    if stream is not None and len(files) > 1:
        raise IngestError("--stream names one stream: give one transcript file.")
    scrubber = Scrubber() if scrub else None
    out = []
    for i, f in enumerate(files, 1):
        out.append(ingest_transcript(store, f, scrubber=scrubber, stream=stream, blob_threshold=blob_threshold))
        if progress is not None:
            progress(i, len(files))
    return out


# ----------------------------------------------------------------------------- hooks


@dataclass
class HookResult:
    """What one hook call recorded: its ``claude.hook`` event, and what it led to."""

    stream: str
    version: int
    duplicate: bool = False  # the same call was recorded before (a retry, a re-drained spool)
    states: list[Any] = field(default_factory=list)
    transcript: TranscriptResult | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class DrainResult:
    hooks: int = 0
    states: list[Any] = field(default_factory=list)
    transcripts: list[TranscriptResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: bool = False  # another drain held the spool
    stopped: bool = False  # asked to stop before the spool was empty

    def add(self, hook: HookResult) -> None:
        self.hooks += 1
        self.states.extend(hook.states)
        self.transcripts.extend([hook.transcript] if hook.transcript is not None else [])
        self.errors.extend(hook.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"hooks": self.hooks, "states": [r.to_dict() for r in self.states],
                "transcripts": [t.to_dict() for t in self.transcripts], "errors": self.errors}


@dataclass(frozen=True)
class WrittenFile:
    """A file's bytes as a hook copied them when it ran (the spool keeps them)."""

    path: str
    data: bytes


def state_dialect_for(path: str) -> str | None:
    """The dialect that recognises ``path`` as its state file, if any."""
    name = Path(path).name
    for dialect_name in available():
        if name in getattr(get_dialect(dialect_name), "state_file_names", ()):
            return dialect_name
    return None


def parse_hook_body(body: bytes) -> dict[str, Any]:
    """A hook body as its JSON object; InvalidEvent naming the problem when it is none.

    What ``POST /hooks/claude-code`` refuses (with a 400): not UTF-8 JSON, not an object, no
    ``hook_event_name`` string, no ``session_id`` usable as a stream id.  The spool records
    whatever a hook was given instead (see :func:`record_hook`).
    """
    try:
        payload = parse_json_text(body, "hook body")
    except RecursionError:
        raise InvalidEvent("hook body: nested too deeply.") from None
    if type(payload) is not dict:
        raise InvalidEvent(f"hook body: must be a JSON object (what Claude Code sends), got {type(payload).__name__}.")
    for key in ("hook_event_name", "session_id"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            raise InvalidEvent(f'hook body: "{key}" must be a non-empty string.')
    try:
        check_stream_id(payload["session_id"])
    except InvalidEvent as exc:
        raise InvalidEvent(f'hook body: "session_id": {exc}') from None
    return payload


def _loose_payload(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _s(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) else None


def _hook_event(body: bytes, payload: dict[str, Any], received_at: float | None, scrubber: Scrubber | None,
                event_id: str, at: datetime | None, meta: dict[str, Any],
                blob_threshold: int) -> tuple[NewEvent, ev.HookReceived, dict[str, bytes]]:
    """The ``claude.hook`` event of one call: its body (scrubbed) and the fields read from it, and
    the blobs it refers to.

    The contents of the body's JSON strings of ``blob_threshold`` bytes or more (0: none) are cut
    out into content-addressed blobs as a transcript line's are (the same bytes, escapes included:
    a ``Write``'s content in the hook and in the transcript is one blob).  A body still too large
    for one event keeps its first part, its size and its SHA-256, and no blobs; the file itself is
    recorded whole as the state version.
    """
    text: str | None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    # Only a JSON object's strings are cut (a quote of anything else delimits nothing).
    strings = LongStrings(body, blob_threshold) if text is not None and payload and blob_threshold \
        and len(body) >= blob_threshold else None
    secrets = 0
    if text is not None and scrubber is not None:
        kinds = None
        if strings is not None and strings.spans:  # look at each distinct long string once
            kinds = scrubber.kinds([*((r, None) for r in strings.rest),
                                    *zip(strings.datas, strings.digests, strict=True)])
        text, found = scrubber.scrub(text, body, kinds=kinds)
        secrets = len(found)
        if found and strings is not None:
            strings = LongStrings(text.encode("utf-8"), blob_threshold)  # the markers moved the strings
    findings = []
    if secrets:
        findings.append({"path": "/input", "code": "secret-scrubbed", "severity": "warning",
                         "message": f"{secrets} secret(s) replaced by markers"})
    fields: dict[str, Any] = {k: _s(payload, k) for k in ("hook_event_name", "tool_name", "tool_use_id",
                                                           "agent_id", "agent_type")}
    if strings is not None and strings.spans:
        assert text is not None
        stored, refs, blobs = cut_blobs(text.encode("utf-8"), blob_threshold, strings)
        event = ev.HookReceived(**fields, input=stored.decode("utf-8"), received_at=received_at, secrets=secrets,
                                blobs=refs)
        try:
            new = NewEvent(None, event, event_id=event_id, occurred_at=at,
                           meta={**meta, "blobs": list(blobs), **({"findings": findings} if findings else {})})
            return new, event, blobs
        except InvalidEvent:  # still over the limit without its long strings: kept in part, below
            pass
    keep: int | None = None
    while True:
        kept_text = text if keep is None or text is None else text[:keep]
        kept_raw = body if keep is None else body[:keep]
        event = ev.HookReceived(**fields, input=kept_text,
                                input_b64=None if text is not None else base64.b64encode(kept_raw).decode("ascii"),
                                received_at=received_at, secrets=secrets,
                                input_bytes=None if keep is None else len(body),
                                input_sha256=None if keep is None else hashlib.sha256(body).hexdigest())
        try:
            new = NewEvent(None, event, event_id=event_id, meta={**meta, "findings": findings} if findings else meta,
                           occurred_at=at)
            return new, event, {}
        except InvalidEvent:
            if keep is not None and keep < 1024:
                raise
            keep = config.MAX_EVENT_BYTES // 4 if keep is None else keep // 2  # escaping may double it
            findings = [f for f in findings if f["code"] != "hook-input-truncated"] + [{
                "path": "/input", "code": "hook-input-truncated", "severity": "warning",
                "message": f"the hook input of {len(body)} bytes is over the event limit: its first "
                           f"{keep} characters are kept, with its size and SHA-256"}]


def _hook_stream(session: str | None) -> str:
    try:
        return check_stream_id(session) if session else "claude-hooks"
    except InvalidEvent:
        return "claude-hooks"


def hook_event_id(key: str) -> str:
    """The id of the ``claude.hook`` event a hook call with ``key`` (a spooled line's SHA-256) becomes."""
    return str(uuid.uuid5(_NAMESPACE, f"hook\0{key}"))


def hook_target(record: spool.Record) -> tuple[str, str]:
    """(stream id, event id) of the ``claude.hook`` event a drain records ``record`` as."""
    return _hook_stream(_s(_loose_payload(record.stdin), "session_id")), hook_event_id(record.digest)


def record_streams(store: EventStore, record: spool.Record) -> set[str]:
    """Every stream a drain of ``record`` would write to: its hook event's (the session's), the stream
    of the state file a ``Write``/``Edit`` of it records (as the file's dialect names it) and those of
    the transcripts a ``Stop``-like call has read (the session's, a subagent's).  What ``erase
    --stream`` takes out of the spool; a record that is not whole writes nowhere."""
    if record.header.get("corrupt") is True:
        return set()
    payload = _loose_payload(record.stdin)
    out = {_hook_stream(_s(payload, "session_id"))}
    name = _s(payload, "hook_event_name")
    if name == "PostToolUse" and _s(payload, "tool_name") in FILE_TOOLS:
        path, data = record.header.get("file"), record.file_bytes
        tool_input = payload.get("tool_input")
        if not isinstance(path, str) or data is None:
            path, data = (_s(tool_input, "file_path") if isinstance(tool_input, dict) else None), None
        if path and not os.path.isabs(path) and _s(payload, "cwd"):
            path = os.path.join(payload["cwd"], path)
        dialect_name = state_dialect_for(path) if path else None
        raw = data if data is not None else written_by_tool(payload) if dialect_name else None
        if path and dialect_name and raw is not None:
            from eventstore.ingest import Ingestor

            try:
                out.add(Ingestor(store, get_dialect(dialect_name)).stream_for(read_snapshot(raw, path, {"file": path})))
            except EvstoreError:
                pass
    if name in DRAIN_TRANSCRIPT_ON:
        for key in ("agent_transcript_path", "transcript_path"):
            given = _s(payload, key)
            if given:
                first = None
                try:
                    with open(given, "rb") as fh:
                        first = fh.readline()[:-1]
                except OSError:
                    pass
                out.add(stream_for(Path(given), first if Path(given).stem.startswith("agent-") else None)[0])
    return out


def record_hook(store: EventStore, body: bytes, *, key: str | None = None, received_at: float | None = None,
                written: WrittenFile | None = None, scrubber: Scrubber | None = None,
                transcript_roots: Sequence[Path] | None = None, via: str = "spool",
                blob_threshold: int | None = None) -> HookResult:
    """Record one Claude Code hook call: what ``evstore hook drain`` does for each spooled call and
    ``POST /hooks/claude-code`` for each request.

    ``body`` is the JSON Claude Code hands a hook (a command hook's stdin, an http hook's request
    body).  It becomes a ``claude.hook`` event in the session's stream (``claude-hooks`` when the
    body names none), whose id derives from ``key`` (default: the body's HMAC-SHA256 under the
    scrubber's local key, else its SHA-256; kept in ``meta[via].sha256``), so the same call recorded
    twice is recorded once.  The body's strings of
    ``blob_threshold`` bytes or more (default :data:`eventstore.config.BLOB_THRESHOLD`; 0: none)
    are stored once as content-addressed blobs, as a transcript's are.  Then:

    * a ``PostToolUse`` of ``Write``/``Edit``/``MultiEdit`` of a file some dialect recognises
      (``Dialect.state_file_names``) records that file's new version, with the session and tool
      call in ``meta.source.claude``.  Its bytes are ``written`` (what the spooling hook copied),
      else what the body says the tool wrote (``Write``'s content; an edit applied to
      ``tool_response.originalFile``): the file is never read here.
    * ``Stop``, ``SubagentStop``, ``SessionEnd`` and ``PreCompact`` record the new lines of the
      session's transcript.  With ``transcript_roots`` only a ``.jsonl`` file under one of them,
      named after the body's session (``<session>.jsonl`` or ``<session>/subagents/agent-*.jsonl``),
      is read, so a caller cannot have any other file read; without, any file the body names.

    What goes wrong after the hook event is recorded is listed in ``errors`` (the call itself is
    kept); errors recording the hook event raise.
    """
    payload = _loose_payload(body)
    threshold = config.BLOB_THRESHOLD if blob_threshold is None else blob_threshold
    # The id of a call with no key of its own (an http hook's body) derives from the body keyed with the
    # local scrub key, not its plain SHA-256: the event id stays in the chain after an erasure, and a
    # plain digest of the body would confirm a guess of it.  A retried request is still the same call.
    key = key or (scrubber.keyed_digest(body) if scrubber is not None else hashlib.sha256(body).hexdigest())
    session = _s(payload, "session_id")
    sid = _hook_stream(session)
    at = datetime.fromtimestamp(received_at, UTC) if received_at is not None else None
    new, event, blobs = _hook_event(body, payload, received_at, scrubber, hook_event_id(key),
                                    at, {"dialect": "claude", via: {"sha256": key}}, threshold)
    r = store.append(sid, [new], dialect="claude", blobs=blobs or None)
    result = HookResult(sid, r.version, duplicate=r.duplicate)
    name = event.hook_event_name
    if name == "PostToolUse" and event.tool_name in FILE_TOOLS:
        _record_state(store, payload, written, key, session, event, at, result, via)
    if name in DRAIN_TRANSCRIPT_ON:
        _record_transcript(store, payload, transcript_roots, scrubber, result, threshold)
    return result


def _record_state(store: EventStore, payload: dict[str, Any], written: WrittenFile | None, key: str,
                  session: str | None, event: ev.HookReceived, at: datetime | None, result: HookResult,
                  via: str = "spool") -> None:
    tool_input = payload.get("tool_input")
    path = written.path if written is not None else _s(tool_input, "file_path") if isinstance(tool_input, dict) \
        else None
    if path and not os.path.isabs(path) and _s(payload, "cwd"):
        path = os.path.join(payload["cwd"], path)
    dialect_name = state_dialect_for(path) if path else None
    if path is None or dialect_name is None:
        return
    raw = written.data if written is not None else written_by_tool(payload)
    if raw is None:
        result.errors.append(f"{path}: the hook body does not say what {event.tool_name} wrote "
                             "(no content, or an edit that does not apply to tool_response.originalFile); "
                             "not recorded")
        return
    from eventstore.ingest import Ingestor

    # The version's identity is the hook call's (its spool record, or the request body's SHA-256):
    # its events' ids derive from it too, so a call drained twice is recorded once.
    source = {"file": path, "id": f"{via}:{key}", "claude": {"session_id": session, "tool_use_id": event.tool_use_id,
                                       "tool_name": event.tool_name, "hook": "PostToolUse",
                                       "sha256": hashlib.sha256(raw).hexdigest()}}
    for attempt in range(_RETRIES):
        snap = read_snapshot(raw, path, source)  # a broken write is recorded as document.unreadable
        snap.occurred_at = at
        try:
            result.states.append(Ingestor(store, get_dialect(dialect_name)).ingest(snap, key=f"state\0{key}"))
            return
        except ConcurrencyError:  # another writer of that stream got in first: derive again from its head
            _pause(attempt)
            if attempt == _RETRIES - 1:
                result.errors.append(f"{path}: the stream kept moving under {_RETRIES} attempts; not recorded")
        except DuplicateEventId:
            return  # this call's version was recorded before (a retry after the stream moved on)
        except EvstoreError as exc:
            result.errors.append(f"{path}: {exc}")
            return


def written_by_tool(payload: dict[str, Any]) -> bytes | None:
    """The bytes a ``Write``/``Edit``/``MultiEdit`` left in its file, from its hook body alone:
    ``Write``'s content, or the edits applied to the file as it was (``tool_response.originalFile``)."""
    tool_input, response, tool = payload.get("tool_input"), payload.get("tool_response"), payload.get("tool_name")
    if not isinstance(tool_input, dict):
        return None
    if tool == "Write":
        content = tool_input.get("content")
        return content.encode("utf-8", "surrogatepass") if isinstance(content, str) else None
    if tool not in ("Edit", "MultiEdit"):
        return None
    edits = tool_input.get("edits") if tool == "MultiEdit" else [tool_input]
    original = response.get("originalFile", response.get("originalFileContents")) if isinstance(response, dict) \
        else None
    if not isinstance(edits, list) or not edits:
        return None
    text = apply_edits(original if isinstance(original, str) else "", edits)  # "": a file an edit creates
    return text.encode("utf-8", "surrogatepass") if text is not None else None


def _record_transcript(store: EventStore, payload: dict[str, Any], roots: Sequence[Path] | None,
                       scrubber: Scrubber | None, result: HookResult, blob_threshold: int) -> None:
    given = _s(payload, "agent_transcript_path") if payload.get("hook_event_name") == "SubagentStop" else None
    given = given or _s(payload, "transcript_path")
    if not given:
        return
    path = transcript_allowed(given, _s(payload, "session_id"), roots)
    if path is None:
        result.errors.append(f"{given}: not a transcript of this session under "
                             f"{', '.join(str(r) for r in roots or ())}; not read")
        return
    if not path.is_file():
        if roots is not None:
            result.errors.append(f"{given}: no such transcript")
        return
    for attempt in range(_RETRIES):
        try:
            result.transcript = ingest_transcript(store, path, scrubber=scrubber, blob_threshold=blob_threshold)
            return
        except ConcurrencyError:  # another hook of this session moved its stream: take what is new after it
            _pause(attempt)
            if attempt == _RETRIES - 1:
                result.errors.append(f"{given}: the session stream kept moving under {_RETRIES} attempts")
        except EvstoreError as exc:
            result.errors.append(f"{given}: {exc}")
            return


def _pause(attempt: int) -> None:
    """A short random wait before another attempt, so racing writers spread out."""
    import random
    import time

    time.sleep(random.uniform(0, 0.005 * (attempt + 1)))


def transcript_allowed(given: str, session: str | None, roots: Sequence[Path] | None) -> Path | None:
    """``given`` as the transcript to read, or None when ``roots`` rule it out.

    Without ``roots`` (the spool: the hook ran as the agent's user on this machine) any path.
    With them (a request over HTTP) only a ``.jsonl`` file whose real path lies under a root and
    whose name is the session's: ``<session>.jsonl`` or ``<session>/subagents/agent-*.jsonl``.
    """
    if roots is None:
        return Path(given)
    if not session or not os.path.isabs(given):
        return None
    real = Path(os.path.realpath(given))
    if real.suffix != ".jsonl":
        return None
    own = real.stem == session or (real.parent.name == "subagents" and real.parent.parent.name == session
                                   and real.stem.startswith("agent-"))
    if not own:
        return None
    for root in roots:
        if real.is_relative_to(Path(os.path.realpath(root))):
            return real
    return None


def claude_projects_dirs() -> list[Path]:
    """Where Claude Code keeps transcripts: ``$CLAUDE_CONFIG_DIR/projects``, else ``~/.claude/projects``."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return [Path(base).expanduser() / "projects" if base else Path.home() / ".claude" / "projects"]


def drain(store: EventStore, directory: Path, *, scrub: bool = True,
          stop: Callable[[], bool] | None = None, blob_threshold: int | None = None,
          lock: int | None = None, exclusive: ExclusiveLock | None = None) -> DrainResult:
    """Record every spooled hook call; a claimed spool file is deleted only once recorded.

    One drain at a time per folder: when another holds it (``evstore serve``, ``watch``, a hook's
    background ``hook drain``) this returns at once with nothing done (``result.skipped``).
    ``stop`` is asked between records; when it says so the drain ends and leaves the rest of the
    claimed file to the next one, which records it without doubling what is in (ids derive
    from the spooled bytes).  Problems with single calls are in ``result.errors`` and appended
    to the folder's ``drain-errors.log`` (``evstore doctor``); what stops the drain raises.
    ``blob_threshold``: as :func:`record_hook`'s.  ``lock``: the folder's drain lock
    (:func:`spool.drain_lock`) if the caller holds it already; this closes it.

    Into a PostgreSQL store a drain with something to do also takes the folder's advisory lock
    (:func:`drain_exclusive`; ``exclusive``: one the caller keeps between drains, released here,
    not closed), so that several servers or workers draining the folder (one mounted on several
    machines) take turns: whoever finds it taken skips, as for the ``flock``.

        >>> drain(store, spool.spool_dir(url)).hooks  # doctest: +SKIP
        3
    """
    result = DrainResult()
    first = True
    # A hook that finds the lock taken starts no drain of its own (eventstore.entry): records it
    # spooled meanwhile are this drain's to take, so it looks again before and after letting go.
    mine = exclusive is None  # a lock made here is closed here
    try:
        while first or spool.waiting(directory):
            if not first or lock is None:
                lock = spool.drain_lock(directory)
            if lock is None:
                result.skipped = first
                return result
            first = False
            try:
                if store.backend.has_session_locks and spool.pending(directory):
                    if exclusive is None:
                        exclusive = drain_exclusive(store, directory)
                    if not exclusive.acquire():  # another machine drains this folder now
                        result.skipped = result.hooks == 0
                        return result
                _drain_claims(store, directory, scrub, stop, blob_threshold, result, exclusive)
                if result.stopped:
                    return result
                spool.mark_drained(directory)
            finally:
                os.close(lock)
    finally:
        if exclusive is not None:
            if mine:
                exclusive.close()
            else:
                exclusive.release()
    return result


def drain_exclusive(store: EventStore, directory: Path) -> ExclusiveLock:
    """The advisory lock of the spool folder ``directory``'s drain in ``store`` (PostgreSQL)."""
    from eventstore.locks import ExclusiveLock, default_label

    return ExclusiveLock(store, "hook-drain:" + spool.spool_id(directory), label=default_label("evstore hook drain"))


def _drain_claims(store: EventStore, directory: Path, scrub: bool, stop: Callable[[], bool] | None,
                  blob_threshold: int | None, result: DrainResult, exclusive: ExclusiveLock | None) -> None:
    """Claim and record the spool until it is empty (the drain's ``flock`` held)."""
    scrubber = None
    while True:
        claims = spool.claim(directory)
        if not claims:
            return
        for claimed in claims:
            if exclusive is not None and exclusive.held and not exclusive.still_held():
                # Our session ended (killed, network cut): another drain may hold the lock now.
                result.stopped = True
                return
            if scrubber is None and scrub:  # made only when there is something to scrub (it reads a key file)
                scrubber = Scrubber()
            for record in spool.read(claimed):
                if stop is not None and stop():
                    result.stopped = True
                    return
                errors = len(result.errors)
                _drain_one(store, record, scrubber, result, blob_threshold)
                if len(result.errors) > errors:
                    streams = record_streams(store, record)
                    event = hook_target(record)[1] if record.header.get("corrupt") is not True else None
                    for problem in result.errors[errors:]:
                        spool.log_drain_error(directory, problem, streams=streams, event=event)
            claimed.unlink()


def _drain_one(store: EventStore, record: spool.Record, scrubber: Scrubber | None, result: DrainResult,
               blob_threshold: int | None = None) -> None:
    """One spooled call: its id derives from the spooled line, the file bytes are the ones it copied.
    A record that is not whole (a hook died writing it) is not stored: it is an error of the drain."""
    if record.header.get("corrupt") is True:
        result.errors.append(f"a spooled record is not whole (a hook killed while writing it?), skipped: "
                             f"{len(record.stdin)} bytes, sha256 {record.digest}")
        return
    received = record.header.get("received_at")
    path, data = record.header.get("file"), record.file_bytes
    written = WrittenFile(path, data) if isinstance(path, str) and data is not None else None
    result.add(record_hook(store, record.stdin, key=record.digest,
                           received_at=received if isinstance(received, float) else None,
                           written=written, scrubber=scrubber, blob_threshold=blob_threshold))


__all__ = ["ClaudeDialect", "DrainResult", "HookResult", "WrittenFile", "claude_projects_dirs", "drain",
           "drain_exclusive",
           "ingest_transcript", "ingest_transcripts", "parse_hook_body", "record_hook", "state_dialect_for",
           "transcript_allowed", "transcript_files", "TranscriptResult", "transcript_state", "written_by_tool"]
