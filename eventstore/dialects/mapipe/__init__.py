"""The ``mapipe`` dialect: multi-agent-pipeline ``agent-state.json`` (schemaVersion 2.0.0-2.2.0).

* catalog: :mod:`eventstore.dialects.mapipe.events` (tags ``mapipe.<snake_name>``);
* evolve/derive: :mod:`eventstore.dialects.mapipe.lens`;
* validation against multi-agent-pipeline's JSON Schema, shipped as ``schemas/agent-state.schema.json``:
  :mod:`eventstore.dialects.mapipe.validate`;
* simulator: :mod:`eventstore.dialects.mapipe.simulate`.

Example::

    >>> import random, datetime as dt
    >>> d = MapipeDialect()
    >>> snaps = list(d.simulate(random.Random(1), run_id="PROJ-7", start=dt.datetime(2026, 1, 5)))
    >>> d.describe(snaps[-1].doc).task_id
    'PROJ-7'
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from msgspec import UNSET

from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, Finding, RunInfo, Snapshot
from eventstore.dialects.mapipe import events as ev
from eventstore.dialects.mapipe.lens import apply_event, derive_events
from eventstore.dialects.mapipe.validate import validate_document
from eventstore.events import Event


class MapipeDialect(Dialect):
    name = "mapipe"
    demo_weight = 4
    identity_keys = ("schemaVersion", "taskId")
    state_file_names = ("agent-state.json",)
    description = "multi-agent-pipeline agent-state.json (schemaVersion 2.0.0-2.2.0)"
    catalog = ev.CATALOG

    def analytics(self) -> Analytics:
        from eventstore.dialects.mapipe.analytics import ANALYTICS

        return ANALYTICS

    def apply(self, doc: Any, event: Event) -> Any:
        return apply_event(doc, event)

    def derive(self, prev: Any, next_doc: Any) -> list[Event]:
        return derive_events(prev, next_doc)

    def stream_id(self, doc: Any) -> str | None:
        task = doc.get("taskId") if isinstance(doc, dict) else None
        return task if isinstance(task, str) and task else None

    def describe(self, doc: Any) -> RunInfo:
        if not isinstance(doc, dict):
            return RunInfo()

        def text(key: str) -> str | None:
            v = doc.get(key)
            return v if isinstance(v, str) else None

        phase = doc.get("currentPhase")
        return RunInfo(task_id=self.stream_id(doc), project=text("project"), title=text("title"),
                       status=text("status"),
                       phase=str(phase) if isinstance(phase, (int, str)) and not isinstance(phase, bool) else None)

    def validate(self, doc: Any) -> list[Finding]:
        return validate_document(doc)

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        from eventstore.dialects.mapipe.simulate import simulate_run  # the simulator loads only for demo and tests

        return simulate_run(rng, run_id=run_id, start=start)

    def summary(self, event: Event) -> str | None:
        return _summary(event)


def _phase_line(e: Any, verb: str) -> str:
    parts = [f"model={e.model}"] if e.model else []
    if e.retryCount:
        parts.append(f"retries={e.retryCount}")
    if e.subStep:
        parts.append(f"subStep={e.subStep}")
    return f"phase {e.phase} {verb}" + (f" ({', '.join(parts)})" if parts else "")


def _summary(e: Event) -> str | None:  # noqa: C901 - one line per event type
    if isinstance(e, ev.RunStarted):
        return f"run {e.taskId} started: {e.title or e.project or ''}".rstrip(": ")
    if isinstance(e, ev.PhaseStarted):
        return _phase_line(e, "started")
    if isinstance(e, ev.PhaseCompleted):
        return _phase_line(e, "completed")
    if isinstance(e, ev.PhaseSkipped):
        return _phase_line(e, "skipped")
    if isinstance(e, ev.PhaseFailed):
        return _phase_line(e, "failed")
    if isinstance(e, ev.PhaseUpdated):
        return _phase_line(e, "updated")
    if isinstance(e, ev.QuestionAsked):
        q = e.pendingQuestion
        what = q.get("text") if isinstance(q, dict) else None
        return f"question asked at {e.stepId or e.waitingFor or '?'}: {what or e.questionId or ''}".rstrip(": ")
    if isinstance(e, ev.QuestionAnswered):
        return f"question {e.questionId} answered: {', '.join(e.optionIds)}"
    if isinstance(e, ev.SteerQueued):
        s = e.pendingSteer
        return f"steer queued: {s.get('text') if isinstance(s, dict) else s}"
    if isinstance(e, ev.SteerApplied):
        return f"steer applied at phase {e.appliedPhase}"
    if isinstance(e, ev.MaturityAssessed):
        return f"maturity assessed: score={e.score}, {len(e.maturity.get('blockers') or [])} blocker(s)"
    if isinstance(e, ev.MaturityFollowupAsked):
        return f"maturity follow-up asked: {', '.join(map(str, e.maturityFollowup.get('gaps') or []))}"
    if isinstance(e, ev.BaselineCaptured):
        return f"baseline captured: tests {e.testsStatus or 'unknown'}"
    if isinstance(e, ev.ResearchPassRecorded):
        return f"research pass {e.research.get('round')}: {e.decision}"
    if isinstance(e, ev.PlanCritiqueRecorded):
        return f"plan critique: {e.verdict} ({e.planCritique.get('objections', 0)} objections)"
    if isinstance(e, ev.DiffRiskScored):
        d = e.diffRisk
        return f"diff risk: {d.get('files')} files, max score {d.get('max_score')}"
    if isinstance(e, ev.ReviewIterationRecorded):
        raised = sum(len(r.get("findings") or []) for r in e.reviewers if isinstance(r, dict))
        return (f"review iteration {e.number}: {raised} findings from {len(e.reviewers)} reviewers, "
                f"{len(e.accepted_fingerprints)} accepted, decision={e.decision}")
    if isinstance(e, ev.ReviewIterationUpdated):
        return f"review iteration {e.number} updated"
    if isinstance(e, ev.ReviewDeltaComputed):
        counts = ", ".join(f"{k}={e.count(k)}" for k in ("new", "stillPresent", "resolved", "downgraded"))
        flags = "".join([" plateau" if e.plateau else "", " tripped" if e.tripped else ""])
        return f"review delta for iteration {e.index + 1}: {counts}{flags}"
    if isinstance(e, ev.ReviewDecisionRecorded):
        return f"review decision for iteration {e.index + 1}: {e.verdict} (approved={e.approved})"
    if isinstance(e, ev.GateVerdictRecorded):
        return f"gate {e.gate}: {e.verdict}"
    if isinstance(e, ev.CircuitBreakerTripped):
        rec = e.to_record()
        trigger = rec.get("trigger") if isinstance(rec, dict) else None
        detail = rec.get("detail") if isinstance(rec, dict) else None
        return f"circuit breaker tripped: trigger {trigger}" + (f" ({detail})" if detail else "")
    if isinstance(e, ev.CircuitBreakerReset):
        return "circuit breaker reset"
    if isinstance(e, ev.VerificationFailed):
        return f"verification failed at gate {e.gate}: {e.verificationFailed.get('reason', '')}"
    if isinstance(e, ev.RunStatusChanged):
        parts = [f"status {e.status}" if e.status is not UNSET else "status unchanged"]
        if e.haltReason is not UNSET:
            parts.append("haltReason cleared" if e.haltReason is None else f"haltReason={e.haltReason}")
        if e.abandonedBy is not UNSET:
            parts.append(f"abandonedBy={e.abandonedBy}")
        return ", ".join(parts)
    if isinstance(e, ev.RunFinished):
        return f"run finished at {e.finishedAt}"
    if isinstance(e, ev.PrOpened):
        return f"PR #{e.number} opened"
    if isinstance(e, ev.PrUpdated):
        return "PR updated"
    if isinstance(e, ev.PrPublished):
        return f"branch published ({e.publish.get('outcome')})"
    if isinstance(e, ev.CommitRecorded):
        return f"commit {str(e.sha)[:10]}"
    if isinstance(e, ev.WorktreeRemoved):
        return "worktree removed"
    return None


__all__ = ["MapipeDialect"]
