"""How a report's sections read DuckDB: the quantiles taken from counts of values (``facts.quantiles_by_count``:
the ``histories`` section's write intervals) are ``quantile_cont``'s (the same values found, interpolated the
same way), and the rows fetched in batches are those of one fetch."""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from projections.analytics.facts import quantiles_by_count

_QS = (0.5, 0.9, 0.0, 1.0, 0.25)
_con: list[duckdb.DuckDBPyConnection] = []


def _connection() -> duckdb.DuckDBPyConnection:
    if not _con:
        _con.append(duckdb.connect())
    return _con[0]
_values = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                             st.one_of(st.none(), st.integers(-50, 5000).map(float),
                                       st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False))),
                   max_size=40)


@settings(max_examples=150, deadline=None)
@given(rows=_values)
@example(rows=[("a", 35.0), ("a", 42.0), ("a", 47.0), ("a", 49.0)])  # d = 0.7000000000000002 at q = 0.9
@example(rows=[("a", None), ("b", 1.0)])  # a group of no value: no row
def test_quantiles_by_count_are_quantile_cont(rows: list[tuple[str, float | None]]) -> None:
    con = _connection()  # one per process, the table made again from the rows (executemany: 5x the time)
    con.execute("CREATE OR REPLACE TABLE t AS SELECT unnest($1::VARCHAR[]) AS grp, unnest($2::DOUBLE[]) AS x",
                [[g for g, _x in rows], [x for _g, x in rows]])
    ours = {r[0]: r[1:] for r in con.execute(quantiles_by_count("SELECT grp, x FROM t", "grp", "x", _QS)).fetchall()}
    cols = ", ".join(f"quantile_cont(x, {q})" for q in _QS)
    theirs = {r[0]: r[1:] for r in con.execute(f"SELECT grp, {cols}, max(x) FROM t WHERE x IS NOT NULL "
                                               "GROUP BY grp").fetchall()}
    assert ours.keys() == theirs.keys()
    for grp, got in ours.items():
        want = theirs[grp]
        assert got[-1] == want[-1]  # the maximum
        values = sorted(x for g, x in rows if g == grp and x is not None)
        scale = max(abs(values[0]), abs(values[-1]), 1.0)
        for q, a, b in zip(_QS, got, want, strict=False):
            at = (len(values) - 1) * q
            if at == math.floor(at):  # an order statistic itself: exactly the same value
                assert a == b == values[int(at)], (q, a, b)
            else:  # interpolated: DuckDB's own arithmetic may round the last bit otherwise
                assert values[math.floor(at)] <= a <= values[math.ceil(at)], (q, a)
                assert abs(a - b) <= 4 * math.ulp(scale), (q, a, b)


def test_a_sections_rows_are_fetched_in_batches_each_text_held_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``metrics._rows``: the rows a plain ``fetchall`` gives (as ``_plain`` values), whatever the batch size;
    a text that repeats is one object (a report's rows repeat statuses, days and projects)."""
    from projections import metrics

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i, ['done', 'pending', NULL][i % 3 + 1] AS status, "
                "DATE '2026-01-01' + (i // 4)::INT AS day, i / 7 AS ratio, i % 2 = 0 AS even, "
                "(i / 3)::DECIMAL(10, 2) AS share, TIMESTAMPTZ '2026-01-01 00:00:00+00' + i * INTERVAL 1 HOUR AS at, "
                "CASE WHEN i % 5 = 0 THEN NULL ELSE i * 1.5 END AS maybe, 'nan'::DOUBLE AS nothing FROM range(25) r(i)")
    sql = "SELECT * FROM t ORDER BY i"
    cols = [d[0] for d in con.execute(sql).description]
    want = [dict(zip(cols, (metrics._plain(v) for v in r), strict=True)) for r in con.execute(sql).fetchall()]
    for size in (1, 7, 25, 10_000):
        monkeypatch.setattr(metrics, "FETCH_ROWS", size)
        got = metrics._rows(con, sql)
        assert got == want
        assert got[1]["status"] is got[4]["status"] == "pending" and got[0]["day"] is got[1]["day"]


def test_a_section_whose_when_finds_no_row_runs_nothing_else() -> None:
    """``MetricSection.when``: with no row, the section is shown without rows or summary and its SQL is not run
    (here it would raise); with a row, its SQL and summary run as without ``when``."""
    from eventstore.dialects.analytics import MetricSection
    from projections import metrics

    con = duckdb.connect()
    con.execute("CREATE TABLE sel AS SELECT 'a' AS stream_id")
    failing = MetricSection("s", "S", ("n",), "SELECT error('ran') AS n", "SELECT error('ran') AS n",
                            when="SELECT 1 FROM sel WHERE stream_id = 'b'")
    s = metrics.section(con, failing)
    assert (s.rows, s.summary) == ([], {})
    shown = MetricSection("s", "S", ("n",), "SELECT count(*) AS n FROM sel", "SELECT 2 AS m",
                          when="SELECT 1 FROM sel WHERE stream_id = 'a'")
    s = metrics.section(con, shown)
    assert (s.rows, s.summary) == ([{"n": 1}], {"m": 2})
