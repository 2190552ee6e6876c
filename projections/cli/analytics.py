"""CLI: ``evstore query``, ``evstore metrics`` and ``evstore export`` (analytics over DuckDB)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from eventstore.cli import cli, open_store
from eventstore.errors import EvstoreError

_analytics_dir = click.option("--analytics-dir", type=click.Path(file_okay=False), default=None,
                              envvar="EVSTORE_ANALYTICS_DIR",
                              help="Where the Parquet tables live (default: the store's own folder; see docs/metrics.md).")


@contextmanager
def _tables(store: Any, directory: str | None, no_refresh: bool, sql: str | None = None) -> Iterator[Any]:
    """The store's analytics tables as a DuckDB connection (caught up first unless ``no_refresh``; for
    the one query ``sql`` if given: :func:`projections.analytics.views.reads`)."""
    from projections.analytics import reading
    from projections.analytics.files import refresh_apart

    if not no_refresh:
        result = refresh_apart(store, directory)  # in a forked child where it can: pyarrow stays out of here
        if result.events:
            click.echo(f"analytics: {result.events} new events applied (checkpoint {result.position})", err=True)
    with reading(store, directory, fresh=False, sql=sql) as con:
        yield con


@cli.command("query")
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
@click.option("--no-refresh", is_flag=True, help="Query the tables as they are (skip catching up first).")
@_analytics_dir
@click.pass_context
def query_cmd(ctx: click.Context, sql: str, as_json: bool, as_csv: bool, no_refresh: bool,
              analytics_dir: str | None) -> None:
    """Run DuckDB SQL over the analytics views (runs, phases, review_findings, review_deltas, gates, ...)."""
    from projections.analytics import jsonable, query
    from projections.report import rows_csv, table_text

    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive.")
    with _tables(open_store(ctx), analytics_dir, no_refresh, sql) as con:
        columns, rows = query(con, sql)
    if as_json:
        click.echo(json.dumps([jsonable(dict(zip(columns, r, strict=True))) for r in rows], ensure_ascii=False))
    elif as_csv:
        click.echo(rows_csv(columns, [[jsonable(v) for v in r] for r in rows]), nl=False)
    elif columns:
        click.echo(table_text(columns, [dict(zip(columns, (jsonable(v) for v in r), strict=True)) for r in rows],
                              max_width=80))
        click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", err=True)


@cli.command("metrics")
@click.argument("task", required=False)
@click.option("--project", default=None, help="Only runs of this project.")
@click.option("--dialect", default=None, help="Only runs of this dialect.")
@click.option("--since", default=None, metavar="ISO", help="Only runs active since this date/time (UTC if no zone).")
@click.option("--writer", default=None, metavar="TOKEN[/MACHINE]",
              help="Only runs with events this token (from this machine) sent to a team server.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "html"]), default="table",
              show_default=True, help="Output format (html: one self-contained file with charts).")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write to this file instead of stdout.")
@click.option("--no-refresh", is_flag=True, help="Use the tables as they are (skip catching up first).")
@_analytics_dir
@click.pass_context
def metrics_cmd(ctx: click.Context, task: str | None, project: str | None, dialect: str | None, since: str | None,
                writer: str | None, fmt: str, out: str | None, no_refresh: bool, analytics_dir: str | None) -> None:
    """Cross-run metrics (reviewer acceptance, review deltas, gates, breaker trips, phases, ...),
    or with TASK the same for one run (its timeline, iterations and deltas)."""
    from projections.analytics import io_error, replacing
    from projections.metrics import Scope, rendered
    from projections.report import html_pieces, json_pieces, render, renderer_digest, table_pieces

    store = open_store(ctx, indexed=False)  # reads only: the runs index's code is not needed
    stream_id = None
    if task:
        from projections.replay import resolve

        stream_id = resolve(store, task)

    def refreshed(result: Any) -> None:
        click.echo(f"analytics: {result.events} new events applied (checkpoint {result.position})", err=True)

    # Computed and rendered once per log position and kept (projections.metrics.rendered): on an unchanged
    # store this reads no event, opens no DuckDB connection and renders nothing (the kept text is written).
    # In pieces (JSON, HTML, the table): after new events, a section taken from the report before is its text there
    # too.  CSV's header is the union of every section's columns: written whole.
    pieces = {"json": lambda r, known: json_pieces(r.to_dict(), known), "html": html_pieces, "table": table_pieces}
    text = rendered(store, lambda r: render(r, fmt), f"{fmt}-{renderer_digest()}", analytics_dir,
                    stream_id=stream_id, scope=Scope(project=project, dialect=dialect, since=since, writer=writer),
                    fresh=not no_refresh, refreshed=refreshed, pieces=pieces.get(fmt))
    if out:
        try:
            with replacing(Path(out)) as tmp:
                tmp.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise io_error("write", out, exc) from exc
        click.echo(f"wrote {out}", err=True)
    else:
        if fmt == "html" and sys.stdout.isatty():
            raise EvstoreError("--format html writes a whole HTML file; pass --out FILE (or redirect stdout).")
        click.echo(text, nl=False)


@cli.command("export")
@click.option("--parquet", "parquet_dir", type=click.Path(file_okay=False), default=None,
              help="Write log.parquet and one Parquet file per analytics table/view into this directory.")
@click.option("--jsonl", "jsonl_file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write one JSON object per line to this file ('-': stdout): every event, or --table's rows.")
@click.option("--table", "table", default="log", show_default=True, metavar="NAME",
              help="With --jsonl: log (the events) or an analytics table or view (runs, phases, gates, ...).")
@_analytics_dir
@click.pass_context
def export_cmd(ctx: click.Context, parquet_dir: str | None, jsonl_file: str | None, table: str,
               analytics_dir: str | None) -> None:
    """Export the events and the analytics tables for other tools."""
    from projections.analytics import export_jsonl, export_parquet

    if not parquet_dir and not jsonl_file:
        raise click.UsageError("pass --parquet DIR and/or --jsonl FILE.")
    if table != "log" and not jsonl_file:
        raise click.UsageError("--table applies to --jsonl (--parquet writes every table).")
    store = open_store(ctx)
    if parquet_dir:
        counts = export_parquet(store, parquet_dir, analytics_dir)
        click.echo(f"wrote {len(counts)} Parquet files to {parquet_dir} ({counts['log']} events)", err=True)
    if jsonl_file:
        n = export_jsonl(store, sys.stdout if jsonl_file == "-" else jsonl_file, table=table, directory=analytics_dir)
        click.echo(f"wrote {n} {'events' if table == 'log' else f'{table} rows'} to {jsonl_file}", err=True)


@cli.command("usage")
@click.option("--by", "by", type=click.Choice(["session", "task", "model", "subagent", "day", "project", "writer",
                                               "token", "machine"]),
              default="session", show_default=True,
              help="One row per this (writer: the token/machine that sent the transcript to a team server).")
@click.option("--since", default=None, metavar="ISO", help="Only API messages at or after this date/time (UTC if no zone).")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False), default=None, envvar="EVSTORE_PRICES",
              help="A TOML price table overriding the package's for the models it names (docs/metrics.md).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: rows, total and the price table used.")
@click.option("--no-refresh", is_flag=True, help="Use the tables as they are (skip catching up first).")
@_analytics_dir
@click.pass_context
def usage_cmd(ctx: click.Context, by: str, since: str | None, prices_file: str | None, as_json: bool,
              no_refresh: bool, analytics_dir: str | None) -> None:
    """Tokens and cost of the agent sessions in the store, by session, task, model, subagent, day, project or
    writer (token and machine that sent them to a team server)."""
    from projections.prices import load_prices
    from projections.report import table_text
    from projections.usage import cost_text, usage_report

    prices = load_prices(prices_file)  # a bad file fails before the tables are caught up
    with _tables(open_store(ctx), analytics_dir, no_refresh) as con:
        report = usage_report(con, by=by, since=since, prices=prices)
    if as_json:
        click.echo(json.dumps(report.to_dict(), ensure_ascii=False))
        return
    # The cache writes split by lifetime (5-minute and 1-hour, priced apart) where the transcripts have
    # 1-hour writes; otherwise every write is a 5-minute one and the split says nothing more.
    split = bool(report.total.get("cache_creation_1h_tokens"))
    counts = ("sessions", "api_messages", "input_tokens", "output_tokens", "cache_creation_tokens",
              *(("cache_write_5m", "cache_write_1h") if split else ()), "cache_read_tokens")

    def cells(r: dict[str, Any]) -> dict[str, Any]:
        named = {**r, "cache_write_5m": r.get("cache_creation_5m_tokens"),
                 "cache_write_1h": r.get("cache_creation_1h_tokens")}
        return {c: named[c] for c in counts}

    shown = [{by: "(none)" if r["key"] is None else r["key"], **({"label": r["label"]} if r["label"] else {}),
              **cells(r), "cost": cost_text(r)} for r in report.rows]
    shown.append({by: "total", **cells(report.total), "cost": cost_text(report.total)})
    columns = [by, *(["label"] if any("label" in r for r in shown) else []), *counts, "cost"]
    click.echo(table_text(columns, shown, max_width=48))
    p = report.prices
    click.echo(f"prices: table {p.name}, as of {p.as_of or 'undated'} ({p.source})", err=True)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
