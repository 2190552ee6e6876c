"""The lifecycle document of one task folder, computed from folder contents alone.

A *tree* is the contents of a ``tasks/`` directory: ``{rel: {filename: bytes}}`` where ``rel``
is a task folder's path relative to ``tasks/`` (``"add-auth"``, ``"add-auth/sub-a"`` for a
sub-task) and ``""`` holds the files directly in ``tasks/`` (only marker files matter there).
:func:`lifecycle` is a pure function of ``(tree, rel)``; :func:`read_tree` builds a tree from
disk and the simulator builds one in memory, so both produce identical documents.

The document (keys always present, in this order)::

    {
      "task": "add-user-auth",                 # folder name
      "origin": null | {"kind": "fix"|"review"|"tiebreak"|"subtask",
                        "parent": "add-user-auth", "issue": "null-handling"|null,
                        "starts_at": "bug_find", "copied": {"SPEC.md": "<parent sha256>", ...}},
      "mode": "manual" | "autopilot",
      "mode_source": "default" | ".autopilot" | "../.autopilot" | ".manual" | ...,
      "phase": one of PHASES,                 # the phase the orchestrator is in / proposes next
      "status": one of STATUSES,
      "artifacts": {"SPEC.md": {"size": 812, "sha256": "…", "content": "# Spec…"}, ...},
      "verdict": null | {"value": "PASS"|"FAIL"|"NEEDS_REVIEW"|"unparsed", "parsed_by": rule|null,
                         "line": int|null, "sha256": "…", "reason": str|null,
                         "findings": [{"issue", "text"}], "remaining_issues": [...],
                         "tie_breaks": [...]},
      "follow_ups": [{"kind", "task", "issue", "starts_at", "files"}],   # by task name
      "paused": null | {"reason": "human intervention required", "verdict": "FAIL",
                        "pending": ["add-user-auth-fix-null-handling", ...]},
      "subtasks": ["sub-a", ...]
    }

Rules (from seeds/agent-framework-workflow.md, decisions marked *):

* Artifacts are the non-hidden regular files of the folder, ordered SPEC.md … VERDICT.md then
  by name.  ``content`` is the UTF-8 text (``null`` plus ``content_b64`` for other bytes).
* A phase is complete only if its artifact exists and is non-blank (*whitespace-only counts
  as empty).  ``phase`` is the phase after the furthest complete one; optional phases
  (decomposition, design, test_design) are proposed only once their file exists (*an empty
  file of a phase after the furthest complete one and up to the proposed one marks its phase
  as in progress: an empty DESIGN.md right after SPEC.md means "design").
  After VERDICT.md: ``complete`` on PASS, else ``review`` (request user intervention).
* *Mode: a ``.manual`` or ``.autopilot`` marker file in the task folder, else in the nearest
  enclosing folder (``tasks/``, or the decomposed parent), else manual.
* Follow-ups: a sibling folder ``{task}-{fix|review|tiebreak}-{issue}`` is a follow-up of
  ``task`` (*the longest existing sibling name wins, so ``a-fix-x-fix-y`` belongs to
  ``a-fix-x``).  Files the orchestrator copies (SPEC.md, BUG_REPORT.md,
  ADVERSARIAL_BUG_REPORT.md) that are still byte-identical to the parent's are *inherited*:
  they do not complete a phase of the follow-up, which starts at ``starts_at``.
* Sub-folders of a task folder are sub-tasks (``origin.kind == "subtask"``).
* Autopilot + FAIL / NEEDS_REVIEW / tie-breaks: ``paused`` records the follow-ups manual mode
  would create; no follow-up is expected.  Unparseable VERDICT.md: ``verdict.value ==
  "unparsed"``, status ``unparsed``, never a PASS.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventstore import reading
from eventstore.dialects.taskflow.verdict import parse_verdict
from eventstore.errors import IngestError

JSON = Any
Tree = dict[str, dict[str, bytes]]

PHASES = ("research", "decomposition", "subtask_research", "design", "test_design", "implement",
          "bug_find", "adversarial_bug_find", "doc_review", "referee", "review", "complete")
ARTIFACT_OF = {
    "research": "SPEC.md",
    "decomposition": "DECOMPOSITION.md",
    "design": "DESIGN.md",
    "test_design": "TEST_PLAN.md",
    "implement": "IMPLEMENTATION.md",
    "bug_find": "BUG_REPORT.md",
    "adversarial_bug_find": "ADVERSARIAL_BUG_REPORT.md",
    "doc_review": "DOC_REVIEW.md",
    "referee": "VERDICT.md",
}
PHASE_OF = {a: p for p, a in ARTIFACT_OF.items()}
NEXT_PHASE = {
    "research": "implement",
    "decomposition": "subtask_research",
    "design": "implement",
    "test_design": "implement",
    "implement": "bug_find",
    "bug_find": "adversarial_bug_find",
    "adversarial_bug_find": "doc_review",
    "doc_review": "referee",
}
MANDATORY = ("research", "implement", "bug_find", "adversarial_bug_find", "doc_review", "referee")
COPIED_FILES = ("SPEC.md", "BUG_REPORT.md", "ADVERSARIAL_BUG_REPORT.md")
FOLLOW_UP_KINDS = ("fix", "review", "tiebreak")
STARTS_AT = {"fix": "bug_find", "review": "bug_find", "tiebreak": "research", "subtask": "research"}
STATUSES = ("active", "complete", "failed", "needs_review", "paused", "unparsed")
MODES = ("manual", "autopilot")
MARKERS = (".manual", ".autopilot")
KEYS = ("task", "origin", "mode", "mode_source", "phase", "status", "artifacts", "verdict",
        "follow_ups", "paused", "subtasks")
PAUSE_REASON = "human intervention required"
_ORDER = {a: i for i, a in enumerate(ARTIFACT_OF.values())}


# ------------------------------------------------------------------ artifacts


def artifact_entry(data: bytes) -> dict[str, Any]:
    """``{size, sha256, content}`` (``content: null`` + ``content_b64`` when not UTF-8)."""
    entry: dict[str, Any] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        entry["content"] = data.decode("utf-8")
    except UnicodeDecodeError:
        entry["content"] = None
        entry["content_b64"] = base64.b64encode(data).decode("ascii")
    return entry


def artifact_key(name: str) -> tuple[int, str]:
    """Display order: the seed's artifacts in lifecycle order, then other files by name."""
    return (_ORDER.get(name, len(_ORDER)), name)


def is_blank(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return True
    if entry.get("size") == 0:
        return True
    content = entry.get("content")
    return isinstance(content, str) and not content.strip()


def _inherited(origin: Any, name: str, entry: Any) -> bool:
    if not isinstance(origin, dict) or not isinstance(entry, dict):
        return False
    copied = origin.get("copied")
    return isinstance(copied, dict) and copied.get(name) is not None and copied.get(name) == entry.get("sha256")


def own_done(artifacts: Any, origin: Any, name: str) -> bool:
    """The artifact completes its phase in *this* task: present, non-blank, not inherited."""
    if not isinstance(artifacts, dict) or name not in artifacts:
        return False
    entry = artifacts[name]
    return not is_blank(entry) and not _inherited(origin, name, entry)


def _start(origin: Any) -> str:
    if isinstance(origin, dict) and origin.get("starts_at") in PHASES:
        return str(origin["starts_at"])
    return "research"


# ------------------------------------------------------------------ phase, status, verdict


def compute_phase(artifacts: Any, origin: Any, verdict: Any) -> str:
    """The current phase from the artifacts (see the module docstring)."""
    done = [p for p, a in ARTIFACT_OF.items() if own_done(artifacts, origin, a)]
    idx = PHASES.index
    if done:
        furthest = max(done, key=idx)
        if furthest == "referee":
            value = verdict.get("value") if isinstance(verdict, dict) else None
            phase = "complete" if value == "PASS" else "review"
        else:
            phase = NEXT_PHASE[furthest]
        floor = idx(furthest)
    else:
        phase, floor = "research", -1
    if isinstance(artifacts, dict):
        # an empty file up to the proposed phase shows which phase the orchestrator chose
        # (DESIGN.md after SPEC.md); further ahead it is a placeholder (a follow-up's
        # IMPLEMENTATION.md) and proposes nothing
        started = [p for p, a in ARTIFACT_OF.items()
                   if a in artifacts and is_blank(artifacts[a]) and floor < idx(p) <= idx(phase)]
        if started:
            phase = max(started, key=idx)
    start = _start(origin)
    return start if idx(start) > idx(phase) else phase


def skipped_phases(artifacts: Any, origin: Any) -> list[str]:
    """Mandatory phases before the furthest complete one whose artifact is missing or empty.

    Phases before a follow-up's ``starts_at`` are exempt (the seed skips them on purpose);
    from ``starts_at`` on, an inherited copy does not count, except the tie-break's SPEC.md
    (research may keep the spec as it is).
    """
    idx = PHASES.index
    done = [p for p, a in ARTIFACT_OF.items() if own_done(artifacts, origin, a)]
    if not done:
        return []
    furthest = idx(max(done, key=idx))
    start = idx(_start(origin))
    out = []
    for p in MANDATORY:
        i = idx(p)
        if i >= furthest or i < start:
            continue
        name = ARTIFACT_OF[p]
        entry = artifacts.get(name) if isinstance(artifacts, dict) else None
        if own_done(artifacts, origin, name) or (p == "research" and not is_blank(entry) and entry is not None):
            continue
        out.append(p)
    return out


def verdict_doc(artifacts: Any, origin: Any) -> dict[str, Any] | None:
    """The parsed VERDICT.md, or None while it is missing or empty."""
    if not own_done(artifacts, origin, "VERDICT.md"):
        return None
    entry = artifacts["VERDICT.md"]
    content = entry.get("content")
    if isinstance(content, str):
        parsed = parse_verdict(content)
        value, rule, line, reason = parsed.value, parsed.parsed_by, parsed.line, parsed.reason
        lists = [[it.to_dict() for it in items]
                 for items in (parsed.findings, parsed.remaining_issues, parsed.tie_breaks)]
    else:
        value, rule, line, reason = None, None, None, "VERDICT.md is not UTF-8 text"
        lists = [[], [], []]
    return {"value": value if value is not None else "unparsed", "parsed_by": rule, "line": line,
            "sha256": entry.get("sha256"), "reason": reason, "findings": lists[0],
            "remaining_issues": lists[1], "tie_breaks": lists[2]}


def _failing(verdict: Any) -> bool:
    if not isinstance(verdict, dict):
        return False
    value = verdict.get("value")
    return value in ("FAIL", "NEEDS_REVIEW") or (value == "PASS" and bool(verdict.get("tie_breaks")))


def expected_follow_ups(task: str, verdict: Any) -> list[tuple[str, str, str]]:
    """``(kind, task name, issue)`` manual mode must create for this verdict (seed rules 1-3)."""
    if not isinstance(verdict, dict) or verdict.get("value") == "unparsed":
        return []
    lists = []
    if verdict.get("value") == "FAIL":
        lists.append(("fix", verdict.get("findings")))
    if verdict.get("value") == "NEEDS_REVIEW":
        lists.append(("review", verdict.get("remaining_issues")))
    lists.append(("tiebreak", verdict.get("tie_breaks")))
    out: list[tuple[str, str, str]] = []
    for kind, items in lists:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("issue"), str):
                out.append((kind, f"{task}-{kind}-{item['issue']}", item["issue"]))
    return out


def compute_status(verdict: Any, mode: Any) -> str:
    if not isinstance(verdict, dict):
        return "active"
    value = verdict.get("value")
    if value == "unparsed":
        return "unparsed"
    if mode == "autopilot" and _failing(verdict):
        return "paused"
    return {"PASS": "complete", "FAIL": "failed", "NEEDS_REVIEW": "needs_review"}.get(str(value), "active")


def compute_paused(task: str, verdict: Any, mode: Any) -> dict[str, Any] | None:
    if mode != "autopilot" or not _failing(verdict):
        return None
    return {"reason": PAUSE_REASON, "verdict": verdict["value"],
            "pending": [name for _, name, _ in expected_follow_ups(task, verdict)]}


# ------------------------------------------------------------------ the document


def new_document(task: str, origin: dict[str, Any] | None, mode: str, mode_source: str) -> dict[str, Any]:
    """The lifecycle of a task folder that has just been created (no files yet)."""
    return {"task": task, "origin": origin, "mode": mode, "mode_source": mode_source,
            "phase": _start(origin), "status": "active", "artifacts": {}, "verdict": None,
            "follow_ups": [], "paused": None, "subtasks": []}


def link_of(name: str, siblings: list[str]) -> tuple[str, str, str] | None:
    """``(kind, parent, issue)`` if ``name`` is a follow-up of one of ``siblings``."""
    best: tuple[str, str, str] | None = None
    for parent in siblings:
        if parent == name:
            continue
        for kind in FOLLOW_UP_KINDS:
            prefix = f"{parent}-{kind}-"
            if name.startswith(prefix) and len(name) > len(prefix):
                if best is None or len(parent) > len(best[1]):
                    best = (kind, parent, name[len(prefix):])
    return best


def _mode(tree: Mapping[str, Mapping[str, bytes]], rel: str) -> tuple[str, str]:
    folder, up = rel, 0
    while True:
        files = tree.get(folder, {})
        for marker in MARKERS:  # .manual wins: it is the explicit opt-out
            if marker in files:
                return marker[1:], "../" * up + marker
        parent = posixpath.dirname(folder)
        if folder == "" or parent == folder:  # the top ("" or "/"): no marker anywhere
            return "manual", "default"
        folder, up = parent, up + 1


def lifecycle(tree: Mapping[str, Mapping[str, bytes]], rel: str) -> dict[str, Any]:
    """The lifecycle document of task folder ``rel`` in ``tree`` (pure)."""
    files = tree[rel]
    task = posixpath.basename(rel)
    parent_dir = posixpath.dirname(rel)
    siblings = [posixpath.basename(k) for k in tree
                if k and k != rel and posixpath.dirname(k) == parent_dir]
    origin: dict[str, Any] | None = None
    link = link_of(task, siblings)
    if link is not None:
        kind, parent, issue = link
        parent_files = tree[posixpath.join(parent_dir, parent)]
        copied = {f: hashlib.sha256(parent_files[f]).hexdigest()
                  for f in COPIED_FILES if f in parent_files and f in files}
        origin = {"kind": kind, "parent": parent, "issue": issue, "starts_at": STARTS_AT[kind],
                  "copied": copied}
    elif parent_dir:
        origin = {"kind": "subtask", "parent": posixpath.basename(parent_dir), "issue": None,
                  "starts_at": "research", "copied": {}}
    mode, mode_source = _mode(tree, rel)
    doc = new_document(task, origin, mode, mode_source)
    artifacts = {name: artifact_entry(files[name])
                 for name in sorted((n for n in files if not n.startswith(".")), key=artifact_key)}
    verdict = verdict_doc(artifacts, origin)
    follow_ups = []
    for sib in sorted(siblings):
        sl = link_of(sib, siblings + [task])
        if sl is not None and sl[1] == task:
            child_files = tree[posixpath.join(parent_dir, sib)]
            follow_ups.append({"kind": sl[0], "task": sib, "issue": sl[2], "starts_at": STARTS_AT[sl[0]],
                               "files": [f for f in COPIED_FILES if f in child_files and f in files]})
    doc["phase"] = compute_phase(artifacts, origin, verdict)
    doc["status"] = compute_status(verdict, mode)
    doc["artifacts"] = artifacts
    doc["verdict"] = verdict
    doc["follow_ups"] = follow_ups
    doc["paused"] = compute_paused(task, verdict, mode)
    doc["subtasks"] = sorted(posixpath.basename(k) for k in tree if k and posixpath.dirname(k) == rel)
    return doc


def task_folders(tree: Mapping[str, Mapping[str, bytes]]) -> list[str]:
    """Every task folder of the tree, parents before their sub-tasks."""
    return sorted((k for k in tree if k), key=lambda k: k.split("/"))


# ------------------------------------------------------------------ disk


Check = Callable[[Path, list[str]], None]
MAX_DEPTH = 32  # nested sub-task folders; deeper is no task tree


def _names(files: list[Path]) -> list[str]:
    return [p.name for p in files if not p.name.startswith(".") or p.name in MARKERS]


def _list_task(folder: Path, rel: str, root: Path, listing: dict[str, list[Path]], check: Check | None) -> None:
    """List ``folder`` and its sub-task folders into ``listing`` (names and ``stat`` only); ``check``
    sees each folder's file names as it is listed, so a tree that is no task tree (``/``) is refused
    at its first folder, before any file is read."""
    if rel.count("/") >= MAX_DEPTH:
        raise IngestError(f"{folder}: sub-task folders nested over {MAX_DEPTH} deep; pass a task folder or a "
                          "tasks/ directory. Nothing was written.")
    files, folders = reading.entries(folder, root=root)
    kept = [p for p in files if not p.name.startswith(".") or p.name in MARKERS]
    if check is not None:
        check(folder, _names(kept))
    listing[rel] = kept
    for sub in folders:
        if not sub.name.startswith("."):
            _list_task(sub, f"{rel}/{sub.name}", root, listing, check)


def _read(listing: dict[str, list[Path]], base: Path) -> Tree:
    """The files of every listed folder; a folder whose files add up to more than the snapshot limit
    (its document would) is refused before any of them is read."""
    for rel, files in listing.items():
        reading.check_size(base / rel if rel else base, sum(_size(p) for p in files), what="task folder")
    return {rel: {p.name: reading.read_bounded(p) for p in files} for rel, files in listing.items()}


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc}).") from exc


def _markers(folder: Path, root: Path) -> list[Path]:
    return [p for p in reading.entries(folder, root=root)[0] if p.name in MARKERS]


def read_tree(tasks_dir: Path, check: Check | None = None) -> Tree:
    """Every task folder under a ``tasks/`` directory (recursively: sub-tasks).  ``check(folder,
    names)`` may refuse a folder as it is listed, before anything is read."""
    listing: dict[str, list[Path]] = {"": _markers(tasks_dir, tasks_dir)}
    for sub in reading.entries(tasks_dir)[1]:
        if not sub.name.startswith("."):
            _list_task(sub, sub.name, tasks_dir, listing, check)
    return _read(listing, tasks_dir)


def read_task_tree(task_dir: Path, check: Check | None = None) -> Tree:
    """One task folder plus what its links need: the enclosing folder's markers and the
    siblings whose names make them its parent or its follow-ups."""
    enclosing = task_dir.parent
    name = task_dir.name
    listing: dict[str, list[Path]] = {"": _markers(enclosing, enclosing)}
    _list_task(task_dir, name, task_dir, listing, check)
    for sib in reading.entries(enclosing)[1]:
        if sib.name != name and (sib.name.startswith(name + "-") or name.startswith(sib.name + "-")):
            listing[sib.name] = [p for p in reading.entries(sib)[0]
                                 if not p.name.startswith(".") or p.name in MARKERS]
    return _read(listing, enclosing)


def is_task_folder(path: Path) -> bool:
    """A task folder holds files (or nothing at all: a new task); a tasks/ dir only folders."""
    if path.name == "tasks":
        return False
    files, folders = reading.entries(path)
    return any(not p.name.startswith(".") for p in files) or not any(not p.name.startswith(".") for p in folders)


def folder_time(folder: Path) -> datetime:
    """Newest modification time of the folder or its files (UTC)."""
    stamps = [folder.stat().st_mtime] + [p.stat().st_mtime for p in reading.entries(folder)[0]]
    return datetime.fromtimestamp(max(stamps), tz=UTC)


def write_tree(tasks_dir: Path, tree: Mapping[str, Mapping[str, bytes]]) -> None:
    """Make ``tasks_dir`` hold exactly ``tree`` (files and folders not in it are removed)."""
    tasks_dir.mkdir(parents=True, exist_ok=True)
    wanted = {tasks_dir / rel if rel else tasks_dir for rel in tree}
    for folder in sorted((p for p in tasks_dir.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if folder not in wanted and not any(w.is_relative_to(folder) for w in wanted):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
    for rel in sorted(tree, key=lambda k: k.split("/")):
        folder = tasks_dir / rel if rel else tasks_dir
        folder.mkdir(parents=True, exist_ok=True)
        for p in folder.iterdir():
            if p.is_file() and p.name not in tree[rel]:
                p.unlink()
        for fname, data in tree[rel].items():
            target = folder / fname
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
