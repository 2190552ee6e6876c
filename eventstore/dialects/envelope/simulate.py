"""Realistic turn sequences for one unit, as an envelope-emitting driver would record them.

A unit is planned, executed phase by phase, reviewed (review → fold cycles until clean), audited
(sometimes BLOCKED, rarely HALT) and made merge-ready or auto-merged.  Along the way: a human
question (NEEDS_INPUT), a fold that changed nothing (the same NEEDS_FIXES advice twice: no
progress), turns that break the parse contract (no fence, broken JSON, an envelope that does not
validate) and their single repair — which occasionally fails, ending the run with FAILED.

Every turn is rendered as a transcript and parsed back with :func:`.parse.load_turn`, so the
simulator exercises exactly the code that ingests real transcripts.  Deterministic per ``rng``.

Example::

    >>> import random, datetime as dt
    >>> snaps = list(simulate_run(random.Random(1), run_id="r1", start=dt.datetime(2026, 1, 1)))
    >>> snaps[0].doc["skill"]
    'plan-feature'
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from eventstore.dialects.base import Snapshot
from eventstore.dialects.envelope.parse import REPAIR_PROMPT, LoadContext, load_turn

JSON = Any
_SLUGS = ("csv-export", "null-crash", "auth-refresh", "billing-webhooks", "rate-limit", "audit-log",
          "search-index", "retry-backoff", "dark-mode", "s3-uploads")
_AXES = ("security", "tests", "correctness", "performance", "docs")
_FILES = ("src/export/handler.ts", "src/api/routes.ts", "src/db/models.py", "lib/retry.go", "app/auth.rb")


@dataclass
class Turn:
    """One scripted turn: what the model meant to emit, and how the text came out."""

    turn: int
    at: datetime
    prompt: str
    envelope: dict[str, Any]
    defect: str | None = None  # None | "no-fence" | "bad-json" | "bad-envelope"
    repair: bool = False  # this text answers the repair prompt
    decoy: bool = False  # an earlier, unrelated ```json block in the prose


class _Unit:
    """Mutable picture of the unit the envelopes describe."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        feature = rng.random() < 0.7
        n = rng.randint(1, 99)
        slug = rng.choice(_SLUGS)
        self.id = f"{n:02d}-{slug}"
        self.type = "feature" if feature else "fix"
        self.issue: int | None = rng.randint(10, 400)
        self.branch = f"{'feat' if feature else 'fix'}/{self.id}"
        self.phases = rng.randint(1, 4) if feature else 1
        self.phase: str | None = None
        self.completed: int | None = None
        self.pr: int | None = None
        self.sha: str | None = None
        self.ci: str | None = None
        self.pr_state = "none"
        self.merge_ready: bool | None = None
        self.verification: str | None = None
        self.review_pending: bool | None = None
        self.audit_pending: bool | None = None
        self.issues_filed: list[int] = []

    def new_sha(self) -> None:
        self.sha = "".join(self.rng.choice("0123456789abcdef") for _ in range(7))

    def envelope(self, skill: str, state: str, summary: str, recommended: str, tier: str, *,
                 fix_now: list[dict[str, Any]] | None = None, blockers: list[dict[str, Any]] | None = None,
                 needs_input: dict[str, Any] | None = None, detail: Any = None) -> dict[str, Any]:
        url = f"https://github.com/acme/app/pull/{self.pr}" if self.pr is not None else None
        filed, self.issues_filed = self.issues_filed, []  # issues_filed: created/updated THIS turn
        return {
            "skill": skill, "state": state, "summary": summary,
            "unit": {"type": self.type, "id": self.id, "issue": self.issue, "branch": self.branch},
            "phase": {"current": self.phase, "total": self.phases, "completed": self.completed},
            "pr": {"number": self.pr, "url": url, "state": self.pr_state, "head_sha": self.sha,
                   "merge_ready": self.merge_ready, "ci": self.ci},
            "gates": {"verification": self.verification, "review_pending": self.review_pending,
                      "audit_pending": self.audit_pending},
            "findings": {"fix_now": fix_now or [], "issues_filed": filed, "untriaged": 0,
                         "decisions_recorded": 0},
            "blockers": blockers or [],
            "dependencies": {"unmet": [], "build_order": []},
            "recommendations": {"product_audit": False, "reason": None},
            "needs_input": needs_input,
            "next": {"recommended": recommended, "alternatives": [], "tier": tier},
            "detail": detail,
        }


def _fix_now(rng: random.Random, k: int) -> list[dict[str, Any]]:
    return [{"id": f"F{i + 1}", "file": f"{rng.choice(_FILES)}:{rng.randint(1, 400)}", "axis": rng.choice(_AXES),
             "severity": rng.choice(("high", "med", "med", "low")), "class": "fix-now", "route": "fold into phase",
             "suggested_tier": rng.choice(("strong", "cheap"))} for i in range(k)]


def script(rng: random.Random, *, start: datetime, p_reject: float = 0.12, p_repair_fails: float = 0.15,
           p_halt: float = 0.06) -> list[Turn]:
    """The turns of one unit's run (accepted envelopes plus rendering defects)."""
    u = _Unit(rng)
    out: list[Turn] = []
    clock = [start]

    def emit(prompt: str, env: dict[str, Any]) -> None:
        clock[0] += timedelta(minutes=rng.randint(2, 45), seconds=rng.randint(0, 59))
        n = len({t.turn for t in out}) + 1
        defect = rng.choice(("no-fence", "no-fence", "bad-json", "bad-json", "bad-envelope")) \
            if rng.random() < p_reject else None
        out.append(Turn(n, clock[0], prompt, env, defect, decoy=rng.random() < 0.1))
        if defect:
            clock[0] += timedelta(seconds=rng.randint(10, 90))
            broken = rng.random() < p_repair_fails
            out.append(Turn(n, clock[0], REPAIR_PROMPT, env, "bad-json" if broken else None, repair=True))

    def failed() -> bool:  # a failed repair ends the run: a human looks before anything continues
        return any(t.repair and t.defect for t in out)

    planner = "plan-feature" if u.type == "feature" else "plan-fix"
    emit(f"/{planner} {u.id}", u.envelope(planner, "OK", f"Plan for {u.id} written: {u.phases} phase(s).",
                                          f"/execute-phase {u.id} P1", "cheap"))
    u.phase, u.completed, u.verification = "P1", 0, "not-run"
    for p in range(1, u.phases + 1):
        if failed():
            return out
        if rng.random() < 0.1:  # a decision only the human can make; nothing was guessed
            q = {"question": f"Keep the legacy endpoint for {u.id}?", "options": ["keep", "remove"]}
            emit(f"/execute-phase {u.id} P{p}", u.envelope(
                "execute-phase", "NEEDS_INPUT", f"P{p} needs a decision before continuing.",
                f"/execute-phase {u.id} P{p}", "cheap", needs_input=q))
            if failed():
                return out
        u.verification, u.completed = "green", p
        if p < u.phases:
            u.phase = f"P{p + 1}"
            emit(f"/execute-phase {u.id} P{p}", u.envelope(
                "execute-phase", "CONTINUE", f"P{p} committed; P{p + 1} is next.",
                f"/execute-phase {u.id} P{p + 1}", "cheap", detail={"tasks_done": rng.randint(2, 9)}))
        else:
            u.pr, u.pr_state, u.ci = rng.randint(10, 900), "open", "pending"
            u.new_sha()
            u.review_pending, u.audit_pending = True, True
            emit(f"/execute-phase {u.id} P{p}", u.envelope(
                "execute-phase", "READY_FOR_REVIEW", f"P{p} committed, gate green, PR #{u.pr} opened.",
                "/review-change", "strong"))
    if failed():
        return out
    cycle = 0
    while True:  # review -> fold until clean (bounded: the review loop has a cap)
        cycle += 1
        if cycle <= 4 and rng.random() < 0.65 / cycle:
            items = _fix_now(rng, rng.randint(1, 3))
            if rng.random() < 0.3:
                u.issues_filed.append(rng.randint(400, 900))
            env = u.envelope("review-change", "NEEDS_FIXES", f"Review cycle {cycle}: {len(items)} fix-now finding(s).",
                             f"/execute-phase {u.id} --fold", "cheap", fix_now=items)
            emit("/review-change", env)
            if failed():
                return out
            if rng.random() < 0.2:  # the fold changed nothing: the same advice comes back
                stuck = dict(env, skill="execute-phase", summary="Fold attempted; findings still open.")
                emit(f"/execute-phase {u.id} --fold", stuck)
                if failed():
                    return out
            u.new_sha()
            u.ci, u.review_pending = "pending", True
            emit(f"/execute-phase {u.id} --fold", u.envelope(
                "execute-phase", "READY_FOR_REVIEW", f"Folded {len(items)} finding(s) into {u.branch}.",
                "/review-change", "strong"))
            if failed():
                return out
            continue
        u.review_pending, u.ci = False, "green"
        emit("/review-change", u.envelope("review-change", "READY_FOR_AUDIT", "Review clean; audit is next.",
                                          "/audit-pr", "strong"))
        if failed():
            return out
        roll = rng.random()
        if roll < p_halt:
            halt = [{"kind": rng.choice(("substrate", "issue")), "id": rng.choice(("forge", "#51", "secrets-scan")),
                     "scope": "run", "detail": "critical security hole in merged code; stop every unit"}]
            emit("/audit-pr", u.envelope("audit-pr", "HALT", "Audit found a run-invalidating problem.",
                                         "/workflow-status", "strong", blockers=halt))
            return out
        if roll < p_halt + 0.15 and cycle <= 4:
            u.ci, u.verification = "red", "red"
            block = [{"kind": "gate", "id": rng.choice(("review-receipt", "ci")), "scope": "unit",
                      "detail": "The review receipt is stale."}]
            emit("/audit-pr", u.envelope("audit-pr", "BLOCKED", "The audit found one blocking gate.",
                                         "/review-change", "strong", blockers=block))
            if failed():
                return out
            u.new_sha()
            u.verification, u.review_pending = "green", True
            continue
        break
    u.audit_pending, u.merge_ready = False, True
    emit("/audit-pr", u.envelope("audit-pr", "MERGE_READY", f"Audit passed; PR #{u.pr} is merge-ready.",
                                 f"gh pr merge {u.pr}", "cheap"))
    if not failed() and rng.random() < 0.5:
        u.pr_state = "merged"
        emit("/audit-pr --merge", u.envelope("audit-pr", "MERGED", f"PR #{u.pr} auto-merged under policy.",
                                             "/workflow-status", "cheap"))
    return out


# ------------------------------------------------------------------ rendering


def render(t: Turn, *, run_id: str) -> str:
    """The transcript text of one turn (front matter, user prompt, assistant message)."""
    head = ["---", f"run: {run_id}", f"turn: {t.turn}"]
    if t.repair:
        head.append(f"repair_of: {t.turn}")
    head += [f"at: {t.at.isoformat()}", "---", "", "## User", "", t.prompt, "", "## Assistant", ""]
    body = json.dumps(t.envelope, indent=2, ensure_ascii=False)
    if not t.repair:
        head.append(f"{t.envelope['summary']}")
        head.append("")
        if t.decoy:
            head += ["The config used:", "", "```json", '{"retries": 3, "timeout_s": 30}', "```", ""]
        head.append(f"→ Next: {t.envelope['next']['recommended']}")
        head.append("")
    if t.defect == "no-fence":
        return "\n".join(head) + "\n"
    if t.defect == "bad-json":
        lines = body.splitlines()
        lines = lines[:-3] if len(lines) > 4 else lines[:-1]  # a reply cut off mid-object
        body = "\n".join(lines)
    elif t.defect == "bad-envelope":
        bad = {k: v for k, v in t.envelope.items() if k != "pr"}
        bad["state"] = "done"
        body = json.dumps(bad, indent=2, ensure_ascii=False)
    return "\n".join(head + ["```json", body, "```"]) + "\n"


def file_name(t: Turn) -> str:
    return f"turn-{t.turn:03d}{'.repair' if t.repair else ''}.md"


def simulate_run(rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
    """Snapshots of one unit's run: accepted envelopes, and ``doc=None`` bookkeeping turns."""
    ctx = LoadContext()
    for t in script(rng, start=start):
        text = render(t, run_id=run_id)
        snap = load_turn(Path(file_name(t)), text.encode("utf-8"), ctx)
        yield Snapshot(doc=snap.doc, raw=None, source={"simulated": True, "turn": t.turn, "repair": t.repair},
                       occurred_at=t.at, stream_hint=run_id, events=snap.events)


def write_transcripts(rng: random.Random, folder: Path, *, run_id: str, start: datetime) -> list[Path]:
    """Write one simulated run as transcript files (``turn-NNN.md``, ``turn-NNN.repair.md``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in script(rng, start=start):
        p = folder / file_name(t)
        p.write_text(render(t, run_id=run_id), encoding="utf-8")
        paths.append(p)
    return paths
