"""Retention, legal hold and erasure commands: erase, hold, retention (library: eventstore/erasure.py).

The library empties payloads in the log; this layer (the top one, which may import projections)
then rebuilds every registered projection (the runs index, who-wrote-what, the analytics Parquet)
with their own rebuild hooks, so nothing derived from an erased payload stays, and only then
scrubs the database files (VACUUM), so the rebuilt projection tables' old pages go too.

The hook spool is drained first (what it holds becomes events the erasure reaches; a claimed file
a killed drain left behind is recorded again as a no-op and deleted), and after an erasure the
calls spooled meanwhile that it would have erased are taken out of the spool files.
"""

from __future__ import annotations

import json
from typing import Any

import click

from eventstore import erasure
from eventstore.cli import cli, open_store
from eventstore.errors import EvstoreError


def _project_of(store: Any) -> erasure.ProjectOf:
    """stream id -> project, from the runs index (read once, before anything is erased)."""
    from projections.runs import iter_runs

    projects = {r.stream_id: r.project for r in iter_runs(store)}
    return projects.get


def _rebuild_projections(store: Any) -> list[str]:
    from projections.engine import ProjectionRunner, registered

    done = []
    with ProjectionRunner(store) as runner:
        for p in registered():
            runner.rebuild(p)
            done.append(p.name)
    return done


def _spool_waiting(store: Any) -> bool:
    from eventstore import spool

    folder = spool.spool_dir(store.url)
    return spool.waiting(folder) or (folder.is_dir() and any(folder.glob("claimed-*.jsonl")))


def _drain_spool(store: Any) -> None:
    """The hook spool is evstore's too: record what it holds (calls no drain has taken yet, and the
    claimed files a killed drain left behind, already recorded) before erasing, so the erasure
    reaches that content in the store and no spool file keeps it."""
    from eventstore import capture, spool

    if not _spool_waiting(store):
        return
    folder = spool.spool_dir(store.url)
    r = capture.drain(store, folder)
    if r.skipped:
        click.echo(f"warning: another drain holds the hook spool {folder}; what it records after this command "
                   "is not erased — run this command again once it is done.", err=True)
    else:
        click.echo(f"drained the hook spool first: {r.hooks} call(s) recorded", err=True)


def _scrub_spool(store: Any, streams: tuple[str, ...], event_id: str | None, match: str | None) -> None:
    """Take out of the spool the calls spooled while the erasure ran that it would have erased: those
    holding the ``--match`` text, those any of whose streams (the session's, the state file's, the
    transcripts') is a ``--stream``, the ``--event``'s call (they are then never recorded; a drain would
    have recorded the erased content again); and the lines of the spool's error logs that name them."""
    from eventstore import capture, spool

    found = erasure.needles(match) if match is not None else []

    def drop(record: spool.Record) -> bool:
        if found and not any(n in part for part in spool.contents(record) for n in found):
            return False
        if streams and not capture.record_streams(store, record) & set(streams):
            return False
        return event_id is None or capture.hook_target(record)[1] == event_id

    folder = spool.spool_dir(store.url)
    removed, reached = spool.remove(folder, drop)
    if removed:
        click.echo(f"removed {removed} hook call(s) holding what was erased from the hook spool {folder} (never "
                   "recorded)", err=True)
    if not reached:
        click.echo(f"warning: another drain holds the hook spool {folder}; its claimed files were not searched — "
                   "run this command again once it is done.", err=True)
    _scrub_logs(store, streams, event_id, found)


def _scrub_logs(store: Any, streams: tuple[str, ...], event_id: str | None, found: list[bytes],
                before: str | None = None) -> None:
    """Take out of the spool's error logs the lines that name what was erased or purged: holding one of
    ``found`` (the ``--match`` text), naming one of ``streams`` (tagged ``[stream S]`` or in the message),
    naming ``event_id``; with ``before`` (retention apply's cutoff, ISO time), only lines logged before it
    (or whose time cannot be read), as the purge took only the payloads recorded before it."""
    import re

    from eventstore import spool

    texts = [n.decode("utf-8", "replace") for n in found]
    texts += [" ".join(t.split()) for t in texts]  # a logged message has its whitespace collapsed
    named = [re.compile(rf"(?<![\w-]){re.escape(s)}(?![\w-])|\[stream {re.escape(s)}\]") for s in streams]
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")

    def drop_line(line: str) -> bool:
        if texts and not any(t and t in line for t in texts):
            return False
        if named and not any(rx.search(line) for rx in named):
            return False
        if before is not None and stamp.match(line) and line[:19] >= before[:19]:
            return False  # logged at or after the cutoff: its payloads are still kept
        return event_id is None or event_id in line

    folder = spool.spool_dir(store.url)
    lines = spool.scrub_logs(folder, drop_line) if folder.is_dir() else 0
    if lines:
        click.echo(f"removed {lines} line(s) naming what was erased from the spool's error logs", err=True)


def _finish(store: Any, results: list[erasure.EraseResult], as_json: bool, dry_run: bool) -> None:
    if not dry_run:  # also after nothing new: a killed run may have erased before it got here
        rebuilt = _rebuild_projections(store)
        click.echo(f"rebuilt the projections: {', '.join(rebuilt)}", err=True)
        for line in store.backend.scrub(store._raw()):
            click.echo(line, err=True)
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_dict(), ensure_ascii=False))
            continue
        verb = f"would be {r.kind}" if dry_run else r.kind
        held = f"; kept by a hold: {', '.join(r.held)}" if r.held else ""
        click.echo(f"{r.events} event payload(s) {verb} in {len(r.streams)} stream(s), {r.blobs} blob(s), "
                   f"{r.batches} batch(es) — {r.reason}{held}")


@cli.command()
@click.option("--stream", "streams", multiple=True, metavar="STREAM", help="Erase every payload of STREAM "
              "(repeatable).")
@click.option("--event", "event_id", default=None, metavar="ID", help="Erase the payload of one event (its id).")
@click.option("--match", "match", default=None, metavar="TEXT", help="Erase the whole payload of every event whose "
              "data or meta contains TEXT (or that names a blob containing it); the text itself is not recorded.")
@click.option("--reason", required=True, help="The request carried out (recorded in the admin stream).")
@click.option("--dry-run", is_flag=True, help="Say what would be erased; change nothing.")
@click.option("--batch", type=click.IntRange(1, 100_000), default=erasure.BATCH, show_default=True,
              help="Events per transaction.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def erase(ctx: click.Context, streams: tuple[str, ...], event_id: str | None, match: str | None, reason: str,
          dry_run: bool, batch: int, as_json: bool) -> None:
    """Erase payloads on request (a leaked secret, a person's data): headers, digests and chain hashes stay,
    so verify, checkpoints and proofs stay valid."""
    if not streams and event_id is None and match is None:
        raise click.UsageError("say what to erase: --stream, --event or --match")
    store = open_store(ctx)
    for s in streams:
        if store.stream_info(s) is None:
            raise EvstoreError(f'No stream "{s}" — `evstore runs` lists the streams.')
    if not dry_run:
        _drain_spool(store)
    result = erasure.erase(store, reason=reason, stream_ids=list(streams) or None, event_id=event_id, match=match,
                           project_of=_project_of(store), batch=batch, scrub=False, dry_run=dry_run,
                           on_batch=lambda n: click.echo(f"erased {n} payload(s)…", err=True))
    if not result.streams and not dry_run:
        click.echo("nothing to erase: no stored payload matches (already erased?)", err=True)
    if not dry_run:
        _scrub_spool(store, streams, event_id, match)
    elif _spool_waiting(store):
        click.echo("note: the hook spool holds calls not recorded yet; the erasure records them first.", err=True)
    _finish(store, [result], as_json, dry_run)


@cli.group()
def hold() -> None:
    """Legal holds: nothing under a hold is purged or erased."""


@hold.command("add")
@click.argument("stream", required=False)
@click.option("--project", default=None, help="Hold every stream of this project (the runs index's).")
@click.option("--reason", required=True, help="The matter the records are kept for.")
@click.pass_context
def hold_add(ctx: click.Context, stream: str | None, project: str | None, reason: str) -> None:
    """Put STREAM (or --project P) under a legal hold."""
    if (stream is None) == (project is None):
        raise click.UsageError("give a STREAM or --project, one of them")
    store = open_store(ctx)
    if stream is not None and store.stream_info(stream) is None:
        raise EvstoreError(f'No stream "{stream}" — `evstore runs` lists the streams.')
    h = erasure.add_hold(store, "stream" if stream else "project", stream or project or "", reason)
    click.echo(h.describe())


@hold.command("release")
@click.argument("target")
@click.option("--reason", required=True, help="Why the hold ends.")
@click.pass_context
def hold_release(ctx: click.Context, target: str, reason: str) -> None:
    """Release the hold TARGET names (its id, or the stream or project it is on)."""
    for h in erasure.release_hold(open_store(ctx), target, reason):
        click.echo(f"released {h.describe()}")


@hold.command("show")
@click.pass_context
def hold_show(ctx: click.Context) -> None:
    """The holds in force."""
    for h in erasure.policies(open_store(ctx)).holds.values():
        click.echo(h.describe())


@cli.group()
def retention() -> None:
    """Retention policies: how long payloads are kept (headers, digests and hashes are kept for good)."""


@retention.command("set")
@click.option("--dialect", default=None)
@click.option("--stream", default=None)
@click.option("--project", default=None)
@click.option("--keep-payloads", "keep", required=True, metavar="DURATION", help="180d, 26w, 1y; 'forever' removes "
              "the policy.")
@click.option("--below-floor", is_flag=True, help=f"Allow less than {erasure.FLOOR_DAYS} days (recorded).")
@click.option("--reason", default="", help="Why (recorded in the admin stream).")
@click.pass_context
def retention_set(ctx: click.Context, dialect: str | None, stream: str | None, project: str | None, keep: str,
                  below_floor: bool, reason: str) -> None:
    """Set how long the payloads of a dialect, project or stream are kept."""
    given = [(k, v) for k, v in (("dialect", dialect), ("project", project), ("stream", stream)) if v is not None]
    if len(given) != 1:
        raise click.UsageError("give one of --dialect, --project, --stream")
    days = None if keep.strip().lower() == "forever" else erasure.parse_duration(keep)
    p = erasure.set_retention(open_store(ctx), given[0][0], given[0][1], days, below_floor=below_floor, reason=reason)
    click.echo(p.describe() if p else f"retention {given[0][0]} {given[0][1]}: payloads kept for good")


@retention.command("show")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def retention_show(ctx: click.Context, as_json: bool) -> None:
    """The policies and holds in force."""
    p = erasure.policies(open_store(ctx))
    if as_json:
        click.echo(json.dumps({"retention": [vars(r) for r in p.retention.values()],
                               "holds": [vars(h) for h in p.holds.values()]}, ensure_ascii=False))
        return
    for r in p.retention.values():
        click.echo(r.describe() + (" (below the floor)" if r.below_floor else ""))
    for h in p.holds.values():
        click.echo(h.describe())
    if not p.retention:
        click.echo("no retention policy: every payload is kept", err=True)


@retention.command("apply")
@click.option("--dry-run", is_flag=True, help="Say what would be purged; change nothing.")
@click.option("--as-of", "as_of", default=None, metavar="ISO-TIME", help="Apply the policies as of this time "
              "(default: now), e.g. to see with --dry-run what a date will purge.")
@click.option("--batch", type=click.IntRange(1, 100_000), default=erasure.BATCH, show_default=True,
              help="Events per transaction.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def retention_apply(ctx: click.Context, dry_run: bool, as_of: str | None, batch: int, as_json: bool) -> None:
    """Purge the payloads past their policy (held streams are skipped), in bounded batches."""
    from datetime import datetime

    from eventstore.store import iso

    when = None if as_of is None else datetime.fromisoformat(str(iso(as_of, what="--as-of")).replace("Z", "+00:00"))
    store = open_store(ctx)
    if not dry_run:
        _drain_spool(store)  # a claimed file a killed drain left behind holds recorded payloads too
    results = erasure.apply_retention(store, now=when, project_of=_project_of(store), dry_run=dry_run, batch=batch,
                                      scrub=False, on_batch=lambda n: click.echo(f"purged {n} payload(s)…", err=True))
    if not results:
        click.echo("no retention policy applies to any stream", err=True)
    if not dry_run:  # each policy's streams, also those a killed run already purged
        for r in results:
            if r.covered:
                _scrub_logs(store, tuple(r.covered), None, [], before=r.before)
    _finish(store, results, as_json, dry_run)
