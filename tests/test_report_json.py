"""The JSON rendering of a report: ``json.dumps``' text, built without listing every piece at once."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import pytest
from hypothesis import given, settings
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
