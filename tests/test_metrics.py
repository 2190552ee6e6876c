"""Every metric of DESIGN.md section 6, checked against an independent computation written here
from the raw snapshot documents the simulators produced (never from the analytics tables)."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
from analytics_fixtures import SimulatedPortfolio, simulate_into
from conftest import migrated
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.dialects import get_dialect
from eventstore.dialects.base import Snapshot
from eventstore.dialects.friday.validate import computed_risk_score, risk_score_mismatch
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections import analytics
from projections.metrics import Report, Scope, cross_run_report, run_report, wilson

COUNTS = {"mapipe": 24, "friday": 8, "taskflow": 10, "envelope": 8}


def _strip_some(snaps: list[Snapshot], run_no: int) -> list[Snapshot]:
    """Make real-world gaps and shapes: every third run loses iteration 1's anonymizationMap, every
    fourth loses its first reviewer's model (the metric must count "unavailable" and "unknown");
    every other run's first reviewer lists a fingerprint twice (raised counts reviewer x *distinct*
    fingerprint), and its second reviewer's findings and the accepted list are plain fingerprint
    strings instead of objects, the accepted one listed twice."""
    edited: set[int] = set()  # snapshots of a run may share an iteration object: edit each once
    for s in snaps:
        its = s.doc.get("reviewIterations") if isinstance(s.doc, dict) else None
        if not its:
            continue
        it = its[0]
        if run_no % 3 == 0:
            it.pop("anonymizationMap", None)
        if run_no % 4 == 0:
            it["reviewers"][0].pop("model", None)
        if run_no % 2 == 1 and id(it) not in edited:
            edited.add(id(it))
            first = it["reviewers"][0]["findings"]
            if first:  # the repeat before the reviewer's other findings: they still count
                first.insert(1, {**first[0], "line": 999})
            if len(it["reviewers"]) > 1:
                second = it["reviewers"][1]
                second["findings"] = [_fp(f) for f in second["findings"]]
            it["accepted"] = [_fp(a) for a in it.get("accepted", [])] + [_fp(a) for a in it.get("accepted", [])][:1]
    return snaps


@pytest.fixture(scope="module")
def portfolio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EventStore, SimulatedPortfolio, Path]]:
    d = tmp_path_factory.mktemp("metrics")
    url = f"sqlite:///{d}/events.db"
    migrated(url)
    store = EventStore(url)
    p = simulate_into(store, COUNTS, seed=20260105, transform=_strip_some)
    analytics.refresh(store)
    yield store, p, analytics.analytics_dir(store)
    store.close()


@pytest.fixture(scope="module")
def report(portfolio: tuple[EventStore, SimulatedPortfolio, Path]) -> Report:
    store, _p, out = portfolio
    return cross_run_report(analytics.connect(out))


def _last(snaps: list[Snapshot]) -> dict[str, Any]:
    return [s.doc for s in snaps if s.doc is not None][-1]


def _fp(x: Any) -> str | None:
    return x if isinstance(x, str) else (x.get("fingerprint") if isinstance(x, dict) else None)


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (DuckDB's quantile_cont, numpy's default)."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _secs(a: str, b: str) -> float:
    return (datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))
            ).total_seconds()


# ---------------------------------------------------------------- reviewer acceptance


def test_reviewer_acceptance_matches_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    raised: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    unavailable = with_map = repeats = 0
    shapes: set[type] = set()
    for snaps in p.of("mapipe").values():
        for it in _last(snaps).get("reviewIterations", []):
            if not isinstance(it.get("anonymizationMap"), dict):
                unavailable += 1
                continue
            with_map += 1
            acc = {_fp(a) for a in it.get("accepted", [])}
            for r in it.get("reviewers", []):
                model = r.get("model") or "unknown"
                listed = [_fp(f) for f in r.get("findings", [])]
                fps = set(listed) - {None}
                repeats += len(listed) - len(set(listed))
                shapes |= {type(f) for f in r.get("findings", [])}
                raised[model] += len(fps)
                accepted[model] += len(fps & acc)
    sec = report.section("reviewer_acceptance")
    got = {r["model"]: r for r in sec.rows}
    assert unavailable > 0 and "unknown" in raised  # the fixture really exercises both cases
    assert repeats > 0 and {str, dict} <= shapes  # ... and repeated, string and object fingerprints
    assert sec.summary == {"iterations_with_map": with_map, "unavailable": unavailable}
    assert set(got) == set(raised)
    for model in raised:
        assert got[model]["raised"] == raised[model]
        assert got[model]["accepted"] == accepted[model]
        assert got[model]["ratio"] == round(accepted[model] / raised[model], 4)
        lo, hi = wilson_closed_form(accepted[model], raised[model])
        assert abs(got[model]["ci_low"] - lo) <= 0.5e-4 + 1e-12  # the report rounds to 4 places
        assert abs(got[model]["ci_high"] - hi) <= 0.5e-4 + 1e-12
        assert got[model]["ci_low"] == round(got[model]["ci_low"], 4)  # ... and to no more than 4
        assert got[model]["ci_high"] == round(got[model]["ci_high"], 4)
    # (the 4th place is there to lose)
    assert any(r["ci_low"] != round(r["ci_low"], 3) for r in sec.rows)
    assert any(r["ci_high"] != round(r["ci_high"], 3) for r in sec.rows)


def test_review_facts_match_the_documents(portfolio: Any) -> None:
    """The rows under reviewer acceptance, from each run's last state: one per reviewer x distinct
    fingerprint (the first listing's severity and file; string findings have neither), whether it was
    accepted, and each iteration's counts."""
    _store, p, out = portfolio
    findings, iterations = [], []
    for sid, snaps in p.of("mapipe").items():
        for idx, it in enumerate(_last(snaps).get("reviewIterations", [])):
            has_map = isinstance(it.get("anonymizationMap"), dict)
            acc = {_fp(a) for a in it.get("accepted", [])} - {None}
            raised, distinct = 0, set()
            for r_i, rv in enumerate(it.get("reviewers", [])):
                first: dict[str, Any] = {}
                for f in rv.get("findings", []):
                    first.setdefault(_fp(f), f)
                first.pop(None, None)
                raised += len(first)
                distinct |= set(first)
                findings += [(sid, it.get("iteration"), idx, r_i, rv.get("model") or "unknown", fp,
                              f.get("severity") if isinstance(f, dict) else None,
                              f.get("file") if isinstance(f, dict) else None, has_map, fp in acc)
                             for fp, f in first.items()]
            iterations.append((sid, idx, it.get("iteration"), it.get("decision"), has_map, len(it.get("reviewers", [])),
                               raised, len(distinct), len(acc), it.get("blocking"), it.get("important"),
                               it.get("suggestion")))
    con = analytics.connect(out)
    assert sorted(con.execute("SELECT stream_id, iteration, idx, reviewer, model, fingerprint, severity, file, has_map, "
                              "accepted FROM review_findings").fetchall(), key=repr) == sorted(findings, key=repr)
    assert sorted(con.execute("SELECT stream_id, idx, iteration, decision, has_map, reviewers, raised, "
                              "distinct_findings, accepted, blocking, important, suggestion "
                              "FROM review_iterations").fetchall(), key=repr) == sorted(iterations, key=repr)
    assert all(isinstance(row[9], int) for row in iterations)  # the documents do give the counts
    assert any(row[6] is not None for row in findings) and any(row[6] is None for row in findings)


Z975 = NormalDist().inv_cdf(0.975)  # the two-sided 95 % quantile, from the stdlib


def wilson_closed_form(k: int, n: int) -> tuple[float, float]:
    """Wilson (1927): (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), p = k/n."""
    p, z = k / n, Z975
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n), (centre + spread) / (1 + z * z / n)


# (accepted, raised) -> Wilson 95 % bounds from scipy 1.17 (binomtest(k, n).proportion_ci(method="wilson")),
# written out so that a wrong quantile (1.96 instead of 1.959964) or formula shows at 1e-9.
WILSON_REFERENCE = {
    (81, 263): (0.2552885198782742, 0.36620957698280004),
    (0, 10): (0.0, 0.27753279986288926),
    (10, 10): (0.7224672001371109, 1.0),
    (1, 2): (0.09453120573423074, 0.9054687942657693),
    (5, 1000): (0.0021375355273244604, 0.011650955373375113),
    (171, 412): (0.36846878389185067, 0.463197832037892),
    (3, 7): (0.1582198552514697, 0.7495416354723428),
}


@pytest.mark.parametrize(("k", "n"), list(WILSON_REFERENCE))
def test_wilson_known_values(k: int, n: int) -> None:
    ref_lo, ref_hi = WILSON_REFERENCE[(k, n)]
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(ref_lo, abs=1e-9) and hi == pytest.approx(ref_hi, abs=1e-9)
    cf_lo, cf_hi = wilson_closed_form(k, n)  # the closed form here agrees with the reference
    assert cf_lo == pytest.approx(ref_lo, abs=1e-9) and cf_hi == pytest.approx(ref_hi, abs=1e-9)
    if k == 0:
        assert lo == 0.0
    if k == n:
        assert hi == 1.0


def test_wilson_of_nothing_raised() -> None:
    assert wilson(0, 0) == (None, None)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10_000), st.data())
def test_wilson_interval_contains_the_ratio(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    lo, hi = wilson(k, n)
    assert lo is not None and hi is not None
    assert 0.0 <= lo <= k / n <= hi <= 1.0


# ---------------------------------------------------------------- review deltas


def test_review_deltas_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    per_it: dict[int, Counter[str]] = defaultdict(Counter)
    plateaus: dict[int, list[bool]] = defaultdict(list)
    max_rec: dict[int, int] = {}
    approvals: list[int] = []
    not_approved = 0
    for snaps in p.of("mapipe").values():
        its = _last(snaps).get("reviewIterations", [])
        prev_still: list[str] | None = None
        for it in its:
            d = it.get("delta")
            if not isinstance(d, dict):
                continue
            n = it["iteration"]
            for kind in ("new", "stillPresent", "resolved", "downgraded", "stillPresentBlocking"):
                per_it[n][kind] += len(d.get(kind, []))
            per_it[n]["runs"] += 1
            still = sorted(_fp(x) for x in d.get("stillPresent", []))
            plateaus[n].append(bool(still) and still == prev_still)
            prev_still = still
            if d.get("recurrence"):
                max_rec[n] = max(max_rec.get(n, 0), *d["recurrence"].values())
        if its:
            accepted_at = [it["iteration"] for it in its if it.get("decision") == "accept"]
            if accepted_at:
                approvals.append(min(accepted_at))
            else:
                not_approved += 1
    rows = {r["iteration"]: r for r in report.section("review_deltas").rows}
    assert set(rows) == set(per_it) and per_it
    assert any(any(v) for v in plateaus.values()), "fixture should contain a plateau"
    for n, c in per_it.items():
        r = rows[n]
        assert (r["runs"], r["new"], r["still_present"], r["resolved"], r["downgraded"], r["still_present_blocking"]) \
            == (c["runs"], c["new"], c["stillPresent"], c["resolved"], c["downgraded"], c["stillPresentBlocking"])
        denom = c["resolved"] + c["stillPresent"] + c["downgraded"]
        assert r["resolution_rate"] == (round(c["resolved"] / denom, 4) if denom else None)
        assert r["plateau_rate"] == round(sum(plateaus[n]) / len(plateaus[n]), 4)
        assert r["max_recurrence"] == max_rec.get(n)
    sec = report.section("iterations_until_approval")
    assert sec.summary["approved"] == len(approvals)
    assert sec.summary["not_approved"] == not_approved
    assert {r["iterations"]: r["runs"] for r in sec.rows} == dict(Counter(approvals))


def _finding(fp: str, severity: str, file: str) -> dict[str, str]:
    return {"fingerprint": fp, "severity": severity, "file": file}


NULL_DEREF = _finding("fp-null-deref", "blocking", "src/auth.py")
SQL_INJECT = _finding("fp-sql-inject", "blocking", "src/db.py")
RACE = _finding("fp-race", "important", "src/cache.py")
LOG_LEVEL = _finding("fp-log-level", "suggestion", "src/log.py")
DELTA_AT = datetime(2026, 2, 3, 10, 0, tzinfo=UTC)


def _iteration_entry(n: int, decision: str, findings: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {"iteration": n, "decision": decision, "reviewers": [{"model": "model-a", "findings": findings}],
            "accepted": [f["fingerprint"] for f in findings], **extra}


def test_review_deltas_of_iterations_written_with_their_delta(tmp_path: Path) -> None:
    """An orchestrator that writes a review iteration with its ``delta`` (and ``reviewDecision``)
    already inside, in one write, rather than review-delta.mjs adding it to the entry later: the
    lens records it as one ``review_iteration_recorded`` and the delta's rows come from the
    iteration entry.  Expected rows are written out by hand from the documents below."""
    url = f"sqlite:///{tmp_path}/events.db"
    migrated(url)
    store = EventStore(url)
    head = {"schemaVersion": "2.2.0", "taskId": "DELTA-1", "status": "in_progress"}
    it1 = _iteration_entry(1, "fix", [NULL_DEREF, SQL_INJECT])  # the first review: no delta yet
    it2 = _iteration_entry(2, "fix", [NULL_DEREF, RACE], delta={
        "previousIteration": 1, "new": [RACE], "stillPresent": [NULL_DEREF], "resolved": [SQL_INJECT],
        "downgraded": [LOG_LEVEL], "stillPresentBlocking": [NULL_DEREF], "recurrence": {"fp-null-deref": 1},
        "plateau": False, "tripped": False}, reviewDecision={"verdict": "rebuttal-round", "approved": False})
    it3 = _iteration_entry(3, "escalate", [NULL_DEREF], delta={
        "previousIteration": 2, "new": [], "stillPresent": [NULL_DEREF], "resolved": [RACE], "downgraded": [],
        "stillPresentBlocking": [NULL_DEREF], "recurrence": {"fp-null-deref": 2}, "plateau": True,
        "tripped": True}, reviewDecision={"verdict": "pass", "approved": True})
    docs = [head, {**head, "reviewIterations": [it1]}, {**head, "reviewIterations": [it1, it2]},
            {**head, "reviewIterations": [it1, it2, it3]}]
    ing = Ingestor(store, get_dialect("mapipe"))
    for i, doc in enumerate(docs):
        ing.ingest(Snapshot(doc=doc, occurred_at=DELTA_AT + timedelta(hours=i)))
    types = [r.type for r in store.read_stream("DELTA-1")]
    # the deltas arrived inside new entries: no review_delta_computed explains them
    assert types.count("mapipe.review_iteration_recorded") == 3 and "mapipe.review_delta_computed" not in types
    analytics.refresh(store)
    con = analytics.connect(analytics.analytics_dir(store))
    store.close()
    assert con.execute(
        "SELECT stream_id, iteration, idx, new, still_present, resolved, downgraded, still_present_blocking, "
        "resolution_rate, plateau, plateau_recorded, tripped, max_recurrence FROM review_deltas ORDER BY idx"
    ).fetchall() == [
        ("DELTA-1", 2, 1, 1, 1, 1, 1, 1, 1 / 3, False, False, False, 1),
        ("DELTA-1", 3, 2, 0, 1, 1, 0, 1, 1 / 2, True, True, True, 2),
    ]
    assert con.execute("SELECT idx, previous_iteration, occurred_at FROM review_delta_events ORDER BY idx"
                       ).fetchall() == [(1, 1, DELTA_AT + timedelta(hours=2)), (2, 2, DELTA_AT + timedelta(hours=3))]
    assert con.execute("SELECT idx, kind, fingerprint, severity, file, recurrence FROM review_delta_items "
                       "ORDER BY idx, kind, fingerprint").fetchall() == [
        (1, "downgraded", "fp-log-level", "suggestion", "src/log.py", None),
        (1, "new", "fp-race", "important", "src/cache.py", None),
        (1, "recurrence", "fp-null-deref", None, None, 1),
        (1, "resolved", "fp-sql-inject", "blocking", "src/db.py", None),
        (1, "stillPresent", "fp-null-deref", "blocking", "src/auth.py", None),
        (1, "stillPresentBlocking", "fp-null-deref", "blocking", "src/auth.py", None),
        (2, "recurrence", "fp-null-deref", None, None, 2),
        (2, "resolved", "fp-race", "important", "src/cache.py", None),
        (2, "stillPresent", "fp-null-deref", "blocking", "src/auth.py", None),
        (2, "stillPresentBlocking", "fp-null-deref", "blocking", "src/auth.py", None),
    ]
    assert con.execute("SELECT idx, iteration, decision, decision_verdict, approved FROM review_iterations "
                       "ORDER BY idx").fetchall() == [
        (0, 1, "fix", None, None), (1, 2, "fix", "rebuttal-round", False), (2, 3, "escalate", "pass", True)]


# ---------------------------------------------------------------- gates and breaker


def test_gates_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    verdicts: dict[str, Counter[str]] = defaultdict(Counter)
    first: dict[str, list[str]] = defaultdict(list)
    failed: Counter[str] = Counter()
    recovered: Counter[str] = Counter()
    for snaps in p.of("mapipe").values():
        per_gate: dict[str, list[str]] = defaultdict(list)
        for g in _last(snaps).get("gates", []):
            verdicts[g["gate"]][g["verdict"]] += 1
            per_gate[g["gate"]].append(g["verdict"])
        for gate, vs in per_gate.items():
            judged = [v for v in vs if v in ("pass", "fail")]
            if judged:
                first[gate].append(judged[0])
            if "fail" in vs:
                failed[gate] += 1
                if "pass" in vs[vs.index("fail") + 1:]:
                    recovered[gate] += 1
    rows = {r["gate"]: r for r in report.section("gates").rows}
    assert set(rows) == set(verdicts)
    assert sum(failed.values()) > 0 and sum(recovered.values()) > 0
    for gate, c in verdicts.items():
        r = rows[gate]
        assert (r["pass"], r["fail"], r["not_applicable"]) == (c["pass"], c["fail"], c["not-applicable"])
        fpy = (round(first[gate].count("pass") / len(first[gate]), 4) if first[gate] else None)
        assert r["first_pass_yield"] == fpy
        assert r["runs_failed"] == failed[gate] and r["recovered"] == recovered[gate]


def test_breaker_trips_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    trips: Counter[int] = Counter()
    where: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
    for snaps in p.of("mapipe").values():
        was = False
        for s in snaps:
            cb = s.doc.get("circuitBreaker") if isinstance(s.doc, dict) else None
            now = isinstance(cb, dict) and cb.get("tripped") is True
            if now and not was:
                trips[cb["trigger"]] += 1
                cp = cb["checkpoint"]
                where[cb["trigger"]].add((cp["phase"], cp["step"], cp["iteration"]))
            was = now
    assert trips, "the fixture portfolio must trip a breaker"
    rows = {r["trigger"]: r for r in report.section("breaker_trips").rows}
    assert {t: r["trips"] for t, r in rows.items()} == dict(trips)
    for t, places in where.items():  # each place once, in (phase, step, iteration) order: never the files' order
        assert rows[t]["where"] == "; ".join(f"phase {p} / step {s} / iteration {i}" for p, s, i in sorted(places))


# ---------------------------------------------------------------- phases and questions


def test_phase_durations_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    durations: dict[str, list[float]] = defaultdict(list)
    retries: Counter[str] = Counter()
    executions: Counter[str] = Counter()
    for snaps in p.of("mapipe").values():
        for phase, rec in _last(snaps).get("phases", {}).items():
            executions[phase] += 1
            retries[phase] += rec.get("retryCount", 0)
            if rec.get("status") == "done":
                durations[phase].append(_secs(rec["startedAt"], rec["finishedAt"]))
    assert durations, "the fixture portfolio must finish phases"
    rows = {r["phase"]: r for r in report.section("phase_durations").rows if r["dialect"] == "mapipe"}
    assert set(rows) == set(executions)
    for phase, ds in durations.items():
        r = rows[phase]
        assert r["executions"] == executions[phase] and r["retries"] == retries[phase]
        assert r["p50_s"] == pytest.approx(_quantile(ds, 0.5), abs=1e-3)
        assert r["p90_s"] == pytest.approx(_quantile(ds, 0.9), abs=1e-3)
        assert r["max_s"] == max(ds)


def test_fact_columns_no_section_reads_match_the_documents(portfolio: Any) -> None:
    """Columns kept for `evstore query` that no metric section reads (mutation testing: reading them
    from the wrong key survived): each envelope turn's unit, each mapipe phase's sub-step and model."""
    from eventstore.dialects.envelope.lens import unit_id

    store, p, out = portfolio
    con = analytics.connect(out)
    units = {(sid, unit_id(s.doc)) for sid, snaps in p.of("envelope").items() for s in snaps if s.doc is not None}
    got = set(con.execute("SELECT stream_id, unit_id FROM envelope_turns WHERE kind = 'accepted'").fetchall())
    assert got == units and any(u is not None for _, u in units)
    sub_steps = {(sid, phase, rec.get("subStep")) for sid, snaps in p.of("mapipe").items()
                 for s in snaps if s.doc is not None for phase, rec in s.doc.get("phases", {}).items()}
    seen = set(con.execute("SELECT stream_id, phase, sub_step FROM phase_events WHERE dialect = 'mapipe'").fetchall())
    assert seen <= sub_steps and {x for x in seen if x[2] is not None}, "the portfolio must record sub-steps"
    models = {(sid, phase, rec.get("model")) for sid, snaps in p.of("mapipe").items()
              for s in snaps if s.doc is not None for phase, rec in s.doc.get("phases", {}).items()}
    seen = set(con.execute("SELECT stream_id, phase, model FROM phase_events WHERE dialect = 'mapipe'").fetchall())
    assert seen <= models and {x for x in seen if x[2] is not None}, "the portfolio must record phase models"


def test_question_latency_matches_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    lat: dict[str, list[float]] = defaultdict(list)
    asked: Counter[str] = Counter()
    for snaps in p.of("mapipe").values():
        open_q: dict[str, str] = {}
        seen: set[tuple[str, str]] = set()
        for s in snaps:
            q = s.doc.get("pendingQuestion")
            if isinstance(q, dict) and (q["id"], q["askedAt"]) not in seen:
                seen.add((q["id"], q["askedAt"]))
                asked[q["id"]] += 1
                open_q[q["id"]] = q["askedAt"]
            a = s.doc.get("lastAnswer")
            if isinstance(a, dict) and a["questionId"] in open_q:
                lat[a["questionId"]].append(_secs(open_q.pop(a["questionId"]), a["answeredAt"]))
    assert lat, "the fixture portfolio must answer questions"
    rows = {r["question_id"]: r for r in report.section("question_latency").rows}
    assert set(rows) == set(asked)
    for qid, ls in lat.items():
        assert rows[qid]["asked"] == asked[qid] and rows[qid]["answered"] == len(ls)
        assert rows[qid]["p50_s"] == pytest.approx(_quantile(ls, 0.5), abs=1e-3)
        assert rows[qid]["mean_s"] == pytest.approx(sum(ls) / len(ls), abs=1e-3)


# ---------------------------------------------------------------- friday, envelope, taskflow

def risk_score_formula(m: dict[str, Any]) -> int:
    """The additive model of FRIDAY's session-mode recommendation skill (the formula the state schema's
    risk_score refers to), written out: +1 per threshold met, +1 for a risky last output, +2 mixed."""
    def at_least(key: str, n: int) -> bool:
        return type(m.get(key)) is int and m[key] >= n
    return (at_least("specialist_runs_current_thread", 2) + at_least("distinct_specialist_count", 2)
            + at_least("cycle_rounds_total", 3) + at_least("recovery_attempts", 1)
            + at_least("prompt_failure_retries", 1) + at_least("long_outputs_count", 2)
            + at_least("large_summaries_count", 1) + at_least("scope_confusion_signals", 1)
            + (m.get("last_output_class") in ("failure", "partial-output", "unclear-output", "recovery-report"))
            + 2 * (m.get("mixed_scope_signal") is True))


def risk_score_disagrees(m: dict[str, Any]) -> bool:
    recorded = m.get("risk_score")
    return type(recorded) is not int or recorded != risk_score_formula(m)


def test_risk_score_formula_cases() -> None:
    """Hand-worked cases of the formula, one rule at a time, then all together (1+1+...+1+2 = 11)."""
    assert risk_score_formula({}) == 0
    assert risk_score_formula({"specialist_runs_current_thread": 1, "distinct_specialist_count": 1,
                               "cycle_rounds_total": 2, "long_outputs_count": 1, "recovery_attempts": 0}) == 0
    assert risk_score_formula({"cycle_rounds_total": 3}) == 1
    assert risk_score_formula({"mixed_scope_signal": True}) == 2
    assert risk_score_formula({"mixed_scope_signal": 1, "recovery_attempts": 1.0}) == 0  # not bool / int
    assert risk_score_formula({"last_output_class": "partial-output", "large_summaries_count": 1}) == 2
    everything = {"specialist_runs_current_thread": 2, "distinct_specialist_count": 2, "cycle_rounds_total": 3,
                  "recovery_attempts": 1, "prompt_failure_retries": 1, "long_outputs_count": 2,
                  "large_summaries_count": 1, "scope_confusion_signals": 1, "last_output_class": "failure",
                  "mixed_scope_signal": True}
    assert risk_score_formula(everything) == 11
    for m in ({}, {"cycle_rounds_total": 3}, everything, {"mixed_scope_signal": True, "risk_score": 2}):
        assert computed_risk_score({"session_metrics": m}) == risk_score_formula(m)
        assert (risk_score_mismatch({"session_metrics": m}) is not None) is risk_score_disagrees(m)


_REPORT_KEYS = ("last_report_type", "question_origin", "mode", "gap_queue", "ambiguity_queue",
                "unresolved_blocking_gaps", "cycle_count")


def test_friday_cycles_and_risk_mismatches_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    rounds: dict[str, list[int]] = defaultdict(list)
    writes = mismatches = 0
    runs_mismatch = set()
    for sid, docs in p.docs("friday").items():
        prev: dict[str, Any] = {}
        current: list[Any] | None = None  # [cycle_type, rounds]
        for doc in docs:
            pc, nc = prev.get("active_cycle"), doc.get("active_cycle")
            same = (isinstance(pc, dict) and isinstance(nc, dict)
                    and all(pc.get(k) == nc.get(k) for k in ("agent", "cycle_type", "phase")))
            if isinstance(nc, dict) and not same:
                if current:
                    rounds[current[0]].append(current[1])
                current = [nc.get("cycle_type"), 1]
            elif same:
                assert current is not None
                changed = any(k in nc and (k not in pc or pc[k] != nc[k]) for k in _REPORT_KEYS)
                for kind in ("gap", "ambiguity"):
                    key = f"collected_{kind}_answers"
                    old, new = pc.get(key), nc.get(key)
                    if key in nc and old != new and not (
                            isinstance(new, dict) and (old is None or key not in pc or
                                                       (isinstance(old, dict) and list(new)[:len(old)] == list(old)))):
                        changed = True
                if changed:
                    current[1] += 1
            elif current and not isinstance(nc, dict):
                rounds[current[0]].append(current[1])
                current = None
            if doc.get("session_metrics") != prev.get("session_metrics") and isinstance(doc.get("session_metrics"),
                                                                                          dict):
                writes += 1
                if risk_score_disagrees(doc["session_metrics"]):
                    mismatches += 1
                    runs_mismatch.add(sid)
            prev = doc
        if current:
            rounds[current[0]].append(current[1])
    sec = report.section("friday_cycles")
    rows = {r["cycle_type"]: r for r in sec.rows}
    assert set(rows) == set(rounds)
    for ct, rs in rounds.items():
        assert rows[ct]["cycles"] == len(rs)
        assert rows[ct]["max_rounds"] == max(rs)
        assert rows[ct]["mean_rounds"] == round(sum(rs) / len(rs), 4)
    assert sec.summary["metrics_writes"] == writes
    assert sec.summary["mismatching_writes"] == mismatches
    assert sec.summary["runs_with_mismatch"] == len(runs_mismatch)


def test_envelope_mix_and_repair_rate_match_the_snapshots(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    mix: Counter[tuple[str, str]] = Counter()
    rejected = accepted = 0
    folds: list[int] = []
    for snaps in p.of("envelope").values():
        n_folds = 0
        for s in snaps:
            if s.doc is not None:
                accepted += 1
                mix[(s.doc["skill"], s.doc["state"])] += 1
                n_folds += s.doc["skill"] == "review-change" and s.doc["state"] == "NEEDS_FIXES"
            elif not s.source.get("repair"):
                rejected += 1
        folds.append(n_folds)
    sec = report.section("envelope_turns")
    assert {(r["skill"], r["state"]): r["turns"] for r in sec.rows} == dict(mix)
    assert sec.summary["accepted_turns"] == accepted and sec.summary["rejected_turns"] == rejected
    assert sec.summary["repair_rate"] == round(rejected / (accepted + rejected), 4)
    assert sec.summary["max_review_fold_cycles"] == max(folds)
    assert sec.summary["mean_review_fold_cycles"] == round(sum(folds) / len(folds), 4)


def test_taskflow_verdicts_and_spawn_rate_match_the_documents(portfolio: Any, report: Report) -> None:
    _store, p, _out = portfolio
    mix: Counter[str] = Counter()
    spawned: Counter[str] = Counter()
    for docs in p.docs("taskflow").values():
        last_sha = None
        for doc in docs:
            v = doc.get("verdict")
            if isinstance(v, dict) and v.get("sha256") != last_sha:
                mix["UNPARSEABLE" if v["value"] == "unparsed" else v["value"]] += 1
            last_sha = v.get("sha256") if isinstance(v, dict) else None
        for f in docs[-1].get("follow_ups", []):
            spawned[f["kind"]] += 1
    sec = report.section("taskflow_verdicts")
    assert {r["verdict"]: r["verdicts"] for r in sec.rows} == dict(mix)
    total = sum(mix.values())
    assert sec.summary["fix_spawned"] == spawned["fix"]
    assert sec.summary["fix_spawn_rate"] == round(spawned["fix"] / total, 4)
    assert sec.summary["follow_up_spawn_rate"] == round(sum(spawned.values()) / total, 4)


# ---------------------------------------------------------------- scope and one run


def test_scope_filters_runs(portfolio: Any) -> None:
    _store, p, out = portfolio
    con = analytics.connect(out)
    mapipe_only = cross_run_report(con, Scope(dialect="mapipe"))
    assert mapipe_only.scope["runs"] == COUNTS["mapipe"]
    assert mapipe_only.section("envelope_turns").rows == []
    project = _last(next(iter(p.of("mapipe").values())))["project"]
    n = sum(1 for snaps in p.of("mapipe").values() if _last(snaps)["project"] == project)
    assert cross_run_report(con, Scope(project=project)).scope["runs"] == n
    nothing = cross_run_report(con, Scope(since="2100-01-01"))
    assert nothing.scope["runs"] == 0
    acceptance = nothing.section("reviewer_acceptance")  # no runs: zero counts, not missing ones
    assert acceptance.rows == [] and acceptance.summary == {"iterations_with_map": 0, "unavailable": 0}


def test_run_report_shows_one_runs_iterations(portfolio: Any) -> None:
    _store, p, out = portfolio
    sid, snaps = max(p.of("mapipe").items(), key=lambda kv: len(_last(kv[1]).get("reviewIterations", [])))
    rep = run_report(analytics.connect(out), sid)
    its = _last(snaps)["reviewIterations"]
    assert [r["iteration"] for r in rep.section("review_iterations").rows] == [it["iteration"] for it in its]
    assert [r["iteration"] for r in rep.section("review_deltas").rows] == \
        [it["iteration"] for it in its if "delta" in it]
    assert len(rep.section("timeline").rows) == len(list(_store_events(portfolio[0], sid)))


def _store_events(store: EventStore, sid: str) -> Iterator[Any]:
    return store.read_stream(sid)


def test_plain_values() -> None:
    """What a report row holds: floats to 4 places (NaN as null), times as ISO text, DuckDB decimals as
    rounded floats; ints, bools, text and null unchanged."""
    from decimal import Decimal

    from projections.metrics import _plain

    assert _plain(1.23456) == 1.2346 and _plain(2.0) == 2.0 and type(_plain(2.0)) is float
    assert _plain(float("nan")) is None
    assert _plain(datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2025-01-02T03:04:05+00:00"
    assert _plain(Decimal("0.123456")) == 0.1235 and type(_plain(Decimal("1"))) is float
    for v in (7, True, "x", None):
        assert _plain(v) is v


def test_the_json_report_names_every_field_of_each_section(report: Report) -> None:
    """``evstore metrics --format json`` (and the notebooks, the web API): each section as a mapping of
    exactly these keys, the chart left out (mutation testing: a misspelt key survived every test)."""
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data) == {"title", "scope", "sections"} and data["title"] == report.title
    assert [s["name"] for s in data["sections"]] == [s.name for s in report.sections]
    with pytest.raises(KeyError) as missing:  # a section the report lacks is named
        report.section("no_such_section")
    assert missing.value.args == ("no_such_section",)
    for got, section in zip(data["sections"], report.sections, strict=True):
        assert got == {"name": section.name, "title": section.title, "columns": list(section.columns),
                       "rows": json.loads(json.dumps(section.rows)), "summary": json.loads(json.dumps(section.summary)),
                       "note": section.note}


@pytest.mark.parametrize(("n", "shown", "more"), [(20, 20, ""), (21, 20, ", … (21 in all)"), (22, 20, ", … (22 in all)")])
def test_a_scope_matching_nothing_lists_at_most_twenty_values(n: int, shown: int, more: str) -> None:
    """The refusal of an unknown --project names the projects there are, the first twenty in order and then
    how many there are in all (mutation testing: the bounds moved by one survived every test)."""
    projects = [f"p{i:02d}" for i in range(n)]
    assert _refusal(list(reversed(projects)), Scope(project="nope")) == \
        f'No run has --project "nope"; the projects are: {", ".join(projects[:shown])}{more}.'


def _refusal(projects: list[str | None], scope: Scope) -> str:
    """What ``check_scope`` says of ``scope`` over a ``runs`` table of mapipe runs of these projects."""
    import duckdb

    from eventstore.errors import EvstoreError
    from projections.metrics import check_scope

    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE runs (stream_id VARCHAR, project VARCHAR, dialect VARCHAR, last_event_at TIMESTAMPTZ)")
    con.executemany("INSERT INTO runs VALUES (?, ?, 'mapipe', '2026-01-05T00:00:00Z')",
                    [(f"R-{i}", p) for i, p in enumerate(projects)])
    with pytest.raises(EvstoreError) as err:
        check_scope(con, scope)
    return str(err.value)


def test_a_reports_scope_and_title_name_each_filter_and_the_run(portfolio: Any) -> None:
    """The JSON report's ``scope`` names each filter given, by the option's name, and the run count;
    a run's report is titled with and scoped to its stream (mutation testing: misspelt keys survived)."""
    _store, p, out = portfolio
    con = analytics.connect(out)
    project = _last(next(iter(p.of("mapipe").values())))["project"]
    scoped = cross_run_report(con, Scope(project=project, dialect="mapipe", since="2020-01-01"))
    assert scoped.title == "evstore metrics"
    assert set(scoped.scope) == {"project", "dialect", "since", "runs"}
    assert (scoped.scope["project"], scoped.scope["dialect"], scoped.scope["since"]) == (project, "mapipe", "2020-01-01")
    sid = next(iter(p.of("mapipe")))
    one = run_report(con, sid)
    assert one.title == f"evstore metrics {sid}" and one.scope["stream"] == sid == one.scope["stream_id"]
    assert Scope(stream_id=sid).to_dict() == {"stream": sid}


def test_each_section_carries_the_note_and_chart_its_dialect_declares(report: Report) -> None:
    from projections.analytics.facts import catalog

    declared = {m.name: (m.note, m.chart) for _dialect, m in catalog().sections}
    assert [(s.name, s.note, s.chart) for s in report.sections] == \
        [(s.name, *declared[s.name]) for s in report.sections]
    assert any(note for note, _chart in declared.values()) and any(chart for _note, chart in declared.values())


def test_a_run_without_sections_of_its_own_and_an_unknown_run(tmp_path: Path) -> None:
    """A generic run (its dialect declares no analytics) gets the shared sections; an unknown run is
    refused by name."""
    from eventstore.errors import EvstoreError
    from projections.analytics.facts import CORE_RUN_SECTIONS, catalog

    url = migrated(f"sqlite:///{tmp_path}/events.db")
    with EventStore(url) as store:
        Ingestor(store, get_dialect("generic")).ingest(Snapshot(doc={"taskId": "G-1", "n": 0}))
        analytics.refresh(store, tmp_path / "a")
    con = analytics.connect(tmp_path / "a")
    rep = run_report(con, "G-1")
    shared = [m.name for m in (*CORE_RUN_SECTIONS, *catalog().every_run_sections)]
    assert [s.name for s in rep.sections] == shared and rep.scope["dialect"] == "generic"
    with pytest.raises(EvstoreError) as err:
        run_report(con, "NOPE")
    assert str(err.value) == 'No run "NOPE" in the analytics tables; `evstore runs` lists the runs.'


def test_a_filter_on_a_column_no_run_records_says_so() -> None:
    assert _refusal([None], Scope(project="nope")) == 'No run has --project "nope"; no run records a project.'
