"""Claude Code transcripts for usage counting, shaped as Claude Code 1.0.x-2.1.x writes them.

* streamed messages: one line per content block (thinking, text, tool_use), each line with the
  message's usage so far, so the output tokens grow from line to line and only the last is final;
* a resumed session whose file starts by repeating two messages of the first (same message and
  request ids): counted once;
* every subagent layout: an inline 1.0.x sidechain, a 2.0.x sibling ``agent-<id>.jsonl`` naming its
  session in ``sessionId``, a 2.1.x ``<session>/subagents/agent-<id>.jsonl``;
* a model no price table names, and Claude Code's own ``<synthetic>`` message (no tokens);
* one message whose cache writes are split into 5-minute and 1-hour ones (``usage.cache_creation``).

``write(root)`` lays them out as ``~/.claude/projects`` does and returns the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

S1 = "11111111-aaaa-4bbb-8ccc-000000000001"
S2 = "11111111-aaaa-4bbb-8ccc-000000000002"  # resumes S1
S3 = "11111111-aaaa-4bbb-8ccc-000000000003"  # 1.0.x, inline sidechain
A_SIB = "0aa11bb2"  # S1's 2.0.x sibling subagent file
A_SUB = "0cc33dd4"  # S2's 2.1.x subagents/ file


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, separators=(",", ":")) + "\n").encode()


def _t(minute: int, second: int = 0, day: int = 5) -> str:
    return f"2025-11-{day:02d}T10:{minute:02d}:{second:02d}.000Z"


def _base(session: str, **extra: Any) -> dict[str, Any]:
    return {"sessionId": session, "cwd": "/work/shop", "version": "2.1.3", "userType": "external",
            "isSidechain": False, **extra}


def _streamed(base: dict[str, Any], msg: str, req: str, model: str, at: int, blocks: list[dict[str, Any]],
              inp: int, outs: list[int], cache_read: int = 0, cache_write: int = 0, parent: str | None = None,
              day: int = 5, split: tuple[int, int] | None = None) -> list[bytes]:
    """One API message as Claude Code streams it: a line per block, output tokens so far on each;
    ``split``: its cache writes as (5-minute, 1-hour) in ``usage.cache_creation``, as 1.0.8x on writes it."""
    lines = []
    for i, (block, out) in enumerate(zip(blocks, outs, strict=True)):
        uuid = f"{msg}-{i}"
        usage: dict[str, Any] = {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": cache_read,
                                 "cache_creation_input_tokens": cache_write}
        if split is not None:
            usage["cache_creation"] = {"ephemeral_5m_input_tokens": split[0], "ephemeral_1h_input_tokens": split[1]}
        lines.append(_line({**base, "type": "assistant", "uuid": uuid, "parentUuid": parent,
                            "timestamp": _t(at, i, day), "requestId": req,
                            "message": {"id": msg, "model": model, "role": "assistant", "type": "message",
                                        "content": [block], "usage": usage}}))
        parent = uuid
    return lines


def _user(base: dict[str, Any], uuid: str, at: int, content: Any, parent: str | None = None, day: int = 5,
          **extra: Any) -> bytes:
    return _line({**base, "type": "user", "uuid": uuid, "parentUuid": parent, "timestamp": _t(at, 0, day),
                  "message": {"role": "user", "content": content}, **extra})


_THINK = {"type": "thinking", "thinking": "Plan the change.", "signature": "sig"}
_TEXT = {"type": "text", "text": "Done with this step."}


def _tool(tid: str, name: str, **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp}


def session1() -> list[bytes]:
    b = _base(S1)
    return [
        _user(b, "u1", 0, "Add a discount field to the checkout"),
        *_streamed(b, "msg_a1", "req_a1", "claude-sonnet-4-5-20250929", 1, [_THINK, _TEXT, _tool("t1", "Read",
                   file_path="/work/shop/checkout.py")], 2400, [3, 41, 118], cache_read=9000, cache_write=1200),
        _user(b, "u2", 2, [{"type": "tool_result", "tool_use_id": "t1", "content": "def checkout(): ..."}]),
        *_streamed(b, "msg_a2", "req_a2", "claude-sonnet-4-5-20250929", 3,
                   [_tool("t2", "Task", description="review", prompt="Review checkout.py", subagent_type="reviewer")],
                   2600, [77], cache_read=10400, cache_write=300),
        _user(b, "u3", 5, [{"type": "tool_result", "tool_use_id": "t2", "content": "agentId: " + A_SIB}]),
        # cache writes split by lifetime: 100 for 5 minutes, 150 for an hour (of the 250 in all)
        *_streamed(b, "msg_a3", "req_a3", "claude-sonnet-4-5-20250929", 6, [_THINK, _TEXT], 2900, [2, 230],
                   cache_read=10700, cache_write=250, split=(100, 150)),
        # Claude Code's own message after an interruption: no API call.
        _line({**b, "type": "assistant", "uuid": "syn", "parentUuid": None, "timestamp": _t(7),
               "message": {"id": "msg_syn", "model": "<synthetic>", "role": "assistant", "type": "message",
                           "content": [{"type": "text", "text": "No response requested."}],
                           "usage": {"input_tokens": 0, "output_tokens": 0}}}),
    ]


def sibling_agent() -> list[bytes]:
    b = {**_base(S1), "isSidechain": True, "agentId": A_SIB}
    return [
        _user(b, "x1", 3, "Review checkout.py"),
        *_streamed(b, "msg_x1", "req_x1", "claude-haiku-4-5-20251001", 4, [_THINK, _TEXT], 1500, [5, 96],
                   cache_read=4000, cache_write=900, parent="x1"),
    ]


def session2() -> list[bytes]:
    """Resumes S1 the next day: its file starts with two of S1's messages, as written there."""
    b = _base(S2)
    repeated = [line for line in session1()[:5] if b'"msg_a1"' in line]
    return [
        *repeated,
        _user(b, "v1", 0, "Now add tests for the discount", day=6),
        *_streamed(b, "msg_b1", "req_b1", "claude-opus-4-1-20250805", 1, [_TEXT, _tool("t9", "Agent",
                   description="tests", prompt="Write tests", subagent_type="tester")], 5200, [12, 64],
                   cache_read=0, cache_write=5200, day=6),
        _user(b, "v2", 4, [{"type": "tool_result", "tool_use_id": "t9", "content": "done"}], day=6,
              toolUseResult={"agentId": A_SUB, "status": "completed"}),
        *_streamed(b, "msg_b2", "req_b2", "claude-experimental-9", 5, [_TEXT], 700, [33], day=6),
    ]


def subagent2() -> list[bytes]:
    b = {**_base(S2), "isSidechain": True, "agentId": A_SUB}
    return [
        _user(b, "y1", 2, "Write tests", day=6),
        *_streamed(b, "msg_y1", "req_y1", "claude-sonnet-4-5-20250929", 2, [_THINK, _tool("t10", "Write",
                   file_path="/work/shop/test_checkout.py", content="def test(): pass\n")], 3100, [9, 410],
                   cache_read=2000, cache_write=1000, parent="y1", day=6),
        *_streamed(b, "msg_y2", "req_y2", "claude-sonnet-4-5-20250929", 3, [_TEXT], 3500, [58],
                   cache_read=5100, parent="msg_y1-1", day=6),
    ]


def session3() -> list[bytes]:
    """1.0.x: a subagent inline, as a sidechain of the session's own file."""
    b = {**_base(S3), "version": "1.0.51"}
    side = {**b, "isSidechain": True}
    return [
        _user(b, "w1", 10, "Rename the module"),
        *_streamed(b, "msg_c1", "req_c1", "claude-sonnet-4-20250514", 11,
                   [_tool("t20", "Task", description="find uses", prompt="Find every import of shop.old")],
                   1800, [40], cache_read=500),
        _user(side, "sc1", 12, "Find every import of shop.old"),
        *_streamed(side, "msg_s1", "req_s1", "claude-sonnet-4-20250514", 12, [_THINK, _TEXT], 900, [4, 51],
                   parent="sc1"),
        _user(b, "w2", 14, [{"type": "tool_result", "tool_use_id": "t20", "content": "3 files"}]),
        *_streamed(b, "msg_c2", "req_c2", "claude-sonnet-4-20250514", 15, [_TEXT], 2100, [88], cache_read=1800),
    ]


def write(root: Path) -> dict[str, Path]:
    """The transcripts under ``root`` (a ``~/.claude/projects``), by name."""
    folder = root / "-work-shop"
    files = {
        "s1": folder / f"{S1}.jsonl", "sib": folder / f"agent-{A_SIB}.jsonl", "s2": folder / f"{S2}.jsonl",
        "sub2": folder / S2 / "subagents" / f"agent-{A_SUB}.jsonl", "s3": folder / f"{S3}.jsonl",
    }
    content = {"s1": session1(), "sib": sibling_agent(), "s2": session2(), "sub2": subagent2(), "s3": session3()}
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(content[name]))
    return files
