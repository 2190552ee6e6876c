"""The mapipe dialect: lens law, schema-valid simulation, domain events that metrics can read."""

from __future__ import annotations

import datetime as dt
import json
import random
from functools import cache
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from oracles import exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.dialects.base import DocumentObserved, DocumentPatched, Snapshot
from eventstore.dialects.mapipe import MapipeDialect
from eventstore.dialects.mapipe import events as ev
from eventstore.dialects.mapipe.validate import schema
from eventstore.events import Event, decode_event, encode_event, known_event_types

DIALECT = MapipeDialect()
START = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


@cache
def run(seed: int) -> tuple[Snapshot, ...]:
    return tuple(DIALECT.simulate(random.Random(seed), run_id=f"PROJ-{1000 + seed}", start=START))


def docs(seed: int) -> list[Any]:
    return [s.doc for s in run(seed)]


def roundtrip(events: list[Event]) -> list[Event]:
    """What the store gives back: every event encoded and decoded by its stable tag."""
    out = []
    for e in events:
        data = encode_event(e)
        back = decode_event(e.event_type(), type(e).schema_version, data)
        assert encode_event(back) == data
        out.append(back)
    return out


def assert_lens(prev: Any, nxt: Any) -> list[Event]:
    events = DIALECT.observe(prev, nxt)
    rebuilt = DIALECT.fold(documents.copy(prev), roundtrip(events))
    assert exact(rebuilt, nxt), (prev, nxt, events)
    if prev is not None:
        # derive() itself must apply cleanly: observe() falling back to one whole patch would
        # pass the law above while silently dropping the domain events.
        derived = DIALECT.derive(prev, nxt)
        partial = DIALECT.fold(documents.copy(prev), roundtrip(derived))
        assert exact(documents.apply(partial, documents.diff(partial, nxt)), nxt)
    return events


@cache
def observed_events(seed: int) -> list[list[Event]]:
    """observe() for every consecutive pair of a simulated run (first: a new stream)."""
    out, prev = [], None
    for doc in docs(seed):
        out.append(DIALECT.observe(prev, doc))
        prev = doc
    return out


def flat(seed: int) -> list[Event]:
    return [e for batch in observed_events(seed) for e in batch]


# ------------------------------------------------------------------ registry and describe


def test_registry_resolves_the_dialect_and_its_tags() -> None:
    assert isinstance(get_dialect("mapipe"), MapipeDialect)
    tags = known_event_types()
    for cls in ev.CATALOG:
        assert cls.event_type().startswith("mapipe.")
        assert cls.event_type() in tags
    assert len({c.event_type() for c in ev.CATALOG}) == len(ev.CATALOG)


def test_stream_id_and_describe() -> None:
    doc = docs(3)[-1]
    assert DIALECT.stream_id(doc) == "PROJ-1003"
    info = DIALECT.describe(doc)
    assert info.task_id == "PROJ-1003"
    assert info.project == doc["project"] and info.title == doc["title"] and info.status == doc["status"]
    assert info.phase == str(doc["currentPhase"])
    assert DIALECT.describe([1, 2]).task_id is None
    assert DIALECT.stream_id({"taskId": ""}) is None


# ------------------------------------------------------------------ the simulator


@pytest.mark.parametrize("seed", range(12))
def test_simulated_run_shape(seed: int) -> None:
    snaps = run(seed)
    assert 15 <= len(snaps) <= 60
    times = [s.occurred_at for s in snaps]
    assert all(t is not None for t in times) and times == sorted(times)  # type: ignore[type-var]
    first, last = snaps[0].doc, snaps[-1].doc
    assert first["taskId"] == f"PROJ-{1000 + seed}" and first["currentPhase"] == 0
    assert last["status"] in {"complete", "failed", "abandoned", "paused"}
    assert all(not exact(a.doc, b.doc) for a, b in zip(snaps, snaps[1:], strict=False)), "every write changes something"


def test_simulator_is_deterministic_per_rng() -> None:
    a = list(DIALECT.simulate(random.Random(99), run_id="PROJ-1", start=START))
    b = list(DIALECT.simulate(random.Random(99), run_id="PROJ-1", start=START))
    c = list(DIALECT.simulate(random.Random(98), run_id="PROJ-1", start=START))
    assert [json.dumps(s.doc) for s in a] == [json.dumps(s.doc) for s in b]
    assert [json.dumps(s.doc) for s in a] != [json.dumps(s.doc) for s in c]


@pytest.mark.parametrize("seed", range(15))
def test_every_simulated_snapshot_is_schema_valid(seed: int) -> None:
    validator = Draft202012Validator(schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    for i, doc in enumerate(docs(seed)):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], f"snapshot {i}: {errors}"
        assert DIALECT.validate(doc) == []


def test_simulation_covers_the_outcomes() -> None:
    finals = [docs(s)[-1] for s in range(120)]
    statuses = {d["status"] for d in finals}
    assert {"complete", "failed", "abandoned"} <= statuses
    assert any(d.get("circuitBreaker") for d in finals)
    assert {len(d.get("reviewIterations", [])) for d in finals} >= {1, 2, 3, 4}
    assert any(d.get("pr") for d in finals) and any(d.get("publish") for d in finals)


# ------------------------------------------------------------------ the lens on simulated runs


@pytest.mark.parametrize("seed", range(25))
def test_folding_observe_reproduces_every_version(seed: int) -> None:
    state: Any = None
    for doc, batch in zip(docs(seed), observed_events(seed), strict=False):
        state = DIALECT.fold(state, roundtrip(batch))
        assert exact(state, doc)


def test_most_transitions_need_no_residual_patch() -> None:
    transitions = explained = 0
    worst = 0
    for seed in range(30):
        for batch in observed_events(seed)[1:]:
            transitions += 1
            patches = [e for e in batch if isinstance(e, DocumentPatched)]
            domain = [e for e in batch if not isinstance(e, (DocumentPatched, DocumentObserved))]
            assert domain, f"seed {seed}: a transition without any domain event: {batch}"
            worst = max([worst, *(len(p.ops) for p in patches)])
            explained += not patches
    assert explained / transitions >= 0.95, (explained, transitions)
    assert worst <= 3


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), data=st.data())
def test_lens_law_on_simulated_pairs(seed: int, data: st.DataObject) -> None:
    ds = docs(seed)
    i = data.draw(st.integers(0, len(ds) - 1))
    j = data.draw(st.integers(0, len(ds) - 1))
    assert_lens(ds[i], ds[j])  # forwards, backwards and skipping versions
    assert_lens(None, ds[j])


# ------------------------------------------------------------------ mutated documents


def _json_value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.choice([True, False])
    if kind == 2:
        return rnd.randint(-5, 2**40)
    if kind == 3:
        return rnd.choice([0.5, -1.25, 1.0, 3.0e10])
    if kind in (4, 5):
        return rnd.choice(["", "idle", "x/y~z", "in_progress", "done", "ünï", "PROJ-1"])
    if kind in (6, 7):
        return {rnd.choice(["a", "b", "status", "tripped", "fingerprint", "x/y"]): _json_value(rnd, depth + 1)
                for _ in range(rnd.randint(0, 3))}
    return [_json_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]


def _containers(node: Any, out: list[Any]) -> list[Any]:
    if isinstance(node, (dict, list)):
        out.append(node)
        for child in node.values() if isinstance(node, dict) else node:
            _containers(child, out)
    return out


def mutate(doc: Any, rnd: random.Random, steps: int) -> Any:
    """Out-of-spec edits a real file may carry: unknown keys, wrong types, reordering, removals."""
    doc = documents.copy(doc)
    for _ in range(steps):
        # Bias towards the parts the dialect interprets.
        focus = rnd.choice([doc, doc, doc.get("phases"), doc.get("reviewIterations"), doc.get("gates"),
                            doc.get("circuitBreaker"), doc.get("pendingQuestion")])
        pool = _containers(focus, []) or _containers(doc, [])
        target = rnd.choice(pool)
        op = rnd.randrange(6)
        if isinstance(target, dict):
            keys = list(target)
            if op == 0 or not keys:
                target[rnd.choice(["bogus", "retries", "tripped", "status", "a/b", "~0"])] = _json_value(rnd)
            elif op == 1:
                del target[rnd.choice(keys)]
            elif op == 2:
                target[rnd.choice(keys)] = _json_value(rnd)
            elif op == 3:
                items = list(target.items())
                rnd.shuffle(items)
                target.clear()
                target.update(items)
            elif op == 4:
                k = rnd.choice(keys)
                v = target[k]
                target[k] = float(v) if type(v) is int else v
            else:
                k = rnd.choice(keys)
                target[k] = documents.copy(rnd.choice(pool)) if pool else None
        else:
            if op in (0, 1) or not target:
                target.insert(rnd.randint(0, len(target)), _json_value(rnd))
            elif op == 2:
                del target[rnd.randrange(len(target))]
            elif op == 3:
                rnd.shuffle(target)
            else:
                target[rnd.randrange(len(target))] = _json_value(rnd)
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), data=st.data(), rnd=st.randoms(use_true_random=False))
def test_lens_law_on_mutated_documents(seed: int, data: st.DataObject, rnd: random.Random) -> None:
    ds = docs(seed)
    i = data.draw(st.integers(1, len(ds) - 1))
    prev, nxt = ds[i - 1], ds[i]
    m_prev = mutate(prev, rnd, data.draw(st.integers(1, 4)))
    m_next = mutate(nxt, rnd, data.draw(st.integers(1, 4)))
    for a, b in ((prev, m_next), (m_prev, nxt), (m_prev, m_next), (m_next, m_prev), (nxt, m_prev)):
        assert_lens(a, b)
    for doc in (m_prev, m_next):
        findings = DIALECT.validate(doc)
        assert all(f.path == "" or f.path.startswith("/") for f in findings)


@settings(max_examples=60, deadline=None)
@given(a=st.recursive(st.none() | st.integers(-9, 9) | st.text(max_size=3),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                      max_leaves=8),
       b=st.recursive(st.none() | st.integers(-9, 9) | st.text(max_size=3),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                      max_leaves=8))
def test_lens_law_on_arbitrary_json(a: Any, b: Any) -> None:
    assert_lens(a, b)
    assert_lens({"taskId": "T-1", "phases": a}, {"taskId": "T-1", "phases": b, "gates": a})


def test_unknown_keys_survive_in_the_residual_patch() -> None:
    prev, nxt = docs(1)[3], documents.copy(docs(1)[4])
    nxt["phases"]["0"]["mystery"] = {"k": 1.0}
    nxt["customField"] = [1, "two"]
    events = assert_lens(prev, nxt)
    patched = [op for e in events if isinstance(e, DocumentPatched) for op in e.ops]
    assert {op["path"] for op in patched} >= {"/customField"}
    assert any(not isinstance(e, DocumentPatched) for e in events), "domain events still derived"


# ------------------------------------------------------------------ domain events for metrics


def test_review_iterations_carry_what_reviewer_acceptance_needs() -> None:
    checked = 0
    for seed in range(20):
        final = docs(seed)[-1]
        recorded = [e for e in flat(seed) if isinstance(e, ev.ReviewIterationRecorded)]
        assert len(recorded) == len(final.get("reviewIterations", []))
        for e in recorded:
            it = e.iteration
            assert e.number == e.index + 1 == it["iteration"]
            assert 2 <= len(e.reviewers) <= 3 and all(r["model"] for r in e.reviewers)
            label_map = e.anonymizationMap
            assert label_map is not None and label_map["seed"] == f"PROJ-{1000 + seed}:{e.number}"
            assert sorted(label_map["labelToModel"].values()) == sorted(r["model"] for r in e.reviewers)
            raised = {f["fingerprint"] for r in e.reviewers for f in r["findings"]}
            assert e.accepted_fingerprints <= raised
            assert e.decision in {"fix", "accept", "escalate"}
            checked += 1
    assert checked >= 20


def _acceptance(iterations: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for it in iterations:
        accepted = {a["fingerprint"] for a in it["accepted"]}
        for r in it["reviewers"]:
            fps = {f["fingerprint"] for f in r["findings"]}
            acc, tot = out.get(r.get("model", "unknown"), (0, 0))
            out[r.get("model", "unknown")] = (acc + len(fps & accepted), tot + len(fps))
    return out


def test_reviewer_acceptance_from_events_equals_from_documents() -> None:
    from_events: list[dict[str, Any]] = []
    from_docs: list[dict[str, Any]] = []
    for seed in range(15):
        from_events += [e.iteration for e in flat(seed) if isinstance(e, ev.ReviewIterationRecorded)]
        from_docs += docs(seed)[-1].get("reviewIterations", [])
    assert _acceptance(from_events) == _acceptance(from_docs)
    assert len(_acceptance(from_events)) >= 3


def test_review_deltas_from_iteration_two() -> None:
    seen = 0
    for seed in range(20):
        final = docs(seed)[-1]
        deltas = [e for e in flat(seed) if isinstance(e, ev.ReviewDeltaComputed)]
        expected = [i for i, it in enumerate(final.get("reviewIterations", [])) if "delta" in it]
        assert [d.index for d in deltas] == expected
        for d in deltas:
            assert d.index >= 1 and d.delta["previousIteration"] == d.index
            for kind in ("new", "stillPresent", "resolved", "downgraded", "stillPresentBlocking"):
                assert d.count(kind) == len(d.delta[kind])
            assert set(d.delta["recurrence"]) == {f["fingerprint"] for f in d.delta["stillPresent"]}
            assert isinstance(d.plateau, bool) and isinstance(d.tripped, bool)
            seen += 1
    assert seen >= 10


def test_gate_verdicts_mirror_the_ledger() -> None:
    verdicts: set[str] = set()
    for seed in range(15):
        gates = [e for e in flat(seed) if isinstance(e, ev.GateVerdictRecorded)]
        ledger = docs(seed)[-1].get("gates", [])
        assert [g.to_entry() for g in gates] == ledger
        assert all(g.entry is msgspec.UNSET for g in gates), "exact entries need no verbatim copy"
        verdicts |= {g.verdict for g in gates}
    assert verdicts == {"pass", "fail", "not-applicable"}


def test_circuit_breaker_trips_and_resets_are_events() -> None:
    trips, resets = [], []
    for seed in range(200):
        es = flat(seed)
        trips += [e for e in es if isinstance(e, ev.CircuitBreakerTripped)]
        resets += [e for e in es if isinstance(e, ev.CircuitBreakerReset)]
        if trips and resets:
            break
    assert trips and resets
    t = trips[0]
    assert t.trigger == 2 and t.record is msgspec.UNSET
    assert isinstance(t.checkpoint, dict) and t.checkpoint["phase"] == 3 and t.checkpoint["iteration"] >= 2
    assert isinstance(t.counters, dict) and t.counters["identicalFindingCycles"] >= 2
    assert resets[0].record is msgspec.UNSET


def test_phase_question_and_steer_events() -> None:
    es = flat(0)
    started = [e.phase for e in es if isinstance(e, ev.PhaseStarted)]
    assert started[:2] == ["1", "2"]  # phase 0 arrives with the first snapshot
    completed = [e for e in es if isinstance(e, ev.PhaseCompleted)]
    assert all(e.startedAt and e.finishedAt and e.model for e in completed)
    first_starts = {e.phase: e for e in reversed(es) if isinstance(e, ev.PhaseStarted)}
    assert all(e.currentPhase == int(p) for p, e in first_starts.items()), "entering a phase moves currentPhase"
    asked = [e for e in es if isinstance(e, ev.QuestionAsked)]
    answered = [e for e in es if isinstance(e, ev.QuestionAnswered)]
    assert len(asked) == len(answered) >= 1
    assert asked[0].questionId == answered[0].questionId and asked[0].askedAt <= answered[0].answeredAt  # type: ignore[operator]
    assert answered[0].removed == ["waitingFor"] and answered[0].pendingQuestion is None
    assert any(isinstance(e, ev.SteerQueued) for e in es)
    assert [e.appliedPhase for e in es if isinstance(e, ev.SteerApplied)] == [2]
    kinds = {type(e) for seed in range(80) for e in flat(seed)}
    for cls in (ev.MaturityAssessed, ev.BaselineCaptured, ev.PlanCritiqueRecorded, ev.ResearchPassRecorded,
                ev.DiffRiskScored, ev.ReviewDecisionRecorded, ev.PrOpened, ev.PrUpdated, ev.PrPublished,
                ev.CommitRecorded, ev.WorktreeRemoved, ev.RunFinished, ev.RunStatusChanged, ev.PhaseFailed,
                ev.VerificationFailed):
        assert cls in kinds, cls


def test_run_started_from_an_empty_document() -> None:
    doc = docs(2)[0]
    events = assert_lens({}, doc)
    assert [type(e) for e in events] == [ev.RunStarted]
    assert events[0].taskId == "PROJ-1002"  # type: ignore[attr-defined]


# ------------------------------------------------------------------ catalog codec


def _handmade() -> list[Event]:
    return [
        ev.RunStarted(state=documents.copy(docs(0)[0])),
        ev.PhaseSkipped(phase="1", record={"status": "skipped"}),
        ev.MaturityFollowupAsked(maturityFollowup={"gaps": ["vague_scope"], "askedAt": "2026-01-05T09:00:00Z"}),
        ev.ReviewIterationUpdated(index=0, iteration={"iteration": 1, "x": [1.5, None]}),
        ev.GateVerdictRecorded(gate="g", verdict="odd", entry={"gate": "g", "verdict": "odd", "extra": 1}),
        ev.CircuitBreakerTripped(trigger=9, record={"tripped": True, "trigger": 9, "bogus": True}),
        ev.CircuitBreakerReset(record={"tripped": False}),
        ev.RunStatusChanged(haltReason=None, removed=["abandonedBy"]),
        ev.WorktreeRemoved(worktreeRemovedAt="2026-01-05T09:00:00Z", artifactsPath=None),
    ]


def test_every_catalog_event_round_trips_through_the_codec() -> None:
    samples: dict[type[Event], list[Event]] = {}
    for seed in range(60):
        for e in flat(seed):
            samples.setdefault(type(e), []).append(e)
    for e in _handmade():
        samples.setdefault(type(e), []).append(e)
    missing = [c.__name__ for c in ev.CATALOG if c not in samples]
    assert missing == []
    for cls, items in samples.items():
        for e in items[:25]:
            data = encode_event(e)
            back = decode_event(cls.event_type(), cls.schema_version, data)
            assert back == e and encode_event(back) == data
            assert json.loads(data)["type"] == cls.event_type()


def test_out_of_spec_values_never_become_undecodable_events() -> None:
    prev = docs(5)[2]
    nxt = documents.copy(prev)
    nxt["status"] = 7  # RunStatusChanged.status is a str: must go to the residual instead
    nxt["maturity"] = ["not", "an", "object"]
    nxt.setdefault("gates", []).append({"gate": 5, "verdict": "pass"})
    events = assert_lens(prev, nxt)
    assert not any(isinstance(e, (ev.RunStatusChanged, ev.MaturityAssessed)) for e in events)
    gate = [e for e in events if isinstance(e, ev.GateVerdictRecorded)]
    assert gate and gate[0].entry == {"gate": 5, "verdict": "pass"} and gate[0].gate == ""


# ------------------------------------------------------------------ validate and summarize


def test_validate_reports_unknown_keys_and_bad_values_with_pointers() -> None:
    doc = documents.copy(docs(4)[-1])
    doc["bogus"] = 1
    doc["a/b"] = True
    doc["phases"]["2"]["retries"] = 3
    doc["status"] = "idle"
    doc["phases"]["1"]["retryCount"] = 9
    findings = DIALECT.validate(doc)
    by_path = {(f.path, f.code) for f in findings}
    assert ("/bogus", "unknown-key") in by_path
    assert ("/a~1b", "unknown-key") in by_path
    assert ("/phases/2/retries", "unknown-key") in by_path
    assert ("/status", "schema-enum") in by_path
    assert ("/phases/1/retryCount", "schema-maximum") in by_path
    assert len(findings) == 5
    missing = documents.copy(docs(4)[-1])
    del missing["taskId"]
    assert [(f.path, f.code) for f in DIALECT.validate(missing)] == [("", "schema-required")]


def test_a_few_documents_are_validated_without_compiling_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling the fast validator costs more than jsonschema spends on a hundred documents: a process
    compiles it only once it has validated COMPILE_AFTER, and the findings are the same either way."""
    from eventstore.dialects.mapipe import validate

    monkeypatch.setattr(validate, "_validated", 0)
    validate._fast.cache_clear()
    bad = documents.copy(docs(4)[-1])
    bad["status"] = "idle"
    sample = [*docs(4)[:3], bad]
    before = [validate.validate_document(d) for d in sample]
    assert validate._fast.cache_info().currsize == 0 and validate._validated == len(sample)
    monkeypatch.setattr(validate, "_validated", validate.COMPILE_AFTER)
    assert [validate.validate_document(d) for d in sample] == before
    assert validate._fast.cache_info().currsize == 1  # compiled now, and used
    assert before[:3] == [[], [], []] and [(f.path, f.code) for f in before[3]] == [("/status", "schema-enum")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), data=st.data(), rnd=st.randoms(use_true_random=False))
def test_the_compiled_validator_accepts_only_what_jsonschema_accepts(seed: int, data: st.DataObject,
                                                                     rnd: random.Random) -> None:
    """The compiled validator is a shortcut for valid documents: when it accepts one, jsonschema (which
    has the last word, and lists the findings) finds nothing either."""
    from eventstore.dialects.mapipe import validate

    ds = docs(seed)
    doc = mutate(ds[data.draw(st.integers(0, len(ds) - 1))], rnd, data.draw(st.integers(0, 3)))
    fast = validate._fast()
    assert fast is not None  # the packaged schema compiles: otherwise every document takes the slow path
    try:
        fast(documents.copy(doc))
        accepted = True
    except Exception:
        accepted = False
    errors = list(validate.validator().iter_errors(doc))
    event(f"compiled validator accepts: {accepted}")
    if accepted:
        assert errors == [], [e.message for e in errors]


def test_summaries_are_readable() -> None:
    s = DIALECT.summarize
    assert s(ev.PhaseCompleted(phase="3", record={"status": "done", "model": "opus", "retryCount": 1})) == \
        "phase 3 completed (model=opus, retries=1)"
    it = {"iteration": 2, "decision": "fix", "accepted": [{"fingerprint": "a"}, "b"],
          "reviewers": [{"model": "gpt-5", "findings": [{"fingerprint": "a"}, {"fingerprint": "c"}]},
                        {"model": "gemini-2.5-pro", "findings": [{"fingerprint": "b"}]}]}
    assert s(ev.ReviewIterationRecorded(index=1, iteration=it)) == \
        "review iteration 2: 3 findings from 2 reviewers, 2 accepted, decision=fix"
    assert s(ev.GateVerdictRecorded(gate="test-suite", verdict="fail")) == "gate test-suite: fail"
    assert s(ev.CircuitBreakerTripped(trigger=3, detail="re-entry hard-kill")) == \
        "circuit breaker tripped: trigger 3 (re-entry hard-kill)"
    assert s(ev.RunStatusChanged(status="failed", haltReason="phase-2:x")) == "status failed, haltReason=phase-2:x"
    for seed in range(5):
        for e in flat(seed):
            line = s(e)
            assert line and "\n" not in line
