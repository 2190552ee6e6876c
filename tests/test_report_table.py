"""The text table streamed (``report.table_stream``): ``table_text``'s lines from rows read twice, never held."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.report import table_stream, table_text

COLUMNS = ("stream", "title", "events", "findings", "wait_s")
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)  # controls, bidi marks and wide characters too


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({
    "stream": _TEXT, "title": st.none() | _TEXT, "events": st.integers(-10**12, 10**12) | st.booleans(),
    "findings": st.none() | st.integers(0, 10**6) | _TEXT, "wait_s": st.none() | _TEXT}), max_size=8),
    max_width=st.integers(1, 20))
def test_the_streamed_table_is_the_table_of_every_row(rows: list[dict[str, Any]], max_width: int) -> None:
    """Any rows of text, whole numbers and nothing: the streamed lines are ``table_text``'s (widths, cuts,
    escapes, right-aligned number columns), and no rows give no line."""
    reads: list[int] = []

    def again() -> Any:
        reads.append(1)
        return iter(rows)

    lines = list(table_stream(COLUMNS, again, max_width=max_width))
    if rows:
        assert "\n".join(lines) == table_text(COLUMNS, rows, max_width=max_width) and len(reads) == 2
    else:
        assert lines == [] and len(reads) == 1


@pytest.mark.parametrize("row", [{"stream": "a", "events": 1.5}, {"stream": "a", "wait_s": 30}])
def test_a_column_whose_format_depends_on_every_value_is_refused(row: dict[str, Any]) -> None:
    """A float (3 decimals, one or none by the column's values) and a duration column take a format decided over
    the whole column: table_stream says so rather than print another format than table_text would."""
    with pytest.raises(ValueError, match="format is the column's"):
        list(table_stream(COLUMNS, lambda: [row]))
