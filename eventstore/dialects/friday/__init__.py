"""The ``friday`` dialect: TemperAI FRIDAY's ``.temper/friday-state.json``.

FRIDAY keeps one state file per repository and no run/task id inside it, so
:meth:`FridayDialect.stream_id` returns None unless the document carries an obvious id
(``session_id`` / ``run_id`` / ``id``); ingest then needs ``--stream`` (or uses the file name).

Example::

    >>> from eventstore.dialects import get_dialect
    >>> d = get_dialect("friday")
    >>> [type(e).__name__ for e in d.observe({"status": "fresh", "next_action": "wait"},
    ...                                       {"status": "blocked", "next_action": "wait"})]
    ['StatusChanged']
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from msgspec import UNSET

from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, Finding, RunInfo, Snapshot
from eventstore.dialects.friday import events as ev
from eventstore.dialects.friday.lens import apply_event, derive_events
from eventstore.dialects.friday.validate import (
    computed_risk_score,
    risk_score_from_metrics,
    risk_score_mismatch,
    validate_state,
)
from eventstore.events import Event

JSON = Any


def _short(value: Any, limit: int = 70) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FridayDialect(Dialect):
    name = "friday"
    demo_weight = 2
    # The state skill requires last_updated, status, request_summary and next_action of any persisted
    # state; a FRIDAY write lacking one is still FRIDAY's (validate's missing-required finding), so
    # identity asks only for the pair no other dialect's document has: status alone is mapipe's and
    # taskflow's too, next_action is FRIDAY's handoff to the next session.
    identity_keys = ("status", "next_action")
    state_file_names = ("friday-state.json",)
    time_keys = ("last_updated",)
    description = "TemperAI FRIDAY orchestrator state (.temper/friday-state.json)"
    catalog = ev.CATALOG

    def analytics(self) -> Analytics:
        from eventstore.dialects.friday.analytics import ANALYTICS

        return ANALYTICS

    def apply(self, doc: JSON, event: Event) -> JSON:
        return apply_event(doc, event)

    def derive(self, prev: JSON, next_doc: JSON) -> list[Event]:
        return derive_events(prev, next_doc)

    def stream_id(self, doc: JSON) -> str | None:
        if type(doc) is dict:
            for key in ("session_id", "run_id", "id"):
                v = doc.get(key)
                if isinstance(v, str) and v:
                    return v
        return None

    def describe(self, doc: JSON) -> RunInfo:
        if type(doc) is not dict:
            return RunInfo()
        ctx = doc.get("context")
        project = ctx.get("project") if type(ctx) is dict else None
        title, status = doc.get("request_summary"), doc.get("status")
        return RunInfo(project=project if isinstance(project, str) else None,
                       title=title if isinstance(title, str) else None,
                       status=status if isinstance(status, str) else None,
                       phase=self._phase(doc))

    @staticmethod
    def _phase(doc: dict[str, Any]) -> str | None:
        c = doc.get("active_cycle")
        if type(c) is dict:
            parts = [str(c[k]) for k in ("agent", "phase", "cycle_type") if c.get(k) is not None]
            if c.get("waiting_for") is not None:
                parts.append(f"waiting for {c['waiting_for']}")
            return " ".join(parts) or None
        step, total, agent = doc.get("current_step"), doc.get("total_steps"), doc.get("current_agent")
        if type(step) is int and type(total) is int and total > 0:
            return f"step {step}/{total}" + (f" {agent}" if isinstance(agent, str) else "")
        return agent if isinstance(agent, str) else None

    def validate(self, doc: JSON) -> list[Finding]:
        return validate_state(doc)

    def summary(self, event: Event) -> str | None:
        return _summary(event)

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        from eventstore.dialects.friday.simulate import simulate_session  # the simulator loads only for demo and tests

        return simulate_session(rng, run_id=run_id, start=start)


def _summary(e: Event) -> str:  # noqa: C901 - one line per event type, flat on purpose
    if isinstance(e, ev.StateInitialised):
        return "state file initialised"
    if isinstance(e, ev.StateReset):
        return "state reset: removed " + ", ".join(e.removed)
    if isinstance(e, ev.StateSaved):
        return f"state saved at {e.last_updated}"
    if isinstance(e, ev.StatusChanged):
        return f"status {e.previous} -> {e.status}"
    if isinstance(e, ev.RequestChanged):
        return f"request: {_short(e.request_summary)}"
    if isinstance(e, ev.ContextChanged):
        proj = e.context.get("project") if isinstance(e.context, dict) else None
        return f"context updated (project: {_short(proj, 40)})"
    if isinstance(e, ev.NextActionChanged):
        return f"next action: {_short(e.next_action)}"
    if isinstance(e, ev.Blocked):
        return f"blocked: {_short(e.block_reason)}"
    if isinstance(e, ev.Unblocked):
        return "unblocked" + (f" (was: {_short(e.previous_reason, 50)})" if e.previous_reason else "")
    if isinstance(e, ev.PlanProposed):
        n = len(e.plan) if isinstance(e.plan, list) else "?"
        return f"plan proposed: {n} step(s)"
    if isinstance(e, ev.PlanApproved):
        return f"plan approved ({e.steps} step(s)); at step {e.step}, status {e.status}"
    if isinstance(e, ev.PlanReplaced):
        n = len(e.plan) if isinstance(e.plan, list) else "?"
        return f"plan replaced ({e.reason}): {e.previous_steps} -> {n} step(s)"
    if isinstance(e, ev.StepDelegated):
        parts = []
        if e.step is not UNSET:
            parts.append(f"step {e.step}")
        if e.agent is not UNSET:
            parts.append(f"to {e.agent}" if e.agent is not None else "(agent cleared)")
        if e.execution_mode is not UNSET:
            parts.append(f"mode {e.execution_mode}")
        if e.total_steps is not UNSET:
            parts.append(f"of {e.total_steps}")
        return "delegated " + " ".join(parts)
    if isinstance(e, ev.StepStatusChanged):
        out = f", output {_short(e.output, 40)}" if e.output is not UNSET and e.output is not None else ""
        st = e.status if e.status is not UNSET else "(unchanged)"
        return f"step {e.step} ({e.agent}) {st}{out}"
    if isinstance(e, ev.TaskQueueSet):
        queued = len(e.pending_tasks) if isinstance(e.pending_tasks, list) else None
        return "task queue set" + (f": {queued} pending" if queued is not None else "") + (
            f", {e.total_tasks} total" if e.total_tasks is not UNSET else "")
    if isinstance(e, ev.TaskStarted):
        tid = e.task_id if e.task_id is not UNSET else "(same task)"
        return f"task {tid} started" + (f": {_short(e.title, 50)}" if isinstance(e.title, str) else "")
    if isinstance(e, ev.TaskCompleted):
        return f"task {e.task_id} completed"
    if isinstance(e, ev.CycleOpened):
        extra = e.phase or e.mode
        return f"{e.agent} cycle opened ({e.cycle_type}{', ' + str(extra) if extra else ''})"
    if isinstance(e, ev.ReportReceived):
        parts = [f"{e.agent} report"]
        if e.last_report_type is not UNSET:
            parts.append(str(e.last_report_type))
        for key in ("gap_queue", "ambiguity_queue"):
            q = getattr(e, key)
            if isinstance(q, list):
                parts.append(f"{len(q)} {key.split('_')[0]}(s) queued")
        if e.unresolved_blocking_gaps is not UNSET:
            parts.append(f"{e.unresolved_blocking_gaps} blocking")
        if e.cycle_count is not UNSET:
            parts.append(f"round {e.cycle_count}")
        return ", ".join(parts)
    if isinstance(e, ev.InteractionSurfaced):
        wait = e.waiting_for if e.waiting_for is not UNSET else None
        item = f" {e.item_id}" if e.item_id else ""
        return f"surfaced{item}" + (f", waiting for {wait}" if wait else "")
    if isinstance(e, ev.ParseFallbackEntered):
        return f"parse fallback on {e.report_type}: {_short(e.fallback_reason, 50)}"
    if isinstance(e, ev.AnswerCaptured):
        return f"answer captured for {e.item_id}: {_short(e.answer, 50)}"
    if isinstance(e, ev.BatchSent):
        return f"{e.queue_kind} batch sent ({len(e.item_ids)} answer(s))"
    if isinstance(e, ev.CycleClosed):
        return f"{e.agent} cycle closed after {e.cycle_count} round(s) ({e.last_report_type})"
    if isinstance(e, ev.SessionMetricsRecorded):
        flag = "" if e.risk_score == e.computed_risk_score else f" (formula: {e.computed_risk_score})"
        return f"session metrics recorded, risk_score {e.risk_score}{flag}"
    return type(e).__name__


__all__ = ["FridayDialect", "computed_risk_score", "risk_score_from_metrics", "risk_score_mismatch",
           "validate_state"]
