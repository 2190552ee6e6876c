"""Ingest does each thing once (issue 13 item 6): per ingested version one check of the lens law,
per event at most one ``apply`` (one ``evolve``) and one ``encode_event``, and no ``decode_event``
of what was just encoded, the runs index (an inline projection) included.

Counted around the real functions while every registered snapshot dialect ingests a simulated
history (the dialect contract's, rendered to bytes as an orchestrator writes them) into a store
that keeps the runs index inline, as the CLI's does; then the guarantees are checked as usual:
exact replay, the runs row describing the last document, the findings counted.  Before this
budget, 39 mapipe versions (44 events) cost 129 applies, 185 encodes and 95 decodes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import assert_exact
from test_dialect_contract import SNAPSHOT, history, render

from eventstore import events as events_module
from eventstore import ingest as ingest_module
from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import Dialect, DocumentPatched, Snapshot, parse_json_document
from eventstore.events import Event, round_trips
from eventstore.ingest import Ingestor
from eventstore.store import NewEvent
from projections.replay import replay
from projections.runs import IndexedEventStore, list_runs

#: The dialect's methods counted (``observe`` is not patched: replacing it changes which path runs).
METHODS = ("apply", "evolve", "check_lens_law")
FUNCTIONS = ("encode_event", "decode_event")


def count_calls(monkeypatch: pytest.MonkeyPatch, dialect: type[Dialect]) -> Counter[str]:
    """Count calls of :data:`METHODS` on ``dialect`` and of :data:`FUNCTIONS` wherever a module of
    evstore holds them (each importer has its own reference), around the real functions."""
    counts: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name in METHODS:
        monkeypatch.setattr(dialect, name, counting(name, getattr(dialect, name)))
    originals = {name: getattr(events_module, name) for name in FUNCTIONS}
    holders = [m for m in list(sys.modules.values())
               if getattr(m, "__name__", "").partition(".")[0] in ("eventstore", "projections")]
    for module in holders:
        for name, fn in originals.items():
            if getattr(module, name, None) is fn:
                monkeypatch.setattr(module, name, counting(name, fn))
    assert counts == Counter()
    return counts


def rendered_history(name: str) -> list[Snapshot]:
    """The contract's history of ``name``, each version as bytes in another writing style."""
    out = []
    for i, snap in enumerate(history(name, 3)):
        if snap.doc is not None:
            raw = render(snap.doc, i)
            snap = dataclasses.replace(snap, doc=parse_json_document(raw, f"v{i}"), raw=raw)
        out.append(snap)
    return out


@pytest.mark.parametrize("one_by_one", [False, True], ids=["ingest_all", "one_by_one"])
@pytest.mark.parametrize("name", SNAPSHOT)
def test_ingest_does_each_thing_once(name: str, one_by_one: bool, store_url: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    d = get_dialect(name)
    snaps = rendered_history(name)
    versions = sum(1 for s in snaps if s.doc is not None)
    with IndexedEventStore(store_url) as store:
        ing = Ingestor(store, d)
        counts = count_calls(monkeypatch, type(d))
        results = [ing.ingest(s) for s in snaps] if one_by_one else ing.ingest_all(snaps)
        monkeypatch.undo()
        recorded = list(store.iter_all())
        events = len(recorded)
        domain = sum(1 for e in recorded if not e.type.startswith("document."))
        assert events == sum(r.events for r in results) and versions >= 4 and events >= versions // 2, name
        assert counts["check_lens_law"] == versions, (name, counts)  # every version checked, once
        assert counts["apply"] <= domain, (name, counts, domain)
        assert counts["evolve"] <= events, (name, counts, events)
        assert counts["encode_event"] <= events, (name, counts, events)
        assert counts["decode_event"] == 0, (name, counts)
        if d.catalog:
            assert domain and counts["apply"], name  # the budget is not met by not applying at all

        # The guarantees, as usual: the last version replays exactly, and the runs index (fed the
        # documents ingest folded instead of folding the events again) describes it.
        last = [s for s in snaps if s.doc is not None][-1]
        stream = [r.stream for r in results if r.events][-1]
        assert_exact(replay(store, stream, use_cache=False).doc, last.doc, name)
        row = next(r for r in list_runs(store) if r.stream_id == stream)
        info = d.describe(last.doc)
        assert (row.status, row.title, row.phase) == (info.status, info.title, info.phase), name
        assert row.events == store.stream_version(stream)
        closing = [e for e in store.read_stream(stream) if "source" in e.metadata][-1]
        assert row.findings == len(closing.metadata.get("findings", []))


def test_the_runs_index_copies_a_document_it_was_given_before_changing_it(store_url: str) -> None:
    """The runs index keeps the document ingest gave it; an append folded into it later must not
    change the ingest's own copy (the previous document of its next snapshot)."""
    with IndexedEventStore(store_url) as store:
        ing = Ingestor(store, get_dialect("generic"))
        ing.ingest(Snapshot(doc={"taskId": "ONCE-1", "n": 0}))
        patch = DocumentPatched(ops=[{"op": "replace", "path": "/n", "value": 5}])
        store.append("ONCE-1", [NewEvent(None, patch)], expected_version=1, dialect="generic")
        assert ing._docs["ONCE-1"] == (1, {"taskId": "ONCE-1", "n": 0})
        assert replay(store, "ONCE-1", use_cache=False).doc == {"taskId": "ONCE-1", "n": 5}


# ------------------------------------------------------------------ round_trips against the real thing

CATALOG = sorted({cls for n in available() for cls in get_dialect(n).catalog}, key=lambda c: c.event_type())
VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3),
                   st.lists(st.one_of(st.integers(), st.text(max_size=2)), max_size=2),
                   st.dictionaries(st.text(max_size=2), st.one_of(st.none(), st.integers(), st.floats(allow_nan=False)),
                                   max_size=2),
                   st.just(msgspec.UNSET))


def stored_and_read_back_exactly(event: Event) -> bool:
    """The oracle: encode, decode, encode again, and compare the bytes."""
    try:
        data = events_module.encode_event(event)
        back = events_module.decode_event(event.event_type(), type(event).schema_version, data)
        return events_module.encode_event(back) == data
    except Exception:  # noqa: BLE001 - not storable, or not decodable: it does not come back
        return False


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_trips_agrees_with_encoding_and_decoding(data: st.DataObject) -> None:
    """round_trips decides from the declared types what the store's encode/decode would do (the
    mapipe lens asks it of each event it derives, instead of encoding and decoding it)."""
    cls = data.draw(st.sampled_from(CATALOG))
    values = {f: data.draw(VALUES, label=f) for f in cls.__struct_fields__ if f != "type"}
    try:
        event = cls(**values)
    except TypeError:
        return
    assert round_trips(event) == stored_and_read_back_exactly(event), (cls.__name__, values)


# ------------------------------------------------------------------ formats tried once each, where they can match

TEXT = st.text(alphabet=st.sampled_from("ab/é\u2028日\\\"\t"), max_size=4)
DOCS = st.dictionaries(TEXT, st.one_of(TEXT, st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                                       st.lists(TEXT, max_size=2)), max_size=3)


@settings(max_examples=200, deadline=None)
@given(doc=DOCS, index=st.integers(min_value=0, max_value=len(ingest_module._FORMATS) - 1),
       newline=st.sampled_from(["", "\n", "\r\n"]))
def test_detect_format_finds_what_trying_every_format_finds(doc: dict[str, Any], index: int, newline: str) -> None:
    """detect_format skips formats that cannot write the bytes (escaped output is ASCII; unescaped
    output of non-ASCII text is not); the format it finds is still the first that reproduces them."""
    raw = ingest_module.render(doc, {**ingest_module._FORMATS[index], "newline": newline})
    every = [{**f, "newline": newline} for f in ingest_module._FORMATS]
    first = next(f for f in every if ingest_module.render(doc, f) == raw)
    assert ingest_module.detect_format(doc, raw) == first


@pytest.mark.parametrize(("raw", "fmt"), [
    # msgspec's layouts write exponents without "+" or a leading zero ("1e16", "1.5e-7"): json.dumps cannot
    (msgspec.json.format(msgspec.json.encode({"a": 1e16, "b": 1.5e-7}), indent=2) + b"\n",
     {"renderer": "msgspec", "indent": 2, "newline": "\n"}),
    (msgspec.json.format(msgspec.json.encode({"a": 1e16, "b": 1.5e-7}), indent=4),
     {"renderer": "msgspec", "indent": 4, "newline": ""}),
    (json.dumps({"a": 1e16, "b": 1.5e-7}, indent=2).encode() + b"\r\n",
     {"indent": 2, "ensure_ascii": False, "newline": "\r\n"}),
    (json.dumps({"a": "é", "b": 1e16}).encode(), {"indent": None, "ensure_ascii": True, "newline": ""}),
])
def test_a_file_in_a_known_layout_is_kept_as_its_format_not_its_bytes(raw: bytes, fmt: dict[str, Any]) -> None:
    """Bytes written by msgspec or json.dumps (not by ``render``) are recorded as the layout that writes
    them, and ``replay --raw`` gets them back from it (mutation testing: a ``render`` that never took its
    msgspec branch, or lost its indent, survived: the property above builds its bytes with ``render``)."""
    doc = json.loads(raw)
    rec = ingest_module.raw_record(doc, raw)
    assert rec is not None and rec["format"] == fmt and "raw_zlib_b64" not in rec
    assert ingest_module.raw_bytes(doc, rec) == raw


def _written(doc: Any, fmt: dict[str, Any]) -> bytes:
    """What a tool writing with ``fmt``'s layout puts on disk: msgspec or json.dumps called here, not ``render``."""
    if fmt.get("renderer") == "msgspec":
        return msgspec.json.format(msgspec.json.encode(doc), indent=fmt["indent"]) + fmt["newline"].encode()
    seps = (",", ":") if fmt.get("compact") else None
    return (json.dumps(doc, indent=fmt["indent"], ensure_ascii=fmt["ensure_ascii"], separators=seps)
            + fmt["newline"]).encode()


@pytest.mark.parametrize("newline", ["", "\n", "\r\n"])
@pytest.mark.parametrize("index", range(len(ingest_module._FORMATS)))
def test_bytes_in_each_known_layout_are_recorded_as_it(index: int, newline: str) -> None:
    """For every layout ingest knows, bytes written by the library that writes them (an ASCII document
    and one with non-ASCII text, floats msgspec and json.dumps spell differently, nesting) are recorded
    as the first known layout that writes them, and come back from it; and ``render`` given a layout
    without a newline writes none."""
    every = [{**f, "newline": newline} for f in ingest_module._FORMATS]
    for doc in ({"a": [1, {"b": None}], "c": "x/y", "d": 1e16}, {"é": ["日", 1.5e-7], "n": {"x": [], "y": {}}}):
        raw = _written(doc, every[index])
        first = next(f for f in every if _written(doc, f) == raw)
        rec = ingest_module.raw_record(doc, raw)
        assert rec is not None and rec.get("format") == first, (doc, every[index])
        assert ingest_module.raw_bytes(doc, rec) == raw
        fmt = dict(ingest_module._FORMATS[index])
        assert ingest_module.render(doc, fmt) == _written(doc, {**fmt, "newline": ""})
