"""The lens law for the generic dialect and the exact JSON Patch it rests on (Hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from oracles import assert_exact, canonical, exact

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
    want = json.loads(canonical(nxt))  # the oracle: the stdlib's reading of nxt's JSON text
    events = dialect.observe(prev, nxt)
    got = dialect.fold(documents.copy(prev), events)
    assert_exact(got, want)
    # The events survive storage (encode/decode) and still reproduce the document.
    stored = [decode_event(e.event_type(), 1, encode_event(e)) for e in events]
    assert_exact(dialect.fold(documents.copy(prev), stored), want)
    if exact(prev, nxt):
        assert events == []
    else:
        assert events


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_diff_apply_is_exact_and_json_serialisable(a: object, b: object) -> None:
    ops = documents.diff(a, b)
    json.dumps(ops)  # RFC 6902 operations are plain JSON
    assert_exact(documents.apply(json.loads(canonical(a)), ops), b)
    assert documents.diff(b, b) == []
    assert (documents.diff(a, b) == []) is exact(a, b)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_same_agrees_with_the_oracle(data: st.DataObject) -> None:
    """``same`` says equal exactly when the structural oracle does, on values and on edits of them
    (reordered keys, int -> float, dropped members...), which mostly differ by one detail."""
    a = data.draw(values)
    b = data.draw(edited(a) | st.just(json.loads(canonical(a))))
    assert documents.same(a, b) is exact(a, b)
    assert documents.same(b, a) is exact(a, b)
    assert (canonical(a) == canonical(b)) is exact(a, b)  # a second oracle: the stdlib's text


STRICTLY_DIFFERENT = [
    (1, 1.0), (True, 1), (False, 0), (0.0, -0.0), (None, {}), ("1", 1),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ({"a": None}, {}),
    # int vs float and key order inside containers, at depth
    ({"a": 1}, {"a": 1.0}), ([1, 2], [1, 2.0]), ([True], [1]), ({"a": [0]}, {"a": [0.0]}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}), ([{"x": 1, "y": 2}], [{"y": 2, "x": 1}]),
    ({"a": [{"b": {"c": 1, "d": [1]}}]}, {"a": [{"b": {"c": 1, "d": [1.0]}}]}),
    ({"a": [{"b": {"c": 1, "d": 2}}]}, {"a": [{"b": {"d": 2, "c": 1}}]}),
    ([[[]]], [[{}]]), ([1, [2]], [1, [2, 2]]),
]


@pytest.mark.parametrize(("a", "b"), STRICTLY_DIFFERENT, ids=canonical)
def test_same_is_strict(a: object, b: object) -> None:
    assert not exact(a, b)  # the oracle agrees the pair differs
    assert not documents.same(a, b) and not documents.same(b, a)
    assert documents.same(a, json.loads(canonical(a))) and documents.same(b, json.loads(canonical(b)))
    # diff must not ignore what same ignores: the patch turns a into b exactly, both ways
    for x, y in ((a, b), (b, a)):
        ops = documents.diff(x, y)
        assert ops != []
        assert_exact(documents.apply(json.loads(canonical(x)), ops), y)


def test_same_accepts_equal_values_built_apart() -> None:
    doc = {"a": [1, {"b": 2.5, "c": [None, True, "x"]}], "": -0.0}
    assert documents.same(doc, json.loads(canonical(doc)))
    assert documents.diff(doc, json.loads(canonical(doc))) == []


def test_pointer_escaping() -> None:
    ops = documents.diff({}, {"a/b": 1, "t~1": 2, "": 3})
    assert [op["path"] for op in ops] == ["/a~1b", "/t~01", "/"]
    assert_exact(documents.apply({}, ops), {"a/b": 1, "t~1": 2, "": 3})
