"""The parse contract for turn transcripts, and the loader that turns files into snapshots.

Parse contract (orchestration-envelope): the envelope is the **last fenced ```json block of the
final assistant message**; it must be valid JSON and validate (legacy rules, see
:mod:`.validate`).  Otherwise the turn is rejected and the driver re-invokes the session once with
:data:`REPAIR_PROMPT`; a second failure is a driver-level FAILED.

A transcript file is one turn (Markdown or plain text).  Optional front matter names it::

    ---
    run: run-7            # stream hint (else the envelope's unit.id)
    turn: 3
    repair_of: 3          # this file answers the repair prompt for turn 3
    at: 2026-05-01T10:00:00Z
    ---

Without front matter the turn number comes from the file name (``turn-003.md``;
``turn-003.repair.md`` is its repair), and a turn whose text carries the repair prompt repairs the
last rejected turn seen in the same load.  Role markers (``## Assistant``, ``**assistant:**``,
``assistant:``) select the final assistant message; without them the whole text is the message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventstore import reading
from eventstore.dialects.base import Finding, Snapshot, parse_time, read_snapshot
from eventstore.dialects.envelope.events import RepairAttempted, TurnFailed, TurnRejected
from eventstore.dialects.envelope.lens import unit_id
from eventstore.dialects.envelope.validate import check, verdict

JSON = Any
REPAIR_PROMPT = "Emit only the machine envelope for the turn above."
TRANSCRIPT_SUFFIXES = (".md", ".markdown", ".txt", ".log", ".transcript")

# Same shape as the package's extractor: the info string is exactly `json`, the block ends at the
# first closing fence on its own line.
_FENCE = re.compile(r"```json[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL)
_ROLE = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*|\*\*)?(assistant|user|system)\b[ \t]*:?[ \t]*(?:\*\*)?[ \t]*:?[ \t]*$",
                   re.IGNORECASE | re.MULTILINE)
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_TURN_IN_NAME = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class TurnParse:
    """The outcome of applying the parse contract to one turn's text."""

    envelope: JSON | None  # the accepted envelope (None: rejected)
    code: str = ""  # "" | "no-json-block" | "invalid-json" | "invalid-envelope"
    reason: str = ""
    line: int | None = None  # 1-based, in the text given (plus ``line_offset``)
    column: int | None = None
    errors: tuple[str, ...] = ()
    block: str | None = None
    trailing_output: bool = False  # text after the envelope breaks the placement rule (not fatal)

    @property
    def ok(self) -> bool:
        return self.envelope is not None


def final_assistant_message(text: str) -> tuple[str, int]:
    """The text of the last assistant message and the 0-based line it starts at."""
    last = None
    for m in _ROLE.finditer(text):
        if m.group(1).lower() == "assistant":
            last = m
    if last is None:
        return text, 0
    start = last.end()
    rest = text[start:]
    nxt = next((m for m in _ROLE.finditer(rest) if m.group(1).lower() != "assistant"), None)
    body = rest[: nxt.start()] if nxt else rest
    return body, text.count("\n", 0, start)


def extract_last_json_block(text: str) -> tuple[str, int] | None:
    """The content of the last fenced ```json block and its 0-based first line, or None."""
    last = None
    for m in _FENCE.finditer(text):
        last = m
    if last is None:
        return None
    return last.group(1), text.count("\n", 0, last.start(1))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_turn(text: str, *, line_offset: int = 0) -> TurnParse:
    """Apply the parse contract to one turn's text (see the module docstring)."""
    body, body_line = final_assistant_message(text)
    found = extract_last_json_block(body)
    if found is None:
        return TurnParse(None, "no-json-block", "no fenced ```json block found in the final assistant message")
    block, block_line = found
    first = line_offset + body_line + block_line + 1  # 1-based line of the block's first line
    try:
        value = json.loads(block, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        line = first + exc.lineno - 1
        return TurnParse(None, "invalid-json",
                         f"invalid JSON in last fenced block at line {line}, column {exc.colno}: {exc.msg}",
                         line=line, column=exc.colno, block=block)
    except ValueError as exc:
        return TurnParse(None, "invalid-json", f"invalid JSON in last fenced block: {exc}", line=first, block=block)
    if not verdict(value)[0]:  # the cheap verdict first; the full check only to name the errors
        errs = tuple(check(value).errors)
        shown = "; ".join(errs[:3]) + (f" (+{len(errs) - 3} more)" if len(errs) > 3 else "")
        return TurnParse(None, "invalid-envelope", f"envelope does not validate: {shown}", line=first,
                         errors=errs, block=block)
    tail = body[body.rfind("```") + 3:] if "```" in body else ""
    return TurnParse(value, block=block, trailing_output=bool(tail.strip()))


# ------------------------------------------------------------------ transcripts -> snapshots


def front_matter(text: str) -> tuple[dict[str, str], str, int]:
    """``(meta, body, lines consumed)`` for an optional ``---`` front-matter header."""
    m = _FRONT.match(text)
    if not m:
        return {}, text, 0
    meta: dict[str, str] = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.strip().startswith("#"):
            meta[key.strip().lower()] = value.split(" #", 1)[0].strip()
    return meta, text[m.end():], text.count("\n", 0, m.end())


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def is_transcript(path: Path, raw: bytes) -> bool:
    """Transcripts by suffix; anything else that does not start like JSON is a transcript too."""
    if path.suffix.lower() in TRANSCRIPT_SUFFIXES:
        return True
    if path.suffix.lower() == ".json":
        return False
    return not raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"["))


@dataclass
class LoadContext:
    """What one load remembers across files: turn numbering, rejected turns, the stream."""

    last_turn: int = 0
    stream: str | None = None
    rejected: dict[int, int] = field(default_factory=dict)  # turn -> attempts so far
    last_rejected: int | None = None


def load_turn(path: Path, raw: bytes, ctx: LoadContext) -> Snapshot:
    """One transcript file -> one snapshot (an accepted envelope, or turn bookkeeping only)."""
    text = raw.decode("utf-8", "replace").lstrip("\ufeff")
    meta, body, offset = front_matter(text)
    name_turn = _TURN_IN_NAME.search(path.stem)
    repair_of = _int(meta.get("repair_of"))
    is_repair = repair_of is not None or ".repair" in path.name.lower() or REPAIR_PROMPT in body
    turn = _int(meta.get("turn"))
    if is_repair:
        if repair_of is None:
            repair_of = turn if turn is not None else (
                int(name_turn.group(1)) if name_turn and ".repair" in path.name.lower() else ctx.last_rejected)
        turn = repair_of if turn is None else turn
    elif turn is None:
        turn = int(name_turn.group(1)) if name_turn else ctx.last_turn + 1
    if turn is not None:
        ctx.last_turn = max(ctx.last_turn, turn)
    hint = meta.get("run") or meta.get("stream") or meta.get("unit")
    parsed = parse_turn(body, line_offset=offset)
    source = {"file": str(path), "kind": "transcript", "turn": turn}
    if is_repair:
        source["repair_of"] = repair_of
    when = parse_time(meta.get("at"))
    if parsed.ok:
        stream = hint or unit_id(parsed.envelope) or ctx.stream
        ctx.stream = stream
        events: list[Any] = []
        if is_repair:
            attempt = ctx.rejected.get(repair_of, 1) if repair_of is not None else 1
            events.append(RepairAttempted(turn=turn, repairs_turn=repair_of, ok=True, attempt=attempt,
                                          source=str(path)))
            if repair_of is not None:
                ctx.rejected.pop(repair_of, None)
        return Snapshot(doc=parsed.envelope, raw=raw, source=source, occurred_at=when,
                        stream_hint=hint, events=events)
    stream = hint or ctx.stream
    ctx.stream = stream
    if not is_repair:
        ctx.rejected[turn if turn is not None else -1] = 1
        ctx.last_rejected = turn
        ev: list[Any] = [TurnRejected(turn=turn, code=parsed.code, reason=parsed.reason, line=parsed.line,
                                      column=parsed.column, errors=list(parsed.errors), block=parsed.block,
                                      source=str(path))]
    else:
        key = repair_of if repair_of is not None else -1
        attempt = ctx.rejected.get(key, 1)
        ctx.rejected[key] = attempt + 1
        ev = [RepairAttempted(turn=turn, repairs_turn=repair_of, ok=False, attempt=attempt, code=parsed.code,
                              reason=parsed.reason, line=parsed.line, column=parsed.column, block=parsed.block,
                              source=str(path)),
              TurnFailed(turn=turn, reason=f"repair failed: {parsed.reason}", attempts=attempt + 1)]
    # The turn's envelope could not be read: a finding of the version, as an unreadable state file's
    # is (`evstore log` and the runs index count it).
    what = "repair of turn" if is_repair else "turn"
    finding = Finding("", f"turn-{parsed.code}", f"{path}: {what} {turn} rejected: {parsed.reason}", "error")
    return Snapshot(doc=None, raw=raw, source=source, occurred_at=when, stream_hint=stream, events=ev,
                    findings=[finding])


def _order(path: Path) -> tuple[int, int, str]:
    m = _TURN_IN_NAME.search(path.stem)
    return (int(m.group(1)) if m else 1 << 30, 1 if ".repair" in path.name.lower() else 0, path.name)


def iter_files(path: Path) -> list[Path]:
    """Files of a directory in turn order (numbers compared as numbers), or ``[path]``."""
    if path.is_dir():
        return sorted((p for p in reading.entries(path)[0] if not p.name.startswith(".")), key=_order)
    return [path]


def load_path(path: Path, ctx: LoadContext | None = None) -> list[Snapshot]:
    """Snapshots for a file or a directory of envelope JSON files and/or turn transcripts."""
    ctx = ctx or LoadContext()
    out: list[Snapshot] = []
    for p in iter_files(path):
        raw = reading.read_bounded(p)
        if is_transcript(p, raw):
            out.append(load_turn(p, raw, ctx))
        else:
            snap = read_snapshot(raw, str(p), {"file": str(p), "kind": "envelope"})
            if snap.doc is not None:
                ctx.stream = unit_id(snap.doc) or ctx.stream
            ctx.last_turn += 1
            out.append(snap)
    # A rejected turn before any accepted one (no front matter) belongs to the unit that follows.
    following: str | None = None
    for snap in reversed(out):
        if snap.doc is not None:
            following = snap.stream_hint or unit_id(snap.doc) or following
        elif snap.stream_hint is None:
            snap.stream_hint = following
    return out
