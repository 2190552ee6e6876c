"""Validation of agentic-workflow machine envelopes: legacy, strict v2, and the skill's semantics.

Three layers, each a list of :class:`~eventstore.dialects.base.Finding` with JSON-Pointer paths:

* **legacy** (severity ``error``) — the package's source-compatible ``validateEnvelope``: the 13
  routing keys present, the enums, the shape of every routing-critical field.  ``detail`` is
  optional and unknown keys are tolerated.  Rendered spellings that newer parsers normalise
  (``"blocked"``, ``pr.ci: "failing"``, ``pr.state: "CLOSED"``) are accepted with a warning;
  anything else out of an enum is an error.
* **strict v2** (severity ``warning``) — ``validateEnvelopeV2Strict`` / ``envelope.schema.json``:
  ``detail`` required, no unknown keys at any level, ``next.continuation`` well-formed.
* **semantic** (severity ``warning``) — the orchestration-envelope field rules (HALT ⇒ every
  blocker run-scoped, NEEDS_FIXES ⇒ ``fix_now``, NEEDS_INPUT ⇒ question and options, ...).

Everything is embedded as Python checks (the cheap :func:`verdict` uses them alone); :func:`check`
also runs ``jsonschema`` with the package's own copy of ``envelope.schema.json`` (``schemas/`` beside
this module, with its origin and licence) and adds whatever it sees that the embedded rules did not
(it never has, on the vectors and the property tests).

Example::

    >>> ok, findings = classify({"state": "OK"})
    >>> ok, findings[0].message
    (False, 'missing required key: skill')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from eventstore import documents
from eventstore.dialects.base import Finding

if TYPE_CHECKING:
    from jsonschema import Draft7Validator

JSON = Any

SCHEMA_FILE = "envelope.schema.json"

STATES = ("OK", "CONTINUE", "READY_FOR_REVIEW", "READY_FOR_AUDIT", "MERGE_READY", "MERGED",
          "NEEDS_FIXES", "BLOCKED", "NEEDS_INPUT", "FAILED", "HALT")
# States after which the orchestrator stops and involves a human (the package's isTerminal).
TERMINAL_STATES = ("NEEDS_INPUT", "FAILED", "HALT")
UNIT_TYPES = ("feature", "fix", "docs", "none")
PR_STATES = ("open", "merged", "none")
CI_STATES = ("green", "red", "pending", "none")
VERIFICATION_STATES = ("green", "red", "not-run")
BLOCKER_KINDS = ("dependency", "issue", "gate", "merge-conflict", "substrate", "input")
BLOCKER_SCOPES = ("unit", "run")
SEVERITIES = ("high", "med", "low")
TIERS = ("strong", "cheap")

LEGACY_KEYS = ("skill", "state", "summary", "unit", "phase", "pr", "gates", "findings", "blockers",
               "dependencies", "recommendations", "needs_input", "next")
STRICT_KEYS = LEGACY_KEYS + ("detail",)
_NESTED_KEYS: dict[str, tuple[str, ...]] = {
    "unit": ("type", "id", "issue", "branch"),
    "phase": ("current", "total", "completed"),
    "pr": ("number", "url", "state", "head_sha", "merge_ready", "ci"),
    "gates": ("verification", "review_pending", "audit_pending"),
    "findings": ("fix_now", "issues_filed", "untriaged", "decisions_recorded"),
    "dependencies": ("unmet", "build_order"),
    "recommendations": ("product_audit", "reason"),
    "next": ("recommended", "alternatives", "tier", "suggested", "continuation"),
}
_FIX_NOW_KEYS = ("id", "file", "axis", "severity", "class", "route", "suggested_tier")
_BLOCKER_KEYS = ("kind", "id", "scope", "detail")
_SUGGESTION_KEYS = ("command", "trigger", "source_skill")

# Rendered spellings newer parseEnvelope versions map to the canonical value (vectors/
# ci-normalization.json); keys are compared lower-cased.
CI_SPELLINGS = {"failing": "red", "failure": "red", "failed": "red", "action_required": "red",
                "passing": "green", "success": "green", "queued": "pending",
                "in_progress": "pending", "skipped": "none"}
PR_STATE_SPELLINGS = {"closed": "none"}
VERIFICATION_SPELLINGS = {"failed": "red", "failing": "red", "passed": "green", "passing": "green",
                          "not run": "not-run", "not_run": "not-run"}
SKILL_OUTCOME_CONTRACT = "agentic-workflow/skill-outcome"
_DIGEST = re.compile(r"[0-9a-f]{64}")
# Commands that are judgment work (next.tier must be "strong"); execute-phase is mechanical.
_JUDGMENT = re.compile(r"^/?(plan-|review-|audit-|triage-|design-|loop-review)")
_MECHANICAL = re.compile(r"^/?execute-phase\b")


# ------------------------------------------------------------------ paths


def _dotted(tokens: tuple[str | int, ...]) -> str:
    out = ""
    for t in tokens:
        out += f"[{t}]" if isinstance(t, int) else (f".{t}" if out else t)
    return out


@dataclass
class _Collector:
    """Findings of one layer; messages use the package's dotted paths, paths are JSON Pointers."""

    severity: str
    items: list[Finding] = field(default_factory=list)

    def add(self, tokens: tuple[str | int, ...], code: str, message: str) -> None:
        self.items.append(Finding(path=documents.pointer(*tokens), code=code, message=message,
                                  severity=self.severity))


def _is_obj(v: JSON) -> bool:
    return type(v) is dict


def _is_int(v: JSON) -> bool:
    # JSON has one number type: 3.0 is the integer 3 to JS Number.isInteger and to jsonschema.
    return (type(v) is int) or (type(v) is float and v.is_integer())


def _is_str_list(v: JSON) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _show(v: JSON) -> str:
    return "undefined" if v is _ABSENT else ("null" if v is None else str(v))


_ABSENT: Any = object()


# ------------------------------------------------------------------ normalisation


def normalize(envelope: JSON) -> tuple[JSON, list[Finding]]:
    """A copy with rendered spellings mapped to canonical values, and one warning per mapping."""
    out = documents.copy(envelope)
    notes = _Collector("warning")
    if not _is_obj(out):
        return out, []

    def fix(parent: JSON, key: str, tokens: tuple[str | int, ...], value: str) -> None:
        notes.add(tokens, "non-canonical-spelling",
                  f"{_dotted(tokens)} {parent[key]!r} is a rendered spelling of {value!r}")
        parent[key] = value

    state = out.get("state")
    if type(state) is str and state not in STATES:
        canon = state.strip().upper().replace("-", "_").replace(" ", "_")
        if canon in STATES:
            fix(out, "state", ("state",), canon)
    def lowercase_enum(section: str, key: str, allowed: Any, spellings: dict[str, str]) -> None:
        parent = out.get(section)
        value = parent.get(key) if _is_obj(parent) else None
        if type(value) is str and value not in allowed:
            low = value.strip().lower()
            mapped = low if low in allowed else spellings.get(low)
            if mapped:
                fix(parent, key, (section, key), mapped)

    lowercase_enum("pr", "state", PR_STATES, PR_STATE_SPELLINGS)
    lowercase_enum("pr", "ci", CI_STATES, CI_SPELLINGS)
    lowercase_enum("gates", "verification", VERIFICATION_STATES, VERIFICATION_SPELLINGS)
    return out, notes.items


# ------------------------------------------------------------------ legacy rules


def legacy_findings(value: JSON) -> list[Finding]:
    """The source-compatible ``validateEnvelope`` rules (errors); ``[]`` means valid."""
    c = _Collector("error")
    if not _is_obj(value):
        c.add((), "not-an-object", "envelope is not a JSON object")
        return c.items
    for key in LEGACY_KEYS:
        if key not in value:
            c.add((key,), "missing-key", f"missing required key: {key}")
    g = value.get
    skill = g("skill", _ABSENT)
    if type(skill) is not str or not skill:
        c.add(("skill",), "wrong-type", "skill must be a non-empty string")
    state = g("state", _ABSENT)
    if state not in STATES or type(state) is not str:
        c.add(("state",), "not-in-enum", f"state must be one of {'|'.join(STATES)} (got: {_show(state)})")
    if type(g("summary", _ABSENT)) is not str:
        c.add(("summary",), "wrong-type", "summary must be a string")
    _legacy_unit(g("unit", _ABSENT), c)
    _legacy_phase(g("phase", _ABSENT), c)
    _legacy_pr(g("pr", _ABSENT), c)
    _legacy_gates(g("gates", _ABSENT), c)
    _legacy_blockers(g("blockers", _ABSENT), c)
    deps = g("dependencies", _ABSENT)
    if not _is_obj(deps):
        c.add(("dependencies",), "wrong-type", "dependencies must be an object")
    else:
        for k in ("unmet", "build_order"):
            if not _is_str_list(deps.get(k, _ABSENT)):
                c.add(("dependencies", k), "wrong-type", f"dependencies.{k} must be an array of strings")
    rec = g("recommendations", _ABSENT)
    if not _is_obj(rec):
        c.add(("recommendations",), "wrong-type", "recommendations must be an object")
    else:
        if type(rec.get("product_audit", _ABSENT)) is not bool:
            c.add(("recommendations", "product_audit"), "wrong-type",
                  "recommendations.product_audit must be a boolean")
        if not _str_or_null(rec.get("reason", _ABSENT)):
            c.add(("recommendations", "reason"), "wrong-type", "recommendations.reason must be a string or null")
    _legacy_findings_section(g("findings", _ABSENT), c)
    _legacy_next(g("next", _ABSENT), c)
    ni = g("needs_input", None)
    if ni is not None and not (_is_obj(ni) and type(ni.get("question")) is str
                               and _is_str_list(ni.get("options", _ABSENT))):
        c.add(("needs_input",), "wrong-type", "needs_input must be null or {question: string, options: string[]}")
    return c.items


def _str_or_null(v: JSON) -> bool:
    return v is None or type(v) is str


def _int_or_null(v: JSON) -> bool:
    return v is None or _is_int(v)


def _legacy_unit(unit: JSON, c: _Collector) -> None:
    if not _is_obj(unit):
        c.add(("unit",), "wrong-type", "unit must be an object")
        return
    t = unit.get("type", _ABSENT)
    if t not in UNIT_TYPES or type(t) is not str:
        c.add(("unit", "type"), "not-in-enum", f"unit.type must be one of {'|'.join(UNIT_TYPES)} (got: {_show(t)})")
    if not _str_or_null(unit.get("id", _ABSENT)):
        c.add(("unit", "id"), "wrong-type", "unit.id must be a string or null")
    if not _int_or_null(unit.get("issue", _ABSENT)):
        c.add(("unit", "issue"), "wrong-type", "unit.issue must be an integer or null")
    if not _str_or_null(unit.get("branch", _ABSENT)):
        c.add(("unit", "branch"), "wrong-type", "unit.branch must be a string or null")


def _legacy_phase(phase: JSON, c: _Collector) -> None:
    if not _is_obj(phase):
        c.add(("phase",), "wrong-type", "phase must be an object")
        return
    if not _str_or_null(phase.get("current", _ABSENT)):
        c.add(("phase", "current"), "wrong-type", "phase.current must be a string or null")
    for k in ("total", "completed"):
        if not _int_or_null(phase.get(k, _ABSENT)):
            c.add(("phase", k), "wrong-type", f"phase.{k} must be an integer or null")


def _legacy_pr(pr: JSON, c: _Collector) -> None:
    if not _is_obj(pr):
        c.add(("pr",), "wrong-type", "pr must be an object")
        return
    if not _int_or_null(pr.get("number", _ABSENT)):
        c.add(("pr", "number"), "wrong-type", "pr.number must be an integer or null")
    if not _str_or_null(pr.get("url", _ABSENT)):
        c.add(("pr", "url"), "wrong-type", "pr.url must be a string or null")
    st = pr.get("state", _ABSENT)
    if st not in PR_STATES or type(st) is not str:
        c.add(("pr", "state"), "not-in-enum", f"pr.state must be one of {'|'.join(PR_STATES)} (got: {_show(st)})")
    if not _str_or_null(pr.get("head_sha", _ABSENT)):
        c.add(("pr", "head_sha"), "wrong-type", "pr.head_sha must be a string or null")
    mr = pr.get("merge_ready", _ABSENT)
    if mr is not None and type(mr) is not bool:
        c.add(("pr", "merge_ready"), "wrong-type", "pr.merge_ready must be a boolean or null")
    ci = pr.get("ci", _ABSENT)
    if ci is not None and (ci not in CI_STATES or type(ci) is not str):
        c.add(("pr", "ci"), "not-in-enum", f"pr.ci must be one of {'|'.join(CI_STATES)} or null (got: {_show(ci)})")


def _legacy_gates(gates: JSON, c: _Collector) -> None:
    if not _is_obj(gates):
        c.add(("gates",), "wrong-type", "gates must be an object")
        return
    v = gates.get("verification", _ABSENT)
    if v is not None and (v not in VERIFICATION_STATES or type(v) is not str):
        c.add(("gates", "verification"), "not-in-enum",
              f"gates.verification must be one of {'|'.join(VERIFICATION_STATES)} or null (got: {_show(v)})")
    for k in ("review_pending", "audit_pending"):
        x = gates.get(k, _ABSENT)
        if x is not None and type(x) is not bool:
            c.add(("gates", k), "wrong-type", f"gates.{k} must be a boolean or null")


def _legacy_blockers(blockers: JSON, c: _Collector) -> None:
    if type(blockers) is not list:
        c.add(("blockers",), "wrong-type", "blockers must be an array")
        return
    for i, b in enumerate(blockers):
        p: tuple[str | int, ...] = ("blockers", i)
        if not _is_obj(b):
            c.add(p, "wrong-type", f"blockers[{i}] must be an object")
            continue
        kind, scope = b.get("kind", _ABSENT), b.get("scope", _ABSENT)
        if kind not in BLOCKER_KINDS or type(kind) is not str:
            c.add(p + ("kind",), "not-in-enum",
                  f"blockers[{i}].kind must be one of {'|'.join(BLOCKER_KINDS)} (got: {_show(kind)})")
        if type(b.get("id")) is not str:
            c.add(p + ("id",), "wrong-type", f"blockers[{i}].id must be a string")
        if scope not in BLOCKER_SCOPES or type(scope) is not str:
            c.add(p + ("scope",), "not-in-enum",
                  f"blockers[{i}].scope must be one of {'|'.join(BLOCKER_SCOPES)} (got: {_show(scope)})")
        if type(b.get("detail")) is not str:
            c.add(p + ("detail",), "wrong-type", f"blockers[{i}].detail must be a string")


def _legacy_findings_section(f: JSON, c: _Collector) -> None:
    if not _is_obj(f):
        c.add(("findings",), "wrong-type", "findings must be an object")
        return
    fix_now = f.get("fix_now", _ABSENT)
    if type(fix_now) is not list:
        c.add(("findings", "fix_now"), "wrong-type", "findings.fix_now must be an array")
    else:
        for i, item in enumerate(fix_now):
            p: tuple[str | int, ...] = ("findings", "fix_now", i)
            name = f"findings.fix_now[{i}]"
            if not _is_obj(item):
                c.add(p, "wrong-type", f"{name} must be an object")
                continue
            for k in ("id", "file", "axis", "class", "route"):
                if type(item.get(k)) is not str:
                    c.add(p + (k,), "wrong-type", f"{name}.{k} must be a string")
            sev = item.get("severity", _ABSENT)
            if sev not in SEVERITIES or type(sev) is not str:
                c.add(p + ("severity",), "not-in-enum",
                      f"{name}.severity must be one of {'|'.join(SEVERITIES)} (got: {_show(sev)})")
            tier = item.get("suggested_tier", _ABSENT)
            if tier not in TIERS or type(tier) is not str:
                c.add(p + ("suggested_tier",), "not-in-enum",
                      f"{name}.suggested_tier must be strong|cheap (got: {_show(tier)})")
    filed = f.get("issues_filed", _ABSENT)
    if type(filed) is not list or not all(_is_int(n) for n in filed):
        c.add(("findings", "issues_filed"), "wrong-type", "findings.issues_filed must be an array of integers")
    for k in ("untriaged", "decisions_recorded"):
        n = f.get(k, _ABSENT)
        if not _is_int(n) or n < 0:
            c.add(("findings", k), "wrong-type", f"findings.{k} must be a non-negative integer")


def _legacy_next(nxt: JSON, c: _Collector) -> None:
    if not _is_obj(nxt):
        c.add(("next",), "wrong-type", "next must be an object")
        return
    if type(nxt.get("recommended")) is not str:
        c.add(("next", "recommended"), "wrong-type", "next.recommended must be a string")
    if not _is_str_list(nxt.get("alternatives", _ABSENT)):
        c.add(("next", "alternatives"), "wrong-type", "next.alternatives must be an array of strings")
    tier = nxt.get("tier", _ABSENT)
    if tier not in TIERS or type(tier) is not str:
        c.add(("next", "tier"), "not-in-enum", f"next.tier must be strong|cheap (got: {_show(tier)})")
    if "suggested" in nxt:
        sug = nxt["suggested"]
        if type(sug) is not list:
            c.add(("next", "suggested"), "wrong-type", "next.suggested must be an array when present")
            return
        for i, s in enumerate(sug):
            p: tuple[str | int, ...] = ("next", "suggested", i)
            if not _is_obj(s):
                c.add(p, "wrong-type", f"next.suggested[{i}] must be an object")
                continue
            for k in _SUGGESTION_KEYS:
                if type(s.get(k)) is not str:
                    c.add(p + (k,), "wrong-type", f"next.suggested[{i}].{k} must be a string")


# ------------------------------------------------------------------ strict v2 additions


def strict_findings(value: JSON) -> list[Finding]:
    """What strict v2 (the JSON Schema) adds to the legacy rules: ``detail``, closed objects,
    a well-formed ``next.continuation``.  Warnings: the legacy contract tolerates them."""
    c = _Collector("warning")
    if not _is_obj(value):
        return c.items
    if "detail" not in value:
        c.add(("detail",), "missing-key", "missing required key: detail")
    for key in value:
        if key not in STRICT_KEYS:
            c.add((key,), "unexpected-key", f"unexpected top-level key: {key}")
    for section, allowed in _NESTED_KEYS.items():
        _closed(value.get(section), (section,), allowed, c)
    f = value.get("findings")
    if _is_obj(f) and type(f.get("fix_now")) is list:
        for i, item in enumerate(f["fix_now"]):
            _closed(item, ("findings", "fix_now", i), _FIX_NOW_KEYS, c)
    if type(value.get("blockers")) is list:
        for i, b in enumerate(value["blockers"]):
            _closed(b, ("blockers", i), _BLOCKER_KEYS, c)
    ni = value.get("needs_input")
    _closed(ni, ("needs_input",), ("question", "options"), c)
    nxt = value.get("next")
    if _is_obj(nxt):
        if type(nxt.get("suggested")) is list:
            for i, s in enumerate(nxt["suggested"]):
                _closed(s, ("next", "suggested", i), _SUGGESTION_KEYS, c)
        if "continuation" in nxt:
            _continuation(nxt["continuation"], c)
    return c.items


def _closed(obj: JSON, tokens: tuple[str | int, ...], allowed: tuple[str, ...], c: _Collector) -> None:
    if _is_obj(obj):
        for key in obj:
            if key not in allowed:
                c.add(tokens + (key,), "unexpected-key", f"unexpected key: {_dotted(tokens + (key,))}")


def _nonempty_str(v: JSON) -> bool:
    return type(v) is str and len(v) > 0


def _continuation(cont: JSON, c: _Collector) -> None:
    base: tuple[str | int, ...] = ("next", "continuation")
    if not _is_obj(cont):
        c.add(base, "wrong-type", "next.continuation must be an object")
        return
    _closed(cont, base, ("argv", "rendering", "preconditions", "evidence", "convergence"), c)
    for k in ("argv", "preconditions", "convergence"):
        if k not in cont:
            c.add(base + (k,), "missing-key", f"missing required key: next.continuation.{k}")
    argv = cont.get("argv")
    if "argv" in cont and (type(argv) is not list or not argv or not all(_nonempty_str(a) for a in argv)):
        c.add(base + ("argv",), "wrong-type", "next.continuation.argv must be a non-empty array of non-empty strings")
    for k in ("rendering", "convergence"):
        if k in cont and not _nonempty_str(cont[k]):
            c.add(base + (k,), "wrong-type", f"next.continuation.{k} must be a non-empty string")
    pre = cont.get("preconditions")
    if "preconditions" in cont:
        if type(pre) is not list:
            c.add(base + ("preconditions",), "wrong-type", "next.continuation.preconditions must be an array")
        else:
            for i, p in enumerate(pre):
                pt = base + ("preconditions", i)
                if not _is_obj(p):
                    c.add(pt, "wrong-type", f"{_dotted(pt)} must be an object")
                    continue
                _closed(p, pt, ("id", "check", "satisfied"), c)
                for k in ("id", "check"):
                    if not _nonempty_str(p.get(k)):
                        c.add(pt + (k,), "wrong-type", f"{_dotted(pt + (k,))} must be a non-empty string")
                if type(p.get("satisfied")) is not bool:
                    c.add(pt + ("satisfied",), "wrong-type", f"{_dotted(pt + ('satisfied',))} must be a boolean")
    if "evidence" in cont:
        ev, et = cont["evidence"], base + ("evidence",)
        if not _is_obj(ev):
            c.add(et, "wrong-type", "next.continuation.evidence must be an object")
        else:
            _closed(ev, et, ("artifact", "digest"), c)
            if not _nonempty_str(ev.get("artifact")):
                c.add(et + ("artifact",), "wrong-type", "next.continuation.evidence.artifact must be a non-empty string")
            d = ev.get("digest")
            if type(d) is not str or not _DIGEST.fullmatch(d):
                c.add(et + ("digest",), "wrong-type", "next.continuation.evidence.digest must be 64 lower-case hex digits")


# ------------------------------------------------------------------ semantics


def _section(env: dict[str, Any], key: str) -> dict[str, Any]:
    v = env.get(key)
    return v if type(v) is dict else {}


def semantic_findings(env: JSON) -> list[Finding]:
    """The orchestration-envelope field rules that a schema cannot express (warnings)."""
    c = _Collector("warning")
    if not _is_obj(env):
        return c.items
    state = env.get("state")
    listed = env.get("blockers") if type(env.get("blockers")) is list else []
    blockers = [b for b in listed if _is_obj(b)]
    findings, gates, pr, nxt = (_section(env, k) for k in ("findings", "gates", "pr", "next"))
    rec = nxt.get("recommended")
    recommended: str = rec if type(rec) is str else ""
    ni = env.get("needs_input")

    if state == "HALT":
        if not blockers:
            c.add(("blockers",), "halt-without-blockers", "HALT must say why: blockers[] is empty")
        for i, b in enumerate(listed):
            if _is_obj(b) and b.get("scope") != "run":
                c.add(("blockers", i, "scope"), "halt-blocker-not-run-scoped",
                      f'HALT requires every blocker to have scope "run" (blockers[{i}] has {b.get("scope")!r})')
    elif any(b.get("scope") == "run" for b in blockers):
        c.add(("state",), "run-blocker-without-halt",
              f"a run-scoped blocker stops the whole run, but state is {state!r}, not HALT")
    if state == "NEEDS_FIXES" and not findings.get("fix_now"):
        c.add(("findings", "fix_now"), "needs-fixes-without-fix-now", "NEEDS_FIXES requires non-empty findings.fix_now")
    if state == "NEEDS_INPUT":
        if not _is_obj(ni) or not _nonempty_str(ni.get("question")) or not ni.get("options"):
            c.add(("needs_input",), "needs-input-missing", "NEEDS_INPUT requires needs_input.question and .options")
    elif ni is not None:
        c.add(("needs_input",), "needs-input-unexpected", f"needs_input is filled but state is {state!r}")
    if state == "READY_FOR_REVIEW":
        if gates.get("review_pending") is not True:
            c.add(("gates", "review_pending"), "review-pending-not-set",
                  "READY_FOR_REVIEW requires gates.review_pending: true")
        if "review-change" not in recommended:
            c.add(("next", "recommended"), "review-not-next", "READY_FOR_REVIEW requires review-change next")
    if state == "READY_FOR_AUDIT" and "audit-pr" not in recommended:
        c.add(("next", "recommended"), "audit-not-next", "READY_FOR_AUDIT requires audit-pr next")
    if state == "MERGE_READY" and pr.get("merge_ready") is not True:
        c.add(("pr", "merge_ready"), "merge-ready-not-set", "MERGE_READY requires pr.merge_ready: true")
    if state == "MERGED" and pr.get("state") != "merged":
        c.add(("pr", "state"), "merged-pr-not-merged", f'MERGED requires pr.state "merged" (got {pr.get("state")!r})')
    if state == "BLOCKED" and not blockers:
        c.add(("blockers",), "blocked-without-blockers", "BLOCKED must say why: blockers[] is empty")
    deps = _section(env, "dependencies")
    if any(b.get("kind") == "dependency" for b in blockers) and not deps.get("unmet"):
        c.add(("dependencies", "unmet"), "dependency-blocker-without-unmet",
              "a dependency blocker needs dependencies.unmet (and build_order)")
    tier = nxt.get("tier")
    if _JUDGMENT.match(recommended) and tier == "cheap":
        c.add(("next", "tier"), "tier-mismatch", f"{recommended!r} is judgment work: next.tier should be strong")
    elif _MECHANICAL.match(recommended) and tier == "strong":
        c.add(("next", "tier"), "tier-mismatch", f"{recommended!r} is mechanical work: next.tier should be cheap")
    if nxt.get("suggested") and env.get("skill") != "workflow-status":
        c.add(("next", "suggested"), "suggested-outside-workflow-status",
              "next.suggested[] is workflow-status-only")
    if "detail" in env and env["detail"] is not None and not _is_obj(env["detail"]):
        c.add(("detail",), "detail-not-object", "detail must be an object or null")
    phase = _section(env, "phase")
    total: Any = phase.get("total")
    done: Any = phase.get("completed")
    if _is_int(total) and _is_int(done) and int(done) > int(total):
        c.add(("phase", "completed"), "phase-completed-exceeds-total", f"phase.completed {done} > phase.total {total}")
    number: Any = pr.get("number")
    url: Any = pr.get("url")
    if _is_int(number) and type(url) is str and not re.search(rf"/{int(number)}/?$", url):
        c.add(("pr", "url"), "pr-url-number-mismatch", f"pr.url {url!r} does not end in PR #{number}")
    return c.items


# ------------------------------------------------------------------ the JSON Schemas (precision)


@cache
def schema_validator() -> Draft7Validator:
    """A Draft-7 validator for the newest ``envelope.schema.json`` (package data beside this module)."""
    from jsonschema import Draft7Validator  # imported when a document is first validated

    text = resources.files("eventstore.dialects.envelope").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    return Draft7Validator(json.loads(text))


def schema_findings(value: JSON) -> list[Finding]:
    """``jsonschema`` errors as warnings."""
    return [Finding(path=documents.pointer(*err.absolute_path), code=f"schema-{err.validator}",
                    message=err.message, severity="warning")
            for err in schema_validator().iter_errors(value)]


# ------------------------------------------------------------------ the verdict


@dataclass(frozen=True)
class EnvelopeCheck:
    """The full verdict on one value.

    ``ok`` is the package's ``parseEnvelope`` verdict (legacy rules after normalising rendered
    spellings), ``ok_strict`` the driver-facing ``validateEnvelopeV2Strict`` verdict on the same
    normalised value, ``schema_valid`` whether the raw value satisfies ``envelope.schema.json``.
    """

    kind: str  # "envelope" | "skill-outcome" | "not-an-object"
    ok: bool
    ok_strict: bool
    schema_valid: bool
    normalized: JSON
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> list[str]:
        """Messages of the legacy errors (what ``parseEnvelope`` would report)."""
        return [f.message for f in self.findings if f.severity == "error"]


def verdict(value: JSON) -> tuple[bool, bool]:
    """``(check(value).ok, check(value).ok_strict)`` without the JSON Schema and semantic layers,
    which only add findings (the schema check is ~95 % of :func:`check`'s time)."""
    if _is_obj(value) and value.get("contract") == SKILL_OUTCOME_CONTRACT:
        return False, False
    normalized, _ = normalize(value)
    ok = not legacy_findings(normalized)
    return ok, ok and not strict_findings(normalized)


def check(value: JSON) -> EnvelopeCheck:
    """Validate a parsed value as an envelope (all three layers; see the module docstring)."""
    if _is_obj(value) and value.get("contract") == SKILL_OUTCOME_CONTRACT:
        f = Finding(path="/contract", code="not-an-envelope",
                    message=f"a {SKILL_OUTCOME_CONTRACT} v{value.get('version')} document, not a machine envelope",
                    severity="error")
        return EnvelopeCheck("skill-outcome", False, False, False, value, (f,))
    normalized, notes = normalize(value)
    legacy = legacy_findings(normalized)
    strict = strict_findings(normalized)
    raw_strict_ok = not legacy_findings(value) and not strict_findings(value) if notes else (not legacy and not strict)
    schema = schema_findings(value)
    seen = {f.path for f in legacy + strict + notes}
    extra = [f for f in schema if f.path not in seen]
    schema_ok = raw_strict_ok and not schema
    semantic = semantic_findings(normalized)
    findings = tuple(legacy + notes + strict + extra + semantic)
    kind = "envelope" if _is_obj(value) else "not-an-object"
    return EnvelopeCheck(kind, not legacy, not legacy and not strict, schema_ok, normalized, findings)


def classify(envelope_or_text: JSON | str | bytes) -> tuple[bool, list[Finding]]:
    """``(ok, findings)`` for a parsed envelope, or for a turn's text per the parse contract."""
    if isinstance(envelope_or_text, (str, bytes)):
        from eventstore.dialects.envelope.parse import parse_turn

        text = envelope_or_text.decode("utf-8", "replace") if isinstance(envelope_or_text, bytes) else envelope_or_text
        turn = parse_turn(text)
        if turn.envelope is None:
            return False, [Finding(path="", code=turn.code or "unparseable", message=turn.reason or "", severity="error")]
        envelope_or_text = turn.envelope
    result = check(envelope_or_text)
    return result.ok, list(result.findings)


def is_terminal(state: str | None) -> bool:
    """True when the orchestrator must stop and involve a human."""
    return state in TERMINAL_STATES


def is_run_halt(envelope: JSON) -> bool:
    """True for HALT or when any blocker is run-scoped: the whole run stops."""
    if not _is_obj(envelope):
        return False
    blockers = envelope.get("blockers")
    return envelope.get("state") == "HALT" or (
        type(blockers) is list and any(_is_obj(b) and b.get("scope") == "run" for b in blockers))
