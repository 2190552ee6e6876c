"""The lens law for the generic dialect and the exact JSON Patch it rests on (Hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from oracles import assert_exact, canonical, exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.errors import InvalidEvent
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


# ---------------------------------------------------------------- RFC 6902 edges (each op, each refusal)


def test_apply_each_operation() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    ops = [
        {"op": "test", "path": "/a", "value": [1, 2]},
        {"op": "add", "path": "/a/0", "value": 0},  # insert before index 0
        {"op": "add", "path": "/a/-", "value": 3},  # append
        {"op": "add", "path": "/a/4", "value": 4},  # index == len: append
        {"op": "replace", "path": "/a/1", "value": 1.5},
        {"op": "remove", "path": "/a/2"},
        {"op": "copy", "from": "/b", "path": "/d"},
        {"op": "move", "from": "/b/c", "path": "/e"},
        {"op": "test", "path": "/b", "value": {}},  # moved, not copied
        {"op": "add", "path": "/b", "value": {"x": None}},  # re-adding moves the member to the end
    ]
    assert_exact(documents.apply(doc, ops), {"a": [0, 1.5, 3, 4], "d": {"c": 1}, "e": 1, "b": {"x": None}})
    assert_exact(documents.apply({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]), [1])
    assert documents.apply({"a": 1}, [{"op": "remove", "path": ""}]) is None
    assert_exact(documents.apply(None, [{"op": "add", "path": "", "value": {"z": 1}}]), {"z": 1})
    copied = documents.apply({"a": {"k": [1]}}, [{"op": "copy", "from": "/a", "path": "/b"}])
    copied["b"]["k"].append(2)  # a copy, not a shared reference
    assert_exact(copied, {"a": {"k": [1]}, "b": {"k": [1, 2]}})


@pytest.mark.parametrize(("doc", "op", "error"), [
    ({"a": 1}, {"op": "test", "path": "/a", "value": 1.0}, "ValueError('test failed')"),
    ({"a": 1}, {"op": "replace", "path": "/b", "value": 1}, "KeyError('b')"),
    ({"a": [1]}, {"op": "add", "path": "/a/2", "value": 1}, "IndexError(2)"),
    ({"a": [1]}, {"op": "add", "path": "/a/-1", "value": 1}, "IndexError(-1)"),
    ({"a": 1}, {"op": "add", "path": "/a/b", "value": 1}, "TypeError('cannot add into int')"),
    ({"a": 1}, {"op": "remove", "path": "/b"}, "KeyError('b')"),
    ({"a": [1]}, {"op": "remove", "path": "/a/1"}, "IndexError('list assignment index out of range')"),
    ({"a": 1}, {"op": "frob", "path": "/a"}, "ValueError(\"unknown op 'frob'\")"),
    ({"a": 1}, {"op": "move", "from": "/x", "path": "/a"}, "KeyError('x')"),
])
def test_apply_refusals_name_the_operation(doc: object, op: dict[str, object], error: str) -> None:
    before = json.loads(canonical(doc))
    with pytest.raises(InvalidEvent) as info:
        documents.apply(doc, [{"op": "test", "path": "", "value": before}, op])
    assert str(info.value) == f"JSON Patch operation 1 ({op['op']} {op['path']!r}) does not apply: {error}"


def test_pointers() -> None:
    assert documents.parse_pointer("") == []
    assert documents.parse_pointer("/") == [""]
    assert documents.parse_pointer("/a~1b/~01/~10") == ["a/b", "~1", "/0"]
    assert documents.pointer("a/b", "~", 3) == "/a~1b/~0/3"
    assert documents.pointer() == ""
    assert documents.escape("~/") == "~0~1" and documents.unescape("~0~1") == "~/"
    assert documents.unescape("~01") == "~1"  # ~1 is decoded first: "~01" is "~" then "1"
    with pytest.raises(InvalidEvent) as info:
        documents.parse_pointer("a/b")
    assert str(info.value) == 'JSON Pointer "a/b" must start with "/".'


def test_copy_and_take() -> None:
    doc = {"a": [1, {"b": 2.0}], "c": None}
    c = documents.copy(doc)
    assert c is not doc and c["a"] is not doc["a"] and c["a"][1] is not doc["a"][1]
    assert_exact(c, doc)
    for scalar in (None, "s", 1, 1.5, True):
        assert documents.copy(scalar) is scalar
    assert documents.take(doc) is not doc  # outside owned_events: a copy
    with documents.owned_events():
        assert documents.take(doc) is doc
    assert documents.take(doc) is not doc  # and back after the block


def test_diff_operations_are_minimal_for_simple_edits() -> None:
    """The exact operations, not only their effect: one member replaced, one appended, one removed,
    an array's tail grown and shrunk, keys moved to the end."""
    assert documents.diff({"a": 1, "b": 2}, {"a": 1, "b": 3}) == [{"op": "replace", "path": "/b", "value": 3}]
    assert documents.diff({"a": 1}, {"a": 1, "b": [2]}) == [{"op": "add", "path": "/b", "value": [2]}]
    assert documents.diff({"a": 1, "b": 2}, {"b": 2}) == [{"op": "remove", "path": "/a"}]
    assert documents.diff([1, 2], [1, 2, 3, 4]) == [{"op": "add", "path": "/2", "value": 3},
                                                    {"op": "add", "path": "/3", "value": 4}]
    assert documents.diff([1, 2, 3, 4], [1, 4]) == [{"op": "remove", "path": "/2"}, {"op": "remove", "path": "/1"}]
    assert documents.diff([1, 2, 3], [1, 9, 3]) == [{"op": "replace", "path": "/1", "value": 9}]
    # a repeated item is matched as the common prefix first, then never again as suffix
    assert documents.diff([1], [1, 1]) == [{"op": "add", "path": "/1", "value": 1}]
    assert documents.diff([1, 1], [1]) == [{"op": "remove", "path": "/1"}]
    assert documents.diff(["x", "y"], ["x", "y", "x", "y"]) == [{"op": "add", "path": "/2", "value": "x"},
                                                                {"op": "add", "path": "/3", "value": "y"}]
    # members after the longest kept prefix of b's order move to the end, in b's order
    assert documents.diff({"a": 1, "b": 2}, {"b": 2, "a": 1}) == [{"op": "move", "from": "/b", "path": "/b"},
                                                                 {"op": "move", "from": "/a", "path": "/a"}]
    assert documents.diff({"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3, "b": 2}) == [
        {"op": "move", "from": "/c", "path": "/c"}, {"op": "move", "from": "/b", "path": "/b"}]
    assert documents.diff({"a": {"x": 1}}, {"a": {"x": 2}}) == [{"op": "replace", "path": "/a/x", "value": 2}]
    assert documents.diff(1, 1.0) == [{"op": "replace", "path": "", "value": 1.0}]
