"""Export: the log and every analytics table and view as Parquet files or JSON lines."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import msgspec

from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent
from projections.analytics.facts import arrow_types
from projections.analytics.files import io_error, replacing, sql_string
from projections.analytics.views import reading, table_names

if TYPE_CHECKING:
    import pyarrow as pa


@cache
def _event_schema() -> pa.Schema:
    """``log.parquet``'s columns (pyarrow imported when a log is exported, not with this module)."""
    import pyarrow as pa

    S, I = arrow_types()["VARCHAR"], arrow_types()["BIGINT"]  # noqa: E741, N806 - column-type shorthands
    return pa.schema([("position", I), ("stream_id", S), ("version", I), ("event_id", S), ("type", S),
                      ("schema_version", I), ("data", S), ("meta", S), ("occurred_at", S), ("recorded_at", S),
                      ("prev_hash", S), ("hash", S)])


def _event_batch(batch: Sequence[RecordedEvent]) -> pa.Table:
    from projections.analytics import columns

    cols: list[list[Any]] = [[] for _ in _event_schema()]
    for e in batch:
        for col, v in zip(cols, (e.position, e.stream_id, e.version, e.event_id, e.type, e.schema_version,
                                 e.data.decode(), e.meta.decode(), e.occurred_at, e.recorded_at, e.prev_hash.hex(),
                                 e.hash.hex()), strict=True):
            col.append(v)
    return columns.table(cols, _event_schema(), "log")


def export_parquet(store: EventStore, target: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None,
                   *, batch_size: int = 20_000) -> dict[str, int]:
    """Write ``log.parquet`` (every stored event, data/meta as JSON text) and one Parquet file per
    analytics table and view into ``target`` (created if missing); returns rows per file name.
    Each file is written to a temporary name and renamed when whole."""
    import pyarrow.parquet as pq

    out = Path(target)
    counts: dict[str, int] = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        with reading(store, directory) as con:
            with replacing(out / "log.parquet") as tmp, pq.ParquetWriter(tmp, _event_schema(),
                                                                         compression="zstd") as writer:
                n = 0
                batch: list[RecordedEvent] = []
                for e in store.iter_all(batch_size=batch_size):
                    batch.append(e)
                    if len(batch) >= batch_size:
                        writer.write_table(_event_batch(batch))
                        n += len(batch)
                        batch = []
                if batch:
                    writer.write_table(_event_batch(batch))
                    n += len(batch)
            counts["log"] = n
            for name in table_names():
                with replacing(out / f"{name}.parquet") as tmp:
                    copied = con.execute(f"COPY (SELECT * FROM {name}) TO {sql_string(str(tmp))} (FORMAT parquet, "
                                         "COMPRESSION zstd)")
                    counts[name] = int(copied.fetchall()[0][0])  # COPY returns the rows it wrote
    except (OSError, duckdb.IOException) as exc:
        raise io_error("export to", out, exc) from exc
    return counts


def export_jsonl(store: EventStore, target: str | os.PathLike[str] | Any, *, table: str = "log",
                 directory: str | os.PathLike[str] | None = None, batch_size: int = 20_000) -> int:
    """One JSON object per line; returns the count.  ``table`` "log" (the default) writes every
    stored event (``RecordedEvent.to_dict()``); an analytics table or view name writes its rows
    (refreshed first; values as :func:`jsonable` makes them, as ``evstore query --json``
    prints them), so every line of a file has one shape.

    ``target`` is a path (written to a temporary name, renamed when whole) or a text stream
    (``-`` on the CLI is stdout).
    """
    enc = msgspec.json.Encoder()
    if table != "log" and table not in table_names():
        raise EvstoreError(f'No analytics table "{table}"; choose log or one of: {", ".join(table_names())}.')

    def write(fh: Any) -> int:
        n = 0
        if table == "log":
            for e in store.iter_all(batch_size=batch_size):
                fh.write(enc.encode(e.to_dict()).decode() + "\n")
                n += 1
            return n
        with reading(store, directory) as con:
            cur = con.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            while rows := cur.fetchmany(batch_size):
                for row in rows:
                    fh.write(enc.encode(jsonable(dict(zip(cols, row, strict=True)))).decode() + "\n")
                n += len(rows)
        return n

    if hasattr(target, "write"):
        return write(target)
    path = Path(target)
    try:
        if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout, a FIFO): write as it is
            with open(path, "w", encoding="utf-8") as fh:
                return write(fh)
        with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            return write(fh)  # the file is closed (flushed) before it replaces the target
    except OSError as exc:
        raise io_error("write", path, exc) from exc


def jsonable(v: Any) -> Any:
    """A DuckDB value as JSON: times in ISO 8601, decimals as numbers, bytes as hex."""
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v
