"""Claude Code transcripts built from the public descriptions of the format (versions 1.0.x-2.1.x).

Every record type evstore knows, one it does not, a line that is not JSON, a line that is not
UTF-8, one API message split over several lines (one content block each, sharing ``message.id``
and ``requestId``), a tool error whose ``toolUseResult`` is a plain string, a compaction, a
summary whose ``leafUuid`` points outside the file, an image block of about 1.5 MB (stored in
parts), a line of over 50,000 characters and a last line without a newline.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

SESSION = "7f0c2a52-3c1e-4b7a-9d0e-2f5b1a6c9e01"
AGENT = "a1b2c3d4"


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def records(seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    t = [f"2026-03-0{1 + i // 60}T10:{i % 60:02d}:00.000Z" for i in range(40)]
    base = {"sessionId": SESSION, "cwd": "/work/proj", "version": "2.1.3", "gitBranch": "main",
            "userType": "external", "isSidechain": False}
    image = base64.b64encode(rng.randbytes(1_100_000)).decode("ascii")
    lines = [
        _line({"type": "summary", "summary": "Earlier work on the parser", "leafUuid": "not-in-this-file"}),
        _line({**base, "type": "user", "uuid": "u1", "parentUuid": None, "timestamp": t[0],
               "message": {"role": "user", "content": "Fix the failing test in parser.py, please. Ünïcödé ✓"}}),
        # One API message over three lines: thinking, text, tool_use (same message.id and requestId).
        _line({**base, "type": "assistant", "uuid": "a1", "parentUuid": "u1", "timestamp": t[1], "requestId": "req_1",
               "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant", "type": "message",
                           "content": [{"type": "thinking", "thinking": "Look at the test first.",
                                        "signature": "sig"}],
                           "usage": {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 800,
                                     "cache_creation_input_tokens": 300,
                                     "cache_creation": {"ephemeral_5m_input_tokens": 300,
                                                        "ephemeral_1h_input_tokens": 0}}}}),
        _line({**base, "type": "assistant", "uuid": "a2", "parentUuid": "a1", "timestamp": t[2], "requestId": "req_1",
               "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant", "type": "message",
                           "content": [{"type": "text", "text": "Reading the test."}],
                           "usage": {"input_tokens": 1200, "output_tokens": 60}}}),
        _line({**base, "type": "assistant", "uuid": "a3", "parentUuid": "a2", "timestamp": t[3], "requestId": "req_1",
               "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant", "type": "message",
                           "content": [{"type": "tool_use", "id": "toolu_01", "name": "Read",
                                        "input": {"file_path": "/work/proj/tests/test_parser.py"}}],
                           "usage": {"input_tokens": 1200, "output_tokens": 90}}}),
        _line({**base, "type": "user", "uuid": "u2", "parentUuid": "a3", "timestamp": t[4],
               "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                                         "content": "x" * 60_000}]},
               "toolUseResult": {"type": "text", "file": {"filePath": "/work/proj/tests/test_parser.py",
                                                          "numLines": 1200}}}),
        _line({**base, "type": "assistant", "uuid": "a4", "parentUuid": "u2", "timestamp": t[5], "requestId": "req_2",
               "message": {"id": "msg_2", "model": "claude-sonnet-4-5", "role": "assistant", "type": "message",
                           "content": [{"type": "tool_use", "id": "toolu_02", "name": "Bash",
                                        "input": {"command": "pytest -x", "description": "run tests"}}],
                           "usage": {"input_tokens": 1500, "output_tokens": 20}}}),
        _line({**base, "type": "user", "uuid": "u3", "parentUuid": "a4", "timestamp": t[6],
               "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02",
                                                         "is_error": True, "content": "Exit code 1"}]},
               "toolUseResult": "Error: Exit code 1"}),
        _line({**base, "type": "user", "uuid": "u4", "parentUuid": "u3", "timestamp": t[7],
               "message": {"role": "user", "content": [
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}}]}}),
        _line({**base, "type": "system", "subtype": "compact_boundary", "uuid": "s1", "parentUuid": None,
               "timestamp": t[8], "content": "Conversation compacted", "level": "info",
               "compactMetadata": {"trigger": "auto", "preTokens": 155000}}),
        _line({**base, "type": "system", "subtype": "informational", "uuid": "s2", "parentUuid": "s1",
               "timestamp": t[9], "content": "hook ran"}),
        _line({"type": "file-history-snapshot", "messageId": "u1", "isSnapshotUpdate": False,
               "snapshot": {"messageId": "u1", "trackedFileBackups": {}, "timestamp": t[10]}}),
        _line({**base, "type": "attachment", "uuid": "at1", "parentUuid": "u4", "timestamp": t[11],
               "attachment": {"type": "file", "filename": "notes.md"}}),
        _line({"type": "queue-operation", "operation": "enqueue", "timestamp": t[12], "sessionId": SESSION,
               "content": "also update the changelog"}),
        _line({"type": "cost-state", "sessionId": SESSION, "costUSD": 0.42, "newKeyNobodyKnows": [1, 2.0, None]}),
        _line({"type": "ai-title", "title": "Fix parser test"}),
        b'{"type":"assistant","message":{"id":"msg_3","content":[{"type":"text","text":"cut off mid-wr\n',
        b'{"type":"user","note":"latin-1 \xe9 is not UTF-8"}\n',
        b"\n",
        _line({**base, "type": "assistant", "uuid": "a5", "parentUuid": "u4", "timestamp": t[13], "requestId": "req_3",
               "message": {"id": "msg_4", "model": "claude-opus-4-1", "role": "assistant", "type": "message",
                           "content": [{"type": "tool_use", "id": "toolu_03", "name": "Task",
                                        "input": {"description": "review", "prompt": "Review the fix",
                                                  "subagent_type": "reviewer"}}],
                           "usage": {"input_tokens": 900, "output_tokens": 30}}}),
    ]
    last = _line({**base, "type": "last-prompt", "lastPrompt": "thanks", "timestamp": t[14]}).rstrip(b"\n")
    return [*lines, last]


def subagent_records() -> list[bytes]:
    base = {"sessionId": SESSION, "agentId": AGENT, "isSidechain": True, "cwd": "/work/proj", "version": "2.1.3"}
    return [
        _line({**base, "type": "user", "uuid": "su1", "parentUuid": None, "timestamp": "2026-03-01T10:20:00.000Z",
               "message": {"role": "user", "content": "Review the fix"}}),
        _line({**base, "type": "assistant", "uuid": "sa1", "parentUuid": "su1", "timestamp": "2026-03-01T10:21:00.000Z",
               "requestId": "req_s1", "message": {"id": "msg_s1", "model": "claude-haiku-4-5", "role": "assistant",
                                                  "content": [{"type": "text", "text": "Looks right."}],
                                                  "usage": {"input_tokens": 300, "output_tokens": 12}}}),
    ]


def write_project(root: Path) -> tuple[Path, Path]:
    """A ``~/.claude/projects/<encoded cwd>`` folder: one session and one subagent file."""
    project = root / "-work-proj"
    main = project / f"{SESSION}.jsonl"
    sub = project / SESSION / "subagents" / f"agent-{AGENT}.jsonl"
    sub.parent.mkdir(parents=True)
    main.write_bytes(b"".join(records()))
    sub.write_bytes(b"".join(subagent_records()))
    return main, sub
