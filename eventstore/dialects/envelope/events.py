"""The ``envelope`` event catalog: one machine envelope per orchestrated turn.

The state document of a stream is the latest *accepted* envelope, verbatim.  Each accepted turn
is an :class:`EnvelopeEmitted` carrying the whole envelope (a turn re-emits every key, so the
envelope *is* the fact; folding it reproduces the document exactly), followed by the facts
metrics read: :class:`StateTransitioned`, :class:`FindingsReported`, :class:`BlockersRaised`,
:class:`GatesReported`, :class:`Halted`, :class:`NoProgressDetected`.  The section events
re-write their section with the same value (idempotent after ``EnvelopeEmitted``), so they also
mean something when appended on their own.

Turns that produced no acceptable envelope never change the document: :class:`TurnRejected`
(parse contract failed), :class:`RepairAttempted` (the driver's single repair prompt, linked to the
rejected turn) and :class:`TurnFailed` (the repair failed too: driver-level FAILED).

Evolution rules: tags never change; new fields get defaults and go last; a breaking change bumps
``schema_version`` and registers an upcaster (see :mod:`eventstore.events`).
"""

from __future__ import annotations

from typing import Any

from eventstore.events import Event


class EnvelopeEmitted(Event, frozen=True, tag="envelope.envelope_emitted"):
    """An accepted turn: ``envelope`` is the document from now on."""

    envelope: Any
    skill: str | None = None
    state: str | None = None
    unit_id: str | None = None
    turn: int | None = None  # known when the source numbers its turns (transcripts, simulator)
    recommended: str | None = None
    tier: str | None = None
    recommendation_hash: str = ""  # sha256/16 of state + next: equal hashes = same advice
    valid: bool = True  # legacy validateEnvelope verdict (after normalising rendered spellings)
    valid_strict: bool = True  # validateEnvelopeV2Strict verdict


class StateTransitioned(Event, frozen=True, tag="envelope.state_transitioned"):
    """The routing state changed (``from_state`` None: the unit's first envelope)."""

    from_state: str | None
    to_state: str
    skill: str | None = None
    unit_id: str | None = None
    turn: int | None = None


class FindingsReported(Event, frozen=True, tag="envelope.findings_reported"):
    """The turn reported findings (fix-now items, filed issues, untriaged or decisions)."""

    findings: Any  # the section verbatim
    fix_now_ids: list[str] = []
    fix_now_count: int = 0
    high_severity: int = 0
    issues_filed: list[int] = []
    untriaged: int = 0
    decisions_recorded: int = 0
    skill: str | None = None
    turn: int | None = None


class BlockersRaised(Event, frozen=True, tag="envelope.blockers_raised"):
    """The turn reported blockers (non-empty ``blockers[]``)."""

    blockers: Any  # the section verbatim
    kinds: list[str] = []
    ids: list[str] = []
    run_scoped: int = 0
    skill: str | None = None
    turn: int | None = None


class GatesReported(Event, frozen=True, tag="envelope.gates_reported"):
    """The gates section changed (or was reported for the first time)."""

    gates: Any  # the section verbatim
    verification: str | None = None
    review_pending: bool | None = None
    audit_pending: bool | None = None
    turn: int | None = None


class Halted(Event, frozen=True, tag="envelope.halted"):
    """Stop-the-world: state HALT or a run-scoped blocker (the package's ``isRunHalt``)."""

    state: str | None
    reasons: list[str] = []  # "kind:id — detail" per run-scoped blocker
    skill: str | None = None
    unit_id: str | None = None
    turn: int | None = None


class NoProgressDetected(Event, frozen=True, tag="envelope.no_progress_detected"):
    """Same state and same recommendation as the previous accepted turn, nothing else moved."""

    state: str | None
    recommended: str | None
    recommendation_hash: str
    skill: str | None = None
    unit_id: str | None = None
    turn: int | None = None


class TurnRejected(Event, frozen=True, tag="envelope.turn_rejected"):
    """A turn broke the parse contract; the driver owes it one repair attempt."""

    turn: int | None
    code: str  # "no-json-block" | "invalid-json" | "invalid-envelope"
    reason: str
    line: int | None = None  # 1-based line in the source file, for invalid JSON
    column: int | None = None
    errors: list[str] = []  # validation errors for "invalid-envelope"
    block: str | None = None  # the rejected fenced block, verbatim: nothing observed is lost
    source: str | None = None


class RepairAttempted(Event, frozen=True, tag="envelope.repair_attempted"):
    """The repair prompt was answered for ``repairs_turn``; ``ok`` says whether it parsed."""

    turn: int | None
    repairs_turn: int | None
    ok: bool
    attempt: int = 1  # more than 1 breaks the one-repair rule
    code: str = ""
    reason: str = ""
    line: int | None = None
    column: int | None = None
    block: str | None = None
    source: str | None = None


class TurnFailed(Event, frozen=True, tag="envelope.turn_failed"):
    """The repair failed as well: a driver-level FAILED, surfaced to a human."""

    turn: int | None
    reason: str
    attempts: int = 2


CATALOG: tuple[type[Event], ...] = (
    EnvelopeEmitted, StateTransitioned, FindingsReported, BlockersRaised, GatesReported, Halted,
    NoProgressDetected, TurnRejected, RepairAttempted, TurnFailed,
)

__all__ = [c.__name__ for c in CATALOG] + ["CATALOG"]
