"""Log commands: init, db, append, log, verify, keygen, and the deprecated seal (a signed checkpoint,
``evstore checkpoint`` in eventstore/cli/proofs.py, is the log's one signed head now)."""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from eventstore import codec
from eventstore.cli import cli, interruptible, open_store
from eventstore.display import printable
from eventstore.errors import EvstoreError, InvalidEvent


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


@cli.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create the store (or bring it to the latest schema)."""
    from eventstore import migrate

    store = open_store(ctx, check_schema=False, create=True)
    rev = migrate.upgrade(store.engine)
    click.echo(f"evstore ready at {store.backend.display_url()} (schema {rev})")


@cli.group()
def db() -> None:
    """Schema migrations (Alembic)."""


@db.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    from eventstore import migrate

    store = open_store(ctx, check_schema=False)
    click.echo(f"schema at {migrate.upgrade(store.engine, revision)}")


@db.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the database's schema revision and the code's head."""
    from eventstore import migrate

    store = open_store(ctx, check_schema=False)
    cur = migrate.current_revision(store.engine)
    head = migrate.head_revision(store.engine)
    click.echo(f"current: {cur or '(none)'}  head: {head}" + ("" if cur == head else "  (run `evstore db upgrade`)"))


@db.command("check")
@click.pass_context
def db_check(ctx: click.Context) -> None:
    """Fail if the models and the migrations disagree (alembic check)."""
    from eventstore import migrate

    store = open_store(ctx, check_schema=False)
    migrate.ensure_current(store)
    migrate.check(store.engine)
    click.echo("schema matches the models")


@db.command("roles")
@click.option("--writer", default="evstore_writer", show_default=True, help="The role that may append.")
@click.option("--reader", default="evstore_reader", show_default=True, help="The role that may only read.")
@click.pass_context
def db_roles(ctx: click.Context, writer: str, reader: str) -> None:
    """Create (idempotently) a writer role that can only append and a reader role that can only read (PostgreSQL)."""
    from eventstore import roles

    store = open_store(ctx)  # at the schema head, with the runs index the writer keeps current
    for line in roles.create_roles(store, writer, reader):
        click.echo(line)


def _parse_expected(value: str | None) -> Any:
    if value is None or value == "any":
        return "any"
    if value in ("no-stream", "no stream"):
        return "no stream"
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f'expected "any", "no-stream" or a version number, got "{value}"') from None
    if n < 0:
        raise click.BadParameter("a version number is >= 0")
    return n


def _read_data_arg(value: str) -> bytes:
    if value == "-":
        return sys.stdin.buffer.read()
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            return path.read_bytes()
        except OSError as exc:
            raise EvstoreError(f"Cannot read {path}: {exc.strerror}.") from exc
    return value.encode("utf-8", "surrogateescape")


#: The keys of one ``append --batch`` line: (type, default, what it is).  ``--help`` and the
#: docs/capture.md describe the format from this table.
BATCH_KEYS: dict[str, tuple[str, str, str]] = {
    "stream": ("string, required", "", "stream id, 1-255 characters"),
    "type": ("string, required", "", "event type, e.g. demo.note"),
    "data": ("object", "{}", "the event's data"),
    "meta": ("object", "{}", "free-form metadata"),
    "event_id": ("UUID string", "generated", "client id: a retry with the same content is a no-op"),
    "expected_version": ('int, "any" or "no-stream"', '"any"', "checked before this line's event is written"),
    "occurred_at": ("ISO-8601 time", "none", "when it happened at the source"),
    "schema_version": ("int", "1", "the event's schema version"),
}


class _BatchLines:
    """The events of a JSONL file for ``append_many``, remembering each one's line number
    (4 bytes an event) so errors the store raises about an item name the file's line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = array("I")

    def where(self, exc: EvstoreError) -> EvstoreError:
        """``exc`` naming the line of the item it is about (the store's errors name none)."""
        if exc.item is None or exc.item >= len(self.lines):
            return exc
        return EvstoreError(f"{self.path}, line {self.lines[exc.item]}: {exc}")

    def __iter__(self) -> Iterator[tuple[str, Any, Any]]:
        from eventstore.store import NewEvent

        path = self.path
        try:
            fh = path.open("rb")
        except OSError as exc:
            raise EvstoreError(f"Cannot read {path}: {exc.strerror}.") from exc
        with fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}, line {lineno}"
                obj = codec.parse_json_text(line, where, one_line=True)
                if type(obj) is not dict:
                    raise InvalidEvent(f"{where}: each line must be a JSON object.")
                unknown = set(obj) - BATCH_KEYS.keys()
                if unknown:
                    raise InvalidEvent(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                                       f"a line may have {', '.join(BATCH_KEYS)}.")
                for key in ("stream", "type"):
                    if not isinstance(obj.get(key), str) or not obj[key]:
                        raise InvalidEvent(f'{where}: "{key}" must be a non-empty string.')
                try:
                    event = NewEvent(obj["type"], obj.get("data", {}), meta=obj.get("meta"),
                                     event_id=obj.get("event_id"), occurred_at=obj.get("occurred_at"),
                                     schema_version=obj.get("schema_version"))
                    expected = obj.get("expected_version")
                    expected = None if expected is None else _parse_expected(str(expected))
                except (InvalidEvent, click.BadParameter) as exc:
                    raise InvalidEvent(f"{where}: {exc}") from exc
                self.lines.append(lineno)
                yield obj["stream"], event, expected


def _batch_help() -> str:
    keys = "; ".join(f"{k} ({t}{', default ' + d if d else ''})" for k, (t, d, _) in BATCH_KEYS.items())
    return ("Append a JSONL file, all-or-nothing: one JSON object per line with the keys " + keys
            + ". Blank lines are skipped.")


@cli.command()
@click.argument("stream", required=False)
@click.argument("type_", metavar="TYPE", required=False)
@click.option("--data", "data", metavar="JSON|@FILE|-", help="Event data: a JSON object, @file or - for stdin.")
@click.option("--meta", metavar="JSON", help="Event metadata (JSON object).")
@click.option("--expected-version", default=None, metavar="N|any|no-stream")
@click.option("--event-id", default=None, metavar="UUID", help="Client id: makes retries idempotent.")
@click.option("--batch", "batch", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=_batch_help())
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def append(ctx: click.Context, stream: str | None, type_: str | None, data: str | None, meta: str | None,
           expected_version: str | None, event_id: str | None, batch: Path | None, as_json: bool) -> None:
    """Append one event to STREAM (or a JSONL --batch file)."""
    from eventstore.store import NewEvent

    if batch is not None:
        if stream or type_ or data:
            raise click.UsageError("--batch takes no STREAM, TYPE or --data.")
        store = open_store(ctx, create=True)
        lines = _BatchLines(batch)

        def said(written: int, _streams: int) -> str:  # one transaction: all of it or nothing
            return f"all {written} event(s) written" if written else \
                f"nothing written (a --batch is all-or-nothing; {batch} is not recorded)"

        try:
            with interruptible(store, said):
                results = store.append_many(lines)
        except EvstoreError as exc:
            raise lines.where(exc) from exc
        n = sum(len(r.positions) for r in results)
        if as_json:
            _echo_json({"events": n, "streams": {r.stream_id: r.version for r in results}})
        else:
            click.echo(f"appended {n} events to {len(results)} streams")
        _send(store)
        return
    if not stream or not type_:
        raise click.UsageError("STREAM and TYPE are required (or use --batch FILE).")
    if data is None:
        raise click.UsageError("--data is required (a JSON object, @FILE or -).")
    expected = _parse_expected(expected_version)
    payload = codec.parse_json_text(_read_data_arg(data), "--data")
    if type(payload) is not dict:
        raise InvalidEvent(f"--data: must be a JSON object, got {codec.json_type(payload)}.")
    meta_obj = codec.parse_json_text(meta.encode("utf-8", "surrogateescape"), "--meta") if meta else None
    if meta_obj is not None and type(meta_obj) is not dict:
        raise InvalidEvent(f"--meta: must be a JSON object, got {codec.json_type(meta_obj)}.")
    event = NewEvent(type_, payload, meta=meta_obj, event_id=event_id)
    store = open_store(ctx, create=True)
    r = store.append(stream, [event], expected_version=expected)
    if as_json:
        _echo_json({"stream": r.stream_id, "version": r.version, "positions": r.positions, "duplicate": r.duplicate})
    else:
        note = " (already recorded; nothing written)" if r.duplicate else ""
        click.echo(f"{r.stream_id} @ version {r.version}, position {r.positions[-1]}{note}")
    _send(store)


def _send(store: Any) -> None:
    """With a remote set (`evstore remote set`): send what is waiting now; a failure keeps it for later."""
    from eventstore import remote

    line = remote.note_line(remote.send_if_set(store))
    if line is not None:
        click.echo(line, err=True)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EvstoreError(f"Cannot read {path}: {exc.strerror}.") from exc


def _deprecated(old: str, new: str) -> None:
    """Say on stderr that ``old`` is deprecated for ``new`` (scripts keep working)."""
    click.echo(f"Warning: `{old}` is deprecated; use `{new}` (a signed checkpoint of the log's Merkle tree "
               "replaces the seal: docs/proofs.md).", err=True)


_SINCE_HELP = (
    "Check only the events appended after this signed checkpoint (a file of `evstore checkpoint`, or `latest`: "
    "the newest one recorded in the store whose signature verifies), with --vkey. Trusted: that the log was "
    "whole when the checkpoint was made. Still checked before it: every event's hash (the leaves) and the "
    "stored tree, so the first N leaves must hash to its signed root (an event deleted, moved or rewritten "
    "with its hash fails). Not checked again before it: each event's fields and payload against its hash "
    "(a full verify does).")


def _open_signed(raw: bytes, where: str, log_key: Any) -> Any:
    """The checkpoint of a signed note that ``log_key`` signed (its origin as the note says); a
    failure names ``where``."""
    from eventstore.checkpoints import read_checkpoint
    from eventstore.tlog.checkpoint import open_checkpoint

    try:
        origin = read_checkpoint(raw.decode("utf-8", "replace"), where).origin
        return open_checkpoint(raw, log_key, origin=origin).checkpoint
    except EvstoreError as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def _latest_signed(store: Any, log_key: Any) -> tuple[Any, str]:
    """The newest checkpoint recorded in the store whose signature ``log_key`` verifies (a writer can
    delete one, not forge one) and where it came from, for ``--since latest``."""
    from eventstore.checkpoints import read_checkpoint, recorded_checkpoints
    from eventstore.errors import ProofError
    from eventstore.tlog.checkpoint import open_checkpoint

    for recorded in recorded_checkpoints(store, limit=1000):
        try:
            origin = read_checkpoint(recorded.note).origin
            return open_checkpoint(recorded.note, log_key, origin=origin).checkpoint, \
                f"the checkpoint recorded at {recorded.created_at}"
        except ProofError:
            continue
    raise ProofError(f"--since latest: the store records no checkpoint signed by {log_key.name}; make one "
                     "(`evstore checkpoint`) or pass its file.")


class _Progress:
    """``verify: 120,000 / 200,054 events (61,000 events/s)`` on stderr (never stdout: --json stays
    clean), rewritten in place on a terminal, once the run has taken :attr:`DELAY` seconds.  Shown
    when stderr is a terminal; ``EVSTORE_PROGRESS=1`` forces it on from the start (one line per
    update: a log file, a test), ``EVSTORE_PROGRESS=0`` off."""

    DELAY = 2.0

    def __init__(self, total: int) -> None:
        import time

        forced = os.environ.get("EVSTORE_PROGRESS", "")
        self.tty = sys.stderr.isatty()
        self.forced = forced == "1"
        self.enabled = self.forced or (forced != "0" and self.tty)
        self.total, self.start, self.shown, self.clock = total, time.monotonic(), False, time.monotonic

    def _say(self, text: str) -> None:
        elapsed = self.clock() - self.start
        if not self.enabled or (not self.forced and elapsed < self.DELAY):
            return
        self.shown = True
        if self.tty:
            sys.stderr.write(f"\r\x1b[2K{text}")
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def __call__(self, done: int) -> None:
        rate = done / max(self.clock() - self.start, 1e-6)
        self._say(f"verify: {done:,} / {max(self.total, done):,} events ({rate:,.0f} events/s)")

    def phase(self, what: str) -> None:
        self._say(f"verify: {what}")

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


@cli.command()
@click.argument("stream", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable report.")
@click.option("--seal", "seal", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also check a seal from `evstore seal` (HMAC: needs EVSTORE_SIGNING_KEY; Ed25519: --public-key).")
@click.option("--checkpoint", "checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also check that the log's first N events hash to this signed checkpoint's root (with --vkey).")
@click.option("--since", "since", metavar="CHECKPOINT", default=None, help=_SINCE_HELP)
@click.option("--vkey", "vkey", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The log's verifier key (PREFIX.vkey of `evstore keygen`) that signed --checkpoint / --since.")
@click.option("--public-key", "public_key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The Ed25519 public key (PEM) an Ed25519 seal was signed for.")
@click.pass_context
def verify(ctx: click.Context, stream: str | None, as_json: bool, seal: Path | None, checkpoint: Path | None,
           since: str | None, vkey: Path | None, public_key: Path | None) -> None:
    """Recompute every hash chain (or STREAM's), the Merkle tree and the replay cache; exit 1 naming what fails.

    Progress goes to stderr once a run has taken two seconds, on a terminal (EVSTORE_PROGRESS=1 forces it on,
    0 off); stdout and --json stay the report alone. With two or more CPUs the runs index is re-derived from
    the log by a forked process beside the chain walk (EVSTORE_VERIFY_FORK=0: in the walk, one process)."""
    from eventstore import chain
    from eventstore import verify as v

    tree_checkpoint = None
    log_key: Any = None  # the NoteVerifier of --vkey
    if (checkpoint is not None or since is not None) and vkey is not None:
        from eventstore.tlog import note

        log_key = note.read_verifier_key(vkey)
    if checkpoint is not None:
        raw_cp = _read_file(checkpoint)
        if raw_cp.lstrip().startswith(b"{"):  # a seal file, passed by the spelling seals had before
            if seal is not None:
                raise click.UsageError("--checkpoint got a seal file and --seal another; pass one of them.")
            _deprecated("verify --checkpoint SEAL.json", "verify --seal SEAL.json")
            seal = checkpoint
        else:
            if log_key is None:
                raise click.UsageError("--checkpoint needs the log's verifier key: --vkey PREFIX.vkey.")
            if stream is not None:
                raise click.UsageError("--checkpoint checks the whole log; give no STREAM.")
            tree_checkpoint = _open_signed(raw_cp, str(checkpoint), log_key)
    if since is not None:
        if log_key is None:
            raise click.UsageError("--since needs the log's verifier key that signed the checkpoint: --vkey PREFIX.vkey.")
        if stream is not None:
            raise click.UsageError("--since checks what was appended to the whole log; give no STREAM.")
    if vkey is not None and checkpoint is None and since is None:
        raise click.UsageError("--vkey checks a --checkpoint or --since; pass one.")
    if public_key is not None and seal is None:
        raise click.UsageError("--public-key checks a --seal; pass one.")
    verifier = chain.load_public_key(public_key) if public_key is not None else None
    signed = None
    if seal is not None:
        try:
            raw = seal.read_bytes()
        except OSError as exc:
            raise EvstoreError(f"Cannot read {seal}: {exc.strerror}.") from exc
        signed = codec.parse_json_text(raw, str(seal))
        if type(signed) is not dict:
            raise InvalidEvent(f"{seal}: a seal is a JSON object.")
    since_cp, since_where = None, ""
    if since is not None and since != "latest":
        since_path = Path(since)
        if not since_path.is_file():
            raise click.BadParameter(f"{since}: no such checkpoint file (or give `latest`: the newest one "
                                     "recorded in the store).", param_hint="--since")
        since_cp, since_where = _open_signed(_read_file(since_path), since, log_key), since
    store = open_store(ctx)
    if since == "latest":
        since_cp, since_where = _latest_signed(store, log_key)
    from eventstore.checkpoints import signed_heads

    last = store.max_position()
    progress = _Progress(last - since_cp.size if since_cp is not None else last)
    from projections.runs import IndexCheck, check_index, fork_index_check  # the CLI is the top layer

    # The runs index is written by whoever may append (PostgreSQL's writer role too): re-derived, not trusted;
    # for the whole log by a forked process beside verify's scan (two cores: the longer of the two), else
    # in verify's own scan (the index's code folds each stream as the chain walk reads it).
    forked = fork_index_check(store) if since_cp is None and stream is None else None
    try:
        if since_cp is not None:
            report = v.verify_since(store, since_cp.size, since_cp.root,
                                    signed_heads(store, log_key, since_cp.origin), progress=progress,
                                    stage=progress.phase)
            progress.phase("checking the runs index against the log")
            index_problems = check_index(store, streams=report.streams_checked)
        elif stream is not None:
            report = v.verify(store, stream, progress=progress, stage=progress.phase)
            index_problems = check_index(store, stream)
        elif forked is not None:
            report = v.verify(store, progress=progress, stage=progress.phase)
            if report.damaged:  # what the child read of a damaged file says nothing
                index_problems = []
            else:
                progress.phase("checking the runs index against the log")
                index_problems = forked.problems()
        else:
            derive = IndexCheck(store)
            report = v.verify(store, progress=progress, sink=derive, stage=progress.phase)
            index_problems = derive.problems()
        report.failures.extend(v.Failure(sid, version, "projection", detail)
                               for sid, version, detail in index_problems)
        if since_cp is not None:
            report.since = {"checkpoint": since_where, "origin": since_cp.origin, "tree_size": since_cp.size,
                            "ok": report.ok}
        if signed is not None:
            progress.phase("checking the seal")
            report.failures.extend(v.check_seal(store, signed, verifier))
            report.seal = {"file": str(seal), "ok": report.ok}
        if tree_checkpoint is not None:
            report.failures.extend(v.check_tree_checkpoint(store, tree_checkpoint.size, tree_checkpoint.root,
                                                           signed_heads(store, log_key, tree_checkpoint.origin)))
            report.checkpoint = {"file": str(checkpoint), "origin": tree_checkpoint.origin,
                                 "tree_size": tree_checkpoint.size, "ok": report.ok}
    finally:
        progress.close()
        if forked is not None:
            forked.close()
    if as_json:
        _echo_json(report.to_dict())
    elif report.ok:
        extra = f"; seal {seal} holds" if seal else ""
        if tree_checkpoint is not None:
            extra += f"; checkpoint {checkpoint} holds (the first {tree_checkpoint.size} events)"
        blobs = f", {report.blobs} blobs" if report.blobs else ""
        gone = [f"{n} {what}" for n, what in ((report.purged, "purged"), (report.erased, "erased"),
                                              (report.erased_blobs, "blobs erased")) if n]
        blobs += f" ({', '.join(gone)}: tombstones as recorded)" if gone else ""
        if since_cp is not None:
            click.echo(f"verified {report.events} events after {since_where} (its first {since_cp.size} events hash "
                       f"to its signed root) in {report.streams} streams, {report.cached} cached documents{blobs}: "
                       f"all hash chains intact{extra}")
        else:
            click.echo(f"verified {report.streams} streams, {report.events} events, {report.cached} cached "
                       f"documents{blobs}: all hash chains intact{extra}")
        if stream is None and since_cp is None:
            click.echo(f"file check: {report.storage_check} ok" if report.storage_check else
                       f"file check: none on {store.backend.name} (the server keeps its own files)", err=True)
    elif report.damaged:
        from eventstore.config import sqlite_file
        from eventstore.errors import damaged_message

        for f in report.failures:
            click.echo(f"FAIL {f}", err=True)
        path = sqlite_file(store.url)
        click.echo(f"Error: {damaged_message(path or 'the database', report.storage_check + ' failed')}", err=True)
    else:
        for f in report.failures:
            click.echo(f"FAIL {printable(str(f))}", err=True)
        click.echo(f"Error: {len(report.failures)} integrity failure(s) in {report.streams} streams, "
                   f"{report.events} events", err=True)
    if not report.ok:
        ctx.exit(1)


_OUT_HELP = "Where to write the seal (keep it away from the store)."
_KEY_HELP = "Sign with this Ed25519 private key (PEM, from `evstore keygen`) instead of HMAC."


@cli.command(hidden=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help=_OUT_HELP)
@click.option("--key-file", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=_KEY_HELP)
@click.pass_context
def seal(ctx: click.Context, out: Path, key_file: Path | None) -> None:
    """Deprecated: write a seal, the signed digest of the log (Ed25519 with --key-file, else HMAC with
    EVSTORE_SIGNING_KEY) that `verify --seal` checks; `evstore checkpoint` writes its successor."""
    from eventstore import chain
    from eventstore import verify as v

    signer = chain.load_private_key(key_file) if key_file is not None else None
    store = open_store(ctx)
    _deprecated("evstore seal", "evstore checkpoint --key-file PREFIX.key --out FILE")
    made = v.make_seal(store, signer)
    try:
        out.write_text(json.dumps(made, indent=2) + "\n")
    except OSError as exc:
        raise EvstoreError(f"Cannot write {out}: {exc.strerror}.") from exc
    click.echo(f"seal: {made['event_count']} events, {made['stream_count']} streams, "
               f"max position {made['max_position']}, root {made['merkle_root'][:16]}…, {made['algorithm']} -> {out}")


@cli.command()
@click.option("--out", "prefix", type=click.Path(dir_okay=False, path_type=Path), required=True, metavar="PREFIX",
              help="Write PREFIX.key (private, mode 0600), PREFIX.pub, PREFIX.vkey and PREFIX.witness.vkey.")
@click.option("--name", "name", default=None,
              help="The key's name in its verifier keys, e.g. example.com/log (default: PREFIX's file name).")
def keygen(prefix: Path, name: str | None) -> None:
    """Create an Ed25519 key pair and its signed-note verifier keys (PREFIX.key, .pub, .vkey, .witness.vkey)."""
    from eventstore import chain
    from eventstore.tlog import note

    name = name or prefix.name
    note.check_key_name(name)
    vkeys = [Path(f"{prefix}.vkey"), Path(f"{prefix}.witness.vkey")]
    for p in (Path(f"{prefix}.key"), Path(f"{prefix}.pub"), *vkeys):
        if p.exists():
            raise EvstoreError(f"{p} exists; keygen never overwrites a key (choose another --out).")
    key_path, pub_path = chain.generate_keypair(prefix)
    texts = [note.NoteSigner.from_key_file(key_path, name, alg).verifier.vkey + "\n"
             for alg in (note.ALG_ED25519, note.ALG_COSIGNATURE_V1)]
    try:
        for p, text in zip(vkeys, texts, strict=True):
            with p.open("x", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as exc:
        for p in (*vkeys, key_path, pub_path):  # nothing half-written
            p.unlink(missing_ok=True)
        raise EvstoreError(f"Cannot write {exc.filename or prefix}: {exc.strerror}.") from exc
    click.echo(f"private key {key_path} (mode 0600: keep it with whoever signs checkpoints)")
    click.echo(f"public key  {pub_path} (PEM)")
    click.echo(f"log key     {vkeys[0]}: {texts[0].strip()} (give it to auditors: `evstore verify-proof FILE "
               f"--vkey {vkeys[0]}`)")
    click.echo(f"witness key {vkeys[1]}: {texts[1].strip()} (for `evstore witness serve --key-file {key_path}`)")
