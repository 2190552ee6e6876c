"""The lens law for the generic dialect and the exact JSON Patch it rests on (Hypothesis)."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.events import decode_event, encode_event

keys = st.sampled_from(["a", "b", "a/b", "t~1", "~", "", "/", "ünï", "😀", "0", "-"]) | st.text(max_size=6)
scalars = (
    st.none() | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30,
)


@st.composite
def edited(draw: st.DrawFn, doc: object) -> object:
    """An edit of ``doc``: reorder keys, drop keys, shrink/reorder arrays, change types, nest."""
    kind = draw(st.integers(0, 6))
    if isinstance(doc, dict) and doc:
        items = list(doc.items())
        if kind == 0:
            items = draw(st.permutations(items))
        elif kind == 1:
            items = items[: draw(st.integers(0, len(items)))]
        elif kind == 2:
            k, v = items[draw(st.integers(0, len(items) - 1))]
            items = [(kk, draw(edited(vv)) if kk == k else vv) for kk, vv in items]
        elif kind == 3:
            return {**dict(items), draw(keys): draw(values)}
        return dict(items)
    if isinstance(doc, list) and doc:
        if kind == 0:
            return draw(st.permutations(doc))
        if kind == 1:
            return doc[: draw(st.integers(0, len(doc)))]
        if kind == 2:
            i = draw(st.integers(0, len(doc) - 1))
            return doc[:i] + [draw(edited(doc[i]))] + doc[i + 1:]
    if kind == 4 and isinstance(doc, int) and not isinstance(doc, bool):
        return float(doc)  # int -> float is a change
    if kind == 5:
        return [doc]  # deeper nesting
    return draw(values)


def deep(n: int) -> object:
    doc: object = 1
    for i in range(n):
        doc = {"k": doc, "i": i} if i % 2 else [doc]
    return doc


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_lens_law_generic(data: st.DataObject) -> None:
    dialect = get_dialect("generic")
    prev = data.draw(values | st.just(deep(40)))
    assume(prev is not None)  # None means "no document yet" (a new stream)
    nxt = prev
    for _ in range(data.draw(st.integers(1, 3))):
        nxt = data.draw(edited(nxt))
    events = dialect.observe(prev, nxt)
    got = dialect.fold(documents.copy(prev), events)
    assert documents.same(got, nxt)
    # The events survive storage (encode/decode) and still reproduce the document.
    stored = [decode_event(e.event_type(), 1, encode_event(e)) for e in events]
    assert documents.same(dialect.fold(documents.copy(prev), stored), nxt)
    if documents.same(prev, nxt):
        assert events == []


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_diff_apply_is_exact_and_json_serialisable(a: object, b: object) -> None:
    ops = documents.diff(a, b)
    json.dumps(ops)  # RFC 6902 operations are plain JSON
    assert documents.same(documents.apply(documents.copy(a), ops), b)
    assert documents.diff(b, b) == []


def test_same_is_strict() -> None:
    assert not documents.same(1, 1.0)
    assert not documents.same(True, 1)
    assert not documents.same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not documents.same({"a": None}, {})
    assert documents.same({"a": [1, {"b": 2.5}]}, {"a": [1, {"b": 2.5}]})


def test_pointer_escaping() -> None:
    ops = documents.diff({}, {"a/b": 1, "t~1": 2, "": 3})
    assert [op["path"] for op in ops] == ["/a~1b", "/t~01", "/"]
    assert documents.apply({}, ops) == {"a/b": 1, "t~1": 2, "": 3}
