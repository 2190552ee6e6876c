"""Simulated runs of every dialect, ingested through the store and replayed at every version."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from eventstore import documents
from eventstore.config import seeds_path
from eventstore.dialects import available, get_dialect
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections.replay import replay

START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def simulated(dialect_name: str, seed: int, run_id: str) -> list[object]:
    d = get_dialect(dialect_name)
    return list(d.simulate(random.Random(seed), run_id=run_id, start=START))


@pytest.mark.parametrize("dialect_name", ["mapipe", "friday", "taskflow", "envelope"])
def test_every_version_replays_exactly(store: EventStore, dialect_name: str) -> None:
    if dialect_name not in available():
        pytest.fail(f"dialect {dialect_name} missing")
    d = get_dialect(dialect_name)
    ing = Ingestor(store, d)
    for seed in (1, 2):
        run_id = f"{dialect_name.upper()}-{seed}"
        expected: dict[int, object] = {}
        stream = None
        for snap in simulated(dialect_name, seed, run_id):
            r = ing.ingest(snap)  # type: ignore[arg-type]
            stream = r.stream
            if snap.doc is not None:  # type: ignore[attr-defined]
                expected[r.version] = documents.copy(snap.doc)  # type: ignore[attr-defined]
        assert stream is not None and expected
        for version, doc in expected.items():
            got = replay(store, stream, upto_version=version, use_cache=False).doc
            assert documents.same(got, doc), (stream, version)
        # domain events, not just document patches, explain the run
        types = {e.type for e in store.read_stream(stream)}
        assert any(not t.startswith("document.") for t in types), types


def test_mapipe_versions_are_schema_valid(store: EventStore) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = seeds_path() / "agent-state.schema.json"
    if not path.is_file():
        pytest.skip(f"schema not found at {path} (set EVSTORE_SEEDS)")
    validator = jsonschema.Draft202012Validator(json.loads(path.read_text()))
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
