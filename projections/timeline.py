"""What happened to a task, in order: its state versions, the turns of the agent sessions that wrote
them, their hook calls and the git commits its versions came from, interleaved by time
(``evstore log TASK --timeline``, the run page of ``evstore serve``); and a session's conversation
with its subagents' turns nested under the call that started them (the session page).

Each state version carries the RFC 6902 diff from the version before and the tool call that wrote
it (:mod:`projections.writers`).  A session's line says what the line holds, in the dialect's words
(:meth:`~eventstore.dialects.base.Dialect.search_text`: a prompt, assistant text, a tool call and
its input, a tool's output, a hook call).

    >>> for item in task_timeline(store, "PROJ-42"):
    ...     print(item.at, item.kind, item.text)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from eventstore import codec, documents
from eventstore.dialects import available, get_dialect
from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent
from projections import writers
from projections.replay import dialect_of

#: Characters of a turn's text shown (the whole line is one click away).
TEXT_CHARS = 300
#: State versions whose diff is computed (a longer run shows the first ones' diffs).
MAX_DIFFS = 500


@functools.cache
def _session_kinds() -> dict[str, str]:
    """Every registered dialect's session event types and what each is in a timeline
    (``Dialect.session_kinds``)."""
    return {t: k for name in available() for t, k in get_dialect(name).session_kinds.items()}


@dataclass
class Item:
    """One thing that happened: ``kind`` is ``state``, ``commit``, ``event`` (a run's own event that
    is no state version), or a session's ``prompt``, ``assistant``, ``tool_use``, ``tool_result``,
    ``hook``, ``subagent``; ``depth`` 1 for a subagent's turns."""

    at: str | None
    kind: str
    stream: str
    version: int
    text: str
    lineno: int | None = None
    session: str | None = None
    depth: int = 0
    tool_use_id: str | None = None
    diff: list[dict[str, Any]] | None = None
    written_by: dict[str, Any] | None = None
    children: list[Item] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at": self.at, "kind": self.kind, "stream": self.stream, "version": self.version, "line": self.lineno,
               "session": self.session, "depth": self.depth, "text": self.text}
        if self.tool_use_id:
            out["tool_use_id"] = self.tool_use_id
        if self.diff is not None:
            out["diff"] = self.diff
        if self.written_by is not None:
            out["written_by"] = self.written_by
        if self.children:
            out["children"] = [c.to_dict() for c in self.children]
        return out


def _short(text: str, chars: int = TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[:chars - 1] + "…"


def _time(rec: RecordedEvent) -> str:
    from projections.search import _utc

    return _utc(rec.occurred_at or rec.recorded_at)


def session_items(store: EventStore, stream_id: str, *, depth: int = 0) -> list[Item]:
    """A transcript stream's turns (prompts, assistant text, tool calls and results, hook calls,
    subagent links), in line order."""
    d = dialect_of(store, stream_id)
    session = stream_id.split("/", 1)[0]
    out = []
    for rec in store.read_stream(stream_id):
        kind = _session_kinds().get(rec.type)
        if kind is None:
            continue
        if rec.erased:  # the turn happened; its content was purged or erased (`evstore log` says when, why)
            out.append(Item(at=_time(rec), kind=kind, stream=stream_id, version=rec.version,
                            text="(content purged or erased)", session=session, depth=depth))
            continue
        payload = rec.payload
        if kind == "subagent":
            event = rec.to_event()
            text = d.summarize(event)
        else:
            _, text = d.search_text(rec.type, rec.data, blob=store.read_blob)
            if kind == "tool_result" and payload.get("is_error"):
                text = "ERROR " + text
        side = payload.get("sidechain") if isinstance(payload, dict) else None
        out.append(Item(at=_time(rec), kind=kind, stream=stream_id, version=rec.version,
                        text=_short(text), lineno=payload.get("lineno") if isinstance(payload, dict) else None,
                        session=session, depth=depth + (1 if side else 0),
                        tool_use_id=payload.get("tool_use_id") if isinstance(payload, dict) else None))
    return out


def _subagent_streams(store: EventStore, session: str) -> list[str]:
    return [s.stream_id for s in store.list_streams() if s.stream_id.startswith(session + "/")]


def state_items(store: EventStore, stream_id: str) -> list[Item]:
    """A run's state versions (each with its diff from the version before and who wrote it), the git
    commits they came from, and its events that are not state versions."""
    d = dialect_of(store, stream_id)
    found = {v["version"]: v for v in writers.state_versions(store, stream_id)}
    out: list[Item] = []
    doc: Any = None
    before: Any = None
    diffs = 0
    for rec in store.read_stream(stream_id):
        try:
            doc = d.evolve(doc, rec.to_event())
        except EvstoreError:
            doc = None
        meta = rec.metadata if rec.meta != b"{}" else {}
        git = (meta.get("source") or {}).get("git") if isinstance(meta, dict) else None
        if isinstance(git, dict) and git.get("commit"):
            who = (git.get("author") or {}).get("name") or "?"
            out.append(Item(at=_git_time(git) or _time(rec), kind="commit", stream=stream_id, version=rec.version,
                            text=f"commit {str(git['commit'])[:12]} by {who}"))
        version = found.get(rec.version)
        if version is None:
            if not found:  # not ingested from state files: every event is a step of its own
                event_text = d.summarize(rec.to_event()) if rec.type.split(".", 1)[0] in (d.name, "document") \
                    else rec.data.decode("utf-8", "replace")
                out.append(Item(at=_time(rec), kind="event", stream=stream_id, version=rec.version,
                                text=_short(f"{rec.type}: {event_text}")))
            continue
        snapshot = codec.decode(codec.encode(doc))  # documents change in place as later events fold in
        ops = documents.diff(before, snapshot) if diffs < MAX_DIFFS else None
        diffs += 1
        writer = version.get("written_by")
        by = f" by {writer['tool_name'] or 'a tool call'} {writer['tool_use_id'] or ''} in session " \
             f"{writer['session_id']}" if writer else ""
        out.append(Item(at=_time(rec), kind="state", stream=stream_id, version=rec.version,
                        text=f"state version {rec.version}: {len(ops) if ops is not None else '?'} change(s){by}",
                        diff=ops, written_by=writer, session=writer["session_id"] if writer else None))
        before = snapshot
    return out


def _git_time(git: dict[str, Any]) -> str | None:
    from projections.search import _utc

    committer = git.get("committer")
    at = committer.get("time") if isinstance(committer, dict) else None
    return _utc(at) if isinstance(at, str) else None


def task_timeline(store: EventStore, stream_id: str) -> list[Item]:
    """Everything that happened to ``stream_id`` (a run), interleaved by time: its state versions and
    commits, and the turns and hook calls of the sessions that wrote it (their subagents' included,
    one level deeper)."""
    items = state_items(store, stream_id)
    sessions = writers.run_sessions(store, [stream_id]).get(stream_id, [])
    for session in sessions:
        if store.stream_info(session) is not None:
            items += session_items(store, session)
        for sub in _subagent_streams(store, session):
            items += session_items(store, sub, depth=1)
    order = {"commit": 0, "state": 2}
    # by time; at one instant a commit before its state version, a tool call before the version it wrote
    items.sort(key=lambda i: (i.at or "", order.get(i.kind, 1)))
    return items


def conversation(store: EventStore, session_stream: str) -> list[Item]:
    """A session's turns in order, each subagent's turns nested under the tool call that started it
    (``children``): a 2.x subagent's own stream, a 1.0.x inline sidechain's lines."""
    items = session_items(store, session_stream)
    links: dict[str, tuple[str | None, str]] = {}  # tool_use_id -> (subagent stream, sidechain root)
    for rec in store.read_stream(session_stream):
        if _session_kinds().get(rec.type) == "subagent":
            p = rec.payload
            if isinstance(p, dict) and p.get("tool_use_id"):
                links[p["tool_use_id"]] = (p.get("stream"), p.get("agent") or "")
    sidechains: dict[str, list[Item]] = {}
    main: list[Item] = []
    for payload, item in zip(_session_records(store, session_stream), items, strict=True):
        side = payload.get("sidechain")
        if side:
            sidechains.setdefault(side, []).append(item)
        else:
            main.append(item)
    for item in main:
        if item.kind == "tool_use" and item.tool_use_id in links:
            sub, root = links[item.tool_use_id]
            if sub and store.stream_info(sub) is not None:
                item.children = session_items(store, sub, depth=1)
            elif root in sidechains:
                item.children = sidechains.pop(root)
    return main


def _session_records(store: EventStore, stream_id: str) -> list[dict[str, Any]]:
    """The payload of each event :func:`session_items` made an item of, in the same order."""
    out = []
    for rec in store.read_stream(stream_id):
        if rec.type in _session_kinds():
            p = rec.payload
            out.append(p if isinstance(p, dict) else {})
    return out


def is_session(store: EventStore, stream_id: str) -> bool:
    """Whether ``stream_id`` is an agent session's transcript (its dialect records file writes)."""
    try:
        return bool(get_dialect(dialect_of(store, stream_id).name).file_write_types)
    except EvstoreError:
        return False


__all__ = ["Item", "conversation", "is_session", "session_items", "state_items", "task_timeline"]
