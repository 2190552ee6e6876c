"""FRIDAY validation: the state-schema skill's rules as findings, never errors that drop data.

Sources: ``seeds/friday-state-schema.md`` (required fields, status values, plan/step
consistency, active-cycle rules, session_metrics types) and, for the ``risk_score`` formula,
the upstream ``workflow/friday/session-mode-recommendation`` skill (Temper-AI, MIT), whose
additive model the state schema refers to:

    +1 specialist_runs_current_thread >= 2     +1 distinct_specialist_count >= 2
    +1 cycle_rounds_total >= 3                 +1 recovery_attempts >= 1
    +1 prompt_failure_retries >= 1             +1 long_outputs_count >= 2
    +1 large_summaries_count >= 1              +1 scope_confusion_signals >= 1
    +1 last_output_class in {failure, partial-output, unclear-output, recovery-report}
    +2 mixed_scope_signal is true

The recorded ``risk_score`` is history and is kept; a disagreement is the finding
``risk-score-mismatch``.  Severity ``error`` marks what the skill says blocks a safe resume
(missing required fields, an unknown status); everything else is a ``warning``.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from eventstore.dialects.base import Finding
from eventstore.documents import pointer

JSON = Any

STATUSES = ("fresh", "in-progress", "awaiting-approval", "awaiting-task-approval",
            "awaiting-agent-cycle", "complete", "blocked")
ARCHITECTURES = ("Clean Architecture", "Hexagonal Architecture", "Vertical Slice Architecture",
                 "Onion Architecture", "unknown")
PHASES = ("phase-1-prd", "phase-2-specs")
STEP_STATUSES = ("complete", "pending", "in-cycle")
EXECUTION_MODES = ("task-driven", "direct-action", "direct-bugfix", "recovery")
WORK_ITEM_TYPES = ("user-story", "bug", "refactor", "setup", "future-type")
TASK_CATEGORIES = ("Backend", "Frontend", "Testing", "DevOps")
CYCLE_AGENTS = {"temper-analyst": "analyst", "temper-architect": "architect"}
CYCLE_TYPES = ("gap-resolution", "spec-ambiguity-resolution", "architect-loop")
MODES = ("architectural-design", "problem-solving")
ANALYST_WAITS = {
    "phase-1-prd": ("gap-answer", "gap-batch-send", "manual-review", "none"),
    "phase-2-specs": ("ambiguity-answer", "ambiguity-batch-send", "manual-review", "none"),
}
# architect stage <- the report types that normally precede it (architect-communication skill)
ARCHITECT_STAGES: dict[str, tuple[str, ...]] = {
    "mode-clarification": ("mode-report",),
    "context-clarification": ("clarification-request", "domain-analysis", "problem-analysis"),
    "preference-clarification": ("clarification-request", "domain-analysis", "problem-analysis"),
    "problem-clarification": ("clarification-request", "domain-analysis", "problem-analysis"),
    "proposal-confirmation": ("architectural-proposal", "architectural-plan", "updated-proposal"),
    "document-selection": ("document-offer",),
    "manual-review": (),  # any report that could not be reduced
    "none": ("completion-report",),
}
REPORT_TYPES = ("gap-report", "resolution-status", "ambiguity-stop", "ambiguity-resolution-status",
                "mode-report", "clarification-request", "domain-analysis", "problem-analysis",
                "architectural-proposal", "architectural-plan", "updated-proposal", "document-offer",
                "completion-report")
SURFACES = ("question", "plain-text")
INTERACTION_TYPES = ("analyst-gap", "analyst-ambiguity", "architect-clarification",
                     "architect-decision", "parse-fallback")
SEVERITIES = ("BLOCKING", "IMPORTANT", "CLARIFYING")
OUTPUT_CLASSES = ("completion-report", "proposal", "task-result", "gap-report", "ambiguity-report",
                  "failure", "partial-output", "unclear-output", "recovery-report", "none")
NEXT_ACTION_TYPES = ("none", "direct-answer", "output-approval", "approved-next-specialist",
                     "approved-exact-continuation", "analyst-cycle-input", "architect-cycle-input",
                     "recovery-approval", "repair-or-reset", "blocked-input", "change-direction")
METRIC_COUNTERS = ("specialist_runs_total", "specialist_runs_current_thread",
                   "distinct_specialist_count", "cycle_rounds_total", "recovery_attempts",
                   "prompt_failure_retries", "long_outputs_count", "large_summaries_count",
                   "scope_confusion_signals")
METRIC_KEYS = ("specialist_runs_total", "specialist_runs_current_thread", "distinct_specialists",
               "distinct_specialist_count", "cycle_rounds_total", "recovery_attempts",
               "prompt_failure_retries", "long_outputs_count", "large_summaries_count",
               "last_output_class", "next_action_type", "scope_confusion_signals",
               "mixed_scope_signal", "risk_score")
KNOWN_TOP = ("last_updated", "status", "request_summary", "context", "approved_plan",
             "current_step", "total_steps", "current_agent", "current_execution_mode",
             "current_task", "current_work_item_type", "current_work_item_id",
             "current_task_category", "current_task_location", "task_title", "total_tasks",
             "completed_tasks", "pending_tasks", "active_cycle", "session_metrics",
             "block_reason", "next_action")
_RISKY_OUTPUTS = ("failure", "partial-output", "unclear-output", "recovery-report")
# thresholds of the additive model: (counter, minimum, points)
RISK_RULES: tuple[tuple[str, int, int], ...] = (
    ("specialist_runs_current_thread", 2, 1), ("distinct_specialist_count", 2, 1),
    ("cycle_rounds_total", 3, 1), ("recovery_attempts", 1, 1), ("prompt_failure_retries", 1, 1),
    ("long_outputs_count", 2, 1), ("large_summaries_count", 1, 1), ("scope_confusion_signals", 1, 1),
)


def _is_int(v: Any) -> TypeGuard[int]:
    return type(v) is int


# ================================================================== risk score


def risk_score_from_metrics(metrics: dict[str, Any]) -> int:
    """The documented additive risk model over one ``session_metrics`` object.

    Non-integer counters count as 0 (they are reported by ``validate``, not guessed at).

    >>> risk_score_from_metrics({"distinct_specialist_count": 2, "mixed_scope_signal": True})
    3
    """
    score = 0
    for key, minimum, points in RISK_RULES:
        v = metrics.get(key)
        if _is_int(v) and v >= minimum:
            score += points
    if metrics.get("last_output_class") in _RISKY_OUTPUTS:
        score += 1
    if metrics.get("mixed_scope_signal") is True:
        score += 2
    return score


def computed_risk_score(doc: JSON) -> int | None:
    """The formula's ``risk_score`` for a state document; None when it has no session_metrics."""
    if type(doc) is not dict:
        return None
    m = doc.get("session_metrics")
    return risk_score_from_metrics(m) if type(m) is dict else None


def risk_score_mismatch(doc: JSON) -> tuple[Any, int] | None:
    """``(recorded, computed)`` when the recorded risk_score disagrees with the formula."""
    computed = computed_risk_score(doc)
    if computed is None:
        return None
    recorded = doc["session_metrics"].get("risk_score")
    if _is_int(recorded) and recorded == computed:
        return None
    return recorded, computed


# ================================================================== validate


class _Findings:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, path: str, code: str, message: str, severity: str = "warning") -> None:
        self.items.append(Finding(path=path, code=code, message=message, severity=severity))

    def enum(self, obj: dict[str, Any], key: str, allowed: tuple[str, ...], base: tuple[str | int, ...],
             *, nullable: bool = False, code: str | None = None) -> None:
        if key not in obj:
            return
        v = obj[key]
        if v is None and nullable:
            return
        if v not in allowed:
            what = "null" if v is None else repr(v)
            self.add(pointer(*base, key), code or ("enum-null" if v is None else "value-not-in-enum"),
                     f"{key} is {what}; expected one of: {', '.join(allowed)}"
                     + (" or null" if nullable else ""))


def validate_state(doc: JSON) -> list[Finding]:
    """Findings for one FRIDAY state document (see the module docstring for the sources)."""
    f = _Findings()
    if type(doc) is not dict:
        f.add("", "not-an-object", "FRIDAY state must be a JSON object", "error")
        return f.items
    _top_level(doc, f)
    _plan(doc, f)
    _tasks(doc, f)
    _cycle(doc, f)
    _metrics(doc, f)
    return f.items


def _top_level(doc: dict[str, Any], f: _Findings) -> None:
    for key in ("last_updated", "status", "request_summary", "next_action"):
        if key not in doc or doc[key] is None or doc[key] == "":
            f.add(pointer(key), "missing-required", f"{key} is required for any persisted state", "error")
    for key in doc:
        if key not in KNOWN_TOP:
            f.add(pointer(key), "unknown-field", f"{key} is not a FRIDAY state field")
    status = doc.get("status")
    if "status" in doc and status is not None and status not in STATUSES:
        f.add("/status", "status-not-in-enum",
              f"status {status!r} is not a defined status ({', '.join(STATUSES)})", "error")
    ctx = doc.get("context")
    if "context" in doc:
        if type(ctx) is not dict:
            f.add("/context", "wrong-type", "context must be an object")
        else:
            f.enum(ctx, "architecture", ARCHITECTURES, ("context",))
    if status == "blocked":
        reason = doc.get("block_reason")
        if not isinstance(reason, str) or not reason.strip():
            f.add("/block_reason", "block-reason-missing", "block_reason is required and non-empty when blocked")
    f.enum(doc, "current_execution_mode", EXECUTION_MODES, (), nullable=True)


def _plan(doc: dict[str, Any], f: _Findings) -> None:
    status = doc.get("status")
    plan = doc.get("approved_plan")
    if status in ("in-progress", "awaiting-approval", "awaiting-task-approval") and "approved_plan" not in doc:
        f.add("/approved_plan", "plan-missing", f"approved_plan is required when status is {status}")
    if status == "in-progress" and doc.get("current_agent") in (None, ""):
        f.add("/current_agent", "current-agent-missing", "current_agent is required when status is in-progress")
    if "approved_plan" not in doc:
        return
    if type(plan) is not list:
        f.add("/approved_plan", "wrong-type", "approved_plan must be an array")
        return
    for key in ("current_step", "total_steps"):
        if key not in doc:
            f.add(pointer(key), "plan-pointer-missing", f"{key} is required when approved_plan exists")
    cur, total = doc.get("current_step"), doc.get("total_steps")
    if "total_steps" in doc and (not _is_int(total) or total != len(plan)):
        f.add("/total_steps", "total-steps-mismatch", f"total_steps is {total!r} but the plan has {len(plan)} step(s)")
    if "current_step" in doc and (not _is_int(cur) or not _is_int(total) or not 1 <= cur <= total):
        f.add("/current_step", "current-step-out-of-range",
              f"current_step must be an integer from 1 through total_steps ({cur!r} of {total!r})")
    first_open: int | None = None
    for i, item in enumerate(plan):
        base: tuple[str | int, ...] = ("approved_plan", i)
        if type(item) is not dict:
            f.add(pointer(*base), "wrong-type", "plan item must be an object")
            continue
        for key in ("step", "agent", "description", "status", "output"):
            if key not in item:
                f.add(pointer(*base, key), "plan-item-missing-field", f"plan item lacks {key}")
        if "step" in item and item["step"] != i + 1:
            f.add(pointer(*base, "step"), "plan-step-sequence",
                  f"step is {item['step']!r}; steps must be unique, sequential and in order ({i + 1})")
        f.enum(item, "status", STEP_STATUSES, base, code="plan-status-not-in-enum")
        f.enum(item, "phase", PHASES, base, nullable=True)
        if item.get("status") in ("pending", "in-cycle") and first_open is None:
            first_open = i + 1
        if item.get("status") == "complete" and item.get("output") in (None, ""):
            f.add(pointer(*base, "output"), "completed-step-without-output", "a completed step has no output reference")
    if first_open is not None:
        if status == "complete":
            f.add("/status", "complete-with-open-steps", f"status is complete but step {first_open} is still open")
        elif _is_int(cur) and cur != first_open:
            f.add("/current_step", "pending-step-mismatch",
                  f"the first pending/in-cycle step is {first_open} but current_step is {cur}")
    # an agent spelled two ways (plan "Explore" vs metrics "explore") is one specialist written twice
    metrics = doc.get("session_metrics")
    names = metrics.get("distinct_specialists") if type(metrics) is dict else None
    if type(names) is list:
        for i, item in enumerate(plan):
            agent = item.get("agent") if type(item) is dict else None
            if isinstance(agent, str) and agent not in names and any(
                    isinstance(n, str) and n.lower() == agent.lower() for n in names):
                f.add(pointer("approved_plan", i, "agent"), "agent-name-inconsistent",
                      f"agent {agent!r} appears with different spelling in session_metrics.distinct_specialists")


def _tasks(doc: dict[str, Any], f: _Findings) -> None:
    f.enum(doc, "current_work_item_type", WORK_ITEM_TYPES, (), nullable=True)
    f.enum(doc, "current_task_category", TASK_CATEGORIES, (), nullable=True)
    for key in ("completed_tasks", "pending_tasks"):
        if key in doc and type(doc[key]) is not list:
            f.add(pointer(key), "wrong-type", f"{key} must be an array")
    if doc.get("current_execution_mode") == "task-driven":
        for key in ("current_task", "task_title", "current_work_item_type", "current_work_item_id",
                    "current_task_category", "current_task_location"):
            if doc.get(key) in (None, ""):
                f.add(pointer(key), "task-metadata-missing", f"{key} is required for task-driven execution")
    done, pending, total = doc.get("completed_tasks"), doc.get("pending_tasks"), doc.get("total_tasks")
    if "total_tasks" in doc and type(done) is list and type(pending) is list:
        # the current task is either still in pending_tasks or already counted in completed_tasks
        if not _is_int(total) or total < len(done) + len(pending):
            f.add("/total_tasks", "task-count-mismatch",
                  f"total_tasks is {total!r} but {len(done)} completed + {len(pending)} pending are listed")


def _cycle(doc: dict[str, Any], f: _Findings) -> None:
    status = doc.get("status")
    c = doc.get("active_cycle")
    if status == "awaiting-agent-cycle" and type(c) is not dict:
        f.add("/active_cycle", "active-cycle-missing", "active_cycle is required when status is awaiting-agent-cycle", "error")
    if type(c) is not dict:
        if "active_cycle" in doc and c is not None:
            f.add("/active_cycle", "wrong-type", "active_cycle must be an object")
        return
    b: tuple[str | int, ...] = ("active_cycle",)
    agent = c.get("agent")
    role = CYCLE_AGENTS.get(agent) if isinstance(agent, str) else None
    if role is None:
        f.add(pointer(*b, "agent"), "cycle-agent-invalid", f"agent {agent!r} must be temper-analyst or temper-architect")
    for key in ("waiting_for", "last_report_type", "question_origin", "cycle_count"):
        if key not in c:
            f.add(pointer(*b, key), "cycle-field-missing", f"active_cycle lacks {key}")
    f.enum(c, "last_report_type", REPORT_TYPES, b)
    if role is not None and "question_origin" in c and c["question_origin"] != role:
        f.add(pointer(*b, "question_origin"), "cycle-origin-mismatch",
              f"question_origin {c['question_origin']!r} does not match agent {agent}")
    count = c.get("cycle_count")
    if "cycle_count" in c and (not _is_int(count) or count < 1):
        f.add(pointer(*b, "cycle_count"), "cycle-count-invalid", "cycle_count must be a positive integer")
    wait = c.get("waiting_for")
    if wait != "none" and "pending_interaction" not in c:
        f.add(pointer(*b, "pending_interaction"), "pending-interaction-missing",
              "pending_interaction is required unless waiting_for is none")
    pi = c.get("pending_interaction")
    if type(pi) is dict:
        _pending_interaction(pi, b + ("pending_interaction",), f)
    if role == "analyst":
        _analyst_cycle(c, b, f)
    elif role == "architect":
        if c.get("cycle_type") != "architect-loop":
            f.add(pointer(*b, "cycle_type"), "cycle-type-mismatch", "an architect cycle must be architect-loop")
        if wait != "mode-clarification":
            f.enum(c, "mode", MODES, b)
            if "mode" not in c:
                f.add(pointer(*b, "mode"), "cycle-field-missing", "architect cycle lacks mode")
        stage = ARCHITECT_STAGES.get(wait) if isinstance(wait, str) else None
        if stage is None:
            f.add(pointer(*b, "waiting_for"), "cycle-wait-invalid", f"waiting_for {wait!r} is not an architect stage")
        elif stage and c.get("last_report_type") not in stage:
            f.add(pointer(*b, "waiting_for"), "cycle-wait-report-mismatch",
                  f"waiting_for {wait!r} does not follow a {c.get('last_report_type')!r} report")


def _pending_interaction(pi: dict[str, Any], b: tuple[str | int, ...], f: _Findings) -> None:
    for key in ("surface_via", "interaction_type", "expected_reply", "source_ref"):
        if key not in pi:
            f.add(pointer(*b, key), "interaction-field-missing", f"pending_interaction lacks {key}")
    if pi.get("prompt_text") in (None, "") and pi.get("resume_hint") in (None, ""):
        f.add(pointer(*b, "prompt_text"), "interaction-field-missing", "pending_interaction needs prompt_text or resume_hint")
    f.enum(pi, "surface_via", SURFACES, b)
    f.enum(pi, "interaction_type", INTERACTION_TYPES, b)
    src = pi.get("source_ref")
    if type(src) is dict:
        if "report_type" not in src:
            f.add(pointer(*b, "source_ref", "report_type"), "interaction-field-missing", "source_ref lacks report_type")
        if src.get("item_id") is not None:
            for key in ("sequence", "total"):
                if not _is_int(src.get(key)):
                    f.add(pointer(*b, "source_ref", key), "interaction-field-missing",
                          f"source_ref.{key} is required when presenting a queued item")
    elif "source_ref" in pi:
        f.add(pointer(*b, "source_ref"), "wrong-type", "source_ref must be an object")


def _analyst_cycle(c: dict[str, Any], b: tuple[str | int, ...], f: _Findings) -> None:
    phase = c.get("phase")
    if phase not in PHASES:
        f.add(pointer(*b, "phase"), "cycle-phase-invalid", f"analyst phase {phase!r} must be phase-1-prd or phase-2-specs")
        return
    kind, ctype = ("gap", "gap-resolution") if phase == "phase-1-prd" else ("ambiguity", "spec-ambiguity-resolution")
    if c.get("cycle_type") != ctype:
        f.add(pointer(*b, "cycle_type"), "cycle-type-mismatch", f"{phase} requires cycle_type {ctype}")
    queue_key, index_key = f"{kind}_queue", f"current_{kind}_index"
    for key in (queue_key, f"collected_{kind}_answers", index_key):
        if key not in c:
            f.add(pointer(*b, key), "cycle-field-missing", f"{phase} requires {key}")
    wait = c.get("waiting_for")
    if wait not in ANALYST_WAITS[phase]:
        f.add(pointer(*b, "waiting_for"), "cycle-wait-invalid", f"waiting_for {wait!r} is not valid for {phase}")
    queue, index = c.get(queue_key), c.get(index_key)
    if type(queue) is list:
        for i, item in enumerate(queue):
            if type(item) is dict:
                f.enum(item, "severity", SEVERITIES, b + (queue_key, i))
        # a batch-send wait has moved past the queue; a parse fallback has no reliable queue
        if index_key in c and wait not in (f"{kind}-batch-send", "manual-review") and (not _is_int(index) or not 0 <= index < len(queue)):
            f.add(pointer(*b, index_key), "queue-index-out-of-range",
                  f"{index_key} {index!r} is outside the queue (size {len(queue)})")


def _metrics(doc: dict[str, Any], f: _Findings) -> None:
    if "session_metrics" not in doc:
        return
    m = doc["session_metrics"]
    b: tuple[str | int, ...] = ("session_metrics",)
    if type(m) is not dict:
        f.add("/session_metrics", "wrong-type", "session_metrics must be an object")
        return
    for key in m:
        if key not in METRIC_KEYS:
            f.add(pointer(*b, key), "metrics-unknown-field", f"{key} is not an allowed session_metrics field")
    for key in METRIC_KEYS:
        if key not in m:
            f.add(pointer(*b, key), "metrics-field-missing", f"session_metrics lacks {key}")
    for key in METRIC_COUNTERS + ("risk_score",):
        if key in m and (not _is_int(m[key]) or m[key] < 0):
            f.add(pointer(*b, key), "metrics-not-counter", f"{key} must be a non-negative integer, got {m[key]!r}")
    if "mixed_scope_signal" in m and type(m["mixed_scope_signal"]) is not bool:
        f.add(pointer(*b, "mixed_scope_signal"), "metrics-not-boolean", "mixed_scope_signal must be a boolean")
    f.enum(m, "last_output_class", OUTPUT_CLASSES, b)
    f.enum(m, "next_action_type", NEXT_ACTION_TYPES, b)
    names = m.get("distinct_specialists")
    if "distinct_specialists" in m:
        if type(names) is not list:
            f.add(pointer(*b, "distinct_specialists"), "wrong-type", "distinct_specialists must be an array")
        elif m.get("distinct_specialist_count") != len(names) or len(set(map(str, names))) != len(names):
            f.add(pointer(*b, "distinct_specialist_count"), "distinct-specialists-inconsistent",
                  f"distinct_specialist_count {m.get('distinct_specialist_count')!r} "
                  f"does not match {len(names)} distinct specialist name(s)")
    mismatch = risk_score_mismatch(doc)
    if mismatch is not None:
        recorded, computed = mismatch
        f.add(pointer(*b, "risk_score"), "risk-score-mismatch",
              f"recorded risk_score {recorded!r} but the additive formula gives {computed} (recorded value kept)")
