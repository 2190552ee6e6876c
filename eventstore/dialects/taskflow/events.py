"""The ``taskflow`` event catalog: facts about one agent-framework task folder.

Tags are ``taskflow.<snake_name>`` and never change.  Evolution rules (see
:mod:`eventstore.events`): new fields get defaults and go last; a breaking change bumps
``schema_version`` and registers an upcaster.

What metrics read:

* ``taskflow.phase_entered`` (``phase``, ``previous``, ``skipped``): furthest phase reached,
  phase skips;
* ``taskflow.verdict_issued`` / ``taskflow.verdict_unparseable``: verdict mix, parse rules;
* ``taskflow.follow_up_task_spawned`` (``kind`` fix/review/tiebreak, ``parent``): spawn rate and
  rework depth (follow the ``parent`` links);
* ``taskflow.autopilot_paused``: human interventions in autopilot mode.
"""

from __future__ import annotations

import msgspec

from eventstore.events import Event


class VerdictItem(msgspec.Struct, frozen=True, kw_only=True):
    """One list item under Findings / Remaining Issues / Tie-Breaks of VERDICT.md."""

    issue: str  # kebab-case slug used in follow-up task names
    text: str  # the item as written (Markdown list marker stripped)


class TaskCreated(Event, tag="taskflow.task_created", frozen=True):
    """The task folder exists (first observation).  Starts a fresh lifecycle document.

    ``kind`` is ``None`` for a task created from user input, else ``fix`` / ``review`` /
    ``tiebreak`` (a follow-up of ``parent``) or ``subtask`` (a folder inside a decomposed task).
    ``copied`` maps each file the orchestrator copied from the parent to the parent's SHA-256.
    """

    task: str
    kind: str | None = None
    parent: str | None = None
    issue: str | None = None
    starts_at: str = "research"
    copied: dict[str, str] = msgspec.field(default_factory=dict)
    mode: str = "manual"
    mode_source: str = "default"


class ArtifactWritten(Event, tag="taskflow.artifact_written", frozen=True):
    """A new file appeared in the task folder (possibly empty: an empty file completes nothing)."""

    name: str
    size: int
    sha256: str
    content: str | None  # UTF-8 text; None when the bytes are not UTF-8 (see content_b64)
    content_b64: str | None = None


class ArtifactChanged(Event, tag="taskflow.artifact_changed", frozen=True):
    """An existing file's bytes changed (rewritten by an agent, or an empty file filled in)."""

    name: str
    size: int
    sha256: str
    content: str | None
    previous_sha256: str = ""
    content_b64: str | None = None


class ArtifactRemoved(Event, tag="taskflow.artifact_removed", frozen=True):
    name: str
    previous_sha256: str = ""


class PhaseEntered(Event, tag="taskflow.phase_entered", frozen=True):
    """The task's current phase changed.  ``skipped``: mandatory phases newly left out."""

    phase: str
    previous: str | None = None
    skipped: list[str] = msgspec.field(default_factory=list)


class TaskStatusChanged(Event, tag="taskflow.task_status_changed", frozen=True):
    """active / complete / failed / needs_review / paused / unparsed."""

    status: str
    previous: str | None = None


class ModeSet(Event, tag="taskflow.mode_set", frozen=True):
    """Manual or autopilot, and where that was read (a marker file path or ``default``)."""

    mode: str
    source: str = "default"


class VerdictIssued(Event, tag="taskflow.verdict_issued", frozen=True):
    """The Referee's VERDICT.md was parsed: ``verdict`` is PASS, FAIL or NEEDS_REVIEW.

    ``parsed_by`` names the rule (see :mod:`.verdict`) and ``line`` the 1-based line it matched.
    """

    verdict: str
    parsed_by: str
    line: int
    sha256: str
    findings: list[VerdictItem] = msgspec.field(default_factory=list)
    remaining_issues: list[VerdictItem] = msgspec.field(default_factory=list)
    tie_breaks: list[VerdictItem] = msgspec.field(default_factory=list)


class VerdictUnparseable(Event, tag="taskflow.verdict_unparseable", frozen=True):
    """VERDICT.md is non-empty but names no single verdict; never read as a PASS."""

    sha256: str
    reason: str
    findings: list[VerdictItem] = msgspec.field(default_factory=list)
    remaining_issues: list[VerdictItem] = msgspec.field(default_factory=list)
    tie_breaks: list[VerdictItem] = msgspec.field(default_factory=list)


class VerdictWithdrawn(Event, tag="taskflow.verdict_withdrawn", frozen=True):
    """VERDICT.md was removed or emptied (the task is back before its verdict)."""

    previous: str | None = None


class FollowUpTaskSpawned(Event, tag="taskflow.follow_up_task_spawned", frozen=True):
    """A ``{parent}-{kind}-{issue}`` task folder appeared next to its parent."""

    kind: str  # fix | review | tiebreak
    task: str
    parent: str
    issue: str
    starts_at: str  # bug_find for fix/review, research for tiebreak
    files: list[str] = msgspec.field(default_factory=list)  # copied from the parent


class AutopilotPaused(Event, tag="taskflow.autopilot_paused", frozen=True):
    """Autopilot met FAIL / NEEDS_REVIEW / tie-breaks: human intervention required.

    ``pending`` names the follow-up tasks manual mode would have created.
    """

    reason: str
    verdict: str
    pending: list[str] = msgspec.field(default_factory=list)


class AutopilotResumed(Event, tag="taskflow.autopilot_resumed", frozen=True):
    """The pause ended (mode switched to manual, or the verdict changed)."""

    previous_verdict: str | None = None


class SubtaskCreated(Event, tag="taskflow.subtask_created", frozen=True):
    """A sub-task folder appeared inside a decomposed task."""

    task: str
    parent: str


CATALOG: tuple[type[Event], ...] = (
    TaskCreated,
    ArtifactWritten,
    ArtifactChanged,
    ArtifactRemoved,
    PhaseEntered,
    TaskStatusChanged,
    ModeSet,
    VerdictIssued,
    VerdictUnparseable,
    VerdictWithdrawn,
    FollowUpTaskSpawned,
    AutopilotPaused,
    AutopilotResumed,
    SubtaskCreated,
)
