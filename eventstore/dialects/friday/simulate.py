"""A simulator of one FRIDAY session, writing the state file the way the skills describe.

One run: a fresh state, a request with a proposed plan, approval, then each step in turn —
analyst Phase 1 / Phase 2 loops (gap / ambiguity queues, one question at a time, answers
captured verbatim, a consolidated batch sent, sometimes another round, sometimes a parse
fallback), an architect loop (mode clarification, proposal, change request, document offer),
implementation steps (task-driven with a task queue, or direct-action), sometimes a block and
a recovery, sometimes a change of direction that replaces the plan — and ``complete``.
``session_metrics`` is refreshed after each specialist completion with the additive
``risk_score``.

Deliberately injected quirks (the only findings ``validate`` should report on these docs):

* ``risk-score-mismatch``: with probability 0.15 per metrics write the recorded ``risk_score``
  is left stale (as in real versions 06-08);
* ``status-not-in-enum`` + ``current-step-out-of-range``: with probability 0.1 the session ends
  with a reset to ``"idle"`` and an empty plan at step 0/0 (as in real version 09).

Deterministic for a given ``rng`` state; 10-40 snapshots per run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore import documents
from eventstore.dialects.base import Snapshot
from eventstore.dialects.friday.lens import _TOP_RANK, _put
from eventstore.dialects.friday.validate import risk_score_from_metrics

MAX_SNAPSHOTS = 40
PROJECTS = [
    ("warehouse inventory service", "Clean Architecture", ".NET 10, EF Core, PostgreSQL"),
    ("clinic appointment booking", "Vertical Slice Architecture", ".NET 10 minimal APIs, Blazor"),
    ("fleet telemetry dashboard", "Hexagonal Architecture", ".NET 10, Angular, SignalR"),
    ("library lending portal", "Onion Architecture", "ASP.NET Core, EF Core, SQL Server"),
]
FEATURES = ["supplier returns", "recurring bookings", "geofence alerts", "late-fee waivers",
            "bulk CSV import", "role-based approvals", "audit trail export"]
GAP_QUESTIONS = [
    "Who is allowed to approve a {f} request?", "What happens when a {f} request is cancelled midway?",
    "Must {f} work offline or only online?", "Which notification should users get for {f}?",
    "Is there a limit on how many {f} items a user can create per day?",
    "Should {f} history be editable after submission?",
]
ANSWERS = ["Only warehouse managers.", "Keep it as draft and notify the owner.", "Online only for now.",
           "Email plus an in-app badge.", "No limit in the first release.", "No — history is read-only.",
           "Same rule as the existing orders flow.", "Ask me again after the pilot; defer it."]


class _Session:
    def __init__(self, rng: random.Random, run_id: str, start: datetime) -> None:
        self.rng = rng
        self.run_id = run_id
        self.t = start if start.tzinfo else start.replace(tzinfo=UTC)
        self.snaps: list[Snapshot] = []
        self.doc: dict[str, Any] = {}
        self.project, self.arch, self.stack = rng.choice(PROJECTS)
        self.feature = rng.choice(FEATURES)
        self.gap_seq = 0
        self.task_seq = 0
        self.counters: dict[str, Any] = {
            "specialist_runs_total": 0, "specialist_runs_current_thread": 0, "distinct_specialists": [],
            "distinct_specialist_count": 0, "cycle_rounds_total": 0, "recovery_attempts": 0,
            "prompt_failure_retries": 0, "long_outputs_count": 0, "large_summaries_count": 0,
            "last_output_class": "none", "next_action_type": "none", "scope_confusion_signals": 0,
            "mixed_scope_signal": False, "risk_score": 0,
        }

    # -------------------------------------------------------------- writing

    def room(self, needed: int) -> bool:
        """Whether ``needed`` more snapshots still fit (keeps runs within MAX_SNAPSHOTS)."""
        return len(self.snaps) + needed <= MAX_SNAPSHOTS - 4

    def put(self, key: str, value: Any) -> None:
        _put(self.doc, key, value, _TOP_RANK)

    def save(self, minutes: tuple[int, int] = (1, 12)) -> None:
        self.t += timedelta(minutes=self.rng.randint(*minutes), seconds=self.rng.randint(0, 59))
        self.put("last_updated", self.t.strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.snaps.append(Snapshot(doc=documents.copy(self.doc), occurred_at=self.t, stream_hint=self.run_id,
                                   source={"simulated": "friday", "run_id": self.run_id,
                                           "seq": len(self.snaps) + 1}))

    def metrics(self, *, agent: str, output_class: str, next_type: str, rounds: int = 0) -> None:
        c, rng = self.counters, self.rng
        c["specialist_runs_total"] += 1
        c["specialist_runs_current_thread"] += 1
        if agent not in c["distinct_specialists"]:
            c["distinct_specialists"].append(agent)
        c["distinct_specialist_count"] = len(c["distinct_specialists"])
        c["cycle_rounds_total"] += rounds
        c["long_outputs_count"] += rng.random() < 0.5
        c["large_summaries_count"] += rng.random() < 0.15
        c["prompt_failure_retries"] += rng.random() < 0.05
        c["scope_confusion_signals"] += rng.random() < 0.05
        c["last_output_class"] = output_class
        c["next_action_type"] = next_type
        if rng.random() >= 0.15:  # else: quirk, a stale recorded risk_score
            c["risk_score"] = risk_score_from_metrics(c)
        self.put("session_metrics", documents.copy(c))

    # -------------------------------------------------------------- the run

    def run(self) -> list[Snapshot]:
        rng = self.rng
        self.doc = {"last_updated": "", "status": "fresh", "request_summary": "No active request.",
                    "context": {"project": self.project, "architecture": "unknown", "stack": self.stack,
                                "notes": "Clean baseline."},
                    "session_metrics": documents.copy(self.counters), "block_reason": None,
                    "next_action": "Wait for the next user request."}
        self.save()
        plan = self.propose(rng.choice(["feature", "feature", "architecture", "implementation"]))
        changed = False
        i = 0
        while i < len(plan):
            if not changed and i > 0 and rng.random() < 0.12:
                plan, changed, i = self.change_direction(plan, i), True, i
                continue
            self.run_step(plan, i)
            i += 1
        self.finish()
        return self.snaps

    def propose(self, kind: str) -> list[dict[str, Any]]:
        f = self.feature
        templates: dict[str, list[tuple[str, str | None, str]]] = {
            "feature": [("temper-analyst", "phase-1-prd", f"Elicit requirements and produce the PRD for {f}."),
                        ("temper-analyst", "phase-2-specs", f"Generate specs for {f} from the approved PRD."),
                        ("temper-architect", None, f"Propose the architecture for {f}."),
                        ("temper-backend", None, f"Implement the {f} backend tasks.")],
            "architecture": [("temper-architect", None, f"Solve the persistence design problem for {f}."),
                             ("temper-backend", None, f"Implement the approved {f} design."),
                             ("temper-review", None, f"Review the {f} implementation.")],
            "implementation": [("temper-analyst", "phase-1-prd", f"Clarify the {f} requirements."),
                               ("temper-backend", None, f"Implement {f} directly."),
                               ("temper-review", None, f"Review the {f} change.")],
        }
        steps = templates[kind]
        plan = [{"step": n, "agent": a, "phase": ph, "description": d, "status": "pending", "output": None}
                for n, (a, ph, d) in enumerate(steps, 1)]
        self.put("status", "awaiting-approval")
        self.put("request_summary", f"Add {f} to the {self.project}.")
        self.put("context", {"project": self.project, "architecture": self.arch, "stack": self.stack,
                             "notes": f"User asked for {f}; plan proposed, awaiting approval."})
        self.put("approved_plan", plan)
        self.put("current_step", 1)
        self.put("total_steps", len(plan))
        self.put("current_agent", plan[0]["agent"])
        self.put("next_action", f"Wait for the user to approve the {len(plan)}-step plan.")
        self.save()
        return plan

    def change_direction(self, plan: list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
        """The user approves a change of direction: remaining steps replaced by a direct path + review."""
        kept = [documents.copy(s) for s in plan[:i]]
        kept.append({"step": i + 1, "agent": "temper-backend", "phase": None,
                     "description": f"Implement {self.feature} via the approved direct-action path.",
                     "status": "pending", "output": None})
        kept.append({"step": i + 2, "agent": "temper-review", "phase": None,
                     "description": f"Review the direct-action {self.feature} change.",
                     "status": "pending", "output": None})
        self.counters["mixed_scope_signal"] = self.rng.random() < 0.5
        self.counters["next_action_type"] = "change-direction"
        self.counters["risk_score"] = risk_score_from_metrics(self.counters)
        self.put("session_metrics", documents.copy(self.counters))
        ctx = dict(self.doc["context"])
        ctx["notes"] = "User approved a change-direction: remaining steps replaced by a direct-action path."
        self.put("context", ctx)
        self.put("approved_plan", kept)
        self.put("total_steps", len(kept))
        self.put("current_step", i + 1)
        self.put("current_agent", "temper-backend")
        self.put("status", "awaiting-approval")
        self.put("next_action", "Wait for approval of the change-direction plan.")
        self.save()
        return kept

    def point(self, plan: list[dict[str, Any]], i: int, status: str) -> None:
        self.put("approved_plan", plan)
        self.put("current_step", i + 1)
        self.put("current_agent", plan[i]["agent"])
        self.put("status", status)

    def run_step(self, plan: list[dict[str, Any]], i: int) -> None:
        step = plan[i]
        agent = step["agent"]
        if agent == "temper-analyst":
            rounds, output = self.analyst_cycle(plan, i), f"Docs/{'PRD' if step['phase'] == 'phase-1-prd' else 'Specs'}.md"
        elif agent == "temper-architect":
            rounds, output = self.architect_cycle(plan, i), "Docs/Architecture.md"
        elif agent == "temper-backend":
            rounds, output = 0, self.implementation(plan, i)
        else:
            self.point(plan, i, "in-progress")
            self.put("next_action", f"Wait for {agent} to finish step {i + 1}.")
            self.save()
            rounds, output = 0, "Review report: no blocking findings."
        step["status"], step["output"] = "complete", output
        last = i + 1 == len(plan)
        self.put("approved_plan", plan)
        self.put("block_reason", None)
        self.metrics(agent=agent, output_class="completion-report",
                     next_type="none" if last else "approved-next-specialist", rounds=rounds)
        if not last:
            self.point(plan, i + 1, "awaiting-approval")
            self.put("next_action", f"Wait for approval to delegate step {i + 2} to {plan[i + 1]['agent']}.")
            self.save()

    # -------------------------------------------------------------- analyst loop

    def queue(self, kind: str, n: int) -> list[dict[str, Any]]:
        items = []
        for _ in range(n):
            self.gap_seq += 1
            q = self.rng.choice(GAP_QUESTIONS).format(f=self.feature)
            sev = "BLOCKING" if kind == "ambiguity" else self.rng.choice(["BLOCKING", "BLOCKING", "IMPORTANT"])
            key = "gap_id" if kind == "gap" else "ambiguity_id"
            items.append({key: f"{'GAP' if kind == 'gap' else 'AMB'}-{self.gap_seq:03d}", "severity": sev,
                          "question_text": q})
        return items

    def analyst_cycle(self, plan: list[dict[str, Any]], i: int) -> int:
        rng, phase = self.rng, plan[i]["phase"]
        kind = "gap" if phase == "phase-1-prd" else "ambiguity"
        report = "gap-report" if kind == "gap" else "ambiguity-stop"
        plan[i]["status"] = "in-cycle"
        self.point(plan, i, "awaiting-agent-cycle")
        queue = self.queue(kind, rng.randint(2, 3))
        cycle: dict[str, Any] = {
            "agent": "temper-analyst", "phase": phase,
            "cycle_type": "gap-resolution" if kind == "gap" else "spec-ambiguity-resolution",
            "mode": None, "waiting_for": f"{kind}-answer", "last_report_type": report,
            "question_origin": "analyst", "pending_interaction": None,
            f"{kind}_queue": queue, f"collected_{kind}_answers": {}, f"current_{kind}_index": 0,
            "unresolved_blocking_gaps": sum(q["severity"] == "BLOCKING" for q in queue), "cycle_count": 1,
        }
        self.put("active_cycle", cycle)
        if rng.random() < 0.2:  # the first report could not be parsed reliably
            cycle[f"{kind}_queue"] = []
            cycle["waiting_for"] = "manual-review"
            cycle["pending_interaction"] = {
                "surface_via": "plain-text", "interaction_type": "parse-fallback",
                "prompt_text": "The analyst report is shown above; reply directly or ask for a rerun.",
                "expected_reply": "manual reply",
                "source_ref": {"report_type": report, "item_id": None, "sequence": 1, "total": 1},
                "resume_hint": "Answer the analyst report directly or request a rerun.",
                "fallback_reason": "Item IDs missing; questions fused into one prompt."}
            self.put("next_action", "Wait for the user's direct reply or rerun decision.")
            self.save()
            cycle["cycle_count"] += 1
            cycle[f"{kind}_queue"] = queue
        while True:
            self.surface(cycle, kind, report, 0)
            self.save()
            for n, item in enumerate(cycle[f"{kind}_queue"]):
                item_id = item["gap_id" if kind == "gap" else "ambiguity_id"]
                cycle[f"collected_{kind}_answers"][item_id] = rng.choice(ANSWERS)
                if n + 1 < len(cycle[f"{kind}_queue"]):
                    self.surface(cycle, kind, report, n + 1)
                else:
                    cycle[f"current_{kind}_index"] = n + 1
                    cycle["waiting_for"] = f"{kind}-batch-send"
                    cycle["pending_interaction"] = {
                        "surface_via": "plain-text", "interaction_type": f"analyst-{kind}",
                        "prompt_text": f"All {kind} answers captured; sending the labelled batch to temper-analyst.",
                        "expected_reply": "manual reply",
                        "source_ref": {"report_type": report, "item_id": None, "sequence": n + 1, "total": n + 1},
                        "resume_hint": f"Send the consolidated {kind.upper()} batch before asking anything else.",
                        "fallback_reason": None}
                    self.put("next_action", "Send the consolidated answer batch to temper-analyst.")
                self.save()
            if cycle["cycle_count"] < 3 and rng.random() < 0.35 and self.room(8):
                report = "resolution-status" if kind == "gap" else "ambiguity-resolution-status"
                new = self.queue(kind, rng.randint(1, 2))
                cycle["last_report_type"] = report
                cycle[f"{kind}_queue"] = new
                cycle[f"collected_{kind}_answers"] = {}
                cycle["unresolved_blocking_gaps"] = sum(q["severity"] == "BLOCKING" for q in new)
                cycle["cycle_count"] += 1
                continue
            break
        rounds: int = cycle["cycle_count"]
        del self.doc["active_cycle"]
        return rounds

    def surface(self, cycle: dict[str, Any], kind: str, report: str, n: int) -> None:
        q = cycle[f"{kind}_queue"][n]
        item_id = q["gap_id" if kind == "gap" else "ambiguity_id"]
        cycle["waiting_for"] = f"{kind}-answer"
        cycle[f"current_{kind}_index"] = n
        cycle["pending_interaction"] = {
            "surface_via": "question", "interaction_type": f"analyst-{kind}", "prompt_text": q["question_text"],
            "expected_reply": f"single {kind} answer",
            "source_ref": {"report_type": report, "item_id": item_id, "sequence": n + 1,
                           "total": len(cycle[f"{kind}_queue"])},
            "resume_hint": f"Answer {item_id}.", "fallback_reason": None}
        self.put("next_action", f"Ask the user {item_id} and capture the answer exactly.")

    # -------------------------------------------------------------- architect loop

    def architect_cycle(self, plan: list[dict[str, Any]], i: int) -> int:
        rng = self.rng
        plan[i]["status"] = "in-cycle"
        self.point(plan, i, "awaiting-agent-cycle")
        stages: list[tuple[str, str, str, str]] = []  # (report, waiting_for, interaction, prompt)
        if rng.random() < 0.4:
            stages.append(("mode-report", "mode-clarification", "architect-clarification",
                           "Is this an architectural design or a specific technical problem?"))
        stages.append(("clarification-request", rng.choice(["context-clarification", "preference-clarification"]),
                       "architect-clarification", "Any preference for the architecture pattern? 'no preference' is fine."))
        stages.append(("architectural-proposal", "proposal-confirmation", "architect-decision",
                       "Approve the proposal or request changes (pattern, stack, external dependencies)."))
        if rng.random() < 0.4:
            stages.append(("updated-proposal", "proposal-confirmation", "architect-decision",
                           "Approve the updated proposal or request further changes."))
        stages.append(("document-offer", "document-selection", "architect-decision",
                       "Which of the offered documents should be generated?"))
        mode = "architectural-design" if "Solve" not in plan[i]["description"] else "problem-solving"
        for n, (report, wait, itype, prompt) in enumerate(stages, 1):
            cycle = {"agent": "temper-architect", "phase": None, "cycle_type": "architect-loop",
                     "mode": None if wait == "mode-clarification" else mode, "waiting_for": wait,
                     "last_report_type": report, "question_origin": "architect",
                     "pending_interaction": {
                         "surface_via": "question", "interaction_type": itype, "prompt_text": prompt,
                         "expected_reply": "clarification answer" if "clarification" in wait else
                         "document selection" if wait == "document-selection" else
                         "proposal confirmation/change request",
                         "source_ref": {"report_type": report, "item_id": None, "sequence": 1, "total": 1},
                         "resume_hint": prompt, "fallback_reason": None},
                     "cycle_count": n}
            if n > 1 and "active_cycle" in self.doc:
                old = self.doc["active_cycle"]
                old.update(cycle)  # same loop: FRIDAY rewrites the fields in place
            else:
                self.put("active_cycle", cycle)
            self.put("next_action", f"Wait for the user's {wait.replace('-', ' ')}.")
            self.save()
        del self.doc["active_cycle"]
        return len(stages)

    # -------------------------------------------------------------- implementation

    def implementation(self, plan: list[dict[str, Any]], i: int) -> str:
        rng = self.rng
        direct = "direct" in plan[i]["description"] or rng.random() < 0.3
        self.point(plan, i, "in-progress")
        self.put("current_execution_mode", "direct-action" if direct else "task-driven")
        if direct:
            self.put("next_action", "Wait for temper-backend to finish the direct-action change.")
            self.save()
            self.maybe_block()
            return f"{self.feature} implemented via direct action"
        tasks: list[dict[str, Any]] = []
        for cat in rng.sample(["Backend", "Backend", "Testing", "DevOps"], rng.randint(2, 3)):
            self.task_seq += 1
            tid = f"T{self.task_seq:03d}"
            tasks.append({"task_id": tid, "work_item_type": "user-story", "work_item_id": "US-001",
                          "category": cat, "agent": "temper-backend", "title": f"{cat} work for {self.feature}",
                          "status": "pending", "dependencies": [tasks[-1]["task_id"]] if tasks else [],
                          "location": f"Plan/User-Stories/US-001-{self.feature.replace(' ', '-')}/{cat}/{tid}.md"})
        self.put("total_tasks", len(tasks))
        self.put("completed_tasks", [])
        self.put("pending_tasks", documents.copy(tasks))
        for n, task in enumerate(tasks):
            self.start_task(task)
            self.put("next_action", f"Wait for temper-backend to complete {task['task_id']}.")
            self.save()
            if n == 0:
                self.maybe_block()
            done = dict(task, status="complete")
            done.pop("dependencies")
            self.doc["pending_tasks"] = [t for t in self.doc["pending_tasks"] if t["task_id"] != task["task_id"]]
            self.doc["completed_tasks"].append(done)
        self.put("status", "awaiting-task-approval")
        self.put("next_action", "Wait for the user to approve the completed backend tasks.")
        self.save()
        self.put("status", "in-progress")
        return f"{len(tasks)} backend tasks completed"

    def start_task(self, task: dict[str, Any]) -> None:
        for key, value in (("current_task", task["task_id"]), ("current_work_item_type", task["work_item_type"]),
                           ("current_work_item_id", task["work_item_id"]), ("current_task_category", task["category"]),
                           ("current_task_location", task["location"]), ("task_title", task["title"])):
            self.put(key, value)

    def maybe_block(self) -> None:
        if self.rng.random() >= 0.25 or not self.room(3):
            return
        prev_status = self.doc["status"]
        self.put("status", "blocked")
        self.put("block_reason", "Build gate failed: the test project does not compile after the change.")
        self.put("next_action", "Wait for the user to approve a recovery attempt.")
        self.save()
        self.counters["recovery_attempts"] += 1
        self.counters["next_action_type"] = "recovery-approval"
        self.counters["risk_score"] = risk_score_from_metrics(self.counters)
        self.put("session_metrics", documents.copy(self.counters))
        self.put("status", prev_status)
        self.put("block_reason", None)
        self.put("next_action", "Recovery approved; re-delegating to the specialist.")
        self.save()

    # -------------------------------------------------------------- the end

    def finish(self) -> None:
        self.put("status", "complete")
        ctx = dict(self.doc["context"])
        ctx["notes"] = f"All steps for {self.feature} complete and approved."
        self.put("context", ctx)
        self.put("next_action", "Workflow complete; wait for the next request.")
        self.save()
        if self.rng.random() < 0.1:  # quirk: the undocumented "idle" reset seen in real data
            for key in ("current_execution_mode", "current_task", "current_work_item_type",
                        "current_work_item_id", "current_task_category", "current_task_location",
                        "task_title", "total_tasks", "completed_tasks", "pending_tasks"):
                self.doc.pop(key, None)
            self.put("status", "idle")
            self.put("request_summary", "No active workflow. All prior work approved and closed.")
            self.put("approved_plan", [])
            self.put("current_step", 0)
            self.put("total_steps", 0)
            self.put("current_agent", None)
            self.put("next_action", "Idle. Awaiting the next user request.")
            self.save()


def simulate_session(rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
    """Snapshots of one simulated FRIDAY session (see the module docstring)."""
    yield from _Session(rng, run_id, start).run()
