"""A Claude Code session that writes a multi-agent-pipeline ``agent-state.json`` (for "who wrote
this state?"), built from the public descriptions of the transcript format.

The session (:data:`SESSION`), working in a project folder, writes the state file four ways:

* ``toolu_w1``: a ``Write`` whose ``content`` is version 1 (a content match);
* ``toolu_e1``: an ``Edit`` whose ``toolUseResult`` carries ``originalFile`` (version 1), so
  the file it left (version 2) is known: a content match;
* ``toolu_e2``: an ``Edit`` from a release that did not record ``originalFile``: its result is
  unknown, so version 3 can only be linked by path and time;
* ``toolu_x1``: a ``Write`` of a draft nobody ingested; version 4 was then written by the
  orchestrator itself, so it must stay unattributed (its bytes are not the draft's).

It also has a tool error, a compaction and a ``Task`` subagent (its own file), so the per-run
metrics have something to sum.  :data:`VERSIONS` says when each state version was written;
:data:`EXPECTED` what attribution each must get; :data:`RUN_TOTALS` the hand-counted sums.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.claude_fixtures import _line

SESSION = "5e55a0b1-4c2d-4e8f-9a1b-0c3d5e7f9a21"
AGENT = "f00dcafe"
TASK = "PROJ-LINK"


def state(status: str, phase: int, note: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": "2.2.0", "taskId": TASK, "title": "Link states to sessions",
                           "status": status, "currentPhase": phase}
    if note:
        doc["note"] = note
    return doc


def text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


V1 = text(state("in_progress", 1))
V2 = V1.replace('"currentPhase": 1', '"currentPhase": 2')  # what toolu_e1's edit leaves
V3 = V2.replace('"status": "in_progress"', '"status": "awaiting_input"')  # what toolu_e2's edit leaves
DRAFT = text(state("in_progress", 2, "a draft nobody ingested"))
V4 = text(state("complete", 3))  # written by the orchestrator, not by the session

#: (state version bytes, the time it was written: the file's mtime when ingested)
VERSIONS = [(V1, "2026-03-02T09:00:05Z"), (V2, "2026-03-02T09:02:05Z"), (V3, "2026-03-02T09:04:05Z"),
            (V4, "2026-03-02T09:09:00Z")]
#: version -> (tool_use_id, message uuid, tool, established by); None: not attributed
EXPECTED: dict[int, tuple[str, str, str, str] | None] = {
    1: ("toolu_w1", "a1", "Write", "content"), 2: ("toolu_e1", "a2", "Edit", "content"),
    3: ("toolu_e2", "a3", "Edit", "path+time"), 4: None}


def _assistant(uuid: str, parent: str, at: str, msg: str, usage: dict[str, int], block: dict[str, Any],
               base: dict[str, Any]) -> bytes:
    return _line({**base, "type": "assistant", "uuid": uuid, "parentUuid": parent, "timestamp": at,
                  "requestId": f"req_{msg}", "message": {"id": msg, "model": "claude-sonnet-4-5", "role": "assistant",
                                                         "type": "message", "content": [block], "usage": usage}})


def _result(uuid: str, parent: str, at: str, call: str, result: Any, base: dict[str, Any],
            is_error: bool = False) -> bytes:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call, "content": "ok" if not is_error else result}
    if is_error:
        block["is_error"] = True
    return _line({**base, "type": "user", "uuid": uuid, "parentUuid": parent, "timestamp": at,
                  "message": {"role": "user", "content": [block]}, "toolUseResult": result})


def session_records(project: Path) -> list[bytes]:
    """The main transcript; ``project`` is the session's cwd, holding ``agent-state.json``."""
    path = str(project / "agent-state.json")
    base = {"sessionId": SESSION, "cwd": str(project), "version": "2.1.3", "gitBranch": "main",
            "userType": "external", "isSidechain": False}
    return [
        _line({**base, "type": "user", "uuid": "u1", "parentUuid": None, "timestamp": "2026-03-02T09:00:00.000Z",
               "message": {"role": "user", "content": "Start the pipeline for PROJ-LINK."}}),
        # One API message over two lines (text, then the tool use): usage counted once.
        _assistant("a0", "u1", "2026-03-02T09:00:01.000Z", "msg_1",
                   {"input_tokens": 1000, "output_tokens": 10, "cache_read_input_tokens": 200,
                    "cache_creation_input_tokens": 50}, {"type": "text", "text": "Writing the state."}, base),
        _assistant("a1", "a0", "2026-03-02T09:00:02.000Z", "msg_1",
                   {"input_tokens": 1000, "output_tokens": 80, "cache_read_input_tokens": 200,
                    "cache_creation_input_tokens": 50},
                   {"type": "tool_use", "id": "toolu_w1", "name": "Write",
                    "input": {"file_path": path, "content": V1}}, base),
        _result("r1", "a1", "2026-03-02T09:00:03.000Z", "toolu_w1",
                {"type": "create", "filePath": path, "content": V1, "structuredPatch": []}, base),
        _assistant("a2", "r1", "2026-03-02T09:02:00.000Z", "msg_2",
                   {"input_tokens": 1500, "output_tokens": 40, "cache_read_input_tokens": 900,
                    "cache_creation_input_tokens": 0},
                   {"type": "tool_use", "id": "toolu_e1", "name": "Edit",
                    "input": {"file_path": path, "old_string": '"currentPhase": 1',
                              "new_string": '"currentPhase": 2'}}, base),
        _result("r2", "a2", "2026-03-02T09:02:01.000Z", "toolu_e1",
                {"filePath": path, "oldString": '"currentPhase": 1', "newString": '"currentPhase": 2',
                 "originalFile": V1, "structuredPatch": [{"oldStart": 5, "oldLines": 1, "newStart": 5,
                                                          "newLines": 1, "lines": []}],
                 "userModified": False, "replaceAll": False}, base),
        _line({**base, "type": "user", "uuid": "u2", "parentUuid": "r2", "timestamp": "2026-03-02T09:03:00.000Z",
               "message": {"role": "user", "content": "Send it to review."}}),
        _assistant("a3", "u2", "2026-03-02T09:04:00.000Z", "msg_3",
                   {"input_tokens": 1700, "output_tokens": 30},
                   {"type": "tool_use", "id": "toolu_e2", "name": "Edit",
                    "input": {"file_path": path, "old_string": '"status": "in_progress"',
                              "new_string": '"status": "awaiting_input"'}}, base),
        # An older release's Edit result: no originalFile, so the file it left is unknown.
        _result("r3", "a3", "2026-03-02T09:04:01.000Z", "toolu_e2",
                {"filePath": path, "oldString": '"status": "in_progress"', "newString": '"status": "awaiting_input"'}, base),
        _assistant("a4", "r3", "2026-03-02T09:05:00.000Z", "msg_4",
                   {"input_tokens": 1800, "output_tokens": 25, "cache_read_input_tokens": 1000},
                   {"type": "tool_use", "id": "toolu_b1", "name": "Bash",
                    "input": {"command": "make check", "description": "run checks"}}, base),
        _result("r4", "a4", "2026-03-02T09:05:30.000Z", "toolu_b1", "Error: Exit code 2", base, is_error=True),
        _line({**base, "type": "system", "subtype": "compact_boundary", "uuid": "s1", "parentUuid": None,
               "timestamp": "2026-03-02T09:06:00.000Z", "content": "Conversation compacted", "level": "info",
               "compactMetadata": {"trigger": "auto", "preTokens": 160000}}),
        _assistant("a5", "s1", "2026-03-02T09:07:00.000Z", "msg_5",
                   {"input_tokens": 600, "output_tokens": 20},
                   {"type": "tool_use", "id": "toolu_t1", "name": "Task",
                    "input": {"description": "review", "prompt": "Review PROJ-LINK", "subagent_type": "reviewer"}},
                   base),
        _result("r5", "a5", "2026-03-02T09:07:50.000Z", "toolu_t1", {"status": "completed"}, base),
        _assistant("a6", "r5", "2026-03-02T09:08:00.000Z", "msg_6",
                   {"input_tokens": 700, "output_tokens": 60},
                   {"type": "tool_use", "id": "toolu_x1", "name": "Write",
                    "input": {"file_path": path, "content": DRAFT}}, base),
        _result("r6", "a6", "2026-03-02T09:08:01.000Z", "toolu_x1",
                {"type": "update", "filePath": path, "content": DRAFT, "structuredPatch": []}, base),
        _line({**base, "type": "user", "uuid": "u3", "parentUuid": "r6", "timestamp": "2026-03-02T09:10:00.000Z",
               "message": {"role": "user", "content": "Thanks."}}),
    ]


def subagent_records(project: Path) -> list[bytes]:
    base = {"sessionId": SESSION, "agentId": AGENT, "isSidechain": True, "cwd": str(project), "version": "2.1.3"}
    return [
        _line({**base, "type": "user", "uuid": "su1", "parentUuid": None, "timestamp": "2026-03-02T09:07:05.000Z",
               "message": {"role": "user", "content": "Review PROJ-LINK"}}),
        _line({**base, "type": "assistant", "uuid": "sa1", "parentUuid": "su1", "timestamp": "2026-03-02T09:07:45.000Z",
               "requestId": "req_s1", "message": {"id": "msg_s1", "model": "claude-haiku-4-5", "role": "assistant",
                                                  "content": [{"type": "text", "text": "Approved."}],
                                                  "usage": {"input_tokens": 400, "output_tokens": 15,
                                                            "cache_creation_input_tokens": 100}}}),
    ]


#: Per-run sums over the linked session (main transcript + its subagent), counted by hand:
#: tokens once per API message (msg_1 .. msg_6, msg_s1; msg_1's two lines repeat its usage, the
#: last line's counts), turns = user lines that are not tool results (u1, u2, u3 + su1),
#: wall time of the main transcript (09:00:00 -> 09:10:00), the subagent's apart (40 s).
RUN_TOTALS = {
    "sessions": 1, "transcripts": 2, "subagents": 1,
    "input_tokens": 1000 + 1500 + 1700 + 1800 + 600 + 700 + 400,
    "output_tokens": 80 + 40 + 30 + 25 + 20 + 60 + 15,
    "cache_read_tokens": 200 + 900 + 1000,
    "cache_creation_tokens": 50 + 100,
    "turns": 4, "tool_calls": 6, "tool_errors": 1, "compactions": 1,
    "wall_s": 600.0, "subagent_wall_s": 40.0,
}


def write_session(root: Path, project: Path) -> tuple[Path, Path]:
    """``root/<encoded cwd>/<session>.jsonl`` and its subagent file."""
    folder = root / "-work-orch"
    main = folder / f"{SESSION}.jsonl"
    sub = folder / SESSION / "subagents" / f"agent-{AGENT}.jsonl"
    sub.parent.mkdir(parents=True)
    main.write_bytes(b"".join(session_records(project)))
    sub.write_bytes(b"".join(subagent_records(project)))
    return main, sub
