"""Subagents linked to the Task tool use that started them, recorded as ``claude.subagent_linked``.

Two formats, two kinds of evidence:

* 2.x keeps a subagent in its own file, ``<session>/subagents/agent-<id>.jsonl`` (2.0.x: a
  sibling ``agent-<id>.jsonl`` whose lines name the session), every line carrying ``agentId``.
  The parent's ``tool_result`` for the Task (``Agent`` since 2.1.x) tool use carries the same id
  in ``toolUseResult.agentId`` (older: ``agentId: <id>`` in the result text).  The link is
  recorded in the parent's stream when that line is ingested: it names the subagent's stream.
* 1.0.x keeps subagents inline in the main file: a sidechain starts with a user line with
  ``isSidechain: true`` and ``parentUuid: null`` whose prompt is the Task's ``input.prompt``;
  its other lines chain to it through ``parentUuid``.  Each sidechain is linked to the Task tool
  use with that prompt nearest before it in time not linked yet (parallel Tasks may share a
  prompt), and every sidechain line names its sidechain (``sidechain``: the first line's uuid),
  which gives the subagent's duration.

Links are new events after the evidence; nothing recorded before is rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from eventstore.dialects.claude import events as ev

#: Tool names that start a subagent (``Task``, renamed ``Agent`` in Claude Code 2.1.x).
TASK_TOOLS = frozenset({"Task", "Agent"})
_AGENT_IN_TEXT = re.compile(r"agentId:\s*([A-Za-z0-9_-]+)")


def user_text(message: Any) -> str | None:
    """The text of a user message: its string content, or its text blocks joined."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        return "".join(texts) if texts else None
    return None


def _result_agent(rec: dict[str, Any], block: dict[str, Any]) -> str | None:
    result = rec.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("agentId"), str) and result["agentId"]:
        return str(result["agentId"])
    content = block.get("content")
    texts = [content] if isinstance(content, str) else [
        b.get("text") for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    for text in texts:
        if isinstance(text, str):
            m = _AGENT_IN_TEXT.search(text)
            if m:
                return m.group(1)
    return None


class Linker:
    """Follows one transcript's lines in order; says which sidechain a line belongs to and which
    subagent links the line establishes.

    ``stream``: the transcript's stream id (``<session>`` or ``<session>/agent-<id>``);
    ``earlier``: a callable giving the lines recorded before this ingest, read only when a line
    refers to one of them (an incremental ingest)."""

    def __init__(self, stream: str, *, subagent: bool, earlier: Callable[[], Iterable[bytes]] | None = None) -> None:
        self.session = stream.split("/", 1)[0]
        self.subagent = subagent
        self._earlier = earlier
        self.primed = earlier is None
        # Task tool uses seen: tool_use_id -> (prompt, timestamp, lineno, description, subagent_type)
        self.tasks: dict[str, tuple[str | None, str | None, int, str | None, str | None]] = {}
        self.claimed: set[str] = set()  # Task tool uses linked already
        self.roots: dict[str, str] = {}  # sidechain line uuid -> its sidechain's first line uuid

    def _prime(self) -> None:
        """Replay the earlier lines' Task uses, sidechains and claims (nothing is emitted)."""
        self.primed = True
        if self._earlier is None:
            return
        lines = self._earlier()
        new_tasks, new_claimed, new_roots = self.tasks, self.claimed, self.roots
        self.tasks, self.claimed, self.roots = {}, set(), {}
        for lineno, raw in enumerate(lines, 1):
            try:
                rec = msgspec.json.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                continue
            if isinstance(rec, dict):
                self._observe(rec, lineno)
        self.tasks.update(new_tasks)
        self.claimed |= new_claimed
        self.roots.update(new_roots)

    def observe(self, rec: Any, lineno: int) -> tuple[str | None, list[ev.SubagentLinked]]:
        """(the sidechain this line is part of, the links it establishes)."""
        if not isinstance(rec, dict):
            return None, []
        return self._observe(rec, lineno)

    def _observe(self, rec: dict[str, Any], lineno: int) -> tuple[str | None, list[ev.SubagentLinked]]:
        kind = rec.get("type")
        message = rec.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        links: list[ev.SubagentLinked] = []
        if kind == "assistant" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in TASK_TOOLS \
                        and isinstance(block.get("id"), str):
                    inp: dict[str, Any] = block["input"] if isinstance(block.get("input"), dict) else {}
                    self.tasks[block["id"]] = (_str(inp.get("prompt")), _str(rec.get("timestamp")), lineno,
                                               _str(inp.get("description")), _str(inp.get("subagent_type")))
        elif kind == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tool_use_id = _str(block.get("tool_use_id"))
                    agent = _result_agent(rec, block)
                    if agent and tool_use_id and not self.subagent:
                        task = self.tasks.get(tool_use_id)
                        self.claimed.add(tool_use_id)
                        links.append(ev.SubagentLinked(
                            agent=agent, by="agent_id", lineno=lineno, tool_use_id=tool_use_id,
                            stream=f"{self.session}/agent-{agent}", task_lineno=task[2] if task else None,
                            description=task[3] if task else None, subagent_type=task[4] if task else None))
        sidechain = None
        if rec.get("isSidechain") is True and not self.subagent:
            uuid, parent = _str(rec.get("uuid")), _str(rec.get("parentUuid"))
            if parent is None and kind == "user" and uuid:
                sidechain = uuid
                link = self._link_inline(uuid, user_text(message), _str(rec.get("timestamp")), lineno)
                if link is not None:
                    links.append(link)
            elif parent is not None:
                sidechain = self.roots.get(parent)
                if sidechain is None and not self.primed:
                    self._prime()
                    sidechain = self.roots.get(parent)
            if uuid and sidechain:
                self.roots[uuid] = sidechain
        return sidechain, links

    def _link_inline(self, root: str, prompt: str | None, at: str | None, lineno: int) -> ev.SubagentLinked | None:
        if prompt is None:
            return None
        best = self._best_task(prompt, at)
        if best is None and not self.primed:
            self._prime()
            best = self._best_task(prompt, at)
        if best is None:
            return None
        self.claimed.add(best)
        _, _, task_lineno, description, subagent_type = self.tasks[best]
        return ev.SubagentLinked(agent=root, by="prompt", lineno=lineno, tool_use_id=best, stream=None,
                                 task_lineno=task_lineno, description=description, subagent_type=subagent_type,
                                 started_at=at)

    def _best_task(self, prompt: str, at: str | None) -> str | None:
        """The unclaimed Task use with this prompt nearest before ``at`` (file order breaks ties)."""
        best: tuple[str, int] | None = None
        found = None
        for tool_use_id, (task_prompt, task_at, task_line, _, _) in self.tasks.items():
            if task_prompt != prompt or tool_use_id in self.claimed:
                continue
            if at is not None and task_at is not None and task_at > at:
                continue
            key = (task_at or "", task_line)
            if best is None or key > best:
                best, found = key, tool_use_id
        return found


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


__all__ = ["Linker", "TASK_TOOLS", "user_text"]
