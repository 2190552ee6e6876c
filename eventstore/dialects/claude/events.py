"""The claude catalog: one event per transcript line (plus hooks and findings).

Every line event keeps the line itself, after secret scrubbing, exactly as it was in the file
(``line``: UTF-8 text including its newline; ``line_b64`` when the bytes are not UTF-8), so
``evstore replay SESSION --raw`` gives the transcript back byte for byte; the contents of very
large JSON strings (tool outputs, base64 images) are cut out into content-addressed blobs and
named in ``blobs``, their digests also in ``meta.blobs`` (a hook call's ``input`` likewise, so a
``Write``'s content in both the transcript and the hook is stored once).  The other fields are
what analytics and ``evstore log`` read, taken from the record when present.  A line longer than
:data:`PART_BYTES` is stored as :class:`LinePart` events (base64 chunks) followed by its typed
event with ``parts`` set and ``line`` empty.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventstore.events import Event

#: Lines longer than this are stored in parts (each event stays far below the 4 MiB limit).
PART_BYTES = 1024 * 1024


class BlobRef(msgspec.Struct, frozen=True):
    """A span of a line stored as a content-addressed blob: ``size`` bytes at ``offset`` of the
    line (after scrubbing), whose SHA-256 is ``sha256``; the line's stored text lacks them."""

    offset: int
    size: int
    sha256: str


class _Line(Event, frozen=True):
    """Fields every transcript line event has (no tag: not an event type of its own)."""

    lineno: int
    offset: int
    line: str | None = None
    line_b64: str | None = None
    parts: int = 0
    uuid: str | None = None
    parent_uuid: str | None = None
    timestamp: str | None = None
    is_sidechain: bool | None = None
    agent_id: str | None = None
    secrets: int = 0
    sidechain: str | None = None  # 1.0.x inline subagent: the uuid of its sidechain's first line
    blobs: list[BlobRef] | None = None  # spans of the line kept as blobs (spliced back on replay)


class UserMessage(_Line, frozen=True, tag="claude.user_message"):
    text_chars: int = 0


class AssistantMessage(_Line, frozen=True, tag="claude.assistant_message"):
    model: str | None = None
    message_id: str | None = None
    request_id: str | None = None
    usage: dict[str, Any] | None = None
    block: str | None = None  # the content block type this line carries (text, thinking, ...)


class ToolUse(_Line, frozen=True, tag="claude.tool_use"):
    tool_use_id: str | None = None
    tool_name: str | None = None
    model: str | None = None
    message_id: str | None = None
    request_id: str | None = None
    usage: dict[str, Any] | None = None
    file_path: str | None = None
    content_sha256: str | None = None  # Write: SHA-256 of the content it writes (UTF-8)
    content_lf_sha256: str | None = None  # ... with CRLF turned into LF, when the content has any


class ToolResult(_Line, frozen=True, tag="claude.tool_result"):
    """``file_*``: the file a Write/Edit/MultiEdit left, from ``toolUseResult`` (``file_how``:
    "content", the bytes written; "edit", the file before the call with the edits applied;
    ``file_lf_sha256``: its SHA-256 with CRLF turned into LF, when it has any)."""

    tool_use_id: str | None = None
    is_error: bool = False
    file_path: str | None = None
    file_sha256: str | None = None
    file_how: str | None = None
    file_lf_sha256: str | None = None


class Summary(_Line, frozen=True, tag="claude.summary"):
    leaf_uuid: str | None = None


class CompactBoundary(_Line, frozen=True, tag="claude.compact_boundary"):
    trigger: str | None = None


class SystemRecord(_Line, frozen=True, tag="claude.system"):
    subtype: str | None = None


class FileHistorySnapshot(_Line, frozen=True, tag="claude.file_history_snapshot"):
    pass


class Attachment(_Line, frozen=True, tag="claude.attachment"):
    pass


class QueueOperation(_Line, frozen=True, tag="claude.queue_operation"):
    operation: str | None = None


class UnknownRecord(_Line, frozen=True, tag="claude.unknown_record"):
    """A record type this version of evstore does not know yet (kept whole)."""

    record_type: str | None = None


class UnreadableLine(_Line, frozen=True, tag="claude.unreadable_line"):
    """A line that is not JSON (or not an object): its bytes, and the parse error.

    A line longer than :data:`eventstore.config.MAX_LINE_BYTES` was never held whole: its bytes
    are not stored (no ``line``, ``line_b64`` or parts), only its length (``size``) and SHA-256,
    and ``replay --raw`` refuses to give the transcript back rather than leave it out."""

    error: str = ""
    size: int | None = None  # set for a line over the limit: its length in bytes (newline included)
    sha256: str | None = None  # ... and the SHA-256 of those bytes


class LinePart(Event, frozen=True, tag="claude.line_part"):
    """One chunk of an oversized line's bytes (base64); the line's typed event follows."""

    lineno: int
    part: int
    b64: str


class PrefixRewritten(Event, frozen=True, tag="claude.prefix_rewritten"):
    """The file no longer starts with what was recorded: never merged silently."""

    file: str
    recorded_bytes: int
    recorded_sha256: str
    found_sha256: str


class SubagentLinked(Event, frozen=True, tag="claude.subagent_linked"):
    """A subagent linked to the Task tool use that started it (:mod:`eventstore.dialects.claude.links`).

    ``agent``: the agent id (2.x, ``by="agent_id"``: its own stream is ``stream``) or the uuid of
    the inline sidechain's first line (1.0.x, ``by="prompt"``); ``lineno``: the line holding the
    evidence (the Task's result, or the sidechain's first prompt)."""

    agent: str
    by: str
    lineno: int
    tool_use_id: str | None = None
    stream: str | None = None
    task_lineno: int | None = None
    description: str | None = None
    subagent_type: str | None = None
    started_at: str | None = None


class HookReceived(Event, frozen=True, tag="claude.hook"):
    """One Claude Code hook call, spooled or posted (``input``: the hook's JSON input, scrubbed).

    Its very large strings (a ``Write``'s content, a Bash output) are cut out into blobs as a
    line's are: ``blobs`` are spans of ``input``'s UTF-8 bytes, which the stored ``input`` lacks
    (:meth:`~eventstore.dialects.claude.dialect.ClaudeDialect.shown_data` puts them back)."""

    hook_event_name: str | None = None
    tool_name: str | None = None
    tool_use_id: str | None = None
    agent_id: str | None = None
    agent_type: str | None = None
    input: str | None = None
    input_b64: str | None = None
    received_at: float | None = None
    secrets: int = 0
    # Set when the input was over the event limit and ``input``/``input_b64`` keep only its start.
    input_bytes: int | None = None
    input_sha256: str | None = None
    blobs: list[BlobRef] | None = None


LINE_EVENTS: tuple[type[_Line], ...] = (
    UserMessage, AssistantMessage, ToolUse, ToolResult, Summary, CompactBoundary, SystemRecord,
    FileHistorySnapshot, Attachment, QueueOperation, UnknownRecord, UnreadableLine,
)
CATALOG: tuple[type[Event], ...] = (*LINE_EVENTS, LinePart, PrefixRewritten, SubagentLinked, HookReceived)
