"""The envelope lens: derive turn events from two accepted envelopes, and fold them back.

``derive(prev, next)`` always starts with :class:`EnvelopeEmitted` (the whole envelope: the
document after the turn, so the fold is exact and the residual patch is empty for any envelope,
valid or not), then the facts metrics read.  A repeated identical envelope is still a turn:
it yields ``EnvelopeEmitted`` + :class:`NoProgressDetected`, never "no change".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from eventstore import documents
from eventstore.dialects.envelope.events import (
    BlockersRaised,
    EnvelopeEmitted,
    FindingsReported,
    GatesReported,
    Halted,
    NoProgressDetected,
    StateTransitioned,
)
from eventstore.dialects.envelope.validate import SKILL_OUTCOME_CONTRACT, is_run_halt, verdict
from eventstore.events import Event

JSON = Any
# Sections whose change means the unit moved, even when the advice is the same.
PROGRESS_KEYS = ("phase", "pr", "gates", "findings", "blockers", "dependencies", "needs_input", "unit")


def is_envelope_like(doc: JSON) -> bool:
    """A JSON object that claims to be a machine envelope (valid or not)."""
    return (type(doc) is dict and doc.get("contract") != SKILL_OUTCOME_CONTRACT
            and ("state" in doc or "next" in doc or "skill" in doc))


def _str(v: JSON) -> str | None:
    return v if type(v) is str else None


def _obj(v: JSON) -> dict[str, Any]:
    return v if type(v) is dict else {}


def unit_id(env: JSON) -> str | None:
    uid = _obj(_obj(env).get("unit")).get("id")
    if type(uid) is int:  # legacy native envelopes number their units
        return str(uid)
    return uid if type(uid) is str and uid else None


def recommendation_hash(env: JSON) -> str:
    """Fingerprint of the advice: state + next (minus the advisory ``suggested``)."""
    e = _obj(env)
    nxt = {k: v for k, v in _obj(e.get("next")).items() if k != "suggested"}
    canon = json.dumps({"state": e.get("state"), "next": nxt}, sort_keys=True, separators=(",", ":"),
                       ensure_ascii=False, default=str)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def no_progress(prev: JSON, nxt: JSON) -> bool:
    """Same advice as the previous turn and nothing that marks progress moved."""
    if not (is_envelope_like(prev) and is_envelope_like(nxt)):
        return False
    if recommendation_hash(prev) != recommendation_hash(nxt):
        return False
    return all(documents.same(prev.get(k), nxt.get(k)) for k in PROGRESS_KEYS)


def _reports_findings(f: JSON) -> bool:
    f = _obj(f)
    return bool(f.get("fix_now") or f.get("issues_filed") or f.get("untriaged") or f.get("decisions_recorded"))


def _nat(v: JSON) -> int:
    return int(v) if type(v) in (int, float) and v == v and v >= 0 and float(v).is_integer() else 0


def derive(prev: JSON, nxt: JSON, *, turn: int | None = None) -> list[Event]:
    """Events for one accepted turn; ``[]`` when ``nxt`` is not envelope-like."""
    if not is_envelope_like(nxt):
        return []
    before = prev if is_envelope_like(prev) else None
    ok, ok_strict = verdict(nxt)  # the findings are the dialect's validate(); only the flags here
    state, skill, uid = _str(nxt.get("state")), _str(nxt.get("skill")), unit_id(nxt)
    nx = _obj(nxt.get("next"))
    rhash = recommendation_hash(nxt)
    events: list[Event] = [EnvelopeEmitted(
        envelope=documents.copy(nxt), skill=skill, state=state, unit_id=uid, turn=turn,
        recommended=_str(nx.get("recommended")), tier=_str(nx.get("tier")), recommendation_hash=rhash,
        valid=ok, valid_strict=ok_strict)]
    prev_state = _str(before.get("state")) if before else None
    if state is not None and (before is None or before.get("state") != nxt.get("state")):
        events.append(StateTransitioned(from_state=prev_state, to_state=state, skill=skill, unit_id=uid, turn=turn))
    if "findings" in nxt and _reports_findings(nxt["findings"]):
        f = _obj(nxt["findings"])
        items = [i for i in f.get("fix_now") or [] if type(i) is dict] if type(f.get("fix_now")) is list else []
        filed = f.get("issues_filed")
        events.append(FindingsReported(
            findings=documents.copy(nxt["findings"]),
            fix_now_ids=[i["id"] for i in items if type(i.get("id")) is str],
            fix_now_count=len(f["fix_now"]) if type(f.get("fix_now")) is list else 0,
            high_severity=sum(1 for i in items if i.get("severity") == "high"),
            issues_filed=[n for n in filed if type(n) is int] if type(filed) is list else [],
            untriaged=_nat(f.get("untriaged")), decisions_recorded=_nat(f.get("decisions_recorded")),
            skill=skill, turn=turn))
    blockers = nxt.get("blockers")
    if type(blockers) is list and blockers:
        rows = [b for b in blockers if type(b) is dict]
        events.append(BlockersRaised(
            blockers=documents.copy(blockers),
            kinds=[b["kind"] for b in rows if type(b.get("kind")) is str],
            ids=[b["id"] for b in rows if type(b.get("id")) is str],
            run_scoped=sum(1 for b in rows if b.get("scope") == "run"), skill=skill, turn=turn))
    if "gates" in nxt and (before is None or not documents.same(before.get("gates"), nxt["gates"])):
        g = _obj(nxt["gates"])
        rp, ap = g.get("review_pending"), g.get("audit_pending")
        events.append(GatesReported(
            gates=documents.copy(nxt["gates"]), verification=_str(g.get("verification")),
            review_pending=rp if type(rp) is bool else None, audit_pending=ap if type(ap) is bool else None,
            turn=turn))
    if is_run_halt(nxt):
        reasons = [f"{b.get('kind')}:{b.get('id')} — {b.get('detail')}"
                   for b in (blockers if type(blockers) is list else []) if type(b) is dict and b.get("scope") == "run"]
        events.append(Halted(state=state, reasons=reasons, skill=skill, unit_id=uid, turn=turn))
    if before is not None and no_progress(before, nxt):
        events.append(NoProgressDetected(state=state, recommended=_str(nx.get("recommended")),
                                         recommendation_hash=rhash, skill=skill, unit_id=uid, turn=turn))
    return events


_SECTION = {StateTransitioned: ("state", "to_state"), FindingsReported: ("findings", "findings"),
            BlockersRaised: ("blockers", "blockers"), GatesReported: ("gates", "gates")}


def apply(doc: JSON, event: Event) -> JSON:
    """Fold one envelope event (the document is the latest accepted envelope)."""
    if isinstance(event, EnvelopeEmitted):
        return documents.take(event.envelope)
    section = _SECTION.get(type(event))
    if section is not None:
        key, attr = section
        if type(doc) is dict:
            doc[key] = documents.take(getattr(event, attr))
        return doc
    # Halted, NoProgressDetected, TurnRejected, RepairAttempted, TurnFailed: facts about the turn,
    # not about the document.
    return doc
