"""The ``taskflow`` dialect: agent-framework task folders (``tasks/<name>/SPEC.md`` …).

The state document is a task's *lifecycle*, computed from the folder's files alone (see
:mod:`.lifecycle` for the document and the rules, :mod:`.verdict` for reading VERDICT.md).
Streams are named ``taskflow/<task name>`` (``stream_hint`` and :meth:`stream_id`), so a task
called like a run of another dialect cannot share its stream.

Reading folders: :meth:`TaskflowDialect.load` accepts

* a task folder ``tasks/NAME/`` (it holds files, or nothing yet: a new task) -> one snapshot
  for it, and one per sub-task folder inside it;
* a ``tasks/`` directory (named ``tasks``, or holding only folders) -> one snapshot per task
  folder, recursively;
* a project root holding ``tasks/`` and no files of its own -> as ``tasks/``;
* a file inside a task folder (what a watcher reports) -> its folder.

The sibling folders are read only as far as links need them: a task's parent
(``NAME = PARENT-fix-ISSUE``) and its follow-ups (``NAME-review-ISSUE``).

The first observation of a task is explained by domain events too (``TaskCreated`` then
``ArtifactWritten`` … ``VerdictIssued``), not by a ``DocumentObserved``: a folder is usually
ingested once, late in its life, and metrics must still see its verdict.  What those events do
not reproduce is a residual patch; a document that is no lifecycle opens with ``DocumentObserved``.

Example::

    dialect = TaskflowDialect()
    for snap in dialect.load(Path("project/tasks")):
        print(snap.stream_hint, snap.doc["phase"], snap.doc["status"])
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from eventstore import reading
from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, Finding, RunInfo, Snapshot
from eventstore.dialects.taskflow import events as ev
from eventstore.dialects.taskflow import lens
from eventstore.dialects.taskflow.lifecycle import (
    ARTIFACT_OF,
    MARKERS,
    folder_time,
    is_task_folder,
    lifecycle,
    read_task_tree,
    read_tree,
    task_folders,
)
from eventstore.dialects.taskflow.validate import validate as _validate
from eventstore.errors import IngestError
from eventstore.events import Event

JSON = Any
STREAM_PREFIX = "taskflow/"


class TaskflowDialect(Dialect):
    name = "taskflow"
    demo_weight = 2
    versions_in_folders = False  # a folder is one task, not versions of a file
    # Every lifecycle has all of lifecycle.KEYS; these four tell it from other dialects' documents
    # (mapipe's and FRIDAY's have a status, envelope's a phase): the folder's name, its files and
    # the phase and status they imply.  A missing other key is validate's missing-key finding.
    identity_keys = ("task", "phase", "status", "artifacts")
    catalog = ev.CATALOG
    description = "agent-framework task folders: artifacts decide the phase, VERDICT.md spawns follow-ups"

    # -- the lens ---------------------------------------------------------------

    def analytics(self) -> Analytics:
        from eventstore.dialects.taskflow.analytics import ANALYTICS

        return ANALYTICS

    def apply(self, doc: JSON, event: Event) -> JSON:
        return lens.apply(doc, event)

    def derive(self, prev: JSON, next_doc: JSON) -> list[Event]:
        return lens.derive(prev, next_doc)

    def start(self, prev: JSON | None, next_doc: JSON) -> list[Event] | None:
        # A new lifecycle opens with TaskCreated; derive explains the rest (what raises is a lens
        # bug: ingest records it, see the base class docstring).  Anything else: the base rules.
        created = lens.task_created(next_doc) if prev is None else None
        return None if created is None else [created]

    # -- reading sources --------------------------------------------------------

    def load(self, path: Path) -> Iterator[Snapshot]:
        path = Path(path)
        if not path.exists():
            raise IngestError(f"{path}: no such task folder or tasks/ directory.")
        if path.is_file():
            path = path.parent
        if path.name in ("", ".."):  # "." or "..": the folder's own name decides what it is
            path = path.resolve()
        if (path / "tasks").is_dir() and not (path / "tasks").is_symlink() and not any(
                not p.name.startswith(".") for p in reading.entries(path)[0]):
            path = path / "tasks"
        # Each folder is checked as it is listed (names only), before any file is read: `ingest
        # taskflow /` stops at the first folder that is no task folder, not after reading the disk.
        if is_task_folder(path):
            tree = read_task_tree(path, check=_check_task_folder)
            rels = [r for r in task_folders(tree) if r == path.name or r.startswith(path.name + "/")]
            base = path.parent
        else:
            tree = read_tree(path, check=_check_task_folder)
            rels = task_folders(tree)
            base = path
        for rel in rels:
            folder = base / rel
            doc = lifecycle(tree, rel)
            yield Snapshot(doc=doc, raw=None, source={"dir": str(folder)},
                           occurred_at=folder_time(folder), stream_hint=STREAM_PREFIX + doc["task"])

    def restore(self, doc: JSON, target: Path) -> list[Path]:
        """Write the task's artifacts (as recorded) into ``target/<task>/``."""
        import base64

        if type(doc) is not dict or type(doc.get("artifacts")) is not dict:
            return []
        folder = target / str(doc.get("task", "task"))
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, entry in doc["artifacts"].items():
            if type(entry) is not dict or "/" in name or name in ("", ".", ".."):
                continue
            content = entry.get("content")
            data = content.encode("utf-8") if isinstance(content, str) else base64.b64decode(entry.get("content_b64", ""))
            (folder / name).write_bytes(data)
            written.append(folder / name)
        return written

    def stream_id(self, doc: JSON) -> str | None:
        task = doc.get("task") if isinstance(doc, dict) else None
        return STREAM_PREFIX + task if isinstance(task, str) and task else None

    # -- describing -------------------------------------------------------------

    def describe(self, doc: JSON) -> RunInfo:
        if not isinstance(doc, dict):
            return RunInfo()
        task, status, phase = doc.get("task"), doc.get("status"), doc.get("phase")
        return RunInfo(task_id=task if isinstance(task, str) else None, title=_title(doc),
                       status=status if isinstance(status, str) else None,
                       phase=phase if isinstance(phase, str) else None)

    def validate(self, doc: JSON) -> list[Finding]:
        return _validate(doc)

    def summary(self, event: Event) -> str | None:
        return _summary(event)

    # -- simulating -------------------------------------------------------------

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        from eventstore.dialects.taskflow.simulate import simulate  # the simulator loads only for demo and tests

        return simulate(rng, run_id=run_id, start=start)


def _check_task_folder(folder: Path, files: list[str]) -> None:
    """Refuse a folder that holds files but none a task folder has (unrelated JSON, say): ingesting
    it would invent a task."""
    if not files or any(name in ARTIFACT_OF.values() or name in MARKERS for name in files):
        return
    names = sorted(files)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise IngestError(f"{folder}: not a task folder: it holds {shown} but none of the files a task folder has "
                      f"({', '.join(ARTIFACT_OF.values())}, or a {' / '.join(MARKERS)} marker). Pass a task "
                      "folder, a tasks/ directory or a project holding tasks/ (wrong dialect?). Nothing was written.")


def _title(doc: dict[str, Any]) -> str | None:
    """The first Markdown heading of SPEC.md, without its ``#`` marks."""
    arts = doc.get("artifacts")
    spec = arts.get("SPEC.md") if isinstance(arts, dict) else None
    content = spec.get("content") if isinstance(spec, dict) else None
    if not isinstance(content, str):
        return None
    for line in content.splitlines():
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and m.group(1):
            return m.group(1)
    return None


def _summary(e: Event) -> str:
    if isinstance(e, ev.TaskCreated):
        origin = f" ({e.kind} of {e.parent}, starts at {e.starts_at})" if e.kind else ""
        return f"task {e.task} created{origin}, {e.mode} mode"
    if isinstance(e, ev.ArtifactWritten):
        return f"{e.name} written ({e.size} bytes{', empty' if e.size == 0 else ''})"
    if isinstance(e, ev.ArtifactChanged):
        return f"{e.name} changed ({e.size} bytes)"
    if isinstance(e, ev.ArtifactRemoved):
        return f"{e.name} removed"
    if isinstance(e, ev.PhaseEntered):
        skipped = f"; skipped {', '.join(e.skipped)}" if e.skipped else ""
        return f"phase {e.previous or '-'} -> {e.phase}{skipped}"
    if isinstance(e, ev.TaskStatusChanged):
        return f"status {e.previous or '-'} -> {e.status}"
    if isinstance(e, ev.ModeSet):
        return f"mode {e.mode} (from {e.source})"
    if isinstance(e, ev.VerdictIssued):
        counts = f"{len(e.findings)} finding(s), {len(e.remaining_issues)} remaining, {len(e.tie_breaks)} tie-break(s)"
        return f"verdict {e.verdict} (rule {e.parsed_by}, line {e.line}); {counts}"
    if isinstance(e, ev.VerdictUnparseable):
        return f"verdict unparseable: {e.reason}"
    if isinstance(e, ev.VerdictWithdrawn):
        return f"verdict withdrawn (was {e.previous})"
    if isinstance(e, ev.FollowUpTaskSpawned):
        return f"{e.kind} task {e.task} spawned from {e.parent} (starts at {e.starts_at})"
    if isinstance(e, ev.AutopilotPaused):
        return f"autopilot paused on {e.verdict}: {e.reason} ({len(e.pending)} follow-up(s) pending)"
    if isinstance(e, ev.AutopilotResumed):
        return "autopilot pause ended"
    if isinstance(e, ev.SubtaskCreated):
        return f"sub-task {e.task} of {e.parent} created"
    return type(e).__name__


__all__ = ["STREAM_PREFIX", "TaskflowDialect"]  # write_simulated_task: eventstore.dialects.taskflow.simulate
