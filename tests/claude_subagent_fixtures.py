"""Subagents in both layouts, from the public descriptions of the format.

* 2.x (``write_v2``): a session whose assistant message starts two subagents in one API message
  (two ``tool_use`` lines sharing ``message.id``: a ``Task`` and, as 2.1.x names it, an ``Agent``),
  each written to ``<session>/subagents/agent-<id>.jsonl`` with ``agentId`` on every line.  The
  first result carries the id in ``toolUseResult.agentId`` (with ``totalDurationMs`` and friends),
  the second only in its text (``agentId: <id> (for resuming ...)``, as 2.0.x printed it).  A
  third subagent file has no Task result yet (still running when the file was copied).
* 1.0.x (``v1_lines``): subagents inline in the main file, ``isSidechain: true`` and a first line
  with ``parentUuid: null`` whose prompt is the Task's ``input.prompt``; two parallel Tasks share
  a prompt, one sidechain's prompt matches no Task, sidechain lines interleave.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

V2_SESSION = "2b4ed4c0-b905-41de-9238-273db3ec737a"
V2_AGENT_A = "a2271d1"
V2_AGENT_B = "b93f0e2"
V2_AGENT_RUNNING = "c0ffee1"
V1_SESSION = "0a9e7c3e-1c55-4a8e-8d67-3d1f6b0b2a10"


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def _t(minute: int, second: int = 0) -> str:
    return f"2026-05-04T09:{minute:02d}:{second:02d}.000Z"


def _assistant(base: dict[str, Any], uuid: str, parent: str | None, at: str, msg: str, block: dict[str, Any],
               model: str = "claude-opus-4-5") -> bytes:
    return _line({**base, "type": "assistant", "uuid": uuid, "parentUuid": parent, "timestamp": at,
                  "requestId": f"req_{msg}", "message": {"id": msg, "model": model, "role": "assistant",
                                                         "type": "message", "content": [block],
                                                         "usage": {"input_tokens": 100, "output_tokens": 10}}})


def _user(base: dict[str, Any], uuid: str, parent: str | None, at: str, content: Any, **extra: Any) -> bytes:
    return _line({**base, "type": "user", "uuid": uuid, "parentUuid": parent, "timestamp": at,
                  "message": {"role": "user", "content": content}, **extra})


def v2_main_lines() -> list[bytes]:
    base = {"sessionId": V2_SESSION, "cwd": "/work/app", "version": "2.1.9", "isSidechain": False,
            "userType": "external"}
    review = {"description": "review the diff", "prompt": "Review the diff in src/", "subagent_type": "reviewer"}
    tests = {"description": "run tests", "prompt": "Run the test suite and report failures",
             "subagent_type": "general-purpose"}
    return [
        _user(base, "u1", None, _t(0), "Review and test my change"),
        _assistant(base, "a1", "u1", _t(1), "msg_v2_1",
                   {"type": "tool_use", "id": "toolu_task_a", "name": "Task", "input": review}),
        _assistant(base, "a2", "a1", _t(1, 1), "msg_v2_1",
                   {"type": "tool_use", "id": "toolu_task_b", "name": "Agent", "input": tests}),
        _user(base, "u2", "a2", _t(6), [{"type": "tool_result", "tool_use_id": "toolu_task_a",
                                         "content": [{"type": "text", "text": "The diff looks right."}]}],
              toolUseResult={"status": "completed", "prompt": review["prompt"], "agentId": V2_AGENT_A,
                             "content": [{"type": "text", "text": "The diff looks right."}],
                             "totalDurationMs": 300000, "totalTokens": 5400, "totalToolUseCount": 3,
                             "usage": {"input_tokens": 5000, "output_tokens": 400}}),
        _user(base, "u3", "u2", _t(9), [{"type": "tool_result", "tool_use_id": "toolu_task_b", "content": [
            {"type": "text", "text": "2 failures in test_io.py"},
            {"type": "text", "text": f"agentId: {V2_AGENT_B} (for resuming to continue this agent's work if needed)"}]}],
              toolUseResult={"status": "completed", "content": [{"type": "text", "text": "2 failures"}]}),
        _assistant(base, "a3", "u3", _t(10), "msg_v2_2", {"type": "text", "text": "Both done."}),
    ]


def v2_agent_lines(agent: str, start: int, end: int, prompt: str) -> list[bytes]:
    base = {"sessionId": V2_SESSION, "agentId": agent, "isSidechain": True, "cwd": "/work/app", "version": "2.1.9"}
    return [
        _user(base, f"{agent}-u1", None, _t(start), prompt),
        _assistant(base, f"{agent}-a1", f"{agent}-u1", _t(start, 30), f"msg_{agent}_1",
                   {"type": "tool_use", "id": f"toolu_{agent}_read", "name": "Read",
                    "input": {"file_path": "/work/app/src/io.py"}}, model="claude-haiku-4-5"),
        _user(base, f"{agent}-u2", f"{agent}-a1", _t(end - 1),
              [{"type": "tool_result", "tool_use_id": f"toolu_{agent}_read", "content": "def read(): ..."}]),
        _assistant(base, f"{agent}-a2", f"{agent}-u2", _t(end), f"msg_{agent}_2",
                   {"type": "text", "text": "Done."}, model="claude-haiku-4-5"),
    ]


def write_v2(root: Path) -> dict[str, Path]:
    """``<root>/-work-app``: the 2.x session and its three subagent files (A: 09:01-09:06, B: 09:01-09:09)."""
    project = root / "-work-app"
    sub = project / V2_SESSION / "subagents"
    sub.mkdir(parents=True)
    files = {"main": project / f"{V2_SESSION}.jsonl", V2_AGENT_A: sub / f"agent-{V2_AGENT_A}.jsonl",
             V2_AGENT_B: sub / f"agent-{V2_AGENT_B}.jsonl",
             V2_AGENT_RUNNING: sub / f"agent-{V2_AGENT_RUNNING}.jsonl"}
    files["main"].write_bytes(b"".join(v2_main_lines()))
    files[V2_AGENT_A].write_bytes(b"".join(v2_agent_lines(V2_AGENT_A, 1, 6, "Review the diff in src/")))
    files[V2_AGENT_B].write_bytes(b"".join(v2_agent_lines(V2_AGENT_B, 2, 9, "Run the test suite and report failures")))
    files[V2_AGENT_RUNNING].write_bytes(b"".join(v2_agent_lines(V2_AGENT_RUNNING, 3, 4, "Still going")))
    return files


def v1_lines() -> list[bytes]:
    """A 1.0.x session: Tasks T1 and T2 (same prompt, 09:01:00 and 09:01:02), T3 (09:02:00); sidechains
    S1 (09:01:05-09:04:05) and S2 (09:01:06-09:03:06) for the shared prompt, S3 (09:02:01-09:07:01) for
    T3's, and S4 whose prompt no Task gave (09:08:00-09:08:30)."""
    base = {"sessionId": V1_SESSION, "cwd": "/work/old", "version": "1.0.98", "userType": "external"}
    main = {**base, "isSidechain": False}
    side = {**base, "isSidechain": True}
    shared = "Find every caller of parse_config"

    def task(uuid: str, parent: str, at: str, msg: str, tid: str, prompt: str) -> bytes:
        return _assistant(main, uuid, parent, at, msg, {"type": "tool_use", "id": tid, "name": "Task", "input": {
            "description": "search", "prompt": prompt, "subagent_type": "general-purpose"}})

    def step(uuid: str, parent: str, at: str, msg: str) -> bytes:
        return _assistant(side, uuid, parent, at, msg, {"type": "text", "text": "working"}, model="claude-sonnet-4")

    return [
        _user(main, "m1", None, "2026-05-04T09:00:00.000Z", "Refactor parse_config"),
        task("m2", "m1", "2026-05-04T09:01:00.000Z", "msg_t1", "toolu_t1", shared),
        task("m3", "m2", "2026-05-04T09:01:02.000Z", "msg_t2", "toolu_t2", shared),
        _user(side, "s1", None, "2026-05-04T09:01:05.000Z", shared),
        _user(side, "s2", None, "2026-05-04T09:01:06.000Z", [{"type": "text", "text": shared}]),
        task("m4", "m3", "2026-05-04T09:02:00.000Z", "msg_t3", "toolu_t3", "List the config keys"),
        _user(side, "s3", None, "2026-05-04T09:02:01.000Z", "List the config keys"),
        step("s2a", "s2", "2026-05-04T09:03:06.000Z", "msg_s2a"),
        step("s1a", "s1", "2026-05-04T09:03:30.000Z", "msg_s1a"),
        step("s1b", "s1a", "2026-05-04T09:04:05.000Z", "msg_s1b"),
        step("s3a", "s3", "2026-05-04T09:07:01.000Z", "msg_s3a"),
        _user(side, "s4", None, "2026-05-04T09:08:00.000Z", "A prompt no Task gave"),
        step("s4a", "s4", "2026-05-04T09:08:30.000Z", "msg_s4a"),
        _assistant(main, "m5", "m4", "2026-05-04T09:09:00.000Z", "msg_m5", {"type": "text", "text": "Done."}),
    ]


def write_v1(root: Path) -> Path:
    project = root / "-work-old"
    project.mkdir(parents=True)
    path = project / f"{V1_SESSION}.jsonl"
    path.write_bytes(b"".join(v1_lines()))
    return path
