"""The ``claude`` dialect's lens and transcript reading (the package docstring says what it records)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, FileWrite, Finding, HookAnswer, RunInfo, StateVersion
from eventstore.dialects.claude import events as ev
from eventstore.dialects.claude.links import Linker
from eventstore.dialects.claude.secrets import Scrubber
from eventstore.errors import EvstoreError, IngestError, IntegrityViolation
from eventstore.events import Event

_decode = msgspec.json.Decoder()


class _LineEvent(msgspec.Struct):
    """The fields of a stored line event that search reads."""

    line: Any = None
    blobs: Any = None


class _LineFields(msgspec.Struct, rename={"type_": "type"}):
    """The fields of a transcript line that search reads."""

    type_: Any = None
    message: Any = None


class _Block(msgspec.Struct):
    """The fields of a message's content block that search reads."""

    type: Any = None
    text: Any = None
    thinking: Any = None
    name: Any = None
    input: Any = None
    content: Any = None


class _Message(msgspec.Struct):
    """A transcript line's message, as search reads it: its content, text or blocks."""

    content: str | list[_Block] | None = None


class _TypedLine(msgspec.Struct, rename={"type_": "type"}):
    """:class:`_LineFields` with its message typed: a message's other fields (its id, model, usage)
    and a block's (ids, signatures) are skipped, not built; a line of another shape fails to
    decode so and is read as :class:`_LineFields`."""

    type_: Any = None
    message: _Message | None = None


_LINE_EVENT = msgspec.json.Decoder(_LineEvent)
_LINE = msgspec.json.Decoder(_LineFields)
_TYPED_LINE = msgspec.json.Decoder(_TypedLine)
_TEXT_BLOCKS = ("text", "thinking")
#: What a blob's place holds in a line search reads before the blob's text is put in (see
#: :meth:`ClaudeDialect._blobbed_words`): a NUL, which a JSON text holds only escaped, and its index.
_HOLDER = "\x00evstore-blob:"
#: The text of each blob a reader (``blob``) gave search, while the reader lives (its batch), up to
#: :data:`_BLOB_TEXT_CHARS` characters: a file read again and again is one blob, decoded once.
_BLOB_TEXTS: weakref.WeakKeyDictionary[Callable[[str], bytes], _BlobTexts] = weakref.WeakKeyDictionary()
_BLOB_TEXT_CHARS = 32 << 20
_STR = msgspec.json.Decoder(str)


class _BlobTexts:
    """Blobs' texts by (SHA-256, size), and their characters in all."""

    __slots__ = ("texts", "size")

    def __init__(self) -> None:
        self.texts: dict[tuple[str, int], str] = {}
        self.size = 0
#: Tools that write a file named by ``file_path`` (or ``notebook_path``).
FILE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")


class ClaudeDialect(Dialect):
    name = "claude"
    description = "Claude Code session transcripts (JSONL), one event per line, and hook calls"
    catalog = ev.CATALOG
    requires_object = False
    line_based = True
    file_write_types = ("claude.tool_use", "claude.tool_result")
    session_kinds: ClassVar[dict[str, str]] = {
        "claude.user_message": "prompt", "claude.assistant_message": "assistant", "claude.tool_use": "tool_use",
        "claude.tool_result": "tool_result", "claude.hook": "hook", "claude.subagent_linked": "subagent"}
    lens_version = 2  # 2: the document counts linked subagents
    ingest_command = "eventstore.dialects.claude.commands:ingest_claude"
    watch_command = "eventstore.dialects.claude.commands:watch_claude"

    def analytics(self) -> Analytics:
        from eventstore.dialects.claude.analytics import ANALYTICS

        return ANALYTICS

    # Claude Code's http hooks (``hook install --http``): ``POST /hooks/claude-code`` in ``evstore serve``.
    http_hook = "claude-code"
    http_hook_openapi: ClassVar[dict[str, Any]] = {
        "summary": "Record one Claude Code http hook call (`evstore hook claude-code` + drain); "
                   "token holders only. The body is the hook's JSON input, as Claude Code sends it.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["session_id", "hook_event_name"],
            "properties": {"session_id": {"type": "string"}, "hook_event_name": {"type": "string"},
                           "transcript_path": {"type": "string"}, "cwd": {"type": "string"},
                           "tool_name": {"type": "string"}, "tool_use_id": {"type": "string"},
                           "tool_input": {"type": "object"}, "tool_response": {}}}}}},
        "responses": {
            "204": {"description": "Recorded, or recorded before (the same body again). No body, so "
                                   "Claude Code adds nothing to the model's context; headers evstore-hook "
                                   "(recorded|duplicate), evstore-version, evstore-states, "
                                   "evstore-transcript-lines, evstore-warnings say what happened."},
            "400": {"description": "Not a hook call (not JSON, not an object, no session_id "
                                   "or hook_event_name); nothing was written"}}}

    def __init__(self) -> None:
        self._scrubber: Scrubber | None = None  # made on the first http hook call (it may create the key file)
        self._scrubber_lock = threading.Lock()

    def http_hook_key(self, body: bytes) -> str:
        from eventstore import capture

        session: str = capture.parse_hook_body(body)["session_id"]  # InvalidEvent naming the problem
        return session

    def record_http_hook(self, store: Any, body: bytes, *, files: tuple[Path, ...] | None = None) -> HookAnswer:
        """One http hook call, recorded as ``evstore hook claude-code`` + drain would
        (:func:`eventstore.capture.record_hook`); transcripts are read only under ``files``
        (default: Claude Code's own projects folder).

        Success is ``204`` with no body: Claude Code reads an http hook's 2xx body as the hook's
        output (a JSON decision, or text added to the model's context), so evstore says nothing
        there; what was recorded is in ``evstore-*`` headers."""
        from eventstore import capture

        with self._scrubber_lock:
            if self._scrubber is None:
                self._scrubber = Scrubber()
        roots = files if files is not None else capture.claude_projects_dirs()
        result = capture.record_hook(store, body, scrubber=self._scrubber, transcript_roots=roots, via="http")
        transcript = result.transcript
        return HookAnswer(204, {
            "evstore-hook": "duplicate" if result.duplicate else "recorded",
            "evstore-version": str(result.version),
            "evstore-states": str(sum(1 for s in result.states if s.events)),
            "evstore-transcript-lines": str(transcript.lines if transcript is not None else 0),
            "evstore-warnings": str(len(result.errors))}, list(result.errors))

    def raw_note(self, doc: Any) -> str | None:
        scrubbed = doc.get("secrets_scrubbed") if isinstance(doc, dict) else 0
        if not scrubbed:
            return None
        return (f"{scrubbed} secret(s) in this transcript were replaced by [evstore-secret:...] markers "
                "before it was stored; these are the stored (scrubbed) bytes.")

    def file_bytes(self, events: Iterator[Event], *, blob: Callable[[str], bytes] | None = None) -> bytes:
        return raw_from_events(events, blob)

    def shown_data(self, event_type: str, data: Any, *, blob: Callable[[str], bytes]) -> Any:
        """A ``claude.hook`` event whose input's long strings are blobs: the input whole again,
        as if none had been (a transcript line's whole bytes are ``replay --raw``'s)."""
        if event_type != "claude.hook" or not isinstance(data, dict) or not data.get("blobs") \
                or not isinstance(data.get("input"), str):
            return data
        refs = msgspec.convert(data["blobs"], list[ev.BlobRef])
        whole = splice_blobs(data["input"].encode("utf-8"), refs, blob).decode("utf-8")
        return {**data, "input": whole, "blobs": None}

    def simulate_writers(self, store: Any, rng: Any, versions: list[StateVersion]) -> int:
        """Two Claude Code sessions (and a subagent) that wrote ``versions``, ingested as transcripts
        (:mod:`eventstore.dialects.claude.simulate`)."""
        import tempfile

        from eventstore import capture
        from eventstore.dialects.claude.simulate import sessions_for

        files = sessions_for(rng, versions)
        with tempfile.TemporaryDirectory(prefix="evstore-demo-sessions-") as tmp:
            for rel, data in files.items():
                path = Path(tmp, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            capture.ingest_transcripts(store, [Path(tmp)], scrub=False)
        return sum(1 for rel in files if "/subagents/" not in rel)

    def search_text(self, event_type: str, raw_data: bytes, *, blob: Callable[[str], bytes]) -> tuple[str, str]:
        """A transcript line's words (a prompt, assistant text, a tool's input, a tool's output), its
        long strings put back from their blobs; a hook call's input."""
        from eventstore.dialects.base import json_words, strings

        if event_type in ("claude.line_part", "claude.prefix_rewritten", "claude.subagent_linked"):
            return "event", json_words(raw_data)
        if event_type != "claude.hook":
            # a line event: only its line and blob refs are read (decoded into a Struct: the other
            # fields are skipped, not built)
            try:
                outer = _LINE_EVENT.decode(raw_data)
            except msgspec.ValidationError:
                outer = None
            if outer is not None and isinstance(outer.line, str):
                return self._line_words(outer.line, outer.blobs, blob)
        data = _decode.decode(raw_data)
        if not isinstance(data, dict):
            return "event", ""
        if event_type == "claude.hook":
            shown = self.shown_data(event_type, data, blob=blob)
            try:
                inp = json.loads(shown.get("input") or "null")
            except ValueError:
                inp = shown.get("input")
            return "hook", "\n".join(x for x in (data.get("hook_event_name"), data.get("tool_name")) if x) + "\n" + \
                "\n".join(strings(inp))
        line = data.get("line")
        if not isinstance(line, str):
            return "event", "\n".join(strings({k: v for k, v in data.items() if k != "line_b64"}))
        return self._line_words(line, data.get("blobs"), blob)

    def _line_words(self, line: str, blobs: Any, blob: Callable[[str], bytes]) -> tuple[str, str]:
        """:meth:`search_text` of a transcript line (its blobs put back)."""
        from eventstore.dialects.base import strings

        raw: str | bytes = line  # msgspec decodes a str as it does its UTF-8 bytes: no copy without blobs
        if blobs:
            found = self._blobbed_words(line, blobs, blob)
            if found is not None:
                return found
            try:
                raw = splice_blobs(line.encode("utf-8"), msgspec.convert(blobs, list[ev.BlobRef]), blob)
            except EvstoreError:
                pass  # a missing blob: `evstore verify` reports it; search indexes what is there
        try:
            typed = _TYPED_LINE.decode(raw)  # only the fields searched (a tool's output repeated in toolUseResult: skipped)
        except msgspec.ValidationError:  # another shape (or not an object): read it field by field below
            pass
        except (msgspec.DecodeError, RecursionError):
            return "event", line
        else:
            kind, typed_texts = self._typed_words(typed)
            return kind, "\n".join(typed_texts or self._other_texts(raw))
        try:
            rec = _LINE.decode(raw)
        except msgspec.ValidationError:  # not an object
            return "event", line
        except (msgspec.DecodeError, RecursionError):
            return "event", line
        message = rec.message
        content = message.get("content") if isinstance(message, dict) else None
        kind = {"user": "prompt", "assistant": "assistant"}.get(str(rec.type_), "event")
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for b in content:
                if not isinstance(b, dict):
                    continue
                t = b.get("type")
                if t in ("text", "thinking"):
                    texts.extend(strings(b.get(t)))
                elif t == "tool_use":
                    kind = "tool_use"
                    texts.append(str(b.get("name") or ""))
                    texts.extend(strings(b.get("input")))
                elif t == "tool_result":
                    kind = "tool_result"
                    inner = b.get("content")
                    if isinstance(inner, list):  # blocks: their text, not their "type"s
                        texts.extend(x["text"] for x in inner if isinstance(x, dict) and isinstance(x.get("text"), str))
                    else:
                        texts.extend(strings(inner))
        return kind, "\n".join(texts or self._other_texts(raw))

    def _blobbed_words(self, line: str, blobs: Any, blob: Callable[[str], bytes]) -> tuple[str, str] | None:
        """:meth:`_line_words` of a line with blobs, read without putting them back into the line: each
        blob's place holds a short place holder (:data:`_HOLDER`) while the line is decoded, and the
        place holders among the texts found become the blobs' texts.  So a tool's output repeated in
        ``toolUseResult`` is neither copied into the line nor parsed, and a blob met again is decoded
        once.  None where that might not give the words a line with its blobs put back gives (the line
        holds an escaped NUL, or no message words; a blob missing or of another size; a place holder
        inside a longer text): the caller then puts the blobs back."""
        stored = line.encode("utf-8")
        if b"\\u0000" in stored:
            return None
        try:
            refs = msgspec.convert(blobs, list[ev.BlobRef])
        except msgspec.ValidationError:
            return None
        out = bytearray()
        kept = done = 0  # as splice_blobs
        for i, ref in enumerate(refs):
            take = ref.offset - done
            if take < 0:
                return None
            out += stored[kept:kept + take]
            kept += take
            out += b"\\u0000evstore-blob:%d" % i
            done = ref.offset + ref.size
        out += stored[kept:]
        try:
            kind, texts = self._typed_words(_TYPED_LINE.decode(out))
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return None
        if not texts:
            return None
        holders = {f"{_HOLDER}{i}": ref for i, ref in enumerate(refs)}
        known = _BLOB_TEXTS.get(blob)
        if known is None:
            known = _BLOB_TEXTS[blob] = _BlobTexts()
        words = []
        for text in texts:
            if "\x00" not in text:
                words.append(text)
                continue
            held = holders.get(text)
            if held is None:
                return None
            ref = held
            got = known.texts.get((ref.sha256, ref.size))
            if got is None:
                try:
                    data = blob(ref.sha256)
                except EvstoreError:
                    return None
                if len(data) != ref.size:
                    return None
                try:
                    got = _STR.decode(b'"' + data + b'"')
                except (msgspec.ValidationError, msgspec.DecodeError):
                    return None
                if known.size + len(got) <= _BLOB_TEXT_CHARS:
                    known.texts[ref.sha256, ref.size] = got
                    known.size += len(got)
            words.append(got)
        return kind, "\n".join(words)

    @staticmethod
    def _typed_words(rec: _TypedLine) -> tuple[str, list[str]]:
        """The kind and texts of a line decoded as :class:`_TypedLine` (as :meth:`_line_words` reads them)."""
        from eventstore.dialects.base import strings

        kind = "prompt" if rec.type_ == "user" else "assistant" if rec.type_ == "assistant" else "event"
        message = rec.message
        content = message.content if message is not None else None
        if isinstance(content, str):
            return kind, [content]
        texts: list[str] = []
        for b in content or ():
            t = b.type
            if t in _TEXT_BLOCKS:
                value = b.text if t == "text" else b.thinking
                if isinstance(value, str):
                    if value:
                        texts.append(value)
                else:
                    texts.extend(strings(value))
            elif t == "tool_use":
                kind = "tool_use"
                texts.append(str(b.name or ""))
                texts.extend(strings(b.input))
            elif t == "tool_result":
                kind = "tool_result"
                inner = b.content
                if isinstance(inner, str):
                    if inner:
                        texts.append(inner)
                elif isinstance(inner, list):  # blocks: their text, not their "type"s
                    texts.extend(x["text"] for x in inner if isinstance(x, dict) and isinstance(x.get("text"), str))
                else:
                    texts.extend(strings(inner))
        return kind, texts

    @staticmethod
    def _other_texts(raw: str | bytes) -> list[str]:
        """The texts of a line without a message's words (a summary, a system line): its own fields,
        in the line's order."""
        from eventstore.dialects.base import strings

        whole = _decode.decode(raw)
        return strings({k: v for k, v in whole.items() if k in ("summary", "content", "subtype")})

    def apply(self, doc: Any, event: Event) -> Any:
        doc = doc if isinstance(doc, dict) else {"lines": 0, "records": {}, "models": [], "tool_calls": 0,
                                                 "tool_errors": 0, "unreadable": 0, "secrets_scrubbed": 0,
                                                 "hooks": 0, "subagents": 0, "first_at": None, "last_at": None}
        if isinstance(event, ev._Line):
            doc["lines"] += 1
            kind = event.event_type().split(".", 1)[1]
            doc["records"][kind] = doc["records"].get(kind, 0) + 1
            doc["secrets_scrubbed"] += event.secrets
            if event.timestamp:
                doc["first_at"] = doc["first_at"] or event.timestamp
                doc["last_at"] = event.timestamp
            model = getattr(event, "model", None)
            if model and model not in doc["models"]:
                doc["models"].append(model)
            if isinstance(event, ev.ToolUse):
                doc["tool_calls"] += 1
            elif isinstance(event, ev.ToolResult) and event.is_error:
                doc["tool_errors"] += 1
            elif isinstance(event, ev.UnreadableLine):
                doc["unreadable"] += 1
        elif isinstance(event, ev.HookReceived):
            doc["hooks"] += 1
        elif isinstance(event, ev.SubagentLinked):
            doc["subagents"] = doc.get("subagents", 0) + 1
        return doc

    def describe(self, doc: Any) -> RunInfo:
        if not isinstance(doc, dict):
            return RunInfo()
        return RunInfo(title=", ".join(doc.get("models") or []) or None, status="session")

    def file_writes(self, event: Event) -> list[FileWrite]:
        if isinstance(event, ev.ToolUse):
            if event.tool_use_id and event.file_path and event.tool_name in FILE_TOOLS:
                return [FileWrite(call_id=event.tool_use_id, path=event.file_path, sha256=event.content_sha256,
                                  how="content" if event.content_sha256 else None, tool=event.tool_name,
                                  message=event.uuid, at=event.timestamp, lf_sha256=event.content_lf_sha256)]
        elif isinstance(event, ev.ToolResult) and event.tool_use_id and (event.file_path or event.is_error):
            return [FileWrite(call_id=event.tool_use_id, path=event.file_path, sha256=event.file_sha256,
                              how=event.file_how, failed=event.is_error, lf_sha256=event.file_lf_sha256)]
        return []

    def load(self, path: Path) -> Iterator[Any]:
        raise IngestError("claude transcripts are ingested line by line: use `evstore ingest claude FILE|DIR`.")

    def summary(self, event: Event) -> str | None:
        if isinstance(event, ev.ToolUse):
            target = f" {event.file_path}" if event.file_path else ""
            return f"tool use {event.tool_name}{target} ({event.tool_use_id})"
        if isinstance(event, ev.ToolResult):
            return f"tool result {event.tool_use_id}{' ERROR' if event.is_error else ''}"
        if isinstance(event, ev.AssistantMessage):
            return f"assistant {event.block or 'message'} ({event.model})"
        if isinstance(event, ev.UserMessage):
            return f"user message ({event.text_chars} chars)"
        if isinstance(event, ev.UnreadableLine):
            return f"line {event.lineno} is not readable: {event.error}"
        if isinstance(event, ev.UnknownRecord):
            return f"record of unknown type {event.record_type!r} (kept whole)"
        if isinstance(event, ev.HookReceived):
            tool = f" {event.tool_name}" if event.tool_name else ""
            return f"hook {event.hook_event_name}{tool}"
        if isinstance(event, ev.PrefixRewritten):
            return f"{event.file}: the first {event.recorded_bytes} bytes changed since they were recorded"
        if isinstance(event, ev.LinePart):
            return f"line {event.lineno}, part {event.part}"
        if isinstance(event, ev.SubagentLinked):
            what = f"subagent {event.stream}" if event.stream else f"inline subagent (sidechain {event.agent})"
            kind = f" [{event.subagent_type}]" if event.subagent_type else ""
            how = "its agentId in the Task result" if event.by == "agent_id" else "its first prompt (the Task's prompt)"
            return f"{what}{kind} started by Task {event.tool_use_id} (line {event.task_lineno}), linked by {how}"
        if isinstance(event, ev._Line):
            return f"{event.event_type().split('.', 1)[1].replace('_', ' ')} (line {event.lineno})"
        return None


# ----------------------------------------------------------------------------- lines -> events


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _first_block(message: Any) -> dict[str, Any] | None:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                return block
    return None


def _blocks(message: Any, kind: str) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def line_event(rec: Any, common: dict[str, Any]) -> ev._Line:
    """The typed event for one parsed record (``common``: line bytes, position, secrets)."""
    if not isinstance(rec, dict):
        return ev.UnknownRecord(record_type=None, **common)
    common = {**common, "uuid": _s(rec.get("uuid")), "parent_uuid": _s(rec.get("parentUuid")),
              "timestamp": _s(rec.get("timestamp")), "agent_id": _s(rec.get("agentId")),
              "is_sidechain": rec.get("isSidechain") if isinstance(rec.get("isSidechain"), bool) else None}
    kind = rec.get("type")
    message = rec.get("message")
    if kind == "user":
        results = _blocks(message, "tool_result")
        if results:
            r = results[0]
            path, text, how = written_text(rec.get("toolUseResult"))
            sha = _sha(text) if text is not None and not common.get("secrets") else None
            return ev.ToolResult(tool_use_id=_s(r.get("tool_use_id")), is_error=r.get("is_error") is True,
                                 file_path=path, file_sha256=sha, file_how=how if sha else None,
                                 file_lf_sha256=_lf_sha(text) if text is not None and sha else None, **common)
        content = message.get("content") if isinstance(message, dict) else None
        chars = len(content) if isinstance(content, str) else sum(
            len(b.get("text", "")) for b in _blocks(message, "text") if isinstance(b.get("text"), str))
        return ev.UserMessage(text_chars=chars, **common)
    if kind == "assistant":
        msg = message if isinstance(message, dict) else {}
        usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else None
        api: dict[str, Any] = {"model": _s(msg.get("model")), "message_id": _s(msg.get("id")),
               "request_id": _s(rec.get("requestId")), "usage": usage}
        uses = _blocks(message, "tool_use")
        if uses:
            u = uses[0]
            tool_input: dict[str, Any] = u["input"] if isinstance(u.get("input"), dict) else {}
            content = tool_input.get("content") if u.get("name") == "Write" else None
            content = content if isinstance(content, str) and not common.get("secrets") else None
            return ev.ToolUse(tool_use_id=_s(u.get("id")), tool_name=_s(u.get("name")),
                              file_path=_s(tool_input.get("file_path") or tool_input.get("notebook_path")),
                              content_sha256=_sha(content) if content is not None else None,
                              content_lf_sha256=_lf_sha(content) if content is not None else None, **api, **common)
        block = _first_block(message)
        return ev.AssistantMessage(block=_s(block.get("type")) if block else None, **api, **common)
    if kind == "summary":
        return ev.Summary(leaf_uuid=_s(rec.get("leafUuid")), **common)
    if kind == "system":
        if rec.get("subtype") == "compact_boundary":
            meta: dict[str, Any] = rec["compactMetadata"] if isinstance(rec.get("compactMetadata"), dict) else {}
            return ev.CompactBoundary(trigger=_s(meta.get("trigger")), **common)
        return ev.SystemRecord(subtype=_s(rec.get("subtype")), **common)
    if kind == "file-history-snapshot":
        return ev.FileHistorySnapshot(**common)
    if kind == "attachment":
        return ev.Attachment(**common)
    if kind == "queue-operation":
        return ev.QueueOperation(operation=_s(rec.get("operation")), **common)
    return ev.UnknownRecord(record_type=kind if isinstance(kind, str) else None, **common)


def _sha(text: str) -> str | None:
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:  # a lone surrogate: no file holds these bytes
        return None


def _lf_sha(text: str) -> str | None:
    """The SHA-256 of ``text`` with every CRLF turned into LF, if it has any (else None: the same
    as its own).  Claude Code reads a file with its line endings normalised and writes it back in
    the file's own style, so a tool's text and the file's bytes may differ in nothing else."""
    return _sha(text.replace("\r\n", "\n")) if "\r\n" in text else None


def apply_edits(text: str, edits: list[Any]) -> str | None:
    """``text`` with Edit/MultiEdit's replacements applied in order (None: one does not apply)."""
    for edit in edits:
        if not isinstance(edit, dict):
            return None
        old, new = edit.get("old_string", edit.get("oldString")), edit.get("new_string", edit.get("newString"))
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        if old == "":  # Edit creates a file with an empty old_string
            if text != "":
                return None
            text = new
            continue
        if old not in text:
            return None
        every = edit.get("replace_all", edit.get("replaceAll")) is True
        text = text.replace(old, new) if every else text.replace(old, new, 1)
    return text


def written_file(result: Any, *, hashed: bool = True) -> tuple[str | None, str | None, str | None]:
    """(path, SHA-256, how) of the file a Write/Edit/MultiEdit's ``toolUseResult`` says it left.

    Write: ``{type: create|update, filePath, content}`` ("content"); Edit: ``{filePath,
    originalFile, oldString, newString, replaceAll}``; MultiEdit: ``{filePath, edits,
    originalFileContents}`` ("edit": the original with the edits applied, as the tool does).
    The hash is None when the record lacks what it needs (or ``hashed`` is False: a line whose
    secrets were replaced no longer holds the bytes written)."""
    path, text, how = written_text(result)
    sha = _sha(text) if text is not None and hashed else None
    return path, sha, how if sha else None


def written_text(result: Any) -> tuple[str | None, str | None, str | None]:
    """(path, text, how) of the file a Write/Edit/MultiEdit's ``toolUseResult`` says it left
    (:func:`written_file`, before hashing)."""
    if not isinstance(result, dict) or not isinstance(result.get("filePath"), str):
        return None, None, None
    path: str = result["filePath"]
    text: str | None = None
    how = None
    original = result.get("originalFile", result.get("originalFileContents"))
    if isinstance(result.get("edits"), list):
        text, how = (apply_edits(original, result["edits"]) if isinstance(original, str) else None), "edit"
    elif "oldString" in result and "newString" in result:
        text, how = (apply_edits(original, [result]) if isinstance(original, str) else None), "edit"
    elif result.get("type") in ("create", "update") and isinstance(result.get("content"), str):
        text, how = result["content"], "content"
    return path, text, how


def _parse_error(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"column {exc.colno}: {exc.msg}"
    except RecursionError:
        return "nested too deeply"
    return "not a JSON object"


@dataclass
class LineEvents:
    """The events of one line and the findings (secrets replaced) to attach to them."""

    events: list[Event]
    findings: list[Finding] = field(default_factory=list)
    links: list[Event] = field(default_factory=list)  # subagents this line links (recorded after it)
    blobs: dict[str, bytes] = field(default_factory=dict)  # SHA-256 hex -> bytes cut out of the line


def long_strings(raw: bytes, threshold: int) -> list[tuple[int, int]]:
    """(start, end) of the contents of each JSON string literal in ``raw`` of ``threshold`` bytes
    or more (``raw``: one valid JSON line; a quote preceded by an odd run of backslashes is escaped)."""
    spans: list[tuple[int, int]] = []
    find = raw.find
    pos = 0
    while True:
        opening = find(b'"', pos)
        if opening < 0:
            return spans
        k = opening + 1
        while True:
            closing = find(b'"', k)
            if closing < 0:
                return spans
            b = closing - 1
            while b > opening and raw[b] == 0x5C:  # backslash
                b -= 1
            if (closing - 1 - b) % 2 == 0:
                break
            k = closing + 1
        if closing - opening - 1 >= threshold:
            spans.append((opening + 1, closing))
        pos = closing + 1


class LongStrings:
    """The long strings of one line: spans, their bytes and SHA-256 digests, and the rest."""

    __slots__ = ("spans", "datas", "digests", "rest")

    def __init__(self, raw: bytes, threshold: int) -> None:
        self.spans = long_strings(raw, threshold)
        self.datas = [raw[s:e] for s, e in self.spans]
        self.digests = [hashlib.sha256(d).digest() for d in self.datas]
        ends = [0] + [e for _, e in self.spans]
        starts = [s for s, _ in self.spans] + [len(raw)]
        self.rest = [raw[a:b] for a, b in zip(ends, starts, strict=True)]


def cut_blobs(raw: bytes, threshold: int, found: LongStrings | None = None,
              ) -> tuple[bytes, list[ev.BlobRef], dict[str, bytes]]:
    """``raw`` without the contents of its strings of ``threshold`` bytes or more, the references
    that put them back, and the blobs by SHA-256 (the exact bytes between the quotes).  ``found``:
    those strings, if already looked for in ``raw``."""
    found = found or LongStrings(raw, threshold)
    if not found.spans:
        return raw, [], {}
    refs: list[ev.BlobRef] = []
    blobs: dict[str, bytes] = {}
    for (start, end), data, digest in zip(found.spans, found.datas, found.digests, strict=True):
        sha = digest.hex()
        blobs[sha] = data
        refs.append(ev.BlobRef(start, end - start, sha))
    return b"".join(found.rest), refs, blobs


def splice_blobs(stored: bytes, refs: list[ev.BlobRef], blob: Callable[[str], bytes]) -> bytes:
    """The line ``cut_blobs`` cut, from its stored bytes and its blobs."""
    out = bytearray()
    kept = done = 0  # bytes of ``stored`` used; bytes of the original line rebuilt
    for ref in refs:
        take = ref.offset - done
        out += stored[kept:kept + take]
        kept += take
        data = blob(ref.sha256)
        if len(data) != ref.size:
            raise IntegrityViolation(f"Blob {ref.sha256} holds {len(data)} bytes, the line refers to {ref.size}; "
                                     "run `evstore verify`.")
        out += data
        done = ref.offset + ref.size
    out += stored[kept:]
    return bytes(out)


def events_for_line(raw: bytes, lineno: int, offset: int, scrubber: Scrubber | None,
                    linker: Linker | None = None, blob_threshold: int = 0) -> LineEvents:
    """One line's events: parts (if oversized), then its typed event; secrets scrubbed first.
    ``linker`` (the file's :class:`~eventstore.dialects.claude.links.Linker`) adds the line's
    sidechain and the subagent links it establishes; a JSON line's strings of ``blob_threshold``
    bytes or more (0: none) become blobs."""
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    found: list[Any] = []
    strings = LongStrings(raw, blob_threshold) if blob_threshold and len(raw) >= blob_threshold else None
    if scrubber is not None:
        kinds = None
        if strings is not None and strings.spans:  # look at each distinct long string once
            kinds = scrubber.kinds([*((r, None) for r in strings.rest), *zip(strings.datas, strings.digests, strict=True)])
        if text is not None:
            text, found = scrubber.scrub(text, raw, kinds=kinds)
            raw = text.encode("utf-8") if found else raw
        else:  # latin-1 maps bytes 1:1, so everything but a replaced secret keeps its bytes
            latin, found = scrubber.scrub(raw.decode("latin-1"), raw, kinds=kinds)
            raw = latin.encode("latin-1", "replace") if found else raw
        if found and strings is not None:
            strings = LongStrings(raw, blob_threshold)  # the secrets' markers moved the strings
    findings = [Finding(path=f"/line/{lineno}", code="secret-scrubbed",
                        message=f"a {s.kind} was replaced by {s.marker}") for s in found]
    body = raw.rstrip(b"\r\n")
    rec: Any = None
    error: str | None = None
    if text is None:
        error = "not valid UTF-8"
    elif not body.strip():
        error = "empty line"
    else:
        try:
            rec = _decode.decode(body)
        except (msgspec.DecodeError, RecursionError):
            error = _parse_error(body.decode("utf-8"))
    stored, refs, blobs = raw, [], {}  # type: tuple[bytes, list[ev.BlobRef], dict[str, bytes]]
    if error is None and strings is not None:
        stored, refs, blobs = cut_blobs(raw, blob_threshold, strings)
    out: list[Event] = []
    common: dict[str, Any] = {"lineno": lineno, "offset": offset, "secrets": len(found)}
    if refs:
        common["blobs"] = refs
    if len(stored) > ev.PART_BYTES:
        for i in range(0, len(stored), ev.PART_BYTES):
            out.append(ev.LinePart(lineno=lineno, part=i // ev.PART_BYTES,
                                   b64=base64.b64encode(stored[i:i + ev.PART_BYTES]).decode("ascii")))
        common["parts"] = len(out)
    elif text is not None:
        common["line"] = stored.decode("utf-8") if refs else text
    else:
        common["line_b64"] = base64.b64encode(stored).decode("ascii")
    if error is not None:
        out.append(ev.UnreadableLine(error=error, **common))
        return LineEvents(out, findings)
    links: list[Event] = []
    if linker is not None:
        common["sidechain"], found_links = linker.observe(rec, lineno)
        links.extend(found_links)
    out.append(line_event(rec, common))
    return LineEvents(out, findings, links, blobs)


def split_lines(data: bytes, final: bool = False) -> tuple[list[bytes], int]:
    """Complete lines of ``data`` (with their newlines) and the bytes they cover.  An
    unterminated tail counts only if ``final`` or it is complete JSON (a writer mid-line is not)."""
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        tail = lines[-1]
        complete = final
        if not complete:
            try:
                _decode.decode(tail)
                complete = True
            except (msgspec.DecodeError, RecursionError):
                complete = False
        if not complete:
            lines.pop()
    return lines, sum(len(x) for x in lines)


def stream_for(path: Path, first_line: bytes | None = None) -> tuple[str, str | None]:
    """(stream id, parent session) of a transcript file: ``<session>`` or ``<session>/agent-<id>``.

    2.1.x keeps a subagent in ``<session>/subagents/agent-<id>.jsonl``; 2.0.x beside the sessions
    as ``agent-<id>.jsonl``, its lines naming the session (``sessionId``): ``first_line`` is read
    for that."""
    stem = path.stem
    if stem.startswith("agent-") and path.parent.name == "subagents":
        parent = path.parent.parent.name
        return f"{parent}/{stem}", parent
    if stem.startswith("agent-") and first_line:
        try:
            rec = _decode.decode(first_line)
        except (msgspec.DecodeError, RecursionError):
            rec = None
        session = rec.get("sessionId") if isinstance(rec, dict) else None
        if isinstance(session, str) and session and "/" not in session:
            return f"{session}/{stem}", session
    return stem, None


def transcript_files(path: Path) -> list[Path]:
    """``*.jsonl`` files under ``path`` (or ``path`` itself), sessions before their subagents."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise IngestError(f"{path}: no such file or directory.")
    from eventstore import reading

    # Never through a symlinked folder (loops), never to a file outside ``path``.
    return sorted(reading.walk_files(path, ".jsonl"), key=lambda p: (p.parent.name == "subagents", str(p)))


def raw_from_events(events: Iterator[Event], blob: Callable[[str], bytes] | None = None) -> bytes:
    """The transcript bytes the line events of a stream hold, in order (``blob``: the bytes
    stored under a SHA-256, for lines that refer to blobs)."""
    out = bytearray()
    parts = bytearray()
    for e in events:
        if isinstance(e, ev.LinePart):
            parts += base64.b64decode(e.b64)
        elif isinstance(e, ev._Line):
            if isinstance(e, ev.UnreadableLine) and e.sha256 is not None:
                raise EvstoreError(f"line {e.lineno} of this transcript ({e.size} bytes at byte {e.offset}, SHA-256 "
                                   f"{e.sha256}) was over the line limit when it was captured and was not stored, "
                                   "so the transcript cannot be given back byte for byte; `evstore log` shows "
                                   "the lines that were stored.")
            if e.parts:
                line, parts = bytes(parts), bytearray()
            elif e.line is not None:
                line = e.line.encode("utf-8")
            elif e.line_b64 is not None:
                line = base64.b64decode(e.line_b64)
            else:
                line = b""
            if e.blobs:
                if blob is None:
                    raise EvstoreError(f"line {e.lineno} refers to blobs: replay it from the store.")
                line = splice_blobs(line, e.blobs, blob)
            out += line
    return bytes(out)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = ["FILE_TOOLS", "ClaudeDialect", "EvstoreError", "LineEvents", "apply_edits", "cut_blobs", "events_for_line",
           "line_event", "long_strings", "raw_from_events", "splice_blobs", "split_lines", "stream_for",
           "transcript_files", "written_file", "written_text"]
