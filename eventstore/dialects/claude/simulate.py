"""Claude Code sessions that wrote a run's state versions, for ``evstore demo``
(:meth:`~eventstore.dialects.claude.dialect.ClaudeDialect.simulate_writers`).

Two sessions share the run: the first writes the first half of its state versions, the second
(a later session on the same task) the rest and starts a subagent (a 2.1.x ``subagents/`` file)
to review the state.  Each version is written by a ``Write`` of the version's exact bytes a few
seconds before it was recorded, after a prompt and a streamed assistant message (thinking, then
text, the output tokens growing line by line as Claude Code writes them), so the writers index
links every version to its tool call by content and ``evstore usage`` has tokens to count.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta
from typing import Any

from eventstore.dialects.base import StateVersion

# Models of the demo's time (its runs start in March 2025), so the package's prices apply.
MODELS = ("claude-3-7-sonnet-20250219", "claude-3-5-sonnet-20241022")
SUBAGENT_MODEL = "claude-3-5-haiku-20241022"
_PROMPTS = ("Continue the task: update the state file with your progress.",
            "Record the review outcome in the state file.",
            "Move the task to the next phase and write it down.",
            "The gate failed; fix it and update the state.")


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class _Session:
    def __init__(self, rng: random.Random, cwd: str, model: str, *, agent: str | None = None,
                 session: str | None = None) -> None:
        self.rng = rng
        self.id = session or str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self.agent = agent
        self.model = model
        self.base: dict[str, Any] = {"sessionId": self.id, "cwd": cwd, "version": "2.1.3", "userType": "external",
                                     "gitBranch": "main", "isSidechain": agent is not None}
        if agent:
            self.base["agentId"] = agent
        self.lines: list[bytes] = []
        self.parent: str | None = None
        self.n = 0

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _add(self, rec: dict[str, Any]) -> None:
        uid = self._uuid()
        self.lines.append(_line({**self.base, "uuid": uid, "parentUuid": self.parent, **rec}))
        self.parent = uid

    def user(self, at: datetime, content: Any, **extra: Any) -> None:
        self._add({"type": "user", "timestamp": _iso(at), "message": {"role": "user", "content": content}, **extra})

    def assistant(self, at: datetime, blocks: list[dict[str, Any]]) -> None:
        """One API message, a line per block; the output tokens so far on each line."""
        self.n += 1
        msg, req = f"msg_{self._uuid()[:18]}", f"req_{self._uuid()[:18]}"
        inp, cache_read = self.rng.randint(800, 4000), self.rng.randint(5000, 60000)
        cache_write = self.rng.randint(0, 3000)
        out = 0
        for i, block in enumerate(blocks):
            out += self.rng.randint(8, 400)
            self._add({"type": "assistant", "timestamp": _iso(at + timedelta(seconds=i)), "requestId": req,
                       "message": {"id": msg, "model": self.model, "role": "assistant", "type": "message",
                                   "content": [block],
                                   "usage": {"input_tokens": inp, "output_tokens": out,
                                             "cache_read_input_tokens": cache_read,
                                             "cache_creation_input_tokens": cache_write}}})


def sessions_for(rng: random.Random, versions: list[StateVersion]) -> dict[str, bytes]:
    """Transcript files (relative paths under a ``~/.claude/projects``) of the sessions that wrote
    ``versions`` (one run's, in order)."""
    if not versions:
        return {}
    cwd = f"/home/dev/{versions[0].path.split('/', 1)[0]}"  # a simulated checkout, on no real machine
    folder = "-" + cwd.strip("/").replace("/", "-")
    half = max(1, (len(versions) + 1) // 2)
    files: dict[str, bytes] = {}
    for part, chunk in enumerate((versions[:half], versions[half:])):
        if not chunk:
            continue
        s = _Session(rng, cwd, MODELS[part % len(MODELS)])
        first = chunk[0].at - timedelta(seconds=90)
        s.user(first, f"Work on {chunk[0].path.split('/', 1)[0]}: {_PROMPTS[part % len(_PROMPTS)]}")
        for i, v in enumerate(chunk):
            at = v.at - timedelta(seconds=40)
            if i and rng.random() < 0.4:
                s.user(at - timedelta(seconds=20), rng.choice(_PROMPTS))
            call = f"toolu_{s._uuid().replace('-', '')[:22]}"
            path = f"{cwd}/{v.path.split('/', 1)[-1]}"
            text = v.content.decode("utf-8", "replace")
            s.assistant(at, [{"type": "thinking", "thinking": "Update the state file to match the work done.",
                              "signature": "sig"},
                             {"type": "text", "text": f"Writing version {v.version} of the state."},
                             {"type": "tool_use", "id": call, "name": "Write",
                              "input": {"file_path": path, "content": text}}])
            s.user(at + timedelta(seconds=5), [{"type": "tool_result", "tool_use_id": call,
                                                "content": f"File written: {path}"}],
                   toolUseResult={"type": "update", "filePath": path, "content": text})
        if part == 1:  # the later session asks a subagent to review the state
            agent = f"{rng.getrandbits(64):016x}"
            call = f"toolu_{s._uuid().replace('-', '')[:22]}"
            at = chunk[-1].at + timedelta(seconds=10)
            prompt = "Review the state file and report anything inconsistent."
            s.assistant(at, [{"type": "tool_use", "id": call, "name": "Task",
                              "input": {"description": "review state", "prompt": prompt,
                                        "subagent_type": "reviewer"}}])
            sub = _Session(rng, cwd, SUBAGENT_MODEL, agent=agent, session=s.id)
            sub.user(at + timedelta(seconds=2), prompt)
            sub.assistant(at + timedelta(seconds=20), [{"type": "text", "text": "The state is consistent."}])
            s.user(at + timedelta(seconds=30), [{"type": "tool_result", "tool_use_id": call,
                                                 "content": [{"type": "text", "text": "The state is consistent."}]}],
                   toolUseResult={"agentId": agent, "status": "completed"})
            files[f"{folder}/{s.id}/subagents/agent-{agent}.jsonl"] = b"".join(sub.lines)
        s.assistant(chunk[-1].at + timedelta(seconds=45), [{"type": "text", "text": "Done for now."}])
        files[f"{folder}/{s.id}.jsonl"] = b"".join(s.lines)
    return files
