"""Validate an ``agent-state.json`` against multi-agent-pipeline's JSON Schema (2020-12).

The schema ships with the package (``schemas/agent-state.schema.json`` beside this module, with its
origin note) and is read once through :mod:`importlib.resources`: no setting, no path outside the
installed package.

Every schema error becomes one :class:`~eventstore.dialects.base.Finding` whose ``path`` is the
JSON Pointer of the failing location.  ``additionalProperties`` errors are split into one
``unknown-key`` finding per unexpected member, pointing at the member itself
(``/phases/3/retries``), because that is the location a reader has to look at.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from eventstore.dialects.base import Finding
from eventstore.documents import pointer

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

SCHEMA_FILE = "agent-state.schema.json"


@cache
def schema() -> dict[str, Any]:
    """The packaged JSON Schema (parsed once; callers must not change it)."""
    text = resources.files("eventstore.dialects.mapipe").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator  # imported when a document is first validated

    return Draft202012Validator(schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


@cache
def _fast() -> Any:
    # fastjsonschema compiles the schema to Python: ~30x faster than jsonschema on a valid
    # 20-50 KB document.  The schema only uses keywords whose draft-07 and 2020-12 meanings
    # agree, and fastjsonschema's format checks are at least as strict, so "valid" here implies
    # "valid" for jsonschema; anything else goes to jsonschema for the full list of findings.
    import fastjsonschema

    compiled = copy.deepcopy(schema())
    compiled.pop("$schema", None)
    try:
        return fastjsonschema.compile(compiled, use_default=False)  # never write defaults into the doc
    except Exception:  # a schema it cannot compile: always take the jsonschema path
        return None


#: The documents a process validates through jsonschema before it compiles the fast validator.  Compiling
#: costs 0.17-0.28 s of CPU and jsonschema about 1 ms a 10 KB document, so the compiled one pays off only
#: after a hundred or more: a command that validates a few (a hook's drain, one file's versions, a watch's
#: next snapshot) never compiles it, and a long ingest or a server does after this many.
COMPILE_AFTER = 100
_validated = 0


def _fast_valid(doc: Any) -> bool:
    """True when the compiled validator finds ``doc`` valid (False: ask jsonschema, which has the last word)."""
    global _validated
    if _validated < COMPILE_AFTER:
        _validated += 1  # unlocked: a race between threads only moves when the compiling happens
        return False
    import fastjsonschema

    fast = _fast()
    if fast is None:
        return False
    try:
        fast(doc)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def validate_document(doc: Any) -> list[Finding]:
    """Findings for every way ``doc`` breaks the schema; ``[]`` when it is valid."""
    if _fast_valid(doc):
        return []
    findings: list[Finding] = []
    for error in sorted(validator().iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), str(e.validator))):
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
