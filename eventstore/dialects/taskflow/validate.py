"""Findings for a taskflow lifecycle document: where the seed's rules are not met.

Never fatal and never a rewrite: the document is what was observed.  Codes:

``not-an-object``, ``missing-key``, ``unknown-key``, ``wrong-type``, ``phase-not-in-enum``,
``mode-not-in-enum``, ``status-not-in-enum``
    the document is not the shape :mod:`.lifecycle` writes;
``skipped-mandatory-phase`` (error)
    a later phase completed while a mandatory one (research, implement, bug_find,
    adversarial_bug_find, doc_review, referee) has no non-empty artifact;
``empty-artifact``
    a seed artifact exists but is empty: its phase is not complete;
``artifact-hash-mismatch`` (error)
    an artifact's ``sha256`` / ``size`` does not match its ``content``;
``verdict-unparseable`` (error)
    VERDICT.md states no single verdict; nothing is spawned, nothing passes;
``verdict-stale`` (error)
    the recorded verdict's ``sha256`` is not VERDICT.md's;
``phase-mismatch`` / ``status-mismatch``
    the recorded value is not what the artifacts imply;
``follow-up-missing``
    manual mode, failing verdict: a fix/review/tiebreak task the orchestrator must create is
    not there (yet);
``autopilot-not-paused`` / ``paused-in-manual-mode`` (error)
    the pause record disagrees with the mode and the verdict.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from eventstore.dialects.base import Finding
from eventstore.dialects.taskflow.lifecycle import (
    ARTIFACT_OF,
    KEYS,
    MODES,
    PHASES,
    STATUSES,
    compute_phase,
    compute_status,
    expected_follow_ups,
    is_blank,
    skipped_phases,
)
from eventstore.documents import pointer

_TYPES: dict[str, tuple[type, ...]] = {
    "task": (str,), "origin": (dict, type(None)), "mode": (str,), "mode_source": (str,),
    "phase": (str,), "status": (str,), "artifacts": (dict,), "verdict": (dict, type(None)),
    "follow_ups": (list,), "paused": (dict, type(None)), "subtasks": (list,),
}


def validate(doc: Any) -> list[Finding]:
    if not isinstance(doc, dict):
        return [Finding("", "not-an-object", "a taskflow lifecycle is a JSON object", "error")]
    out: list[Finding] = []
    for key in KEYS:
        if key not in doc:
            out.append(Finding(pointer(key), "missing-key", f'"{key}" is missing', "error"))
        elif not isinstance(doc[key], _TYPES[key]) or isinstance(doc[key], bool):
            out.append(Finding(pointer(key), "wrong-type",
                               f'"{key}" is {type(doc[key]).__name__}, expected '
                               + " or ".join("null" if t is type(None) else t.__name__ for t in _TYPES[key]),
                               "error"))
    for key in doc:
        if key not in KEYS:
            out.append(Finding(pointer(key), "unknown-key", f'"{key}" is not part of the taskflow lifecycle'))
    for key, allowed, code in (("phase", PHASES, "phase-not-in-enum"), ("mode", MODES, "mode-not-in-enum"),
                               ("status", STATUSES, "status-not-in-enum")):
        value = doc.get(key)
        if isinstance(value, str) and value not in allowed:
            out.append(Finding(pointer(key), code, f'{key} "{value}" is not one of {", ".join(allowed)}', "error"))
    artifacts, origin, verdict = doc.get("artifacts"), doc.get("origin"), doc.get("verdict")
    if isinstance(artifacts, dict):
        out += _artifact_findings(artifacts)
        for phase in skipped_phases(artifacts, origin):
            name = ARTIFACT_OF[phase]
            out.append(Finding(pointer("artifacts", name), "skipped-mandatory-phase",
                               f"mandatory phase {phase} was skipped: {name} is missing or empty "
                               "while a later phase is complete", "error"))
    out += _verdict_findings(doc, artifacts, verdict)
    if isinstance(artifacts, dict) and isinstance(doc.get("phase"), str):
        try:
            implied = compute_phase(artifacts, origin, verdict)
        except (TypeError, AttributeError):
            implied = None
        if implied is not None and implied != doc["phase"]:
            out.append(Finding(pointer("phase"), "phase-mismatch",
                               f'phase is "{doc["phase"]}" but the artifacts imply "{implied}"'))
    if isinstance(doc.get("status"), str) and doc.get("verdict", 0) != 0:
        implied_status = compute_status(verdict, doc.get("mode"))
        if implied_status != doc["status"]:
            out.append(Finding(pointer("status"), "status-mismatch",
                               f'status is "{doc["status"]}" but the verdict and mode imply "{implied_status}"'))
    out += _follow_up_findings(doc, verdict)
    return out


def _artifact_findings(artifacts: dict[str, Any]) -> list[Finding]:
    out = []
    for name, entry in artifacts.items():
        path = pointer("artifacts", name)
        if not isinstance(entry, dict):
            out.append(Finding(path, "wrong-type", f"artifact {name} is not an object", "error"))
            continue
        content, b64 = entry.get("content"), entry.get("content_b64")
        data: bytes | None = None
        if isinstance(content, str):
            data = content.encode("utf-8")
        elif isinstance(b64, str):
            try:
                data = base64.b64decode(b64, validate=True)
            except ValueError:
                data = None
        if data is None:
            out.append(Finding(path, "artifact-content-missing", f"artifact {name} has no content", "error"))
        elif entry.get("sha256") != hashlib.sha256(data).hexdigest() or entry.get("size") != len(data):
            out.append(Finding(path, "artifact-hash-mismatch",
                               f"artifact {name}: sha256/size do not match its content", "error"))
        if name in ARTIFACT_OF.values() and is_blank(entry):
            out.append(Finding(path, "empty-artifact", f"{name} is empty: its phase is not complete"))
    return out


def _verdict_findings(doc: dict[str, Any], artifacts: Any, verdict: Any) -> list[Finding]:
    if not isinstance(verdict, dict):
        return []
    out = []
    if verdict.get("value") == "unparsed":
        out.append(Finding(pointer("verdict"), "verdict-unparseable",
                           f"VERDICT.md states no single verdict ({verdict.get('reason')}); "
                           "nothing passes and no follow-up is spawned", "error"))
    elif verdict.get("value") not in ("PASS", "FAIL", "NEEDS_REVIEW"):
        out.append(Finding(pointer("verdict", "value"), "verdict-not-in-enum",
                           f"verdict {verdict.get('value')!r} is not PASS, FAIL or NEEDS_REVIEW", "error"))
    entry = artifacts.get("VERDICT.md") if isinstance(artifacts, dict) else None
    if not isinstance(entry, dict) or entry.get("sha256") != verdict.get("sha256"):
        out.append(Finding(pointer("verdict", "sha256"), "verdict-stale",
                           "the recorded verdict is not the one in VERDICT.md", "error"))
    return out


def _follow_up_findings(doc: dict[str, Any], verdict: Any) -> list[Finding]:
    task, mode, paused = doc.get("task"), doc.get("mode"), doc.get("paused")
    if not isinstance(task, str):
        return []
    expected = expected_follow_ups(task, verdict)
    out = []
    if mode == "manual":
        follow_ups = doc.get("follow_ups")
        spawned = {f.get("task") for f in follow_ups if isinstance(f, dict)} if isinstance(follow_ups, list) else set()
        for kind, name, _ in expected:
            if name not in spawned:
                out.append(Finding(pointer("follow_ups"), "follow-up-missing",
                                   f"manual mode: the {kind} task {name} has not been created"))
        if paused is not None:
            out.append(Finding(pointer("paused"), "paused-in-manual-mode",
                               "manual mode never pauses; the orchestrator creates follow-ups", "error"))
    elif mode == "autopilot" and compute_status(verdict, mode) == "paused" and paused is None:
        out.append(Finding(pointer("paused"), "autopilot-not-paused",
                           "autopilot met a failing verdict but recorded no pause", "error"))
    return out
