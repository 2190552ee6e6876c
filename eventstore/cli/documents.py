"""Document commands: ingest, watch, replay, log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from eventstore import config
from eventstore.cli import cli, interruptible, open_store
from eventstore.cli.core import _send
from eventstore.display import printable
from eventstore.errors import ConcurrencyError, EvstoreError, IngestError
from eventstore.tokens import sent_by_line


def _dialect(name: str) -> Any:
    from eventstore.dialects import get_dialect

    return get_dialect(name)


@cli.command()
@click.argument("dialect")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--stream", default=None, help="Stream id (default: the document's task id; for a dialect whose documents name none, the file's "
              "name).")
@click.option("--git", "git_spec", default=None, metavar="REPO_DIR:FILE",
              help="Ingest every committed version of FILE in REPO_DIR (all branches), by commit time.")
@click.option("--first-parent", is_flag=True, help="With --git: only the main line's versions.")
@click.option("--order", type=click.Choice(["name", "mtime"]), default="name", show_default=True,
              help="Order of a folder's files: natural name order (2-x before 10-x) or modification time.")
@click.option("--strict", is_flag=True, help="Refuse the whole input, writing nothing, if a version is unreadable "
              "(invalid JSON, not UTF-8, not the dialect's document) or the dialect's lens fails on it, instead of "
              "recording it (as document.unreadable, or exactly with a lens-failed finding).")
@click.option("--force-new-stream", is_flag=True, help="When what a stream recorded of this source differs from the "
              "source now (history rewritten, a version changed), record the capture as a new stream (STREAM~2) "
              "instead of refusing it.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per snapshot, with its status: new, recorded "
              "(already, nothing written) or unchanged (the same bytes as the version before it).")
@click.option("--no-scrub", is_flag=True, help="Dialects that scrub secrets from transcripts: store them as they are "
              "(not advised).")
@click.option("--blob-threshold", type=click.IntRange(0, config.MAX_INT), default=None, metavar="BYTES",
              help="Dialects that store transcripts: store JSON strings of at least BYTES once, "
                   "content-addressed, in transcripts and the hook calls drained with them "
                   "(default 4096, or $EVSTORE_BLOB_THRESHOLD; 0: never).")
@click.pass_context
def ingest(ctx: click.Context, dialect: str, paths: tuple[Path, ...], stream: str | None, git_spec: str | None,
           first_parent: bool, order: str, strict: bool, force_new_stream: bool, as_json: bool, no_scrub: bool,
           blob_threshold: int | None) -> None:
    """Ingest state-file snapshots with DIALECT (a directory: its files in name order).

    Each source version is recorded once: the same folder, files or git range again records
    nothing, and a folder that grew records only its new versions.  A version that is no
    readable document is recorded as document.unreadable with its exact bytes (--strict refuses
    it); a git commit deleting the file, as document.removed."""
    from eventstore import ingest as ing

    d = _dialect(dialect)
    if d.ingest_command:  # a source that is no state-file snapshots (e.g. transcripts, line by line)
        from eventstore.plugins import load

        ingest_with: Callable[..., None] = load(d.ingest_command)  # type: ignore[assignment]
        extra = {} if blob_threshold is None else {"blob_threshold": blob_threshold}

        def said_lines(written: int, streams: int) -> str:  # such a source is written file by file
            return (f"{written} event(s) written to {streams} stream(s); the rest not recorded (run it again: "
                    "what is recorded is not read twice)") if written else "nothing written"

        with interruptible(open_store(ctx, create=True), said_lines):
            ingest_with(ctx, paths, stream=stream, as_json=as_json, scrub=not no_scrub, **extra)
        return
    if blob_threshold is not None:
        raise click.UsageError(f"--blob-threshold is for transcripts; {dialect} ingests state-file snapshots")
    if not paths and not git_spec:
        raise click.UsageError("give at least one PATH or --git REPO_DIR:FILE")
    if first_parent and not git_spec:
        raise click.UsageError("--first-parent needs --git")
    store = open_store(ctx, create=True)

    def note(text: str) -> None:
        click.echo(text, err=True)

    def said(written: int, _streams: int) -> str:  # the ingest is one transaction: all of it or nothing
        return (f"all {written} event(s) written" if written else "nothing written") + \
            (" (an ingest is all-or-nothing; run it again to record the rest)" if not written else "")

    with interruptible(store, said):
        if git_spec:
            results = ing.ingest_git(store, d, git_spec, stream=stream, first_parent=first_parent, strict=strict,
                                     force_new_stream=force_new_stream)
        else:
            results = ing.ingest(store, d, list(paths), stream=stream, order=order, strict=strict,
                                 force_new_stream=force_new_stream, report=note)
    events = unreadable = 0
    for r in results:
        events += r.events
        unreadable += r.unreadable is not None and r.events > 0
        if as_json:
            click.echo(json.dumps(r.to_dict()))
        else:
            click.echo(printable(f"{r.file or '-'} -> {r.stream} @ {r.version} ({_ingest_note(r)})"))
    failed = sum(r.lens_failures for r in results)
    if not as_json:
        bad = f", {unreadable} unreadable version(s) recorded as such" if unreadable else ""
        bad += f", {failed} lens failure(s)" if failed else ""
        click.echo(f"{capture_summary(results)}; {events} event(s){bad}", err=True)
    _send(store)
    if failed:
        click.echo(f"warning: the {dialect} lens failed on {failed} snapshot(s), recorded exactly with a "
                   "lens-failed finding (`evstore log` shows it; --strict refuses such snapshots).", err=True)
    _notice_gone(store, {r.stream for r in results})


def _notice_gone(store: Any, streams: set[str]) -> None:
    """At a capture: the files its streams recorded earlier that no longer exist (a folder that lost
    versions, a source gone) are noticed, once (``projections.coverage``), and named on stderr."""
    from projections.coverage import coverage

    for row in coverage(store, streams=sorted(streams)) if streams else ():
        if row.missing:
            what = "is gone" if row.gone else f"has lost {len(row.missing)} recorded file(s), e.g. {row.missing[0]}"
            click.echo(f"note: {row.source} ({row.stream}) {what}; the record stays (`evstore coverage`)", err=True)


def capture_summary(results: list[Any]) -> str:
    """"7 versions already recorded, 0 new" (and the versions that repeat the bytes before them)."""
    counts = {"recorded": 0, "new": 0, "unchanged": 0}
    for r in results:
        counts[r.status] += 1
    return (f"ingested {len(results)} snapshot(s): {counts['recorded']} version(s) already recorded, "
            f"{counts['new']} new"
            + (f", {counts['unchanged']} unchanged (the same bytes as the version before)" if counts["unchanged"]
               else ""))


def _ingest_note(r: Any) -> str:
    if r.status == "recorded":
        return "already recorded" + ("; erased since, so matched by place and order" if r.erased_match else "")
    if r.events == 0:
        return "unchanged"
    if r.unreadable is not None:
        return f"+{r.events} event, UNREADABLE: {r.unreadable}"
    if r.removed:
        return f"+{r.events} event, file removed"
    flag = f", {len(r.findings)} finding(s)" if r.findings else ""
    flag += ", LENS FAILED" if r.lens_failures else ""
    return f"+{r.events} events{flag}"


def _signature(path: Path) -> Any:
    if path.is_dir():
        return tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*") if p.is_file()))
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


#: How long ``watch`` waits for an unreadable write to change before recording it: a writer that truncates
#: and then writes in place can be descheduled between the two on a loaded machine, and one short tick
#: (``--interval 0.05``) is no proof that the write is over.
UNREADABLE_QUIET_S = 0.5


@cli.command()
@click.argument("dialect")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--stream", default=None, help="Stream id (default: the document's task id).")
@click.option("--interval", default=0.2, show_default=True, help="Polling interval in seconds.")
@click.option("--strict", is_flag=True, help="Skip (and report) unreadable writes instead of recording them.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per ingested write.")
@click.pass_context
def watch(ctx: click.Context, dialect: str, path: Path, stream: str | None, interval: float, strict: bool,
          as_json: bool) -> None:
    """Follow a state file (or folder) and ingest each new write; Ctrl-C stops.

    Polls (inode, mtime, size), so atomic renames and in-place writes are both seen.  A version
    recorded before (by an earlier watch, say) is not recorded again.  A write
    that reads as no valid document may be caught half-way: it is read again each tick, and
    once it has stayed the same for half a second (or one interval, if longer) it is recorded as
    document.unreadable (--strict: reported, skipped).
    """
    from eventstore.ingest import Ingestor, load_paths

    d = _dialect(dialect)
    if d.watch_command:  # a source that is no state-file snapshots (see Dialect.watch_command)
        from eventstore.plugins import load

        watch_with: Callable[..., None] = load(d.watch_command)  # type: ignore[assignment]
        watch_with(ctx, path, interval=interval, as_json=as_json)
        return
    store = open_store(ctx, create=True)
    ing = Ingestor(store, d, stream=stream, strict=strict)
    last: Any = object()
    settling: Any = object()  # the signature of an unreadable write being waited on
    quiet_until = 0.0  # ... and when it counts as finished
    click.echo(f"watching {path} ({dialect}); Ctrl-C stops", err=True)
    try:
        while True:
            sig = _signature(path)
            if sig is not None and sig != last:
                try:
                    snaps = load_paths(d, [path])  # with each version's identity: a restart records none again
                    if not strict and any(s.unreadable is not None for s in snaps):
                        now = time.monotonic()  # perhaps caught mid-write: wait until it has been quiet
                        if sig != settling:
                            settling, quiet_until = sig, now + max(interval, UNREADABLE_QUIET_S)
                        if now < quiet_until:
                            time.sleep(interval)
                            continue
                    for r in ing.ingest_all(snaps):
                        if r.events:
                            if as_json:
                                click.echo(json.dumps(r.to_dict()))
                            else:
                                click.echo(printable(f"{r.file or '-'} -> {r.stream} @ {r.version} ({_ingest_note(r)})"))
                    last = sig
                    _send(store)
                except IngestError as exc:  # bad file, or unreadable under --strict: report, retry on next change
                    click.echo(f"warning: {exc}", err=True)
                    last = sig
                except ConcurrencyError as exc:  # another capture recorded first: look again next tick
                    click.echo(f"note: {exc} Reading the stream again.", err=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


CACHE_NOTE = ("note: folded from the replay cache at version {version} (checked against the log's event hash, not "
              "re-folded from the first event; --no-cache folds every event, `evstore verify` checks every cached "
              "document)")


@cli.command()
@click.argument("task")
@click.option("--upto", "upto", type=click.IntRange(max=config.MAX_INT), default=None, metavar="VERSION",
              help="Rebuild up to this version.")
@click.option("--at", "at", default=None, metavar="ISO-TIME", help="Rebuild as of this time.")
@click.option("--json", "as_json", is_flag=True, help="Print the document as compact JSON.")
@click.option("--raw", "raw", is_flag=True, help="Print the exact bytes of the ingested snapshot.")
@click.option("--diff", "diff", type=click.IntRange(max=config.MAX_INT), nargs=2, default=None, metavar="V1 V2",
              help="JSON Patch from V1 to V2.")
@click.option("--validate", "schema", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Check the document against a JSON Schema.")
@click.option("--check", "check", is_flag=True, help="List every finding of the history with its version(s): "
              "validation findings, unreadable versions, lens failures (with --upto/--at: those of that "
              "version's document); exit 1 if any.")
@click.option("--restore", "restore", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the files the document records into this directory (a dialect whose document is a folder).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Fold every event; neither read nor write the replay cache.")
@click.option("--meta", "with_meta", is_flag=True,
              help="Print {stream, version, document, versions}: each ingested state version up to it with its "
                   "time, file, SHA-256 and who wrote it (session, message, tool call; established by hook, "
                   "content or path+time).")
@click.pass_context
def replay(ctx: click.Context, task: str, upto: int | None, at: str | None, as_json: bool, raw: bool,
           diff: tuple[int, int] | None, schema: str | None, check: bool, restore: Path | None,
           no_cache: bool, with_meta: bool) -> None:
    """Rebuild TASK's state document (a stream id or a task id)."""
    import sys

    from projections import replay as rp

    if upto is not None and at is not None:
        raise click.UsageError("--upto and --at are exclusive")
    if raw and as_json:
        raise click.UsageError("--raw and --json are exclusive")
    if with_meta and (raw or diff or schema or check or restore is not None):
        raise click.UsageError("--meta goes with the document (and --json), not with --raw, --diff, --validate, "
                               "--check or --restore")
    store = open_store(ctx, indexed=False)  # it appends nothing: no index to keep, nor its checkpoint to read
    sid = rp.resolve(store, task)
    if diff:
        click.echo(json.dumps(rp.diff_versions(store, sid, diff[0], diff[1]), ensure_ascii=False, indent=None if as_json else 2))
        return
    if at is not None:
        from eventstore.store import iso

        # The parser the store reads times with.  A time it cannot take is a bad value, not bad
        # usage: "Error: --at ..." and exit 1, as for --since (click's usage errors exit 2).
        iso(at, what="--at")
    result = rp.replay(store, sid, upto_version=upto, at=at, use_cache=not no_cache)
    if result.cached_from is not None:
        click.echo(CACHE_NOTE.format(version=result.cached_from), err=True)
    hidden = rp.unreadable_tail(store, sid, result.version)  # versions the document shown is not
    if restore is not None:
        written = _dialect(result.dialect).restore(result.doc, restore)
        for path in written:
            click.echo(str(path))
        click.echo(f"restored {len(written)} file(s) of {sid} @ version {result.version}", err=True)
        return
    if raw:
        sys.stdout.buffer.write(rp.replay_raw(store, sid, result.version, doc=result.doc))
        note = _dialect(result.dialect).raw_note(result.doc)
        if note:
            click.echo(f"note: {note}", err=True)
        sys.stdout.buffer.flush()
        return
    problems: list[str] = []
    if schema:
        for v in rp.validate_against(result.doc, schema):
            problems.append(f"{v['path']}: {v['message']}")
    whole = check and upto is None and at is None  # the whole history: every finding with its version(s)
    if check:
        d = _dialect(result.dialect)
        if whole:
            problems += [h.line() for h in rp.history_findings(store, sid, current=d.validate(result.doc))]
        else:
            for f in d.validate(result.doc):
                problems.append(f"{f.path or '/'}: [{f.code}] {f.message}")
            for hv, e in hidden:
                problems.append(f"version {hv}: [{rp.tail_code(e)}] {rp.tail_message(e)}")
    if schema or check:
        for p in problems:
            click.echo(p)
        if whole:
            click.echo(f"{len(problems)} finding(s) in the history of {sid} (versions 1-{result.version})", err=True)
        else:
            click.echo(f"{len(problems)} violation(s) at version {result.version}", err=True)
        if problems:
            ctx.exit(1)
        return
    for note in rp.tail_notes(hidden):
        click.echo(f"note: {sid} {note}", err=True)
    printed: Any = result.doc
    if with_meta:
        from projections import writers

        printed = {"stream": sid, "version": result.version, "document": result.doc,
                 "versions": writers.state_versions(store, sid, upto_version=result.version)}
    if as_json:
        click.echo(json.dumps(printed, ensure_ascii=False))
    else:
        click.echo(printable(json.dumps(printed, ensure_ascii=False, indent=2), multiline=True))
        click.echo(printable(f"{sid} @ version {result.version} of {result.stream_version} ({result.dialect})"),
                   err=True)


@cli.command()
@click.argument("task")
@click.option("--json", "as_json", is_flag=True, help="NDJSON: one event per line.")
@click.option("--after", "after", type=click.IntRange(0, config.MAX_INT), default=None, metavar="N",
              help="Only events after version N.")
@click.option("-n", "--limit", "limit", type=click.IntRange(1, config.MAX_INT), default=None, metavar="N",
              help="Only the last N events shown (with --after: the first N after it).")
@click.option("--type", "type_pattern", default=None, metavar="PATTERN",
              help="Only events whose type matches PATTERN (shell-style: 'document.*', '*gate*').")
@click.option("--since", "since", default=None, metavar="ISO",
              help="Only events that occurred (else were recorded) since this date/time (UTC if no zone).")
@click.option("--findings/--no-findings", default=True, help="Show validation findings under snapshots.")
@click.option("--pager/--no-pager", default=True,
              help="Page the timeline when it is longer than the terminal ($PAGER, else less; never when piped).")
@click.option("--timeline", is_flag=True, help="Interleave, by time, the state versions (with their diffs), the turns "
                                              "and hook calls of the sessions that wrote them, and git commits.")
@click.pass_context
def log(ctx: click.Context, task: str, as_json: bool, after: int | None, limit: int | None,
        type_pattern: str | None, since: str | None, findings: bool, pager: bool, timeline: bool) -> None:
    """Show TASK's events as a timeline (version, time, type, summary)."""
    import collections
    import fnmatch
    import itertools
    import shutil
    import sys

    from eventstore.ingest import short_source_id
    from projections import replay as rp
    from projections import writers
    from projections.runs import normalize_since

    since_at = normalize_since(since) if since is not None else None
    store = open_store(ctx, indexed=False)  # it appends nothing
    sid = rp.resolve(store, task)
    if timeline:
        _print_timeline(store, sid, as_json)
        return
    d = rp.dialect_of(store, sid)
    written = writers.writers(store, sid)
    # A session's transcript: the state versions its tool calls wrote (the other way round).
    made = writers.wrote(store, sid) if d.file_write_types and not as_json else {}
    records: Any = (rec for rec in store.read_stream(sid, after_version=after)
                    if (type_pattern is None or fnmatch.fnmatchcase(rec.type, type_pattern))
                    and (since_at is None or (rec.occurred_at or rec.recorded_at) >= since_at))
    if limit is not None:  # git log -n: the newest N (after --after: the first N)
        records = (itertools.islice(records, limit) if after is not None
                   else collections.deque(records, maxlen=limit))
    paged = pager and not as_json and sys.stdout.isatty()
    lines: list[str] = []
    emit: Callable[[str], None] = lines.append if paged else click.echo
    for rec in records:
        writer = written.get(rec.version)
        if rec.erased:  # purged or erased: the header stays, with when and why the content went
            from eventstore.erasure import describe, explain

            said = describe(explain(store, [rec.position]).get(rec.position))
            if as_json:
                click.echo(json.dumps({**rec.to_dict(), "erasure": said}, ensure_ascii=False))
            else:
                when = (rec.occurred_at or rec.recorded_at)[:19].replace("T", " ")
                click.echo(printable(f"{rec.version:>5}  {when}  {rec.type:<40}  [content {said}]"))
            continue
        if as_json:
            out = rec.to_dict()
            out["data"] = d.shown_data(rec.type, out["data"], blob=store.read_blob)  # blobs put back
            if writer is not None:
                out["written_by"] = writer.to_dict()
            emit(json.dumps(out, ensure_ascii=False))
            continue
        event = None
        try:
            event = rec.to_event()
            summary = d.summarize(event)
        except EvstoreError:  # a free-form event type (`evstore append`): show its data
            summary = rec.data.decode("utf-8")[:100]
        when = (rec.occurred_at or rec.recorded_at)[:19].replace("T", " ")
        emit(printable(f"{rec.version:>5}  {when}  {rec.type:<40}  {summary}"))
        meta = rec.metadata
        source = meta.get("source") if isinstance(meta, dict) else None
        if isinstance(source, dict) and isinstance(source.get("id"), str):  # which source version (capture-once)
            emit(printable(f"{'':>5}  {'':19}  source {short_source_id(source['id'])}"))
        sender = meta.get("sent_by") if isinstance(meta, dict) else None
        if isinstance(sender, dict):  # who sent it to a team server (token name, machine)
            emit(printable(f"{'':>5}  {'':19}  {sent_by_line(sender)}"))
        if writer is not None:  # who wrote this state: the session, message and tool call
            emit(printable(f"{'':>5}  {'':19}  {writer.line()}"))
        if made and event is not None and rec.type in d.file_write_types:
            for call in {w.call_id for w in d.file_writes(event) if w.path}:
                for stream, version, by in made.pop(call, ()):  # once: under the call, not its result too
                    emit(printable(f"{'':>5}  {'':19}  wrote {stream} version {version} ({by.how()})"))
        found = meta.get("findings") if isinstance(meta, dict) else None
        if findings and isinstance(found, list):
            shown = [f for f in found if isinstance(f, dict)]
            for f in shown[:20]:
                emit(printable(f"{'':>5}  {'':19}  ! {f.get('path') or '/'}: [{f.get('code')}] {f.get('message')}"))
            if len(shown) > 20:
                emit(f"{'':>5}  {'':19}  ! ... {len(shown) - 20} more finding(s) (`evstore replay {task} --check`)")
    if not paged:
        return
    if len(lines) >= shutil.get_terminal_size((80, 24)).lines:  # longer than the terminal: page it, as git does
        click.echo_via_pager("\n".join(lines))  # click ends it with a newline
    else:
        for line in lines:
            click.echo(line)


def _print_timeline(store: Any, sid: str, as_json: bool) -> None:
    from eventstore.display import printable
    from projections.timeline import task_timeline

    for item in task_timeline(store, sid):
        if as_json:
            click.echo(json.dumps(item.to_dict(), ensure_ascii=False))
            continue
        when = (item.at or "")[:19].replace("T", " ")
        where = item.stream if item.kind in ("state", "commit", "event") else \
            f"{item.stream} line {item.lineno}" if item.lineno is not None else item.stream
        click.echo(printable(f"{when}  {'  ' * item.depth}{item.kind:<11}  {item.text}  [{where} v{item.version}]"))
        for op in (item.diff or [])[:10]:
            value = json.dumps(op.get("value"), ensure_ascii=False) if "value" in op else ""
            click.echo(printable(f"{'':19}  {'':11}    {op['op']} {op['path'] or '/'} {value[:100]}"))
        if item.diff is not None and len(item.diff) > 10:
            click.echo(f"{'':19}  {'':11}    ... {len(item.diff) - 10} more (`evstore replay {sid} --diff`)")
