"""The OpenAPI 3.1 description of the JSON API (served at ``/openapi.json``).

Hand-written: the endpoints take query strings and free-form JSON documents, so a schema
generator from docstrings (Starlette's SchemaGenerator needs YAML in every docstring) would add
a dependency without describing more.  ``tests/test_serve.py`` checks every ``/api`` route is here.
"""

from __future__ import annotations

from typing import Any

_STREAM = {"name": "stream_id", "in": "path", "required": True, "schema": {"type": "string"},
           "description": "A stream id (or a task id naming exactly one stream)."}
_ERROR = {"description": "Error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _q(name: str, kind: str, description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": {"type": kind}, "description": description}


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_RUN_FILTERS = [_q("dialect", "string", "Only runs of this dialect."), _q("project", "string", "Only this project."),
                _q("status", "string", "Only runs with this status."),
                _q("since", "string", "Only runs active since this ISO date/time (UTC if no zone)."),
                _q("q", "string", "Text search in stream id, task id, title and project."),
                _q("page", "integer", "Page number (1-based)."), _q("size", "integer", "Runs per page (1..500).")]


def _hook(operation: dict[str, Any]) -> dict[str, Any]:
    """A dialect's http hook operation (``Dialect.http_hook_openapi``) with the server's security
    and error responses."""
    responses = {**operation.get("responses", {})}
    if "400" in responses:
        responses["400"] = {**_ERROR, **responses["400"]}
    responses.update({"401": _ERROR, "403": _ERROR, "413": {**_ERROR, "description": "Body over the size limit"},
                      "503": {**_ERROR, "description": "The store could not record it; retry"}})
    return {**operation, "security": [{"bearer": []}], "responses": responses}


def spec() -> dict[str, Any]:
    from projections.serve.app import hook_dialects

    ref = "#/components/schemas/"
    return {
        "openapi": "3.1.0",
        "info": {"title": "evstore", "version": "1",
                 "description": "Runs, events, states and diffs of an evstore; writes need a Bearer token."},
        "paths": {
            "/api/runs": {"get": {"summary": "The runs index (`evstore runs --json` rows), newest first, paginated.",
                                  "parameters": _RUN_FILTERS,
                                  "responses": {"200": _ok({"$ref": ref + "RunsPage"}), "400": _ERROR}}},
            "/api/runs/{stream_id}/events": {"get": {
                "summary": "The run's events (`evstore log --json` lines).",
                "parameters": [_STREAM, _q("after", "integer", "Only events after this version."),
                               _q("limit", "integer", "At most this many events.")],
                "responses": {"200": _ok({"type": "array", "items": {"$ref": ref + "Event"}}), "404": _ERROR}}},
            "/api/runs/{stream_id}/state": {"get": {
                "summary": "The state document at a version (`evstore replay --json`).",
                "parameters": [_STREAM, _q("version", "integer", "Default: the latest."),
                               _q("fresh", "integer", "1: fold every event, not from the replay cache.")],
                "responses": {"200": _ok({"$ref": ref + "State"}), "400": _ERROR, "404": _ERROR}}},
            "/api/runs/{stream_id}/diff": {"get": {
                "summary": "RFC 6902 JSON Patch between two versions (`evstore replay --diff V1 V2`).",
                "parameters": [_STREAM, _q("from", "integer", "From version.", True),
                               _q("to", "integer", "To version.", True)],
                "responses": {"200": _ok({"type": "array", "items": {"type": "object"}}), "400": _ERROR,
                              "404": _ERROR}}},
            "/api/runs/{stream_id}/live": {"get": {
                "summary": "Server-sent events: one `append` event (a timeline row) per new event.",
                "parameters": [_STREAM, _q("after", "integer", "Start after this version (or Last-Event-ID).")],
                "responses": {"200": {"description": "text/event-stream",
                                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}}}},
            "/api/metrics": {"get": {
                "summary": "The cross-run report (`evstore metrics --format json`), or one run's with `run`.",
                "parameters": [_q("project", "string", "Only this project."),
                               _q("dialect", "string", "Only this dialect."),
                               _q("since", "string", "Only runs active since this ISO time."),
                               _q("writer", "string", "Only the runs TOKEN (any machine) or TOKEN/MACHINE "
                                                      "sent an event to (`evstore metrics --writer`)."),
                               _q("run", "string", "One run's report (`evstore metrics TASK`).")],
                "responses": {"200": _ok({"type": "object"}), "400": _ERROR}}},
            "/api/search": {"get": {
                "summary": "Full-text search (`evstore search --json`): hits newest first, each with stream, version, "
                           "transcript line, time, type, kind and a snippet with its highlighted spans.",
                "parameters": [_q("q", "string", 'Words (all must occur), "phrases", prefix*.'),
                               _q("dialect", "string", "Only this dialect."),
                               _q("stream", "string", "Only this stream (and its subagent streams)."),
                               _q("type", "string", "Only this event type, or a prefix ending in '.'."),
                               _q("since", "string", "Only events at or after this ISO time."),
                               _q("limit", "integer", "At most this many hits (default 50).")],
                "responses": {"200": _ok({"type": "object"}), "400": _ERROR}}},
            "/api/integrity": {"get": {
                "summary": "The last full verify this server ran, the configured seal, streams' status.",
                "parameters": [_q("page", "integer", "Page of streams (200 per page).")],
                "responses": {"200": _ok({"type": "object"})}}},
            "/api/coverage": {"get": {
                "summary": "What the store has seen of each source (the objects of `evstore coverage --json`, in a list); a source gone "
                           "is noticed, once, when first seen gone.",
                "responses": {"200": _ok({"type": "array", "items": {"type": "object"}})}}},
            "/api/checkpoint": {"get": {
                "summary": "The latest checkpoint `evstore checkpoint` recorded: a C2SP tlog-checkpoint signed note "
                           "(text/plain), with the witnesses' cosignatures.",
                "responses": {"200": {"description": "The signed note",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              "404": _ERROR}}},
            "/api/proofs/inclusion": {"get": {
                "summary": "An event's RFC 9162 inclusion proof in the latest checkpoint (the JSON `evstore prove` "
                           "prints; `evstore verify-proof` checks it).",
                "parameters": [_q("stream", "string", "The run's stream id (with version)."),
                               _q("version", "integer", "The event's version in the stream."),
                               _q("event_id", "string", "Or the event's id.")],
                "responses": {"200": _ok({"type": "object"}), "400": _ERROR, "404": _ERROR,
                              "409": _ERROR}}},
            "/api/proofs/consistency": {"get": {
                "summary": "The RFC 9162 consistency proof between two recorded checkpoints (by tree size).",
                "parameters": [_q("old", "integer", "The older checkpoint's tree size."),
                               _q("new", "integer", "The newer one's (default: the latest).")],
                "responses": {"200": _ok({"type": "object"}), "400": _ERROR, "404": _ERROR,
                              "409": _ERROR}}},
            "/api/verify": {"post": {
                "summary": "Run a full verify (`evstore verify --json`); token holders only.",
                "security": [{"bearer": []}],
                "responses": {"200": _ok({"$ref": ref + "VerifyReport"}),
                              "409": _ok({"$ref": ref + "VerifyReport"}, "Integrity failures"),
                              "401": _ERROR, "403": _ERROR}}},
            "/api/streams/{stream_id}/events": {"post": {
                "summary": "Append events atomically (`evstore append --json`); token holders only.",
                "security": [{"bearer": []}],
                "parameters": [{**_STREAM, "description": "The stream id."}],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": {"$ref": ref + "AppendRequest"}}}},
                "responses": {"201": _ok({"$ref": ref + "AppendResult"}, "Appended"),
                              "200": _ok({"$ref": ref + "AppendResult"}, "Already recorded (same event ids)"),
                              "400": _ERROR, "401": _ERROR, "403": _ERROR,
                              "409": {**_ERROR, "description": "Version conflict or reused event id"},
                              "413": {**_ERROR, "description": "Body or one event over the size limits"}}}},
            **{f"/hooks/{d.http_hook}": {"post": _hook(d.http_hook_openapi)} for d in hook_dialects()},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "properties": {
                    "error": {"type": "string"}, "status": {"type": "integer"},
                    "stream_version": {"type": "integer", "description": "On a version conflict: the stream's version."}}},
                "Run": {"type": "object", "properties": {k: {"type": ["string", "null"]} for k in (
                    "stream_id", "dialect", "project", "task_id", "title", "status", "phase", "started_at",
                    "last_event_at")} | {"events": {"type": "integer"}, "findings": {"type": ["integer", "null"]}}},
                "RunsPage": {"type": "object", "properties": {
                    "runs": {"type": "array", "items": {"$ref": ref + "Run"}}, "total": {"type": "integer"},
                    "page": {"type": "integer"}, "pages": {"type": "integer"}, "size": {"type": "integer"},
                    "usage": {"type": "object", "description": "Per stream on this page with agent sessions: "
                              "tokens and cost_usd (null: no price) of its sessions (`evstore usage`)."}}},
                "Event": {"type": "object", "properties": {
                    "position": {"type": "integer"}, "stream_id": {"type": "string"}, "version": {"type": "integer"},
                    "event_id": {"type": "string"}, "type": {"type": "string"},
                    "schema_version": {"type": "integer"}, "data": {"type": "object"}, "meta": {"type": "object"},
                    "occurred_at": {"type": ["string", "null"]}, "recorded_at": {"type": "string"},
                    "prev_hash": {"type": "string"}, "hash": {"type": "string"}}},
                "State": {"type": "object", "properties": {
                    "stream": {"type": "string"}, "dialect": {"type": "string"}, "version": {"type": "integer"},
                    "stream_version": {"type": "integer"}, "doc": {},
                    "cached_from": {"type": ["integer", "null"], "description": "The replay-cache row the fold "
                                    "started from (null: every event was folded; ?fresh=1 forces that)."}}},
                "NewEvent": {"type": "object", "required": ["type"], "additionalProperties": False, "properties": {
                    "type": {"type": "string"}, "data": {"type": "object"}, "meta": {"type": "object"},
                    "event_id": {"type": "string", "format": "uuid"}, "occurred_at": {"type": "string"},
                    "schema_version": {"type": "integer"}}},
                "AppendRequest": {"type": "object", "required": ["events"], "additionalProperties": False,
                                  "properties": {
                                      "events": {"type": "array", "minItems": 1, "items": {"$ref": ref + "NewEvent"}},
                                      "expected_version": {"oneOf": [{"type": "integer", "minimum": 0},
                                                                     {"enum": ["any", "no-stream", "no stream"]}]}}},
                "AppendResult": {"type": "object", "properties": {
                    "stream": {"type": "string"}, "version": {"type": "integer"},
                    "positions": {"type": "array", "items": {"type": "integer"}}, "duplicate": {"type": "boolean"}}},
                "VerifyReport": {"type": "object", "properties": {
                    "ok": {"type": "boolean"}, "streams": {"type": "integer"}, "events": {"type": "integer"},
                    "failures": {"type": "array", "items": {"type": "object"}},
                    "seal": {"type": ["object", "null"]}}},
            },
        },
    }
