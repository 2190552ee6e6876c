"""A simulator of realistic multi-agent-pipeline runs: the ``agent-state.json`` snapshots a run
writes, every one valid against ``seeds/agent-state.schema.json``.

One run: Phase 0 intake (maturity, a question and its answer, baseline), Phase 1 plan (research
pass, plan critique or clarification rounds, a steer), Phase 2 dev (sub-step checkpoints, gate
ledger with fail -> pass recoveries, sometimes a halt and resume), Phase 3 review (diff risk, 1-4
review iterations by 2-3 reviewer models with fingerprinted findings, an anonymizationMap,
accepted subsets, deltas from iteration 2 on, review decisions, sometimes a circuit-breaker trip
then resume or abandon), Phase 4 delivery (commit, PR or publish, worktree removal, sometimes a
parked verification failure) and Phase 5 report.  Writes mimic write-state.mjs: members are
assigned in place, new members go last.  Deterministic for a given ``random.Random``.

Example::

    >>> import random, datetime as dt
    >>> snaps = list(simulate_run(random.Random(7), run_id="PROJ-1234",
    ...                           start=dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.timezone.utc)))
    >>> snaps[0].doc["taskId"], 15 <= len(snaps) <= 60
    ('PROJ-1234', True)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore import documents
from eventstore.dialects.base import Snapshot

REVIEWER_MODELS = ("claude-opus-4", "gpt-5", "gemini-2.5-pro", "claude-sonnet-4")
PHASE_MODELS = {0: ("sonnet",), 1: ("opus", "fable"), 2: ("sonnet", "opus"), 3: ("opus",),
                4: ("sonnet",), 5: ("haiku", "sonnet")}
PROJECTS = ("checkout-web", "payments-api", "mobile-ios", "ledger-service", "design-system")
FILES = ("src/cart/Cart.tsx", "src/cart/useCart.ts", "src/api/client.ts", "src/auth/session.ts",
         "src/db/migrations/0042_add_index.sql", "tests/cart.test.ts", "src/util/money.ts",
         "src/components/Button.tsx", "src/payments/refund.ts", "README.md")
ISSUES = ("unchecked null on response body", "race between save and refresh", "missing test for error path",
          "SQL built by string concatenation", "token logged at debug level", "off-by-one in pagination",
          "rounding in minor units", "stale closure captures old state", "unused export", "naming: ambiguous flag")
SEVERITIES = ("blocking", "important", "suggestion")
LABELS = "ABC"


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hex(rng: random.Random, bits: int) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


@dataclass
class _Issue:
    fingerprint: str
    severity: str
    file: str
    issue: str
    fix_rate: float = 0.8  # chance one rework cycle fixes it; stubborn issues trip the breaker

    def finding(self, **extra: Any) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "severity": self.severity, "file": self.file,
                "issue": self.issue, **extra}


@dataclass
class _Run:
    rng: random.Random
    run_id: str
    clock: datetime
    doc: dict[str, Any] = field(default_factory=dict)
    out: list[Snapshot] = field(default_factory=list)

    def tick(self, lo_minutes: float, hi_minutes: float) -> str:
        self.clock += timedelta(seconds=round(self.rng.uniform(lo_minutes, hi_minutes) * 60))
        return _iso(self.clock)

    def now(self) -> str:
        return _iso(self.clock)

    def emit(self) -> None:
        self.out.append(Snapshot(doc=documents.copy(self.doc), occurred_at=self.clock,
                                 source={"simulated": "mapipe"}, stream_hint=self.run_id))

    _head: str = ""  # the repository HEAD the gates run against

    # -- phases ------------------------------------------------------------------

    def start_phase(self, n: int, *, apply_steer: bool = True) -> None:
        rec = {"status": "in_progress", "startedAt": self.now(), "model": self.rng.choice(PHASE_MODELS[n])}
        self.doc["phases"][str(n)] = rec
        self.doc["currentPhase"] = n
        steer = self.doc.get("pendingSteer")
        if apply_steer and isinstance(steer, dict) and steer.get("appliedAt") is None:
            # A phase consumes a queued steer at entry, in the same write (never mid-phase).
            steer["appliedAt"] = self.now()
            steer["appliedPhase"] = n
        self.emit()

    def finish_phase(self, n: int, **extra: Any) -> None:
        rec = self.doc["phases"][str(n)]
        rec["status"] = "done"
        rec["finishedAt"] = self.now()
        rec.update(extra)
        self.emit()

    def gate(self, gate: str, verdict: str, **detail: Any) -> None:
        self.doc.setdefault("gates", []).append(
            {"gate": gate, "verdict": verdict, "at": self.now(), "sha": self._head, "detail": detail})
        self.emit()

    def status(self, status: str, **extra: Any) -> None:
        self.doc["status"] = status
        for key, value in extra.items():
            self.doc[key] = value
        self.emit()


def simulate_run(rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
    """Snapshots of one realistic run with task id ``run_id`` starting at ``start``."""
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    run = _Run(rng=rng, run_id=run_id, clock=start)
    run._head = _hex(rng, 160)
    _intake(run)
    if _plan(run) and _dev(run) and _review(run) and _deliver(run):
        _report(run)
    return iter(run.out)


# ------------------------------------------------------------------ phase 0


def _intake(run: _Run) -> None:
    rng = run.rng
    project = rng.choice(PROJECTS)
    base = rng.choice(("develop", "main"))
    source = rng.choice(("asked", "input", "remembered", "default", "derived"))
    autopilot = rng.random() < 0.6
    doc: dict[str, Any] = {
        "schemaVersion": rng.choice(("2.0.0", "2.1.0", "2.2.0")),
        "taskId": run.run_id,
        "shortId": rng.randint(1, 999),
        "title": rng.choice(("Cart total ignores discounts", "Refund fails for partial captures",
                             "Session expires during checkout", "Add pagination to orders list")),
        "jiraId": run.run_id if "-" in run.run_id else None,
        "project": project,
        "projectRoot": f"/home/dev/src/{project}",
        "worktreePath": f"/home/dev/src/{project}/.worktrees/{run.run_id}",
        "branch": f"feature/{run.run_id.lower()}",
        "baseBranch": base,
        "baseFetchStatus": "fresh",
        "baseBranchSource": source,
    }
    if source == "derived":
        doc["baseBranchEvidence"] = {
            "refProvenance": "remote", "chosen": base, "ambiguous": False,
            "candidates": [{"branch": base, "score": round(rng.uniform(0.6, 1.0), 2),
                            "evidence": [{"kind": "repo-default", "detail": f"origin/HEAD -> {base}"}]}],
        }
    doc.update({
        "remoteType": rng.choice(("github", "github", "bitbucket", "generic-git")),
        "inputType": "jira-id",
        "autopilot": autopilot,
        "currentPhase": 0,
        "status": "in_progress",
        "startedAt": run.now(),
        "phases": {"0": {"status": "in_progress", "startedAt": run.now(), "model": "sonnet"}},
        "identity": {"name": "Dana Developer", "email": "dana@example.com", "username": "dana-dev"},
    })
    run.doc = doc
    run.emit()

    run.tick(0.5, 2)
    warnings = rng.sample(["no_acceptance_criteria", "no_figma_link", "vague_scope", "no_labels"], rng.randint(0, 2))
    blockers: list[str] = []
    run.doc["maturity"] = {"score": max(0, 100 - 10 * len(warnings)), "blockers": blockers,
                           "warnings": warnings, "summary": ", ".join(warnings) or "ready"}
    run.emit()

    if not autopilot:
        # An interactive run asks at the maturity step and waits for the human.
        run.tick(0.2, 1)
        _ask(run, "maturity-continue", "phase-0/maturity", "The item has gaps. Continue anyway?",
             [("continue", "Continue"), ("stop", "Stop here")])
        run.tick(5, 240)
        _answer(run, ["continue"])
        if warnings:
            run.doc["maturity"]["accepted"] = list(warnings)
            run.emit()

    run.tick(1, 6)
    red = rng.random() < 0.2
    run.doc["baseline"] = {
        "tests": {"status": "red" if red else rng.choice(("green", "green", "unknown")),
                  "failing": ["tests/legacy.test.ts::flaky"] if red else [],
                  "logPath": f"/tmp/{run.run_id}/baseline.log", "capturedAt": run.now(), "command": "npm test"},
        "sha": run._head,
    }
    run.emit()
    run.tick(0.2, 1)
    run.finish_phase(0, files=[])


def _ask(run: _Run, qid: str, step: str, text: str, options: list[tuple[str, str]]) -> None:
    run.doc["pendingQuestion"] = {"id": qid, "stepId": step, "text": text, "kind": "single-select",
                                  "options": [{"id": i, "label": label} for i, label in options],
                                  "askedAt": run.now()}
    run.doc["waitingFor"] = "question"
    run.status("awaiting_input")


def _answer(run: _Run, option_ids: list[str]) -> None:
    q = run.doc["pendingQuestion"]
    run.doc["lastAnswer"] = {"questionId": q["id"], "stepId": q["stepId"], "optionIds": option_ids,
                             "answeredAt": run.now()}
    run.doc["pendingQuestion"] = None
    del run.doc["waitingFor"]
    run.status("in_progress")


# ------------------------------------------------------------------ phase 1


def _plan(run: _Run) -> bool:
    rng = run.rng
    run.tick(0.1, 0.5)
    run.start_phase(1)
    run.tick(3, 12)
    if run.doc["autopilot"]:
        # Open questions park the run on a pendingQuestion; otherwise the user-test question
        # comes in Phase 5, after the PR is open.
        ask = rng.random() < 0.6
        run.doc["research"] = {
            "round": 1, "kind": "open-questions", "decision": "ask" if ask else "proceed",
            "dir": f"/tmp/{run.run_id}/research", "json": f"/tmp/{run.run_id}/research/research.json",
            "md": f"/tmp/{run.run_id}/research/research.md", "closed": ["q-endpoint"],
            "open": ["q-rounding"] if ask else [], "at": run.now(),
        }
        run.emit()
        if ask:
            run.tick(0.1, 0.5)
            _ask(run, "open-questions", "phase-1/open-questions", "Round to minor units before or after tax?",
                 [("before-tax", "Before tax"), ("after-tax", "After tax")])
            run.tick(20, 600)
            _answer(run, [rng.choice(["before-tax", "after-tax"])])
        run.tick(2, 6)
        objections = rng.randint(0, 4)
        verdict = "fail" if objections >= 4 else "pass"
        run.doc["planCritique"] = {
            "round": 1, "path": f"/tmp/{run.run_id}/plan-critique.md", "digest": _hex(rng, 256),
            "verdict": verdict, "objections": objections, "blocking": [],
            "advisory": [{"objection": f"o{i + 1}", "lens": rng.choice(("scope", "feasibility", "security", "alternative")),
                          "claim": "plan skips the refund path", "label": "inference",
                          "reply": rng.choice(("accept", "rebut"))} for i in range(objections)],
            "at": run.now(),
        }
        run.emit()
    # The user steers mid-plan; Phase 2 consumes it at entry.
    run.tick(1, 10)
    run.doc["pendingSteer"] = {"text": rng.choice(("Keep the public API unchanged.", "Also cover the mobile view.",
                                                   "Prefer a feature flag over a migration.")), "at": run.now()}
    run.emit()
    run.tick(2, 10)
    extra: dict[str, Any] = {"files": [f"/tmp/{run.run_id}/plan.md"]}
    if not run.doc["autopilot"]:
        rounds = rng.randint(0, 2)
        extra.update({"clarificationRounds": rounds,
                      "clarificationQuestions": [f"Question {i + 1}?" for i in range(rounds)],
                      "clarificationAnswers": [f"Answer {i + 1}." for i in range(rounds)],
                      "planIterations": rng.randint(1, 3), "planApprovedAt": run.now()})
    else:
        extra["planApprovedAt"] = None
    run.finish_phase(1, **extra)
    return True


# ------------------------------------------------------------------ phase 2


def _dev(run: _Run) -> bool:
    rng = run.rng
    run.tick(0.1, 0.5)
    run.start_phase(2)
    files = rng.sample(FILES[:9], rng.randint(2, 5))
    rec = run.doc["phases"]["2"]
    for step in ("red", "green"):
        run.tick(5, 30)
        rec["subStep"] = step
        rec["files"] = files
        run.emit()
    run.tick(2, 8)
    if rng.random() < 0.4:
        run.gate("test-summary", "fail", failed=rng.randint(1, 4), passed=rng.randint(40, 200))
        rec["retryCount"] = rec.get("retryCount", 0) + 1
        run.tick(3, 15)
        run.emit()
        run.tick(1, 4)
    run.gate("test-summary", "pass", failed=0, passed=rng.randint(40, 200))
    run.gate("symbol-existence", "pass", checked=rng.randint(3, 30))
    run.gate("evidence-gate/ui", "not-applicable", reason="no UI files changed")
    roll = rng.random()
    if roll < 0.06:
        run.tick(1, 30)
        run.status("abandoned", abandonedBy="kill", finishedAt=run.now())
        return False
    if roll < 0.16:
        # A hard halt: the validator failed twice; then the user resumes and the phase re-runs.
        run.tick(1, 5)
        rec["status"] = "failed"
        run.status("failed", haltReason="phase-2:validator-failed-twice")
        run.tick(30, 300)
        rec["status"] = "in_progress"
        rec["retryCount"] = min(3, rec.get("retryCount", 0) + 1)
        run.status("in_progress", haltReason=None)
    run.tick(1, 5)
    rec["subStep"] = "build"
    run.emit()
    run.tick(0.5, 3)
    run.finish_phase(2)
    return True


# ------------------------------------------------------------------ phase 3


def _review(run: _Run) -> bool:
    rng = run.rng
    run.tick(0.1, 0.5)
    run.start_phase(3)
    files = run.doc["phases"]["2"].get("files", [])
    run.tick(0.5, 2)
    run.doc["diffRisk"] = {"files": len(files), "loc_added": rng.randint(20, 600), "loc_removed": rng.randint(0, 200),
                           "max_score": round(rng.uniform(0.5, 9.5), 1),
                           "signals": sorted(rng.sample(["security_path", "migration", "public_api", "no_test_change"],
                                                        rng.randint(0, 2)))}
    run.emit()
    pool = [_Issue(_hex(rng, 48), "blocking" if rng.random() < 0.3 else "important", rng.choice(files or FILES),
                   rng.choice(ISSUES), fix_rate=0.15 if rng.random() < 0.12 else 0.85)
            for _ in range(rng.randint(2, 5))]
    max_iterations = rng.choice((2, 3, 3, 4, 4))
    mandate: list[_Issue] = []
    previous_still: list[str] | None = None
    autopilot = run.doc["autopilot"]
    cycles: dict[str, int] = {}
    for i in range(1, max_iterations + 1):
        run.tick(5, 20)
        models = rng.sample(REVIEWER_MODELS, rng.randint(2, 3))
        reviewers: list[dict[str, Any]] = []
        raised: dict[str, _Issue] = {}
        corroboration: dict[str, int] = {}
        for model in models:
            found = [iss for iss in pool if rng.random() < 0.7]
            noise = [_Issue(_hex(rng, 48), "suggestion", rng.choice(FILES), rng.choice(ISSUES[-3:]))
                     for _ in range(rng.randint(0, 2))]
            for iss in found + noise:
                raised[iss.fingerprint] = iss
                corroboration[iss.fingerprint] = corroboration.get(iss.fingerprint, 0) + 1
            reviewers.append({"model": model, "findings": [iss.finding(line=rng.randint(1, 400)) for iss in found + noise],
                              "roundCount": 1})
        accepted = [iss for fp, iss in raised.items()
                    if (corroboration[fp] >= 2 and iss.severity != "suggestion") or rng.random() < 0.35]
        counts = {s: sum(1 for a in accepted if a.severity == s) for s in SEVERITIES}
        must_fix = counts["blocking"] + counts["important"] > 0
        # The last allowed iteration accepts leftover important findings but escalates blockers.
        if not must_fix:
            decision = "accept"
        elif i < max_iterations:
            decision = "fix"
        else:
            decision = "escalate" if counts["blocking"] else "accept"
        entry: dict[str, Any] = {
            "iteration": i, **counts, "decision": decision, "reviewers": reviewers,
            "anonymizationMap": {"seed": f"{run.run_id}:{i}",
                                 "labelToModel": {LABELS[k]: m for k, m in enumerate(models)}},
            "triage": {"raised": sum(len(r["findings"]) for r in reviewers), "distinct": len(raised),
                       "accepted": len(accepted)},
            "accepted": [a.finding(source=rng.choice(LABELS[:len(models)])) for a in accepted],
            "validatorResult": {"status": "pass", "checked": len(accepted)},
        }
        run.doc.setdefault("reviewIterations", []).append(entry)
        run.emit()
        current = [a for a in accepted if a.severity != "suggestion"]
        if i >= 2:
            run.tick(0.2, 1)
            prev_fps = {m.fingerprint for m in mandate}
            cur_fps = {c.fingerprint for c in current}
            still = [c for c in current if c.fingerprint in prev_fps]
            # recurrence counts *consecutive* rework cycles survived: a gap resets it.
            cycles = {c.fingerprint: cycles.get(c.fingerprint, 0) + 1 for c in still}
            still_fps = sorted(c.fingerprint for c in still)
            plateau = bool(still_fps) and previous_still == still_fps
            tripped = autopilot and any(cycles[c.fingerprint] >= 2 for c in still)
            entry["delta"] = {
                "previousIteration": i - 1,
                "new": [c.finding() for c in current if c.fingerprint not in prev_fps],
                "stillPresent": [c.finding() for c in still],
                "resolved": [m.finding() for m in mandate if m.fingerprint not in cur_fps],
                "downgraded": [],
                "stillPresentBlocking": [c.finding() for c in still if c.severity == "blocking"],
                "recurrence": {c.fingerprint: cycles[c.fingerprint] for c in still},
                "plateau": plateau, "tripped": tripped, "computedAt": run.now(),
            }
            previous_still = still_fps
            run.emit()
            if tripped:
                run.tick(0.1, 0.5)
                run.doc["circuitBreaker"] = {
                    "tripped": True, "trigger": 2,
                    "detail": f"{len(still)} mandate finding(s) survived {max(cycles.values())} rework cycles",
                    "checkpoint": {"phase": 3, "step": "3.8", "iteration": i}, "trippedAt": run.now(),
                    "counters": {"identicalFindingCycles": max(cycles.values()), "reworkCycles": i - 1},
                }
                run.status("paused", haltReason="phase-3:circuit-breaker-trigger-2")
                run.tick(30, 900)
                if rng.random() < 0.35:
                    run.status("abandoned", abandonedBy="autopilot-runner", finishedAt=run.now())
                    return False
                run.doc["circuitBreaker"]["tripped"] = False
                run.status("in_progress", haltReason=None)
        if autopilot:
            run.tick(0.2, 1)
            kept = [{"fingerprint": c.fingerprint, "basis": "corroborated"} for c in current if c.severity == "blocking"]
            approved = decision == "accept"
            entry["reviewDecision"] = {"verdict": "pass" if approved else rng.choice(("pass", "rebuttal-round")),
                                       "approved": approved, "kept": kept, "downgraded": []}
            run.emit()
        if decision == "accept":
            break
        if decision == "escalate":
            run.tick(0.5, 2)
            run.doc["phases"]["3"]["status"] = "failed"
            run.status("failed", haltReason="phase-3:review-escalated", finishedAt=run.now())
            return False
        # Rework: each mandate finding is fixed with some probability; new issues may appear.
        mandate = current
        pool = [iss for iss in pool if not (iss in current and rng.random() < iss.fix_rate)]
        if rng.random() < 0.3:
            pool.append(_Issue(_hex(rng, 48), "important", rng.choice(files or FILES), rng.choice(ISSUES)))
        run.tick(10, 40)
        rec = run.doc["phases"]["3"]
        rec["subStep"] = f"rework-{i}"
        rec["retryCount"] = min(3, i)
        run.emit()
        run.gate("test-summary", rng.choice(("pass", "pass", "fail")), failed=0, passed=rng.randint(40, 200))
    run.tick(0.5, 2)
    run.gate("review-decision", "pass", iterations=len(run.doc.get("reviewIterations", [])))
    run.finish_phase(3)
    return True


# ------------------------------------------------------------------ phases 4 and 5


def _deliver(run: _Run) -> bool:
    rng = run.rng
    run.tick(0.1, 0.5)
    run.start_phase(4)
    run.tick(0.5, 2)
    sha = _hex(rng, 160)
    run._head = sha
    run.doc["commit"] = {"sha": sha, "message": f"{run.run_id}: {run.doc.get('title') or 'change'}"}
    run.emit()
    run.gate("evidence-gate/test", "pass", suite="npm test")
    if run.doc["autopilot"] and rng.random() < 0.12:
        run.tick(0.5, 3)
        run.doc["verificationFailed"] = {"gate": "publish/ci", "reason": "required check lint failed",
                                         "at": run.now()}
        run.status("paused", haltReason="phase-4:verification-failed")
        return False
    run.tick(0.5, 3)
    remote = run.doc["remoteType"]
    if remote == "generic-git":
        run.doc["publish"] = {"outcome": "pushed-awaiting-pr", "at": run.now(), "host": "git.internal",
                              "branch": run.doc["branch"], "base": run.doc["baseBranch"], "sha": sha}
        run.emit()
    else:
        number = rng.randint(100, 9999)
        host = "github.com/acme" if remote == "github" else "bitbucket.org/acme"
        pr: dict[str, Any] = {"number": number, "url": f"https://{host}/{run.doc['project']}/pull/{number}"}
        if remote == "bitbucket":
            pr["version"] = 0
        pr.update({"draft": bool(run.doc["autopilot"]), "reviewers": rng.sample(["alice", "bob", "carol"], 2)})
        run.doc["pr"] = pr
        run.emit()
        if remote == "bitbucket":
            run.tick(0.1, 1)
            pr["version"] = 1
            run.emit()
    run.tick(0.2, 1)
    run.doc["worktreeRemovedAt"] = run.now()
    run.doc["artifactsPath"] = f"/home/dev/.multi-agent/artifacts/{run.run_id}"
    run.emit()
    run.finish_phase(4, subStep="pr-opened")
    return True


def _report(run: _Run) -> None:
    run.tick(0.1, 0.5)
    run.start_phase(5)
    run.tick(1, 5)
    run.doc["phases"]["5"]["subStep"] = "confluence-synced"
    run.emit()
    if "lastAnswer" not in run.doc:
        run.tick(0.1, 0.5)
        _ask(run, "user-test", "phase-5/user-test", "Did the change pass your manual test on the main checkout?",
             [("passed", "Passed"), ("failed", "Found a problem")])
        run.tick(30, 1440)
        _answer(run, ["passed"])
    run.tick(0.2, 1)
    rec = run.doc["phases"]["5"]
    rec["status"] = "done"
    rec["finishedAt"] = run.now()
    run.status("complete", finishedAt=run.now())
