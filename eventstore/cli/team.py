"""Team commands: ``evstore tokens`` (the named tokens of ``evstore serve``; eventstore/tokens.py), ``evstore
remote`` and ``evstore push`` (a machine sends its records to a team server; eventstore/remote.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eventstore import tokens as tok
from eventstore.cli import cli, open_store
from eventstore.display import printable
from eventstore.errors import EvstoreError


@cli.group("tokens")
def tokens_group() -> None:
    """Named tokens of `evstore serve`: who may read, append or administer (stored as hashes)."""


@tokens_group.command("add")
@click.argument("name")
@click.option("--scope", type=click.Choice(tok.SCOPES), required=True,
              help="read: the pages and the API; append: writes only (a machine's sender); admin: everything.")
@click.option("--expires", default=None, metavar="DATE",
              help="When the token stops working: YYYY-MM-DD (the end of that day, UTC) or an ISO time.")
@click.pass_context
def tokens_add(ctx: click.Context, name: str, scope: str, expires: str | None) -> None:
    """Make a token NAME and print it once (on stdout; only its SHA-256 is stored)."""
    when = tok.parse_expiry(expires) if expires is not None else None
    store = open_store(ctx, create=True)
    secret = tok.add_token(store, name, scope, expires=when)
    click.echo(secret)
    click.echo(f'token "{name}" ({scope}{", expires " + when[:19] + "Z" if when else ""}) added; it is shown only '
               f"this once: keep it in a file only its user can read (chmod 600). Recorded in the stream "
               f"{tok.ADMIN_STREAM}.", err=True)


@tokens_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def tokens_list(ctx: click.Context, as_json: bool) -> None:
    """The tokens: name, scope, created, last used, expires, revoked (never a secret)."""
    rows = tok.list_tokens(open_store(ctx))
    if as_json:
        click.echo(json.dumps([t.to_dict() for t in rows], indent=2))
        return
    if not rows:
        click.echo("no tokens; add one with `evstore tokens add NAME --scope append`", err=True)
        return
    head = ("NAME", "SCOPE", "CREATED", "LAST USED", "EXPIRES", "STATE")
    table = [head] + [(t.name, t.scope, t.created_at[:19], (t.last_used_at or "never")[:19],
                       (t.expires_at or "never")[:19],
                       "revoked " + t.revoked_at[:19] if t.revoked_at else ("expired" if t.problem() else "active"))
                      for t in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        click.echo(printable("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()))


@tokens_group.command("revoke")
@click.argument("name")
@click.pass_context
def tokens_revoke(ctx: click.Context, name: str) -> None:
    """Revoke the token NAME: refused from the next request on, on every worker of every server."""
    t = tok.revoke_token(open_store(ctx), name)
    click.echo(f'token "{t.name}" revoked at {(t.revoked_at or "")[:19]}Z (recorded in the stream '
               f"{tok.ADMIN_STREAM}).", err=True)


@cli.group("remote")
def remote_group() -> None:
    """The team server this machine sends its records to (`evstore push`)."""


@remote_group.command("set")
@click.argument("url")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A file holding this machine's token (`evstore tokens add NAME --scope append` on the server).")
@click.option("--machine", default=None, help="The machine name events record (default: the host name).")
def remote_set(url: str, token_file: Path, machine: str | None) -> None:
    """Send what this machine records to the team server at URL (the local store stays the spool)."""
    from eventstore import remote

    path = remote.set_remote(url, token_file, machine)
    click.echo(f"remote set in {path}: records go to {url} (`evstore push` sends the backlog now)", err=True)


@remote_group.command("show")
def remote_show() -> None:
    """The team server this machine sends to (never the token)."""
    from eventstore import remote

    found = remote.configured()
    if found is None:
        raise EvstoreError("No remote is set — run `evstore remote set URL --token-file FILE`.")
    click.echo(json.dumps({"url": found.url, "machine": found.machine}))


@cli.command("push")
@click.option("--retries", type=click.IntRange(0, 20), default=6, show_default=True,
              help="Retries of a batch the server could not take (exponential backoff from 0.1 s).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def push_cmd(ctx: click.Context, retries: int, as_json: bool) -> None:
    """Send the local events not sent yet to the team server now (in order; exit 1 if a batch is refused)."""
    from dataclasses import asdict

    from eventstore import remote

    result = remote.push(open_store(ctx), retries=retries)
    if as_json:
        click.echo(json.dumps(asdict(result)))
    elif result.skipped:
        click.echo("another push of this store is running; it sends the backlog", err=True)
    else:
        click.echo(f"sent {result.sent} events in {result.batches} batches ({result.duplicates} already recorded); "
                   f"backlog {result.backlog}", err=True)
    if result.error is not None:
        raise EvstoreError(f"the push stopped, the backlog is kept: {result.error} — `evstore doctor` shows it; "
                           "`evstore push` again when it is fixed.")
