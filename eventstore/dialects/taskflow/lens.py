"""``apply`` and ``derive`` for the taskflow lifecycle document.

Each event replaces exactly the member :func:`~.lifecycle.lifecycle` would have computed, in
the same position, so a simulated or observed folder change is explained without residual:

* ``TaskCreated`` builds the document of an empty new folder (applies to ``None``);
* ``ArtifactWritten`` inserts at the artifact's lifecycle position, ``…Changed`` replaces in
  place, ``…Removed`` deletes;
* ``PhaseEntered`` / ``TaskStatusChanged`` / ``ModeSet`` set their fields;
* ``VerdictIssued`` / ``VerdictUnparseable`` / ``VerdictWithdrawn`` set ``verdict``;
* ``FollowUpTaskSpawned`` and ``SubtaskCreated`` insert in name order;
* ``AutopilotPaused`` / ``AutopilotResumed`` set ``paused``.

``derive`` is defensive: for a document that is not a lifecycle (mutated, foreign) it returns
what it can recognise and leaves the rest to the residual patch.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventstore import documents
from eventstore.dialects.taskflow import events as ev
from eventstore.dialects.taskflow.lifecycle import artifact_key, new_document, skipped_phases
from eventstore.events import Event

JSON = Any


def _items(items: list[ev.VerdictItem]) -> list[dict[str, str]]:
    return [{"issue": i.issue, "text": i.text} for i in items]


def _entry(size: int, sha256: str, content: str | None, content_b64: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"size": size, "sha256": sha256, "content": content}
    if content_b64 is not None:
        entry["content_b64"] = content_b64
    return entry


def _insert_sorted(mapping: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """``mapping`` with ``name`` placed before the first member that sorts after it."""
    out: dict[str, Any] = {}
    placed = False
    for k, v in mapping.items():
        if k == name:
            continue
        if not placed and artifact_key(k) > artifact_key(name):
            out[name] = value
            placed = True
        out[k] = v
    if not placed:
        out[name] = value
    return out


def _insert_by(items: list[Any], value: Any, key: str) -> None:
    for i, it in enumerate(items):
        if isinstance(it, dict) and isinstance(it.get(key), str) and it[key] > value[key]:
            items.insert(i, value)
            return
    items.append(value)


def apply(doc: JSON, event: Event) -> JSON:
    """Fold one taskflow domain event into ``doc`` (mutates and returns it)."""
    if isinstance(event, ev.TaskCreated):
        origin = None
        if event.kind is not None:
            origin = {"kind": event.kind, "parent": event.parent, "issue": event.issue,
                      "starts_at": event.starts_at, "copied": dict(event.copied)}
        return new_document(event.task, origin, event.mode, event.mode_source)
    if not isinstance(doc, dict):
        raise TypeError(f"{type(event).__name__} needs a lifecycle document, got {type(doc).__name__}")
    if isinstance(event, ev.ArtifactWritten):
        doc["artifacts"] = _insert_sorted(doc["artifacts"], event.name,
                                          _entry(event.size, event.sha256, event.content, event.content_b64))
    elif isinstance(event, ev.ArtifactChanged):
        if event.name not in doc["artifacts"]:
            raise KeyError(event.name)
        doc["artifacts"][event.name] = _entry(event.size, event.sha256, event.content, event.content_b64)
    elif isinstance(event, ev.ArtifactRemoved):
        del doc["artifacts"][event.name]
    elif isinstance(event, ev.PhaseEntered):
        doc["phase"] = event.phase
    elif isinstance(event, ev.TaskStatusChanged):
        doc["status"] = event.status
    elif isinstance(event, ev.ModeSet):
        doc["mode"] = event.mode
        doc["mode_source"] = event.source
    elif isinstance(event, ev.VerdictIssued):
        doc["verdict"] = {"value": event.verdict, "parsed_by": event.parsed_by, "line": event.line,
                          "sha256": event.sha256, "reason": None, "findings": _items(event.findings),
                          "remaining_issues": _items(event.remaining_issues),
                          "tie_breaks": _items(event.tie_breaks)}
    elif isinstance(event, ev.VerdictUnparseable):
        doc["verdict"] = {"value": "unparsed", "parsed_by": None, "line": None, "sha256": event.sha256,
                          "reason": event.reason, "findings": _items(event.findings),
                          "remaining_issues": _items(event.remaining_issues),
                          "tie_breaks": _items(event.tie_breaks)}
    elif isinstance(event, ev.VerdictWithdrawn):
        doc["verdict"] = None
    elif isinstance(event, ev.FollowUpTaskSpawned):
        _insert_by(doc["follow_ups"], {"kind": event.kind, "task": event.task, "issue": event.issue,
                                       "starts_at": event.starts_at, "files": list(event.files)}, "task")
    elif isinstance(event, ev.AutopilotPaused):
        doc["paused"] = {"reason": event.reason, "verdict": event.verdict, "pending": list(event.pending)}
    elif isinstance(event, ev.AutopilotResumed):
        doc["paused"] = None
    elif isinstance(event, ev.SubtaskCreated):
        subs = doc["subtasks"]
        at = next((i for i, s in enumerate(subs) if isinstance(s, str) and s > event.task), len(subs))
        subs.insert(at, event.task)
    else:
        raise TypeError(f'Dialect "taskflow" cannot apply {type(event).__name__}')
    return doc


# ------------------------------------------------------------------ derive


def task_created(doc: JSON) -> ev.TaskCreated | None:
    """The ``TaskCreated`` that starts ``doc``'s stream, if ``doc`` looks like a lifecycle."""
    if not isinstance(doc, dict) or not isinstance(doc.get("task"), str):
        return None
    origin = doc.get("origin")
    mode, source = doc.get("mode"), doc.get("mode_source")
    kw: dict[str, Any] = {"task": doc["task"]}
    if isinstance(mode, str) and isinstance(source, str):
        kw.update(mode=mode, mode_source=source)
    if isinstance(origin, dict):
        try:
            return msgspec.convert({**kw, **{k: origin[k] for k in ("kind", "parent", "issue", "starts_at", "copied")
                                            if k in origin}}, ev.TaskCreated)
        except msgspec.ValidationError:
            return ev.TaskCreated(**kw)
    return ev.TaskCreated(**kw)


def _verdict_items(raw: Any) -> list[ev.VerdictItem]:
    return msgspec.convert(raw if isinstance(raw, list) else [], list[ev.VerdictItem])


def _artifact_events(prev: Any, nxt: Any) -> list[Event]:
    if not isinstance(prev, dict) or not isinstance(nxt, dict):
        return []
    out: list[Event] = []
    for name, old in prev.items():
        if name not in nxt:
            sha = old.get("sha256") if isinstance(old, dict) else None
            out.append(ev.ArtifactRemoved(name=name, previous_sha256=sha if isinstance(sha, str) else ""))
    for name, new in nxt.items():
        if not isinstance(new, dict):
            continue
        old = prev.get(name)
        if old is not None and documents.same(old, new):
            continue
        try:
            fields = {"name": name, "size": new["size"], "sha256": new["sha256"], "content": new["content"],
                      "content_b64": new.get("content_b64")}
            if name in prev:
                prev_sha = old.get("sha256") if isinstance(old, dict) else None
                fields["previous_sha256"] = prev_sha if isinstance(prev_sha, str) else ""
                out.append(msgspec.convert(fields, ev.ArtifactChanged))
            else:
                out.append(msgspec.convert(fields, ev.ArtifactWritten))
        except (KeyError, msgspec.ValidationError):
            continue  # not an artifact entry: left to the residual patch
    return out


def _verdict_events(prev: Any, nxt: Any) -> list[Event]:
    if documents.same(prev, nxt):
        return []
    if nxt is None:
        return [ev.VerdictWithdrawn(previous=prev.get("value") if isinstance(prev, dict) else None)]
    if not isinstance(nxt, dict):
        return []
    try:
        lists = {k: _verdict_items(nxt.get(k)) for k in ("findings", "remaining_issues", "tie_breaks")}
        if nxt.get("value") == "unparsed":
            return [ev.VerdictUnparseable(sha256=nxt["sha256"], reason=nxt["reason"], **lists)]
        return [ev.VerdictIssued(verdict=nxt["value"], parsed_by=nxt["parsed_by"], line=nxt["line"],
                                 sha256=nxt["sha256"], **lists)]
    except (KeyError, TypeError, msgspec.ValidationError):
        return []


def derive(prev: JSON, nxt: JSON) -> list[Event]:
    """Domain events explaining ``prev -> nxt`` (in causal order)."""
    if not isinstance(prev, dict) or not isinstance(nxt, dict) or prev.get("task") != nxt.get("task"):
        return []
    out: list[Event] = []
    if (prev.get("mode"), prev.get("mode_source")) != (nxt.get("mode"), nxt.get("mode_source")) \
            and isinstance(nxt.get("mode"), str) and isinstance(nxt.get("mode_source"), str):
        out.append(ev.ModeSet(mode=nxt["mode"], source=nxt["mode_source"]))
    out += _artifact_events(prev.get("artifacts"), nxt.get("artifacts"))
    if "verdict" in prev and "verdict" in nxt:
        out += _verdict_events(prev["verdict"], nxt["verdict"])
    if prev.get("phase") != nxt.get("phase") and isinstance(nxt.get("phase"), str):
        before = set(skipped_phases(prev.get("artifacts"), prev.get("origin")))
        skipped = [p for p in skipped_phases(nxt.get("artifacts"), nxt.get("origin")) if p not in before]
        old = prev.get("phase")
        out.append(ev.PhaseEntered(phase=nxt["phase"], previous=old if isinstance(old, str) else None,
                                   skipped=skipped))
    if prev.get("status") != nxt.get("status") and isinstance(nxt.get("status"), str):
        old = prev.get("status")
        out.append(ev.TaskStatusChanged(status=nxt["status"], previous=old if isinstance(old, str) else None))
    out += _follow_up_events(prev, nxt)
    out += _pause_events(prev.get("paused"), nxt.get("paused"))
    pa, na = prev.get("subtasks"), nxt.get("subtasks")
    if isinstance(pa, list) and isinstance(na, list):
        for name in na:
            if isinstance(name, str) and name not in pa:
                out.append(ev.SubtaskCreated(task=name, parent=nxt["task"]))
    return out


def _follow_up_events(prev: dict[str, Any], nxt: dict[str, Any]) -> list[Event]:
    pf, nf = prev.get("follow_ups"), nxt.get("follow_ups")
    if not isinstance(pf, list) or not isinstance(nf, list):
        return []
    known = {f.get("task") for f in pf if isinstance(f, dict)}
    out: list[Event] = []
    for f in nf:
        if isinstance(f, dict) and f.get("task") not in known:
            try:
                out.append(msgspec.convert({**f, "parent": nxt.get("task")}, ev.FollowUpTaskSpawned))
            except msgspec.ValidationError:
                continue
    return out


def _pause_events(prev: Any, nxt: Any) -> list[Event]:
    if documents.same(prev, nxt):
        return []
    if nxt is None:
        return [ev.AutopilotResumed(previous_verdict=prev.get("verdict") if isinstance(prev, dict) else None)]
    try:
        return [msgspec.convert(nxt, ev.AutopilotPaused)]
    except msgspec.ValidationError:
        return []


__all__ = ["apply", "derive", "task_created"]
