"""The ``envelope`` dialect: validation vectors, corpus envelopes, the parse contract, the lens."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.dialects.base import DocumentObserved, DocumentPatched
from eventstore.dialects.envelope import EnvelopeDialect, check, classify, is_run_halt, is_terminal, parse_turn
from eventstore.dialects.envelope import events as ev
from eventstore.dialects.envelope import validate as val
from eventstore.dialects.envelope.parse import REPAIR_PROMPT, load_path
from eventstore.dialects.envelope.simulate import simulate_run, write_transcripts
from eventstore.events import decode_event, encode_event

CORPUS = DATA / "agentic-workflow"
VECTORS = CORPUS / "vectors" / "envelope-validation.vectors.jsonl"
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
D = EnvelopeDialect()


def _vectors() -> list[dict[str, Any]]:
    return [json.loads(line) for line in VECTORS.read_text(encoding="utf-8").splitlines() if line.strip()]


def base_envelope(**over: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "skill": "execute-phase", "state": "READY_FOR_REVIEW", "summary": "Fix 43 implemented, PR #14 opened.",
        "unit": {"type": "fix", "id": "43-null-crash", "issue": 43, "branch": "fix/43-null-crash"},
        "phase": {"current": None, "total": None, "completed": None},
        "pr": {"number": 14, "url": "https://github.com/o/r/pull/14", "state": "open", "head_sha": "abc123",
               "merge_ready": None, "ci": "pending"},
        "gates": {"verification": "green", "review_pending": True, "audit_pending": True},
        "findings": {"fix_now": [], "issues_filed": [45], "untriaged": 0, "decisions_recorded": 0},
        "blockers": [], "dependencies": {"unmet": [], "build_order": []},
        "recommendations": {"product_audit": False, "reason": None}, "needs_input": None,
        "next": {"recommended": "/review-change", "alternatives": [], "tier": "strong"}, "detail": None,
    }
    env.update(over)
    return env


def fenced(env: Any) -> str:
    return "```json\n" + json.dumps(env, indent=2) + "\n```"


# ------------------------------------------------------------------ the 38 vectors


def test_vector_file_has_38_cases() -> None:
    assert len(_vectors()) == 38


@pytest.mark.parametrize("embedded_only", [False, True], ids=["with-schema", "embedded-only"])
@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["id"])
def test_vector_classifies_as_expected(vector: dict[str, Any], embedded_only: bool,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if embedded_only:  # the embedded rules alone must give the same verdicts
        monkeypatch.setattr(val, "schema_findings", lambda value: [])
    expect, env = vector["expect"], vector["envelope"]
    result = check(env)
    ok, findings = classify(env)
    assert ok == result.ok
    if "ok" in expect:
        assert result.ok is expect["ok"]
        if expect["ok"] and expect.get("raw_schema_valid", True):
            assert result.ok_strict and result.schema_valid  # README: every ok vector is schema-valid
    if "ok_legacy" in expect:
        assert result.ok is expect["ok_legacy"]
    if "ok_strict" in expect:
        assert result.ok_strict is expect["ok_strict"]
    messages = [f.message for f in findings]
    if "error" in expect:
        assert expect["error"] in messages
    if "error_prefix" in expect:
        assert any(m.startswith(expect["error_prefix"]) for m in result.errors)
    if "error_contains" in expect:
        assert any(expect["error_contains"] in m for m in result.errors)
    if "isTerminal" in expect:
        assert is_terminal(env["state"]) is expect["isTerminal"]
    if "isRunHalt" in expect:
        assert is_run_halt(env) is expect["isRunHalt"]
    for dotted, value in expect.get("normalized", {}).items():
        node: Any = result.normalized
        for part in dotted.split("."):
            node = node[part]
        assert node == value
    if expect.get("raw_returned"):  # a rejected envelope keeps the raw value it was given
        turn = parse_turn(fenced(env))
        assert not turn.ok and turn.code == "invalid-envelope"
        assert turn.block is not None and exact(json.loads(turn.block), env)
        assert exact(check(env).normalized, env)  # nothing to normalise: the raw value itself
    if expect.get("raw_schema_valid") is False:
        assert result.schema_valid is False
        assert any(f.code == "non-canonical-spelling" for f in findings)
    if not result.ok:  # every error names where, as a JSON Pointer into the envelope
        for f in findings:
            if f.severity == "error" and f.path:
                documents.parse_pointer(f.path)


def test_semantic_rules_are_warnings_with_pointers() -> None:
    halt = base_envelope(state="HALT", blockers=[{"kind": "gate", "id": "ci", "scope": "unit", "detail": "red"}])
    fixes = base_envelope(state="NEEDS_FIXES")
    ask = base_envelope(state="NEEDS_INPUT", needs_input={"question": "Which?", "options": []})
    merge = base_envelope(state="MERGE_READY", next={"recommended": "gh pr merge 14", "alternatives": [], "tier": "cheap"})
    codes = {name: {(f.path, f.code) for f in check(e).findings} for name, e in
             {"halt": halt, "fixes": fixes, "ask": ask, "merge": merge}.items()}
    assert ("/blockers/0/scope", "halt-blocker-not-run-scoped") in codes["halt"]
    assert ("/findings/fix_now", "needs-fixes-without-fix-now") in codes["fixes"]
    assert ("/needs_input", "needs-input-missing") in codes["ask"]
    assert ("/pr/merge_ready", "merge-ready-not-set") in codes["merge"]
    for e in (halt, fixes, ask, merge):
        assert check(e).ok and all(f.severity == "warning" for f in check(e).findings)
    good_halt = base_envelope(state="HALT", blockers=[{"kind": "substrate", "id": "forge", "scope": "run",
                                                       "detail": "down"}],
                              next={"recommended": "/workflow-status", "alternatives": [], "tier": "strong"})
    assert not any(f.code.startswith("halt") for f in check(good_halt).findings)
    assert not check(base_envelope()).findings  # the canonical example is clean in every layer


def test_tier_and_continuation_rules() -> None:
    cheap_review = base_envelope(next={"recommended": "/review-change", "alternatives": [], "tier": "cheap"})
    assert any(f.code == "tier-mismatch" for f in check(cheap_review).findings)
    cont = {"argv": ["/workflow-status"], "rendering": "/workflow-status", "preconditions": [],
            "convergence": "next.recommended"}
    ok = base_envelope(next={"recommended": "/review-change", "alternatives": [], "tier": "strong", "continuation": cont})
    assert check(ok).ok_strict
    bad = documents.copy(ok)
    bad["next"]["continuation"]["evidence"] = {"artifact": "a.md", "digest": "XYZ"}
    result = check(bad)
    assert result.ok and not result.ok_strict
    assert any(f.path == "/next/continuation/evidence/digest" for f in result.findings)


# ------------------------------------------------------------------ corpus envelopes


def _corpus_envelopes() -> list[Path]:
    return sorted((CORPUS / "envelopes").glob("*.json"))


@pytest.mark.parametrize("path", _corpus_envelopes(), ids=lambda p: p.name)
def test_corpus_envelope_classifies_as_its_name_says(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    result = check(doc)
    parts = path.name.split(".")
    if parts[0] == "skill-outcome":
        assert result.kind == "skill-outcome" and not result.ok
        assert D.validate(doc)[0].code == "not-an-envelope"
    elif "invalid" in parts or "native-legacy-shape" in parts:
        assert not result.ok and not result.schema_valid and result.errors
    else:
        assert result.ok and result.ok_strict and result.schema_valid
        assert not [f for f in result.findings if f.severity == "error"]
        states = [p for p in parts if p in val.STATES]
        if states:
            assert doc["state"] == states[0] and D.describe(doc).status == states[0]
        assert D.describe(doc).phase == doc["skill"]


def test_native_legacy_shape_errors_name_the_broken_fields() -> None:
    doc = json.loads((CORPUS / "envelopes" / "audit-pr.native-legacy-shape.json").read_text())
    paths = {f.path for f in check(doc).findings if f.severity == "error"}
    assert {"/unit/id", "/findings/issues_filed", "/blockers/0/kind", "/blockers/0/scope"} <= paths
    assert D.stream_id(doc) == "12"  # a numbered unit still names its stream


# ------------------------------------------------------------------ the parse contract


def test_last_json_fence_wins() -> None:
    first = base_envelope(summary="first")
    last = base_envelope(summary="last")
    text = f"Working...\n{fenced(first)}\nmore prose\n```python\nprint(1)\n```\n{fenced(last)}\n"
    turn = parse_turn(text)
    assert turn.ok and turn.envelope["summary"] == "last"
    ok, _ = classify(text)
    assert ok


def test_only_the_final_assistant_message_counts() -> None:
    text = f"## User\n\n{fenced(base_envelope())}\n\n## Assistant\n\nNo envelope this time.\n"
    turn = parse_turn(text)
    assert not turn.ok and turn.code == "no-json-block"


def test_no_fence_is_rejected_with_reason() -> None:
    turn = parse_turn("Implemented P2.\n→ Next: /review-change\n")
    assert not turn.ok and turn.code == "no-json-block" and "no fenced ```json block" in turn.reason
    ok, findings = classify("just prose")
    assert not ok and findings[0].code == "no-json-block"


def test_invalid_json_is_rejected_with_line_info() -> None:
    body = json.dumps(base_envelope(), indent=2).splitlines()
    body[5] = body[5].replace('"type"', "type")  # an unquoted key on line 6 of the block
    text = "line 1\nline 2\n```json\n" + "\n".join(body) + "\n```\n"
    turn = parse_turn(text)
    assert not turn.ok and turn.code == "invalid-json"
    assert turn.line == 3 + 6 and turn.column is not None  # fence opens on line 3
    assert f"line {turn.line}" in turn.reason and turn.block is not None


def test_envelope_that_does_not_validate_is_rejected() -> None:
    turn = parse_turn(fenced({k: v for k, v in base_envelope().items() if k != "pr"}))
    assert not turn.ok and turn.code == "invalid-envelope" and "missing required key: pr" in turn.errors


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(text, encoding="utf-8")
    return p


def test_rejected_turn_then_repair_is_linked(tmp_path: Path) -> None:
    _write(tmp_path, "turn-001.md", f"## Assistant\nPlanned.\n{fenced(base_envelope(state='OK'))}\n")
    _write(tmp_path, "turn-002.md", "## Assistant\nImplemented, PR opened.\n→ Next: /review-change\n")
    _write(tmp_path, "turn-002.repair.md", f"## User\n{REPAIR_PROMPT}\n## Assistant\n{fenced(base_envelope())}\n")
    snaps = list(D.load(tmp_path))
    assert [s.doc is None for s in snaps] == [False, True, False]
    rejected = snaps[1].events[0]
    assert isinstance(rejected, ev.TurnRejected) and rejected.turn == 2 and rejected.code == "no-json-block"
    assert snaps[1].stream_hint == "43-null-crash"  # bookkeeping lands in the unit's stream
    repair = snaps[2].events[0]
    assert isinstance(repair, ev.RepairAttempted) and repair.ok and repair.repairs_turn == 2 and repair.attempt == 1
    assert snaps[2].doc == base_envelope()


def test_a_rejected_turn_keeps_the_document_for_the_next_turn(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Ingest folds a doc-less turn's events onto the stream's document, not onto nothing: the
    repaired turn after a rejected one is a transition from the last accepted state (mutation
    testing: folding onto None survived every test)."""
    _write(tmp_path, "turn-001.md", f"## Assistant\nPlanned.\n{fenced(base_envelope(state='OK'))}\n")
    _write(tmp_path, "turn-002.md", "## Assistant\nImplemented, PR opened.\n→ Next: /review-change\n")
    _write(tmp_path, "turn-002.repair.md", f"## User\n{REPAIR_PROMPT}\n## Assistant\n{fenced(base_envelope())}\n")
    assert run("ingest", "envelope", str(tmp_path)).exit_code == 0
    log = [json.loads(line) for line in run("log", "43-null-crash", "--json").stdout.splitlines()]
    assert [e["type"].split(".")[1] for e in log] == [
        "envelope_emitted", "state_transitioned", "findings_reported", "gates_reported", "turn_rejected",
        "repair_attempted", "envelope_emitted", "state_transitioned", "findings_reported"]
    assert log[7]["data"]["from_state"] == "OK" and log[7]["data"]["to_state"] == "READY_FOR_REVIEW"


def test_second_failure_is_failed_and_a_third_attempt_is_flagged(tmp_path: Path) -> None:
    _write(tmp_path, "a.md", "---\nturn: 7\nrun: run-9\n---\n## Assistant\nDone.\n")
    _write(tmp_path, "b.md", f"---\nrepair_of: 7\n---\n## User\n{REPAIR_PROMPT}\n## Assistant\n```json\n{{\"skill\": \n```\n")
    _write(tmp_path, "c.md", f"## User\n{REPAIR_PROMPT}\n## Assistant\nstill nothing\n")
    snaps = load_path(tmp_path)
    assert all(s.doc is None for s in snaps)
    assert snaps[0].stream_hint == "run-9" and snaps[1].stream_hint == "run-9"
    kinds = [[type(e).__name__ for e in s.events] for s in snaps]
    assert kinds == [["TurnRejected"], ["RepairAttempted", "TurnFailed"], ["RepairAttempted", "TurnFailed"]]
    failed_repair = snaps[1].events[0]
    assert not failed_repair.ok and failed_repair.repairs_turn == 7 and failed_repair.code == "invalid-json"
    assert failed_repair.line == 8  # front matter (3) + "## User" + prompt + "## Assistant" + fence: block line 1
    assert snaps[1].events[1].turn == 7 and snaps[1].events[1].attempts == 2
    third = snaps[2].events[0]
    assert third.repairs_turn == 7 and third.attempt == 2  # beyond the one-repair rule
    assert "over the one-repair limit" in D.summarize(third)


def test_json_files_are_documents_not_turns(tmp_path: Path) -> None:
    p = _write(tmp_path, "env.json", json.dumps(base_envelope()))
    (snap,) = list(D.load(p))
    assert snap.doc == base_envelope() and snap.events == [] and snap.raw == p.read_bytes()


# ------------------------------------------------------------------ the lens


def _fold(prev: Any, events: list[Any]) -> Any:
    return D.fold(documents.copy(prev), events)


def _runs(seeds: range) -> list[list[Any]]:
    return [list(simulate_run(random.Random(s), run_id=f"run-{s}", start=START)) for s in seeds]


def test_simulated_runs_obey_the_lens_law_without_residual() -> None:
    transitions = residual = 0
    seen: set[str] = set()
    for snaps in _runs(range(40)):
        prev = None
        for s in snaps:
            doc = prev
            for e in s.events:
                doc = D.evolve(doc, e)
            assert exact(doc, prev)  # bookkeeping never changes the document
            seen.update(type(e).__name__ for e in s.events)
            if s.doc is None:
                continue
            out = D.observe(prev, s.doc)
            assert exact(_fold(prev, out), s.doc)
            assert isinstance(out[0], ev.EnvelopeEmitted)
            transitions += 1
            residual += sum(1 for e in out if isinstance(e, (DocumentPatched, DocumentObserved)))
            seen.update(type(e).__name__ for e in out)
            prev = s.doc
    assert transitions > 200 and residual == 0
    assert {c.__name__ for c in ev.CATALOG} <= seen  # the simulator exercises the whole catalog


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=6)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> Any:
    """A valid envelope with random replacements, deletions and unknown keys (or not an object)."""
    doc = base_envelope(
        findings={"fix_now": [{"id": "F1", "file": "a.ts:1", "axis": "tests", "severity": "high", "class": "fix-now",
                               "route": "r", "suggested_tier": "cheap"}], "issues_filed": [1], "untriaged": 0,
                  "decisions_recorded": 0},
        blockers=[{"kind": "gate", "id": "ci", "scope": "unit", "detail": "red"}])
    doc["state"] = draw(st.sampled_from(val.STATES + ("blocked", "BOGUS")))
    for _ in range(draw(st.integers(0, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for t in path[:-1]:
            parent = parent[t]
        op = draw(st.sampled_from(("replace", "delete", "add-key")))
        if op == "replace":
            parent[path[-1]] = draw(json_values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = draw(json_values)
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prev=st.one_of(st.none(), mutated_envelopes()), nxt=mutated_envelopes())
def test_lens_law_on_mutated_envelopes(prev: Any, nxt: Any) -> None:
    out = D.observe(prev, nxt)
    assert exact(_fold(prev, out), nxt)
    if isinstance(nxt, dict) and "state" in nxt:
        assert isinstance(out[0], ev.EnvelopeEmitted)  # any envelope-like doc is a turn, no residual
        assert not any(isinstance(e, DocumentPatched) for e in out)
    for e in out:  # every derived event survives the log
        assert decode_event(type(e).event_type(), 1, encode_event(e)) == e


@settings(max_examples=60, deadline=None)
@given(prev=json_values, nxt=json_values)
def test_lens_law_on_arbitrary_json(prev: Any, nxt: Any) -> None:
    assert exact(_fold(prev, D.observe(prev, nxt)), nxt)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated_envelopes())
def test_embedded_strict_rules_agree_with_the_json_schema(doc: Any) -> None:
    validator = val.schema_validator()
    assert validator is not None
    embedded = not val.legacy_findings(doc) and not val.strict_findings(doc)
    assert embedded == validator.is_valid(doc)


def test_repeated_identical_advice_is_no_progress() -> None:
    a = base_envelope(state="NEEDS_FIXES", findings={"fix_now": [{"id": "F1", "file": "a:1", "axis": "x",
              "severity": "low", "class": "c", "route": "r", "suggested_tier": "cheap"}], "issues_filed": [],
              "untriaged": 0, "decisions_recorded": 0},
              next={"recommended": "/execute-phase 43 --fold", "alternatives": [], "tier": "cheap"})
    b = dict(a, skill="execute-phase", summary="Fold attempted.")
    names = [type(e).__name__ for e in D.observe(a, b)]
    assert names[0] == "EnvelopeEmitted" and "NoProgressDetected" in names and "StateTransitioned" not in names
    assert [type(e).__name__ for e in D.observe(a, a)][-1] == "NoProgressDetected"  # a verbatim repeat is a turn
    moved = documents.copy(b)
    moved["pr"]["head_sha"] = "def456"
    assert "NoProgressDetected" not in [type(e).__name__ for e in D.observe(a, moved)]


def test_halt_and_transition_events() -> None:
    a = base_envelope()
    b = base_envelope(state="HALT", blockers=[{"kind": "substrate", "id": "forge", "scope": "run", "detail": "down"}])
    out = D.observe(a, b)
    st_ev = next(e for e in out if isinstance(e, ev.StateTransitioned))
    assert (st_ev.from_state, st_ev.to_state) == ("READY_FOR_REVIEW", "HALT")
    halted = next(e for e in out if isinstance(e, ev.Halted))
    assert halted.reasons == ["substrate:forge — down"]
    assert "HALT" in D.summarize(halted) and "READY_FOR_REVIEW → HALT" in D.summarize(st_ev)


# ------------------------------------------------------------------ simulator


def _key(snaps: list[Any]) -> list[Any]:
    return [(s.doc, [encode_event(e) for e in s.events], s.occurred_at, s.stream_hint) for s in snaps]


def test_simulator_is_deterministic_per_rng() -> None:
    a = list(simulate_run(random.Random(7), run_id="r", start=START))
    b = list(simulate_run(random.Random(7), run_id="r", start=START))
    c = list(simulate_run(random.Random(8), run_id="r", start=START))
    assert _key(a) == _key(b) and _key(a) != _key(c)
    assert _key(list(D.simulate(random.Random(7), run_id="r", start=START))) == _key(a)


def test_simulated_runs_look_realistic() -> None:
    runs = _runs(range(60))
    states = [s.doc["state"] for snaps in runs for s in snaps if s.doc is not None]
    assert {"OK", "CONTINUE", "READY_FOR_REVIEW", "NEEDS_FIXES", "READY_FOR_AUDIT", "MERGE_READY", "MERGED",
            "BLOCKED", "NEEDS_INPUT", "HALT"} <= set(states)
    for snaps in runs:
        docs = [s.doc for s in snaps if s.doc is not None]
        if not docs:  # the very first turn broke the contract twice: the run is FAILED at once
            assert [type(e).__name__ for e in snaps[-1].events] == ["RepairAttempted", "TurnFailed"]
            continue
        assert docs[0]["skill"] in ("plan-feature", "plan-fix")
        times = [s.occurred_at for s in snaps]
        assert times == sorted(times)
        for d in docs:  # what the simulator writes is what the contract demands
            result = check(d)
            assert result.ok and result.ok_strict, result.findings
            assert not [f for f in result.findings if f.severity == "warning"], (d["state"], result.findings)
        last = snaps[-1]
        failed = any(isinstance(e, ev.TurnFailed) for e in last.events)
        assert failed or docs[-1]["state"] in ("MERGE_READY", "MERGED", "HALT")


def test_transcripts_written_and_loaded_equal_the_simulation(tmp_path: Path) -> None:
    for seed in range(12):
        folder = tmp_path / f"run-{seed}"
        paths = write_transcripts(random.Random(seed), folder, run_id=f"run-{seed}", start=START)
        assert all(p.suffix == ".md" for p in paths)
        loaded = list(D.load(folder))
        simulated = list(simulate_run(random.Random(seed), run_id=f"run-{seed}", start=START))
        assert [s.doc for s in loaded] == [s.doc for s in simulated]
        assert [[type(e).__name__ for e in s.events] for s in loaded] == \
               [[type(e).__name__ for e in s.events] for s in simulated]
        assert [s.occurred_at for s in loaded] == [s.occurred_at for s in simulated]
        assert {s.stream_hint for s in loaded} == {f"run-{seed}"}


# ------------------------------------------------------------------ catalog & describing


def test_every_catalog_event_round_trips() -> None:
    samples: dict[type, Any] = {}
    for snaps in _runs(range(40)):
        prev = None
        for s in snaps:
            for e in s.events:
                samples.setdefault(type(e), e)
            if s.doc is not None:
                for e in D.observe(prev, s.doc):
                    samples.setdefault(type(e), e)
                prev = s.doc
    assert set(samples) == set(ev.CATALOG)
    for cls, e in samples.items():
        tag = cls.event_type()
        assert tag.startswith("envelope.") and tag[len("envelope."):].islower()
        assert decode_event(tag, 1, encode_event(e)) == e
        assert D.summarize(e)


def test_registry_describe_and_stream() -> None:
    d = get_dialect("envelope")
    assert isinstance(d, EnvelopeDialect) and set(d.catalog) == set(ev.CATALOG)
    info = d.describe(base_envelope())
    assert (info.task_id, info.status, info.phase) == ("43-null-crash", "READY_FOR_REVIEW", "execute-phase")
    assert d.stream_id(base_envelope(unit={"type": "none", "id": None, "issue": None, "branch": "main"})) is None
    assert d.describe([1, 2]).task_id is None


def test_cheap_verdict_agrees_with_the_full_check() -> None:
    """The lens and the turn parser use ``verdict`` (no schema layer); it must give check()'s flags,
    on valid runs and on damaged envelopes alike."""
    values: list[Any] = []
    for seed in range(20):
        for snap in simulate_run(random.Random(seed), run_id=f"r{seed}", start=START):
            if isinstance(snap.doc, dict):
                values.append(snap.doc)
    rng = random.Random(1)
    for env in list(values):
        bad = documents.copy(env)
        key = rng.choice(sorted(bad))
        bad[key] = rng.choice([None, 7, "X", [], {}])
        values.append(bad)
    values += [{"contract": val.SKILL_OUTCOME_CONTRACT, "version": 1}, [], "text", None]
    assert any(not check(v).ok for v in values) and any(check(v).ok for v in values)
    for v in values:
        c = check(v)
        assert val.verdict(v) == (c.ok, c.ok_strict), v


def test_check_survives_a_halt_whose_blockers_are_not_a_list() -> None:
    found = check({"state": "HALT", "blockers": 1.0, "skill": "x"}).findings
    assert any(f.code == "halt-without-blockers" for f in found)


def test_a_rejected_turn_naming_no_stream_is_refused_not_guessed(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A folder whose only turn was rejected names no stream; ingested together with another folder's
    accepted turns it is refused (nothing written, --stream suggested), not filed under the other
    folder's stream as an unreadable state file is filed under its neighbours' (mutation testing:
    placing every doc-less snapshot by its neighbours survived every test)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _write(tmp_path / "a", "turn-001.md", "## Assistant\nStarted, no envelope yet.\n")
    _write(tmp_path / "b", "turn-001.md", f"## Assistant\nPlanned.\n{fenced(base_envelope(state='OK'))}\n")
    r = run("ingest", "envelope", str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.exit_code != 0
    assert str(tmp_path / "a" / "turn-001.md") in r.output and "names no task id; pass --stream ID." in r.output
    assert run("log", "43-null-crash").exit_code != 0  # nothing written, the other folder's turn included
    assert run("ingest", "envelope", str(tmp_path / "b")).exit_code == 0
    r = run("ingest", "envelope", str(tmp_path / "a"), "--stream", "43-null-crash")
    assert r.exit_code == 0, r.output
    log = [json.loads(line) for line in run("log", "43-null-crash", "--json").stdout.splitlines()]
    assert [e["type"].split(".")[1] for e in log][-1] == "turn_rejected"
