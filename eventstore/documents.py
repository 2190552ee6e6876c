"""Exact JSON documents: strict equality, cheap deep copies and RFC 6902 patches.

Why hand-written rather than python-json-patch: its ``make_patch`` compares with ``==``
(so ``1 == 1.0 == True``) and ignores object key order, and both are part of a document's
identity here (the lens law demands deep equality *including* key order and int/float).

Key order: adding a member appends it at the end of the object; ``move`` with
``from == path`` therefore moves a member to the end.  :func:`diff` uses that to express
reordering, so ``apply(a, diff(a, b))`` is strictly equal to ``b`` for any JSON values.

Example::

    >>> ops = diff({"a": 1, "b": [1, 2]}, {"b": [2], "a": 1.0})
    >>> same(apply({"a": 1, "b": [1, 2]}, ops), {"b": [2], "a": 1.0})
    True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import msgspec

from eventstore.errors import InvalidEvent

JSON = Any
_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def copy(doc: JSON) -> JSON:
    """A deep copy of a JSON value (msgspec round trip: keeps key order, int vs float)."""
    if doc is None or isinstance(doc, (str, int, float)):
        return doc
    return _dec.decode(_enc.encode(doc))


_owned: contextvars.ContextVar[bool] = contextvars.ContextVar("evstore_owned_events", default=False)


def take(value: JSON) -> JSON:
    """An event payload to place into a document: a copy, unless the caller owns the events.

    ``evolve`` must not let a document share structure with an event it may later encode
    (ingest folds events before appending them).  Replay decodes fresh events that nothing
    else holds, so inside :func:`owned_events` the payload is used as is (2x faster replay).
    """
    return value if _owned.get() else copy(value)


@contextlib.contextmanager
def owned_events() -> Iterator[None]:
    """Within this block, events folded by ``evolve`` are the caller's to give away."""
    token = _owned.set(True)
    try:
        yield
    finally:
        _owned.reset(token)


def same(a: JSON, b: JSON) -> bool:
    """Strict JSON equality: same types (int is not float is not bool), same key order.

    Compares canonical encodings: msgspec keeps key order, writes ``1`` and ``1.0``
    differently, ``true`` apart from ``1`` and floats in shortest round-trip form, so two
    JSON values are strictly equal exactly when their encodings are (and it runs in C).
    """
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict or ta is list:
        return bool(_enc.encode(a) == _enc.encode(b))
    if ta is float:
        return repr(a) == repr(b)
    return bool(a == b)


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(t)) for t in tokens)


def parse_pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise InvalidEvent(f'JSON Pointer "{path}" must start with "/".')
    return [unescape(t) for t in path[1:].split("/")]


# ---------------------------------------------------------------- diff


def diff(a: JSON, b: JSON) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``a`` into ``b`` exactly (see module docstring)."""
    ops: list[dict[str, Any]] = []
    _diff(a, b, "", ops)
    return ops


def _diff(a: JSON, b: JSON, path: str, ops: list[dict[str, Any]]) -> None:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is dict or ta is list) and same(a, b):
        return  # one C-speed comparison instead of a walk of an unchanged subtree
    if ta is dict and tb is dict:
        _diff_object(a, b, path, ops)
    elif ta is list and tb is list:
        _diff_array(a, b, path, ops)
    elif not same(a, b):
        ops.append({"op": "replace", "path": path, "value": copy(b)})


def _diff_object(a: dict[str, Any], b: dict[str, Any], path: str, ops: list[dict[str, Any]]) -> None:
    for key in a:
        if key not in b:
            ops.append({"op": "remove", "path": path + "/" + escape(key)})
    remaining = [key for key in a if key in b]
    bkeys = list(b)
    # Longest prefix of b's order that the kept members of a already have, in order;
    # members of a after it are moved to the end (in b's order), new members appended.
    k = 0
    while k < len(bkeys) and k < len(remaining) and remaining[k] == bkeys[k]:
        k += 1
    in_place = set(bkeys[:k])
    for key in bkeys[:k]:
        _diff(a[key], b[key], path + "/" + escape(key), ops)
    for key in bkeys[k:]:
        p = path + "/" + escape(key)
        if key in a:
            if key not in in_place:
                ops.append({"op": "move", "from": p, "path": p})
            _diff(a[key], b[key], p, ops)
        else:
            ops.append({"op": "add", "path": p, "value": copy(b[key])})


def _diff_array(a: list[Any], b: list[Any], path: str, ops: list[dict[str, Any]]) -> None:
    n, m = len(a), len(b)
    pre = 0
    while pre < n and pre < m and same(a[pre], b[pre]):
        pre += 1
    suf = 0
    while suf < n - pre and suf < m - pre and same(a[n - 1 - suf], b[m - 1 - suf]):
        suf += 1
    mid_a, mid_b = n - pre - suf, m - pre - suf
    common = min(mid_a, mid_b)
    for i in range(pre, pre + common):
        _diff(a[i], b[i], f"{path}/{i}", ops)
    if mid_a > mid_b:
        for i in range(pre + mid_a - 1, pre + common - 1, -1):
            ops.append({"op": "remove", "path": f"{path}/{i}"})
    else:
        for i in range(pre + common, pre + mid_b):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": copy(b[i])})


# ---------------------------------------------------------------- apply


def apply(doc: JSON, ops: list[dict[str, Any]]) -> JSON:
    """Apply RFC 6902 ``ops`` to ``doc`` **in place** where possible; returns the result."""
    for index, op in enumerate(ops):
        try:
            doc = _apply_one(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise InvalidEvent(f"JSON Patch operation {index} ({op.get('op')} {op.get('path')!r}) "
                               f"does not apply: {exc!r}") from exc
    return doc


def _parent(doc: JSON, tokens: list[str]) -> JSON:
    node = doc
    for t in tokens:
        node = node[int(t)] if type(node) is list else node[t]
    return node


def _apply_one(doc: JSON, op: dict[str, Any]) -> JSON:
    kind = op["op"]
    tokens = parse_pointer(op["path"])
    if kind == "test":
        if not same(_parent(doc, tokens), op["value"]):
            raise ValueError("test failed")
        return doc
    if kind in ("move", "copy"):
        src_tokens = parse_pointer(op["from"])
        value = _parent(doc, src_tokens)
        if kind == "move":
            doc = _remove(doc, src_tokens)
        else:
            value = copy(value)
        return _add(doc, tokens, value)
    if kind == "remove":
        return _remove(doc, tokens)
    if kind == "add":
        return _add(doc, tokens, take(op["value"]))
    if kind == "replace":
        if not tokens:
            return take(op["value"])
        parent = _parent(doc, tokens[:-1])
        last = tokens[-1]
        if type(parent) is list:
            parent[int(last)] = take(op["value"])
        else:
            if last not in parent:
                raise KeyError(last)
            parent[last] = take(op["value"])
        return doc
    raise ValueError(f"unknown op {kind!r}")


def _remove(doc: JSON, tokens: list[str]) -> JSON:
    if not tokens:
        return None
    parent = _parent(doc, tokens[:-1])
    last = tokens[-1]
    if type(parent) is list:
        del parent[int(last)]
    else:
        del parent[last]
    return doc


def _add(doc: JSON, tokens: list[str], value: JSON) -> JSON:
    if not tokens:
        return value
    parent = _parent(doc, tokens[:-1])
    last = tokens[-1]
    if type(parent) is list:
        if last == "-":
            parent.append(value)
        else:
            i = int(last)
            if i < 0 or i > len(parent):
                raise IndexError(i)
            parent.insert(i, value)
    elif type(parent) is dict:
        parent.pop(last, None)  # re-adding moves the member to the end
        parent[last] = value
    else:
        raise TypeError(f"cannot add into {type(parent).__name__}")
    return doc
