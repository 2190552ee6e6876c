"""The ``mapipe`` event catalog: facts about one multi-agent-pipeline run (``agent-state.json``).

Field names follow ``seeds/agent-state.schema.json`` exactly (camelCase), and payloads carry the
schema's own sub-objects verbatim wherever that keeps ``evolve`` exact: a phase event holds the
``phases[k]`` record, a review event the ``reviewIterations[i]`` entry, a maturity event the
``maturity`` object.  Read-only properties give typed access for metrics without storing a value
twice (``PhaseCompleted.model``, ``ReviewIterationRecorded.accepted_fingerprints``, ...).

Top-level "setter" events (the ``OWNS`` class variable names the document keys they write) use
``msgspec.UNSET`` for "this key is not touched", ``None`` for "set to null", and ``removed`` for
"delete the key" -- the three are different states of an ``agent-state.json``.

Evolution rules: new fields get defaults and go last; a breaking change bumps ``schema_version``
and registers ``upcast_v1_v2`` via :func:`eventstore.events.register_upcaster`.

Example::

    >>> ev = GateVerdictRecorded(gate="test-suite", verdict="fail", at="2026-01-05T10:00:00Z",
    ...                          sha="3f2a9c1", detail={"failed": 2})
    >>> ev.event_type()
    'mapipe.gate_verdict_recorded'
"""

from __future__ import annotations

from typing import Any, ClassVar

from msgspec import UNSET, UnsetType

from eventstore.events import Event

JSONObject = dict[str, Any]


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


# ------------------------------------------------------------------ run lifecycle


class RunStarted(Event, tag="mapipe.run_started", frozen=True):
    """Phase 0 wrote the first state of a run; ``state`` is that document verbatim."""

    state: JSONObject

    OWNS: ClassVar[tuple[str, ...]] = ()

    @property
    def taskId(self) -> str | None:  # noqa: N802 - schema spelling
        return _str(self.state.get("taskId"))

    @property
    def project(self) -> str | None:
        return _str(self.state.get("project"))

    @property
    def title(self) -> str | None:
        return _str(self.state.get("title"))

    @property
    def schemaVersion(self) -> str | None:  # noqa: N802
        return _str(self.state.get("schemaVersion"))

    @property
    def baseBranchSource(self) -> str | None:  # noqa: N802
        return _str(self.state.get("baseBranchSource"))


class RunStatusChanged(Event, tag="mapipe.run_status_changed", frozen=True):
    """``status`` / ``haltReason`` / ``abandonedBy`` changed (halt, pause, resume, abandon, done)."""

    status: str | UnsetType = UNSET
    haltReason: str | None | UnsetType = UNSET  # noqa: N815
    abandonedBy: str | UnsetType = UNSET  # noqa: N815
    removed: list[str] | UnsetType = UNSET

    OWNS: ClassVar[tuple[str, ...]] = ("status", "haltReason", "abandonedBy")


class RunFinished(Event, tag="mapipe.run_finished", frozen=True):
    """``finishedAt`` was written (complete, failed or abandoned)."""

    finishedAt: str | None  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("finishedAt",)


# ------------------------------------------------------------------ phases


class _PhaseFacts:
    """Typed views of a ``phases[k]`` record (mixed into the phase events)."""

    __slots__ = ()
    record: Any

    @property
    def status(self) -> str | None:
        return _str(_get(self.record, "status"))

    @property
    def model(self) -> str | None:
        return _str(_get(self.record, "model"))

    @property
    def retryCount(self) -> int | None:  # noqa: N802
        return _int(_get(self.record, "retryCount"))

    @property
    def subStep(self) -> str | None:  # noqa: N802
        return _str(_get(self.record, "subStep"))

    @property
    def startedAt(self) -> str | None:  # noqa: N802
        return _str(_get(self.record, "startedAt"))

    @property
    def finishedAt(self) -> str | None:  # noqa: N802
        return _str(_get(self.record, "finishedAt"))

    @property
    def files(self) -> list[str]:
        f = _get(self.record, "files")
        return [x for x in f if isinstance(x, str)] if isinstance(f, list) else []

    @property
    def clarificationRounds(self) -> int | None:  # noqa: N802
        return _int(_get(self.record, "clarificationRounds"))

    @property
    def planIterations(self) -> int | None:  # noqa: N802
        return _int(_get(self.record, "planIterations"))


class PhaseStarted(_PhaseFacts, Event, tag="mapipe.phase_started", frozen=True):
    """``phases[phase]`` entered ``in_progress``; ``currentPhase`` moved with it when set."""

    phase: str
    record: JSONObject
    currentPhase: int | UnsetType = UNSET  # noqa: N815


class PhaseUpdated(_PhaseFacts, Event, tag="mapipe.phase_updated", frozen=True):
    """A phase record changed without a status transition (sub-step checkpoint, retry, files)."""

    phase: str
    record: JSONObject
    currentPhase: int | UnsetType = UNSET  # noqa: N815


class PhaseCompleted(_PhaseFacts, Event, tag="mapipe.phase_completed", frozen=True):
    """``phases[phase].status`` became ``done``."""

    phase: str
    record: JSONObject
    currentPhase: int | UnsetType = UNSET  # noqa: N815


class PhaseSkipped(_PhaseFacts, Event, tag="mapipe.phase_skipped", frozen=True):
    """``phases[phase].status`` became ``skipped``."""

    phase: str
    record: JSONObject
    currentPhase: int | UnsetType = UNSET  # noqa: N815


class PhaseFailed(_PhaseFacts, Event, tag="mapipe.phase_failed", frozen=True):
    """``phases[phase].status`` became ``failed``."""

    phase: str
    record: JSONObject
    currentPhase: int | UnsetType = UNSET  # noqa: N815


PHASE_EVENTS: dict[str, type[Event]] = {
    "in_progress": PhaseStarted,
    "done": PhaseCompleted,
    "skipped": PhaseSkipped,
    "failed": PhaseFailed,
}


# ------------------------------------------------------------------ questions and steering


class QuestionAsked(Event, tag="mapipe.question_asked", frozen=True):
    """The run stopped on a question: ``pendingQuestion`` and/or ``waitingFor`` written."""

    pendingQuestion: JSONObject | None | UnsetType = UNSET  # noqa: N815
    waitingFor: str | UnsetType = UNSET  # noqa: N815
    removed: list[str] | UnsetType = UNSET

    OWNS: ClassVar[tuple[str, ...]] = ("pendingQuestion", "waitingFor")

    @property
    def questionId(self) -> str | None:  # noqa: N802
        return _str(_get(self.pendingQuestion, "id"))

    @property
    def stepId(self) -> str | None:  # noqa: N802
        return _str(_get(self.pendingQuestion, "stepId"))

    @property
    def askedAt(self) -> str | None:  # noqa: N802
        return _str(_get(self.pendingQuestion, "askedAt"))


class QuestionAnswered(Event, tag="mapipe.question_answered", frozen=True):
    """``lastAnswer`` recorded; the same write clears ``pendingQuestion`` / ``waitingFor``."""

    lastAnswer: JSONObject  # noqa: N815
    pendingQuestion: JSONObject | None | UnsetType = UNSET  # noqa: N815
    waitingFor: str | UnsetType = UNSET  # noqa: N815
    removed: list[str] | UnsetType = UNSET

    OWNS: ClassVar[tuple[str, ...]] = ("lastAnswer", "pendingQuestion", "waitingFor")

    @property
    def questionId(self) -> str | None:  # noqa: N802
        return _str(self.lastAnswer.get("questionId"))

    @property
    def optionIds(self) -> list[str]:  # noqa: N802
        ids = self.lastAnswer.get("optionIds")
        return [x for x in ids if isinstance(x, str)] if isinstance(ids, list) else []

    @property
    def answeredAt(self) -> str | None:  # noqa: N802
        return _str(self.lastAnswer.get("answeredAt"))


class SteerQueued(Event, tag="mapipe.steer_queued", frozen=True):
    """``/multi-agent:steer`` queued an instruction (``pendingSteer`` without ``appliedAt``)."""

    pendingSteer: JSONObject | None  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("pendingSteer",)


class SteerApplied(Event, tag="mapipe.steer_applied", frozen=True):
    """A phase consumed the queued steer (``pendingSteer.appliedAt`` / ``appliedPhase`` set)."""

    pendingSteer: JSONObject | None  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("pendingSteer",)

    @property
    def appliedPhase(self) -> int | None:  # noqa: N802
        return _int(_get(self.pendingSteer, "appliedPhase"))


# ------------------------------------------------------------------ phase-0/1 records


class MaturityAssessed(Event, tag="mapipe.maturity_assessed", frozen=True):
    """The fetched item's readiness (``maturity``: score, blockers, warnings, accepted)."""

    maturity: JSONObject

    OWNS: ClassVar[tuple[str, ...]] = ("maturity",)

    @property
    def score(self) -> int | None:
        return _int(self.maturity.get("score"))


class MaturityFollowupAsked(Event, tag="mapipe.maturity_followup_asked", frozen=True):
    """Autopilot asked about an immature item (``maturityFollowup``)."""

    maturityFollowup: JSONObject  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("maturityFollowup",)


class BaselineCaptured(Event, tag="mapipe.baseline_captured", frozen=True):
    """Pre-work repo state (``baseline``: tests status/failing, sha)."""

    baseline: JSONObject

    OWNS: ClassVar[tuple[str, ...]] = ("baseline",)

    @property
    def testsStatus(self) -> str | None:  # noqa: N802
        return _str(_get(self.baseline.get("tests"), "status"))


class ResearchPassRecorded(Event, tag="mapipe.research_pass_recorded", frozen=True):
    """research-gate.mjs recorded a research pass (``research``: round, kind, decision, ...)."""

    research: JSONObject

    OWNS: ClassVar[tuple[str, ...]] = ("research",)

    @property
    def decision(self) -> str | None:
        return _str(self.research.get("decision"))


class PlanCritiqueRecorded(Event, tag="mapipe.plan_critique_recorded", frozen=True):
    """The plan-critique round (``planCritique``: verdict, objections, blocking, advisory)."""

    planCritique: JSONObject  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("planCritique",)

    @property
    def verdict(self) -> str | None:
        return _str(self.planCritique.get("verdict"))


class DiffRiskScored(Event, tag="mapipe.diff_risk_scored", frozen=True):
    """diff-risk-score.mjs totals (``diffRisk``: files, loc_added, loc_removed, max_score, signals)."""

    diffRisk: JSONObject  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("diffRisk",)


# ------------------------------------------------------------------ review loop


class _IterationFacts:
    __slots__ = ()
    iteration: Any

    @property
    def number(self) -> int | None:
        return _int(_get(self.iteration, "iteration"))

    @property
    def decision(self) -> str | None:
        return _str(_get(self.iteration, "decision"))

    @property
    def reviewers(self) -> list[Any]:
        r = _get(self.iteration, "reviewers")
        return r if isinstance(r, list) else []

    @property
    def anonymizationMap(self) -> JSONObject | None:  # noqa: N802
        m = _get(self.iteration, "anonymizationMap")
        return m if isinstance(m, dict) else None

    @property
    def accepted_fingerprints(self) -> set[str]:
        """Fingerprints in ``accepted[]`` (entries are fingerprint strings or finding objects)."""
        acc = _get(self.iteration, "accepted")
        out: set[str] = set()
        for item in acc if isinstance(acc, list) else []:
            fp = item if isinstance(item, str) else _get(item, "fingerprint")
            if isinstance(fp, str):
                out.add(fp)
        return out


class ReviewIterationRecorded(_IterationFacts, Event, tag="mapipe.review_iteration_recorded", frozen=True):
    """A new ``reviewIterations[index]`` entry, verbatim: reviewers (model, findings),
    anonymizationMap, triage, accepted, counts, decision, validatorResult, ..."""

    index: int
    iteration: JSONObject


class ReviewIterationUpdated(_IterationFacts, Event, tag="mapipe.review_iteration_updated", frozen=True):
    """An existing iteration entry accreted or changed fields; ``iteration`` is the new entry."""

    index: int
    iteration: JSONObject


class ReviewDeltaComputed(Event, tag="mapipe.review_delta_computed", frozen=True):
    """review-delta.mjs wrote ``reviewIterations[index].delta`` (new, stillPresent, resolved,
    downgraded, stillPresentBlocking, recurrence, plateau, tripped)."""

    index: int
    delta: JSONObject

    def count(self, kind: str) -> int:
        items = self.delta.get(kind)
        return len(items) if isinstance(items, list) else 0

    @property
    def plateau(self) -> bool | None:
        p = self.delta.get("plateau")
        return p if isinstance(p, bool) else None

    @property
    def tripped(self) -> bool | None:
        t = self.delta.get("tripped")
        return t if isinstance(t, bool) else None


class ReviewDecisionRecorded(Event, tag="mapipe.review_decision_recorded", frozen=True):
    """review-decision-gate.mjs output merged as ``reviewIterations[index].reviewDecision``."""

    index: int
    reviewDecision: JSONObject  # noqa: N815

    @property
    def verdict(self) -> str | None:
        return _str(self.reviewDecision.get("verdict"))

    @property
    def approved(self) -> bool | None:
        a = self.reviewDecision.get("approved")
        return a if isinstance(a, bool) else None


# ------------------------------------------------------------------ gates and breaker


class GateVerdictRecorded(Event, tag="mapipe.gate_verdict_recorded", frozen=True):
    """gate-ledger.mjs appended one ``gates[]`` entry.

    ``entry`` is set only when the observed entry is not exactly ``{gate, verdict, at, sha,
    detail}`` in that order (extra keys, odd types): it is then the entry verbatim and the typed
    fields are best-effort copies.
    """

    gate: str
    verdict: str
    at: str | None = None
    sha: str | None = None
    detail: JSONObject = {}
    entry: Any | UnsetType = UNSET

    def to_entry(self) -> Any:
        if self.entry is not UNSET:
            return self.entry
        return {"gate": self.gate, "verdict": self.verdict, "at": self.at, "sha": self.sha,
                "detail": self.detail}


class CircuitBreakerTripped(Event, tag="mapipe.circuit_breaker_tripped", frozen=True):
    """The autopilot circuit breaker tripped (``circuitBreaker.tripped`` became true).

    ``record`` is set only when the observed record is not the one the typed fields rebuild.
    """

    trigger: int | None | UnsetType = UNSET
    detail: str | UnsetType = UNSET
    checkpoint: JSONObject | UnsetType = UNSET
    trippedAt: str | UnsetType = UNSET  # noqa: N815
    counters: JSONObject | UnsetType = UNSET
    record: Any | UnsetType = UNSET

    def to_record(self) -> Any:
        if self.record is not UNSET:
            return self.record
        out: JSONObject = {"tripped": True}
        for key in ("trigger", "detail", "checkpoint", "trippedAt", "counters"):
            value = getattr(self, key)
            if value is not UNSET:
                out[key] = value
        return out


class CircuitBreakerReset(Event, tag="mapipe.circuit_breaker_reset", frozen=True):
    """``/multi-agent:resume`` cleared ``circuitBreaker.tripped`` (counters kept).

    ``record`` is set only when more than ``tripped`` changed: it is then the new record.
    """

    record: Any | UnsetType = UNSET


class VerificationFailed(Event, tag="mapipe.verification_failed", frozen=True):
    """An unattended run's own gate rejected its work (``verificationFailed``: gate, reason, at)."""

    verificationFailed: JSONObject  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("verificationFailed",)

    @property
    def gate(self) -> str | None:
        return _str(self.verificationFailed.get("gate"))


# ------------------------------------------------------------------ delivery


class PrOpened(Event, tag="mapipe.pr_opened", frozen=True):
    """Phase 4 opened a pull request (``pr`` set where there was none)."""

    pr: JSONObject | None

    OWNS: ClassVar[tuple[str, ...]] = ("pr",)

    @property
    def number(self) -> int | None:
        return _int(_get(self.pr, "number"))


class PrUpdated(Event, tag="mapipe.pr_updated", frozen=True):
    """An existing ``pr`` record changed (version bump, draft flag, reviewers)."""

    pr: JSONObject | None

    OWNS: ClassVar[tuple[str, ...]] = ("pr",)


class PrPublished(Event, tag="mapipe.pr_published", frozen=True):
    """The autopilot runner pushed a verified branch with no draft PR (``publish``)."""

    publish: JSONObject

    OWNS: ClassVar[tuple[str, ...]] = ("publish",)


class CommitRecorded(Event, tag="mapipe.commit_recorded", frozen=True):
    """The run's commit (``commit``: sha, message)."""

    commit: JSONObject | None

    OWNS: ClassVar[tuple[str, ...]] = ("commit",)

    @property
    def sha(self) -> str | None:
        return _str(_get(self.commit, "sha"))


class WorktreeRemoved(Event, tag="mapipe.worktree_removed", frozen=True):
    """Phase 4 removed the worktree (``worktreeRemovedAt``; artefacts salved to ``artifactsPath``)."""

    worktreeRemovedAt: str | None  # noqa: N815
    artifactsPath: str | None | UnsetType = UNSET  # noqa: N815

    OWNS: ClassVar[tuple[str, ...]] = ("worktreeRemovedAt", "artifactsPath")


CATALOG: tuple[type[Event], ...] = (
    RunStarted, RunStatusChanged, RunFinished,
    PhaseStarted, PhaseUpdated, PhaseCompleted, PhaseSkipped, PhaseFailed,
    QuestionAsked, QuestionAnswered, SteerQueued, SteerApplied,
    MaturityAssessed, MaturityFollowupAsked, BaselineCaptured, ResearchPassRecorded,
    PlanCritiqueRecorded, DiffRiskScored,
    ReviewIterationRecorded, ReviewIterationUpdated, ReviewDeltaComputed, ReviewDecisionRecorded,
    GateVerdictRecorded, CircuitBreakerTripped, CircuitBreakerReset, VerificationFailed,
    PrOpened, PrUpdated, PrPublished, CommitRecorded, WorktreeRemoved,
)
