"""The JSON rendering of a report: ``json.dumps``' text, built without listing every piece at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from projections import report as rendering

_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
           | st.datetimes(timezones=st.just(UTC)) | st.decimals(allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(value=st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=40),
       batch=st.integers(1, 7))
def test_the_json_rendering_is_json_dumps_text_joined_a_batch_at_a_time(value: Any, batch: int) -> None:
    """``report.to_json`` (what ``metrics --format json`` prints and keeps) is ``json.dumps``' text with an indent
    of two, non-ASCII as is, other types as their ``str``, and a newline, whatever the batch its pieces are joined
    in."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rendering, "JSON_BATCH", batch)
        assert rendering.to_json(value) == json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"


_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text())
_KEYS = st.text(max_size=4) | st.sampled_from(["%", "%s", '"', "é", "\x00", "rows"])


@st.composite
def _reports(draw: st.DrawFn) -> Any:
    """Report-shaped values: sections whose rows are mostly objects of one set of keys, sometimes not."""
    sections = []
    for _ in range(draw(st.integers(0, 3))):
        keys = draw(st.lists(_KEYS, max_size=4, unique=True))
        column = {k: draw(st.sampled_from(["one", "mixed"])) for k in keys}
        kinds = {k: draw(st.sampled_from([st.none(), st.booleans(), st.integers(), st.floats(), st.text()]))
                 for k in keys}
        rows = [{k: draw(kinds[k] if column[k] == "one" else _SCALARS) for k in keys}
                for _ in range(draw(st.integers(0, 5)))]
        odd = draw(st.sampled_from(["none", "extra key", "other order", "nested", "date", "not a dict"]))
        if rows and odd == "extra key":
            rows[-1] = {**rows[-1], "zz": 1}
        elif rows and odd == "other order" and len(keys) > 1:
            rows[-1] = dict(reversed(list(rows[-1].items())))
        elif rows and odd == "nested" and keys:
            rows[0][keys[0]] = [1, {"a": None}]
        elif rows and odd == "date" and keys:
            rows[0][keys[0]] = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        elif odd == "not a dict":
            rows.append(draw(_SCALARS))
        section = {"name": draw(st.text(max_size=3)), "columns": keys, "rows": rows, "summary": {"n": len(rows)}}
        sections.append(section)
    return {"title": "evstore metrics", "scope": {"runs": draw(st.integers(0, 9))}, "sections": sections}


@settings(max_examples=300, deadline=None)
@given(value=_reports())
@example(value={"sections": [{"rows": [{"p50": 1.5}, {"p50": float("nan")}, {"p50": float("inf")},
                                       {"p50": -float("inf")}, {"p50": -0.0}]}]})  # a column of floats only
@example(value={"sections": [{"rows": [{"n": 1, "%s": "x"}, {"n": None, "%s": "%d"}]}], "title": "t"})
def test_a_reports_rows_written_a_column_at_a_time_are_json_dumps_text(value: Any) -> None:
    """A report's rows, written a column at a time where they are flat objects of the same keys (what
    ``metrics --format json`` prints and keeps), give ``json.dumps``' text byte for byte, whatever the
    values (NaN, infinities, -0.0, control characters, ``%`` in keys) and however many rows are encoded at a
    time, and rows that are not such fall back."""
    want = json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"
    for at_a_time in (1, 2, 10_000):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rendering, "JSON_ROWS", at_a_time)
            assert rendering.to_json(value) == want
    text, spans = rendering.json_pieces(value)
    if value["sections"]:  # each section's object is where the spans say, and a text known for it is used as it is
        data = text.encode("utf-8")
        assert [data[a:b].decode("utf-8") for a, b in spans] == [
            json.dumps(s, indent=2, ensure_ascii=False, default=str).replace("\n", "\n    ")
            for s in value["sections"]]
        assert rendering.json_pieces(value, {i: data[a:b].decode("utf-8") for i, (a, b) in enumerate(spans)
                                             if i % 2})[0] == want
        first = data[spans[0][0]:spans[0][1]].decode("utf-8")
        assert rendering.json_pieces(value, {0: '{"known": 1}'})[0] == want.replace(first, '{"known": 1}', 1)
    else:
        assert spans == []
