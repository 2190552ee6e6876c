"""CLI: ``evstore runs``, ``evstore demo`` and ``evstore projections status|rebuild|run``."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from eventstore import config
from eventstore.cli import cli, interruptible, open_store


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _stdout_console() -> Any:
    from rich.console import Console

    # Tables are for people; when stdout is not a terminal (a pager, a file) do not squeeze them.
    probe = Console(file=sys.stdout)
    return Console(file=sys.stdout, width=probe.width if probe.is_terminal else 240)


@contextmanager
def progress_bar(label: str, *, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields ``update(done, total)``."""
    if not enabled:
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_stderr_console(), transient=False) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _open_indexed(ctx: click.Context, url: str | None = None) -> Any:
    from projections.runs import IndexedEventStore

    obj = ctx.find_root().obj
    return IndexedEventStore(url or obj.get("url"), synchronous=obj.get("synchronous"))


# ---------------------------------------------------------------- runs


def _screen_lines() -> int | None:
    """The terminal's height when stdout is one (``runs`` then shows one screen), else None."""
    return shutil.get_terminal_size((120, 24)).lines if sys.stdout.isatty() else None


@cli.command("runs")
@click.option("--dialect", default=None, help="Only runs of this dialect.")
@click.option("--project", default=None, help="Only runs of this project.")
@click.option("--status", default=None, help="Only runs with this status.")
@click.option("--since", default=None, metavar="ISO", help="Only runs active since this date/time (UTC if no zone).")
@click.option("--limit", type=click.IntRange(1, config.MAX_INT), default=None,
              help="At most this many runs (default: one screen on a terminal, else all).")
@click.option("--page", type=click.IntRange(1, config.MAX_INT), default=None,
              help="Page N, of --limit runs (default: one screen on a terminal, else 50).")
@click.option("--after", default=None, metavar="STREAM",
              help="Only the runs listed after STREAM (the last stream id of the page before).")
@click.option("--wide", is_flag=True, help="Every column (task id, start time, the agent sessions that wrote the "
              "run's state), nothing cut (default on a terminal: fit it; piped or redirected: --wide).")
@click.option("--json", "as_json", is_flag=True,
              help="NDJSON: one JSON object per run and line, streamed (every run unless --limit/--page).")
@click.pass_context
def runs_cmd(ctx: click.Context, dialect: str | None, project: str | None, status: str | None, since: str | None,
             limit: int | None, page: int | None, after: str | None, wide: bool, as_json: bool) -> None:
    """List runs (one per stream), newest activity first."""
    from projections.runs import iter_runs

    if page is not None and after is not None:
        raise click.UsageError("--page and --after are exclusive (--after continues after a stream id).")
    # Piped into another program (or a file), a cut title is a lost value: print every value whole.
    wide = wide or not sys.stdout.isatty()
    store = open_store(ctx)
    screen = _screen_lines() if not as_json else None
    size = limit or (max(screen - 5, 5) if screen else 50 if page else None)
    offset = (page - 1) * size if page is not None and size is not None else 0
    # Filters and paging run in the database; rows stream in batches (constant memory for --json).
    if as_json:
        for r in iter_runs(store, dialect=dialect, project=project, status=status, since=since, limit=size,
                           offset=offset, after=after, sessions=True):
            click.echo(json.dumps(r.to_dict(), ensure_ascii=False))
        return
    from projections.report import table_stream, table_text

    def when(value: str | None) -> str:
        return (value or "")[:16].replace("T", " ")  # to the minute, as people read it

    def cells(r: Any) -> dict[str, Any]:
        return {"stream": r.stream_id, "dialect": r.dialect or "", "project": r.project or "", "task": r.task_id or "",
                "title": r.title or "", "status": r.status or "", "phase": r.phase or "",
                "started": when(r.started_at), "last event": when(r.last_event_at), "events": r.events,
                "findings": r.findings, "sessions": ", ".join(r.sessions)}

    def nothing() -> None:
        click.echo("no runs match" if (dialect or project or status or since) else
                   "no runs yet; try `evstore demo` or `evstore ingest`", err=True)

    columns = ["stream", "dialect", "project", "title", "status", "phase", "last event", "events", "findings"]
    if wide:
        columns[3:3] = ["task"]
        columns[-3:-3] = ["started"]
        columns.append("sessions")
    if size is None:  # every run (piped or redirected, so --wide): read twice, for the widths then the lines, never held
        lines = table_stream(columns, lambda: map(cells, iter_runs(store, dialect=dialect, project=project,
                                                                   status=status, since=since, offset=offset,
                                                                   after=after, sessions=True)), max_width=10_000)
        shown = False
        for text in lines:
            click.echo(text)
            shown = True
        if not shown:
            nothing()
        return
    # One more row than shown says whether there are more.
    rows = list(iter_runs(store, dialect=dialect, project=project, status=status, since=since,
                          limit=size + 1, offset=offset, after=after, sessions=wide))
    if len(rows) > size:
        del rows[size:]
        last = rows[-1].stream_id
        other = "" if after else f" (or --page {(page or 1) + 1})"
        click.echo(f"more runs: --after {last}{other} lists the next ones; --limit N shows N", err=True)
    if not rows:
        nothing()
        return
    table = [cells(r) for r in rows]
    if wide:
        click.echo(table_text(columns, table, max_width=10_000))
        return
    # Fit the terminal: project, phase and status give way, then the title, cut with an ellipsis;
    # the stream id (what people copy) stays whole.  --wide keeps every column whole.
    width = shutil.get_terminal_size((120, 24)).columns
    click.echo(table_text(columns, table, max_width=10_000, width=width,
                          shrink=("title", "project", "phase", "status")))


# ---------------------------------------------------------------- coverage


@cli.command("coverage")
@click.option("--json", "as_json", is_flag=True, help="NDJSON: one JSON object per source and line.")
@click.pass_context
def coverage_cmd(ctx: click.Context, as_json: bool) -> None:
    """What the store has seen of each source, and which have gone.

    Per source: the versions recorded, the first and last capture, the last source identity, the
    unreadable versions, and whether it is gone.  A source is a state file, a folder of versions, a git path or a transcript, as the capture
    recorded it.  A recorded file that no longer exists is gone: the record stays, and the store
    records, once, that it noticed (and when); every later look says that time.
    """
    from projections.coverage import coverage, identity_text

    rows = coverage(open_store(ctx))
    if as_json:
        for r in rows:
            click.echo(json.dumps(r.to_dict(), ensure_ascii=False))
        return
    if not rows:
        click.echo("no captured sources yet; `evstore ingest`, `evstore watch` and the hooks record them", err=True)
        return
    from projections.report import table_text

    def when(value: str | None) -> str:
        return (value or "")[:16].replace("T", " ")

    table = [{"source": r.source, "kind": r.kind, "stream": r.stream, "versions": r.versions,
              "unreadable": r.unreadable, "first capture": when(r.first_capture),
              "last capture": when(r.last_capture), "last identity": identity_text(r.last_identity),
              "gone": (f"gone, noticed {when(r.gone_noticed_at)}" if r.gone else
                       f"{len(r.missing)} file(s) missing" if r.missing else "" if r.checked else "not checked")}
             for r in rows]
    columns = ["source", "kind", "stream", "versions", "unreadable", "first capture", "last capture",
               "last identity", "gone"]
    wide = not sys.stdout.isatty()
    width = 10_000 if wide else shutil.get_terminal_size((120, 24)).columns
    click.echo(table_text(columns, table, max_width=10_000, width=width, shrink=("source", "last identity")))
    gone = sum(r.gone for r in rows)
    click.echo(f"{len(rows)} source(s), {sum(r.versions for r in rows)} version(s), "
               f"{sum(r.unreadable for r in rows)} unreadable, {gone} gone", err=True)


# ---------------------------------------------------------------- demo


@cli.command("demo")
@click.option("--runs", "n_runs", type=click.IntRange(1, config.MAX_INT), default=40, show_default=True,
              help="How many runs to simulate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed + fresh store = same runs.")
@click.option("--url", default=None, metavar="URL", help="Database URL (overrides the global --url).")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Simulation processes (default: all cores for 200+ runs).")
@click.option("--sessions", "n_sessions", type=click.IntRange(0, config.MAX_INT), default=3, show_default=True,
              help="Runs whose state files simulated agent sessions write (their timelines, usage and search show "
                   "the conversations); 0: none.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def demo_cmd(ctx: click.Context, n_runs: int, seed: int, url: str | None, workers: int | None, n_sessions: int,
             as_json: bool) -> None:
    """Create the store if needed and fill it with a realistic simulated portfolio."""
    from eventstore import migrate
    from eventstore.store import EventStore
    from projections.demo import run_demo

    obj = ctx.find_root().obj
    target = url or obj.get("url")
    bootstrap = EventStore(target, check_schema=False)
    try:
        migrate.upgrade(bootstrap.engine)
    finally:
        bootstrap.close()
    store = _open_indexed(ctx, target)

    def said(written: int, runs: int) -> str:  # each run is written whole (a chunk of runs per dialect at a time)
        if not written:
            return "nothing written"
        return f"after {runs} of {n_runs} runs ({written} events written); the rest not recorded"

    try:
        with interruptible(store, said), progress_bar(f"simulating {n_runs} runs") as update:  # the bar ends first
            summary = run_demo(store, runs=n_runs, seed=seed, workers=workers, progress=update,
                               sessions=n_sessions)
        where = store.backend.display_url()
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({**summary.to_dict(), "url": where}))
        return
    from rich.table import Table

    out = _stdout_console()
    last = summary.first_run + summary.runs - 1
    # One plain line, not a table title: rich wraps a title to the (narrow) table's width.
    click.echo(f"{summary.runs} runs (demo-{summary.first_run:05d} … demo-{last:05d}) in {where}")
    table = Table()
    table.add_column("dialect")
    table.add_column("status")
    table.add_column("runs", justify="right")
    for (d, s), n in sorted(summary.by_status.items()):
        table.add_row(d, s, str(n))
    out.print(table)
    click.echo(f"{summary.events} events written in {summary.seconds:.1f} s "
               f"({summary.events_per_second:,.0f} events/s)")
    if summary.sessions:
        click.echo(f"{summary.sessions} agent sessions wrote the state files of {min(n_sessions, summary.runs)} "
                   "run(s): `evstore usage`, `evstore log TASK --timeline`, `evstore search`")
    task = summary.example_task or "<task-id>"
    url_opt = f" --url {url}" if url else ""
    click.echo("\nNext, try:")
    for cmd in ("runs", f"replay {task}", f"replay {task} --raw", f"log {task}", "verify", "metrics"):
        click.echo(f"  evstore{url_opt} {cmd}")


# ---------------------------------------------------------------- projections


@cli.group("projections")
def projections_group() -> None:
    """Projection status, rebuilds and the async runner."""


@projections_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def projections_status(ctx: click.Context, as_json: bool) -> None:
    """Name, version, checkpoint, lag (events behind) and last run of every projection."""
    # The table says, beside each lag, which commands catch that projection up.
    from projections.engine import ProjectionRunner

    store = open_store(ctx)
    with ProjectionRunner(store) as runner:
        rows = runner.status()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows]))
        return
    # A plain aligned table, as `runs` prints (rich's import was a sixth of this command's CPU).
    from projections.report import table_text

    table = []
    for r in rows:
        version = str(r.version) if r.stored_version in (None, r.version) else f"{r.stored_version} → {r.version}"
        mode = "inline" if r.inline else "async" if r.storage == "database" else f"async ({r.storage})"
        table.append({"name": r.name, "mode": mode, "version": version, "checkpoint": r.position, "lag": r.lag,
                      "last run": r.updated_at or "never", "caught up by": r.caught_up_by})
    columns = ["name", "mode", "version", "checkpoint", "lag", "last run", "caught up by"]
    width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else None
    click.echo(table_text(columns, table, max_width=10_000, width=width, shrink=("caught up by",)))
    for r in rows:  # projections that keep files: where they are, and whether they are this store's
        if r.details.get("directory"):
            stale = r.details.get("stale")
            note = f" (not this store's: {stale}; the next refresh rebuilds them)" if stale else ""
            click.echo(f"{r.name} tables: {r.details['directory']}{note}")


@projections_group.command("rebuild")
@click.argument("name", required=False)
@click.pass_context
def projections_rebuild(ctx: click.Context, name: str | None) -> None:
    """Drop and rebuild NAME (default: every projection) from the first event."""
    from projections.engine import ProjectionRunner, get_projection, registered

    store = open_store(ctx, indexed=False)  # it appends nothing
    projs = [get_projection(name)] if name else registered()
    with ProjectionRunner(store) as runner:
        for p in projs:
            with progress_bar(f"rebuilding {p.name}", enabled=sys.stderr.isatty()) as update:
                n = runner.rebuild(p, progress=update)
            click.echo(f"{p.name}: rebuilt from {n} events (version {p.version})")


@projections_group.command("run")
@click.option("--follow", is_flag=True, help="Keep running, applying new events as they arrive.")
@click.option("--poll", type=float, default=0.5, show_default=True, help="Seconds between polls with --follow.")
@click.pass_context
def projections_run(ctx: click.Context, follow: bool, poll: float) -> None:
    """Catch every projection up to the end of the log (with --follow, keep following it)."""
    from projections.engine import ProjectionRunner, registered

    store = open_store(ctx)
    stop = threading.Event()
    standby: list[str | None] = []

    def on_standby(holder: str | None) -> None:
        standby.append(holder)
        then = ("standing by: this one takes over when that one stops" if follow
                else "it keeps the projections current; nothing applied here")
        click.echo(f"another projection runner is running ({holder or 'it just stopped'}); {then}", err=True)

    with ProjectionRunner(store) as runner:
        projs = registered()
        if follow:
            click.echo(f"following {len(projs)} projections; Ctrl-C to stop", err=True)
        try:
            applied = runner.run(projs, follow=follow, poll_interval=poll, stop=stop, on_standby=on_standby)
        except KeyboardInterrupt:
            stop.set()
            return
    if standby and not follow:
        return
    for name, n in applied.items():
        click.echo(f"{name}: applied {n} events")


@cli.command("search")
@click.argument("query")
@click.option("--dialect", default=None, help="Only events of this dialect.")
@click.option("--stream", default=None, help="Only this stream (a session's subagent streams included).")
@click.option("--type", "event_type", default=None, metavar="TYPE",
              help="Only this event type, or a prefix ending in '.' (document.).")
@click.option("--since", default=None, metavar="ISO", help="Only events at or after this date/time (UTC if no zone).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000), help="At most this many hits.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per hit (NDJSON).")
@click.pass_context
def search_cmd(ctx: click.Context, query: str, dialect: str | None, stream: str | None, event_type: str | None,
               since: str | None, limit: int, as_json: bool) -> None:
    """Full-text search over event payloads, transcripts, hook calls and state documents, newest first."""
    from projections.search import MARK_END, MARK_START, search

    store = open_store(ctx)
    with progress_bar("indexing for search", enabled=sys.stderr.isatty()) as update:
        hits = search(store, query, dialect=dialect, stream=stream, type=event_type, since=since, limit=limit,
                      progress=update)
    if as_json:
        for h in hits:
            click.echo(json.dumps(h.to_dict(), ensure_ascii=False))
    else:
        from eventstore.display import printable

        color = sys.stdout.isatty()
        for h in hits:
            where = printable(f"{h.stream_id} v{h.version}" + (f" line {h.lineno}" if h.lineno is not None else ""))
            # controls and bidi characters of the stored text shown as escapes, never obeyed (the marks
            # are ours: they become the highlight after)
            snippet = MARK_START.join(MARK_END.join(printable(x) for x in part.split(MARK_END))
                                      for part in " ".join(h.snippet.split()).split(MARK_START))
            if color:
                snippet = snippet.replace(MARK_START, "\x1b[1;33m").replace(MARK_END, "\x1b[0m")
            else:
                snippet = snippet.replace(MARK_START, "«").replace(MARK_END, "»")
            click.echo(f"{where}  {(h.at or '')[:19].replace('T', ' ')}  {printable(h.type)} [{h.kind}]\n    {snippet}")
    click.echo(f"{len(hits)} hit{'s' if len(hits) != 1 else ''}{' (--limit reached)' if len(hits) == limit else ''}",
               err=True)
