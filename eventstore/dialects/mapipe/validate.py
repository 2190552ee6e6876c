"""Validate an ``agent-state.json`` against ``seeds/agent-state.schema.json`` (JSON Schema 2020-12).

The schema is read from the path setting ``EVSTORE_SEEDS`` (default ``<repo>/../shared/seeds``)
at call time, and cached per file.  When the schema file is not there, :func:`validate_document`
returns no findings: evstore records what it observed and never refuses a document for want of
a spec (the CLI can say that validation was unavailable via :func:`schema_path`).

Every schema error becomes one :class:`~eventstore.dialects.base.Finding` whose ``path`` is the
JSON Pointer of the failing location.  ``additionalProperties`` errors are split into one
``unknown-key`` finding per unexpected member, pointing at the member itself
(``/phases/3/retries``), because that is the location a reader has to look at.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from eventstore.config import seeds_path
from eventstore.dialects.base import Finding
from eventstore.documents import pointer

SCHEMA_FILE = "agent-state.schema.json"


@lru_cache(maxsize=8)
def _schema_file(seeds: str) -> Path | None:
    path = Path(seeds) / SCHEMA_FILE
    return path if path.is_file() else None


def schema_path() -> Path | None:
    """The schema file validation uses, or ``None`` when it is not available (cached per setting)."""
    return _schema_file(str(seeds_path()))


@lru_cache(maxsize=4)
def _validator(path: str) -> Draft202012Validator:
    schema = json.loads(Path(path).read_text(encoding="utf-8"))
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@lru_cache(maxsize=4)
def _fast(path: str) -> Any:
    # fastjsonschema compiles the schema to Python: ~30x faster than jsonschema on a valid
    # 20-50 KB document.  The schema only uses keywords whose draft-07 and 2020-12 meanings
    # agree, and fastjsonschema's format checks are at least as strict, so "valid" here implies
    # "valid" for jsonschema; anything else goes to jsonschema for the full list of findings.
    schema = json.loads(Path(path).read_text(encoding="utf-8"))
    schema.pop("$schema", None)
    try:
        return fastjsonschema.compile(schema, use_default=False)  # never write defaults into the doc
    except Exception:  # a schema it cannot compile: always take the jsonschema path
        return None


def _fast_valid(doc: Any) -> bool:
    path = schema_path()
    if path is None:
        return False
    fast = _fast(str(path))
    if fast is None:
        return False
    try:
        fast(doc)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def validator() -> Draft202012Validator | None:
    path = schema_path()
    if path is None:
        return None
    return _validator(str(path))


def validate_document(doc: Any) -> list[Finding]:
    """Findings for every way ``doc`` breaks the schema; ``[]`` when valid or schema absent."""
    v = validator()
    if v is None or _fast_valid(doc):
        return []
    findings: list[Finding] = []
    for error in sorted(v.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), str(e.validator))):
        findings.extend(_findings(error))
    return findings


def _findings(error: ValidationError) -> list[Finding]:
    where = pointer(*error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = set(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        extras = [k for k in error.instance if k not in known and not any(p.search(k) for p in patterns)]
        if extras:
            return [Finding(path=where + pointer(k), code="unknown-key",
                            message=f'"{k}" is not a property the schema defines here', severity="warning")
                    for k in extras]
    return [Finding(path=where, code=f"schema-{_kebab(str(error.validator))}", message=error.message,
                    severity="error")]


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
