"""The ``envelope`` dialect: agentic-workflow machine envelopes, one per orchestrated turn.

Stream = the unit (``unit.id``) unless the source names a run.  The document is the latest
accepted envelope; turn bookkeeping (rejections, repairs, failures) lives in events only.  A turn
whose envelope could not be read also carries a ``turn-<code>`` finding (severity error), as an
unreadable state file does, so ``evstore log`` and ``evstore runs`` count it.

Example::

    >>> d = EnvelopeDialect()
    >>> [type(e).__name__ for e in d.observe(None, {"skill": "x", "state": "OK", "unit": {"id": "7-a"}})]
    ['EnvelopeEmitted', 'StateTransitioned']
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, Finding, RunInfo, Snapshot
from eventstore.dialects.envelope import lens
from eventstore.dialects.envelope.events import (
    CATALOG,
    BlockersRaised,
    EnvelopeEmitted,
    FindingsReported,
    GatesReported,
    Halted,
    NoProgressDetected,
    RepairAttempted,
    StateTransitioned,
    TurnFailed,
    TurnRejected,
)
from eventstore.dialects.envelope.parse import load_path, parse_turn
from eventstore.dialects.envelope.validate import EnvelopeCheck, check, classify, is_run_halt, is_terminal
from eventstore.events import Event

JSON = Any


class EnvelopeDialect(Dialect):
    name = "envelope"
    demo_weight = 2
    versions_in_folders = False  # turn files are ordered by the transcript parser
    no_raw_bytes = "records envelopes parsed from turn transcripts, not a state file"
    identity_keys = ("state",)
    catalog = CATALOG
    description = "agentic-workflow machine envelopes and turn transcripts (one envelope per turn)"

    # -- the lens ---------------------------------------------------------------

    def analytics(self) -> Analytics:
        from eventstore.dialects.envelope.analytics import ANALYTICS

        return ANALYTICS

    def apply(self, doc: JSON, event: Event) -> JSON:
        if type(event) in CATALOG:
            return lens.apply(doc, event)
        return super().apply(doc, event)

    def derive(self, prev: JSON, next_doc: JSON) -> list[Event]:
        return lens.derive(prev, next_doc)

    def start(self, prev: JSON | None, next_doc: JSON) -> list[Event] | None:
        # Unlike the base class, an envelope is a turn even as the first document of a stream or
        # when it repeats the previous one verbatim (that repetition is the no-progress signal):
        # derive always runs (its EnvelopeEmitted replaces the document, so no residual remains).
        return [] if lens.is_envelope_like(next_doc) else None

    # -- reading sources --------------------------------------------------------

    def load(self, path: Path) -> Iterator[Snapshot]:
        yield from load_path(path)

    def stream_id(self, doc: JSON) -> str | None:
        return lens.unit_id(doc)

    # -- describing -------------------------------------------------------------

    def describe(self, doc: JSON) -> RunInfo:
        if type(doc) is not dict:
            return RunInfo()
        state, skill, summary = doc.get("state"), doc.get("skill"), doc.get("summary")
        return RunInfo(task_id=lens.unit_id(doc), status=state if type(state) is str else None,
                       phase=skill if type(skill) is str else None,
                       title=summary if type(summary) is str else None)

    def validate(self, doc: JSON) -> list[Finding]:
        return list(check(doc).findings)

    def summary(self, event: Event) -> str | None:
        return summarize(event)

    # -- simulating -------------------------------------------------------------

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        from eventstore.dialects.envelope.simulate import simulate_run  # the simulator loads only for demo and tests

        return simulate_run(rng, run_id=run_id, start=start)


def _shown(value: str | bool | None) -> str:
    """A gate value as people read it: unset is "-", never Python's None."""
    if value is None:
        return "-"
    if type(value) is bool:
        return "yes" if value else "no"
    return str(value)


def _t(turn: int | None) -> str:
    return f"turn {turn}" if turn is not None else "turn"


def summarize(event: Event) -> str:
    """One line for ``evstore log``; state changes, repairs, HALTs and no-progress stand out."""
    if isinstance(event, EnvelopeEmitted):
        flag = "" if event.valid else " [INVALID]"
        nxt = f" → next {event.recommended} [{event.tier}]" if event.recommended else ""
        head = f"turn {event.turn} " if event.turn is not None else ""
        return f"{head}{event.skill or '?'}: {event.state or '?'}{nxt}{flag}"
    if isinstance(event, StateTransitioned):
        return f"state {event.from_state or '∅'} → {event.to_state}"
    if isinstance(event, FindingsReported):
        parts = [f"{event.fix_now_count} fix-now" + (f" ({event.high_severity} high)" if event.high_severity else "")]
        if event.issues_filed:
            parts.append("issues " + ", ".join(f"#{n}" for n in event.issues_filed))
        if event.untriaged:
            parts.append(f"{event.untriaged} untriaged")
        return "findings: " + ", ".join(parts)
    if isinstance(event, BlockersRaised):
        run = f" ({event.run_scoped} run-scoped)" if event.run_scoped else ""
        return f"blockers: {', '.join(f'{k}:{i}' for k, i in zip(event.kinds, event.ids, strict=False)) or len(event.ids)}{run}"
    if isinstance(event, GatesReported):
        return (f"gates: verification={_shown(event.verification)} review_pending={_shown(event.review_pending)} "
                f"audit_pending={_shown(event.audit_pending)}")
    if isinstance(event, Halted):
        return "HALT — stop the whole run: " + ("; ".join(event.reasons) or f"state {event.state}")
    if isinstance(event, NoProgressDetected):
        return f"NO PROGRESS — same {event.state} and recommendation repeated: {event.recommended}"
    if isinstance(event, TurnRejected):
        return f"REJECTED {_t(event.turn)} ({event.code}): {event.reason}"
    if isinstance(event, RepairAttempted):
        over = " — over the one-repair limit" if event.attempt > 1 else ""
        verdict = "envelope recovered" if event.ok else f"failed: {event.reason}"
        return f"REPAIR of turn {event.repairs_turn} (attempt {event.attempt}): {verdict}{over}"
    if isinstance(event, TurnFailed):
        return f"FAILED {_t(event.turn)} after {event.attempts} attempts: {event.reason}"
    return ""


__all__ = ["EnvelopeDialect", "EnvelopeCheck", "check", "classify", "is_run_halt", "is_terminal", "parse_turn",
           "summarize"]  # simulate_run and write_transcripts: eventstore.dialects.envelope.simulate
