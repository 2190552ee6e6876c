"""The FRIDAY event catalog (tags ``friday.<snake_name>``).

FRIDAY (TemperAI's orchestrator) persists one document, ``.temper/friday-state.json``; each
event below is one kind of change FRIDAY makes to it.  Field names follow the state schema
(``seeds/friday-state-schema.md``).  Values are typed ``Any`` where real files put
out-of-spec values (``"idle"``, ``null`` for an enum, a string where a number is expected):
the store records what was observed, ``validate`` complains.

Every class repeats ``frozen=True`` (already inherited at runtime) so mypy sees it frozen too.

Absent versus ``null`` matters for exact replay, so optional "set this key" fields default to
``msgspec.UNSET``: UNSET means "this event does not touch the key" and is never encoded.

Marker events (:class:`PlanApproved`, :class:`BatchSent`) do not change the document; they
record an intent that the document only shows indirectly (the status or report that follows).

Evolution rules: new fields get defaults and go last; a breaking change bumps
``schema_version`` and registers an upcaster (see :mod:`eventstore.events`).
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from eventstore.events import Event

Maybe = Any | UnsetType  # a value, or UNSET = "key not touched by this event"

# ----------------------------------------------------------------- the whole document


class StateInitialised(Event, tag="friday.state_initialised", frozen=True):
    """FRIDAY wrote a state file where there was none (or an empty / non-object one)."""

    doc: Any


class StateReset(Event, tag="friday.state_reset", frozen=True):
    """Top-level keys were removed (a reset clears plan/task/cycle keys rather than nulling them)."""

    removed: list[str]


class StateSaved(Event, tag="friday.state_saved", frozen=True):
    """FRIDAY stamped ``last_updated`` on a write (coarse: several writes may share a value)."""

    last_updated: Any


class StatusChanged(Event, tag="friday.status_changed", frozen=True):
    status: Any
    previous: Any = None


class RequestChanged(Event, tag="friday.request_changed", frozen=True):
    request_summary: Any


class ContextChanged(Event, tag="friday.context_changed", frozen=True):
    context: Any


class NextActionChanged(Event, tag="friday.next_action_changed", frozen=True):
    next_action: Any


class Blocked(Event, tag="friday.blocked", frozen=True):
    """``block_reason`` set (the ``status`` change to ``blocked`` is its own StatusChanged)."""

    block_reason: Any


class Unblocked(Event, tag="friday.unblocked", frozen=True):
    previous_reason: Any = None
    block_reason: Any = None  # what the key holds afterwards (normally null)


# ----------------------------------------------------------------- plan and steps


class PlanProposed(Event, tag="friday.plan_proposed", frozen=True):
    """An ``approved_plan`` appeared where there was none (or an empty one)."""

    plan: Any
    total_steps: Maybe = UNSET


class PlanApproved(Event, tag="friday.plan_approved", frozen=True):
    """Marker: the user approved the proposed plan or next step (status left awaiting-approval)."""

    step: Any = None  # current_step after approval
    steps: int = 0  # plan length
    status: Any = None  # the status FRIDAY moved to


class PlanReplaced(Event, tag="friday.plan_replaced", frozen=True):
    """A different plan replaced the previous one.

    ``reason``: ``change-direction`` when the state says so (next_action_type or the context
    notes mention a change of direction), ``cleared`` for an empty plan, ``new-request`` when
    the request summary changed, else ``revised``.  The reason is a heuristic label.
    """

    plan: Any
    previous_steps: int = 0
    reason: str = "revised"
    total_steps: Maybe = UNSET


class StepDelegated(Event, tag="friday.step_delegated", frozen=True):
    """FRIDAY's step pointer moved: ``current_step`` / ``current_agent`` / execution mode."""

    step: Maybe = UNSET
    agent: Maybe = UNSET
    execution_mode: Maybe = UNSET
    total_steps: Maybe = UNSET  # only when it changed without a plan change


class StepStatusChanged(Event, tag="friday.step_status_changed", frozen=True):
    """One ``approved_plan`` item changed status (pending / in-cycle / complete) or output."""

    index: int
    step: Any = None
    agent: Any = None
    status: Maybe = UNSET
    output: Maybe = UNSET


# ----------------------------------------------------------------- tasks


class TaskQueueSet(Event, tag="friday.task_queue_set", frozen=True):
    """Task generation / re-planning wrote the queue (and the counters) wholesale."""

    pending_tasks: Maybe = UNSET
    total_tasks: Maybe = UNSET
    completed_tasks: Maybe = UNSET  # only when not explained by TaskCompleted (e.g. reset to [])


class TaskStarted(Event, tag="friday.task_started", frozen=True):
    """The current-task fields changed (all null: no current task)."""

    task_id: Maybe = UNSET
    title: Maybe = UNSET
    work_item_type: Maybe = UNSET
    work_item_id: Maybe = UNSET
    category: Maybe = UNSET
    location: Maybe = UNSET


class TaskCompleted(Event, tag="friday.task_completed", frozen=True):
    """A task moved from ``pending_tasks`` (matched by task_id) to the end of ``completed_tasks``."""

    task_id: Any
    task: Any


# ----------------------------------------------------------------- analyst / architect cycles


class CycleOpened(Event, tag="friday.cycle_opened", frozen=True):
    """An analyst or architect loop started (``active_cycle`` written)."""

    agent: Any
    cycle_type: Any
    phase: Any = None
    mode: Any = None
    cycle: Any = None  # the whole active_cycle object as written


class ReportReceived(Event, tag="friday.report_received", frozen=True):
    """The specialist returned a report inside the loop: new queue, counts, report type."""

    agent: Any = None
    queue_kind: str | None = None  # "gap" | "ambiguity" | None
    last_report_type: Maybe = UNSET
    question_origin: Maybe = UNSET
    mode: Maybe = UNSET
    gap_queue: Maybe = UNSET
    collected_gap_answers: Maybe = UNSET
    ambiguity_queue: Maybe = UNSET
    collected_ambiguity_answers: Maybe = UNSET
    unresolved_blocking_gaps: Maybe = UNSET
    cycle_count: Maybe = UNSET


class InteractionSurfaced(Event, tag="friday.interaction_surfaced", frozen=True):
    """FRIDAY surfaced one question (or a batch-send / none wait) to the user."""

    waiting_for: Maybe = UNSET
    pending_interaction: Maybe = UNSET
    pending_interaction_removed: bool = False
    index_key: str | None = None  # "current_gap_index" | "current_ambiguity_index"
    index: Maybe = UNSET
    item_id: Any = None  # pending_interaction.source_ref.item_id, for readers


class ParseFallbackEntered(Event, tag="friday.parse_fallback_entered", frozen=True):
    """The report could not be reduced to one question: manual review in plain text."""

    waiting_for: Any
    pending_interaction: Any
    report_type: Any = None
    fallback_reason: Any = None
    index_key: str | None = None  # a queue index FRIDAY reset in the same write
    index: Maybe = UNSET


class AnswerCaptured(Event, tag="friday.answer_captured", frozen=True):
    """The user's answer, verbatim, stored under its GAP-/AMB- id."""

    queue_kind: str  # "gap" | "ambiguity"
    item_id: str
    answer: Any


class BatchSent(Event, tag="friday.batch_sent", frozen=True):
    """Marker: the consolidated labelled answer batch went back to the analyst."""

    queue_kind: str
    item_ids: list[str]


class CycleClosed(Event, tag="friday.cycle_closed", frozen=True):
    """The loop ended: ``active_cycle`` removed (or nulled when ``to_null``)."""

    agent: Any = None
    cycle_type: Any = None
    cycle_count: Any = None
    last_report_type: Any = None
    to_null: bool = False


# ----------------------------------------------------------------- session metrics


class SessionMetricsRecorded(Event, tag="friday.session_metrics_recorded", frozen=True):
    """``session_metrics`` written.  ``risk_score`` is the recorded value (kept as-is);
    ``computed_risk_score`` is the documented additive formula over the same counters."""

    metrics: Any
    risk_score: Any = None
    computed_risk_score: int | None = None


CATALOG: tuple[type[Event], ...] = (
    StateInitialised, StateReset, StateSaved, StatusChanged, RequestChanged, ContextChanged,
    NextActionChanged, Blocked, Unblocked, PlanProposed, PlanApproved, PlanReplaced,
    StepDelegated, StepStatusChanged, TaskQueueSet, TaskStarted, TaskCompleted, CycleOpened,
    ReportReceived, InteractionSurfaced, ParseFallbackEntered, AnswerCaptured, BatchSent,
    CycleClosed, SessionMetricsRecorded,
)

__all__ = [c.__name__ for c in CATALOG] + ["CATALOG", "UNSET"]
