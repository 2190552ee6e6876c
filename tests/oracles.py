"""Independent oracles: what the tests compare against, computed without the code under test.

``documents.same`` is the product's strict JSON equality; a property that checks a replay with it
would pass if ``same`` were broken the same way the replay is.  These helpers are written out
here, in plain Python, from the definition: two JSON values are equal when they have the same
types (``bool`` is not ``int`` is not ``float``), objects have the same members *in the same
order*, arrays the same items, and floats the same value and sign (``0.0`` is not ``-0.0``).
"""

from __future__ import annotations

import json
import math
from typing import Any


def exact(a: Any, b: Any) -> bool:
    """Strict JSON equality by structural recursion (no encoder, no ``documents``)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(exact(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(exact(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def canonical(doc: Any) -> str:
    """The stdlib's JSON text of ``doc``: key order kept (no sort_keys), ``1`` apart from ``1.0``."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False)


def assert_exact(got: Any, want: Any, *where: object) -> None:
    """``got`` is strictly ``want``; on failure the two canonical texts are shown side by side."""
    assert exact(got, want), (where, canonical(got)[:2000], canonical(want)[:2000])
