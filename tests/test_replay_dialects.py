"""Simulated runs of every dialect, ingested through the store and replayed at every version."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from oracles import assert_exact

from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import Snapshot, parse_json_document
from eventstore.dialects.mapipe.validate import schema
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections.replay import replay, replay_raw

START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def simulated(dialect_name: str, seed: int, run_id: str) -> list[object]:
    d = get_dialect(dialect_name)
    return list(d.simulate(random.Random(seed), run_id=run_id, start=START))


DIALECTS = ["mapipe", "friday", "taskflow", "envelope"]


def as_file(snap: Snapshot, extra: dict[str, Any] | None = None) -> Snapshot:
    """``snap`` as if read from a file: its document written as JSON text (plus ``extra`` top-level
    members), then parsed back by the loader; ``raw`` keeps the bytes, the oracle for the replay."""
    if snap.doc is None:
        return snap
    raw = json.dumps({**snap.doc, **(extra or {})}, indent=2, ensure_ascii=False).encode()
    return dataclasses.replace(snap, doc=parse_json_document(raw, "simulated"), raw=raw)


def ingest_and_replay_every_version(store: EventStore, dialect_name: str, seed: int,
                                    extra: dict[str, Any] | None = None) -> tuple[str, Ingestor]:
    """Ingest a simulated run as files; every version replays to ``json.loads`` of its file, and
    ``replay --raw`` gives back the file's bytes."""
    if dialect_name not in available():
        pytest.fail(f"dialect {dialect_name} missing")
    ing = Ingestor(store, get_dialect(dialect_name))
    run_id = f"{dialect_name.upper()}-{seed}"
    source: dict[int, bytes] = {}
    stream = None
    for snap in simulated(dialect_name, seed, run_id):
        snap = as_file(snap, extra)  # type: ignore[arg-type]
        r = ing.ingest(snap)
        stream = r.stream
        if snap.raw is not None and r.events:
            source[r.version] = snap.raw
    assert stream is not None and source
    for version, raw in source.items():
        got = replay(store, stream, upto_version=version, use_cache=False).doc
        assert_exact(got, json.loads(raw), stream, version)
        assert replay_raw(store, stream, version, doc=got) == raw
    return stream, ing


@pytest.mark.parametrize("dialect_name", DIALECTS)
def test_every_version_replays_exactly(store: EventStore, dialect_name: str) -> None:
    for seed in (1, 2):
        stream, _ = ingest_and_replay_every_version(store, dialect_name, seed)
        # domain events, not just document patches, explain the run
        types = {e.type for e in store.read_stream(stream)}
        assert any(not t.startswith("document.") for t in types), types


UNKNOWN = {"x_unknown_extension": {"kept": [1, 2.0, True], "order": {"b": 1, "a": None}}}


@pytest.mark.parametrize("dialect_name", DIALECTS)
def test_unknown_top_level_key_is_ingested_and_replayed(store: EventStore, dialect_name: str) -> None:
    """A member the dialect's validator calls unknown is reported, and kept: through ingest (not
    only observe), every version replays with it, in place, with its exact types."""
    stream, _ = ingest_and_replay_every_version(store, dialect_name, 3, UNKNOWN)
    findings = [f for rec in store.read_stream(stream) if isinstance(rec.metadata, dict)
                for f in rec.metadata.get("findings", [])]
    assert any(f["path"] == "/x_unknown_extension" for f in findings), findings
    doc = replay(store, stream).doc
    assert list(doc)[-1] == "x_unknown_extension"


def test_mapipe_versions_are_schema_valid(store: EventStore) -> None:
    validator = Draft202012Validator(schema())
    ing = Ingestor(store, get_dialect("mapipe"))
    for snap in simulated("mapipe", 7, "PROJ-7"):
        ing.ingest(snap)  # type: ignore[arg-type]
    version = store.stream_version("PROJ-7")
    for v in range(1, version + 1):
        doc = replay(store, "PROJ-7", upto_version=v).doc
        errors = list(validator.iter_errors(doc))
        assert not errors, (v, errors[0].message)
    types = [e.type for e in store.read_stream("PROJ-7")]
    for needed in ("mapipe.review_iteration_recorded", "mapipe.gate_verdict_recorded", "mapipe.phase_completed"):
        assert needed in types
