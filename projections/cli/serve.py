"""CLI: ``evstore serve`` (the web pages and the JSON API of :mod:`projections.serve`)."""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import click

from eventstore import spool
from eventstore.cli import cli, store_url
from eventstore.errors import EvstoreError


def _token(token_file: Path | None, env: str = "EVSTORE_SERVE_TOKEN") -> str | None:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise EvstoreError(f"Cannot read the token file {token_file}: {exc}.") from exc
        if not token:
            raise EvstoreError(f"The token file {token_file} is empty; put the token on its first line.")
        return token
    return os.environ.get(env) or None


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (anything but loopback needs a token, for reads too).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A name clients reach the server by (its Host header), besides the --host address; others get "
                   "421 (DNS rebinding guard). Repeatable.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="TCP port.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file holding the token that reads and writes (default: $EVSTORE_SERVE_TOKEN; none: read-only). "
                   "At least 128 bits.")
@click.option("--read-token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file holding a token that only reads (default: $EVSTORE_SERVE_READ_TOKEN); with one, reads "
                   "need a token on loopback too.")
@click.option("--seal", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar="EVSTORE_SERVE_SEAL", help="A seal (`evstore seal`) the integrity page shows and checks.")
@click.option("--checkpoint", "old_seal", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar="EVSTORE_SERVE_CHECKPOINT", hidden=True, help="Deprecated spelling of --seal.")
@click.option("--public-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The Ed25519 public key the --seal is signed with (default: HMAC, EVSTORE_SIGNING_KEY).")
@click.option("--analytics-dir", type=click.Path(file_okay=False), default=None, envvar="EVSTORE_ANALYTICS_DIR",
              help="Where the Parquet tables live (default: the store's own folder; see docs/metrics.md).")
@click.option("--live-poll", type=click.FloatRange(0.05, 60), default=0.5, show_default=True,
              help="Seconds between polls for a run page in live mode.")
@click.option("--hook-files", "hook_files", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A folder the http hooks (POST /hooks/...) may read the files a call names from, e.g. session "
                   "transcripts (repeatable; default: the source system's own folder).")
@click.option("--no-drain", "no_drain", is_flag=True,
              help="Do not drain the hook spool (what `evstore hook claude-code` writes) into the store.")
@click.option("--drain-interval", type=click.FloatRange(0.05, 3600), default=1.0, show_default=True,
              help="Seconds between drains of the hook spool.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Server processes (workers forked from this one, sharing the port); more than one wants "
                   "PostgreSQL.")
@click.option("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
              help="Addresses of reverse proxies whose X-Forwarded-For/-Proto are believed (comma-separated, or *); "
                   "default: none.")
@click.pass_context
def serve_cmd(ctx: click.Context, host: str, allowed_hosts: tuple[str, ...], port: int, token_file: Path | None,
              read_token_file: Path | None, seal: Path | None,
              old_seal: Path | None, public_key: Path | None, analytics_dir: str | None, live_poll: float,
              hook_files: tuple[Path, ...], no_drain: bool, drain_interval: float, workers: int,
              forwarded_allow_ips: str | None) -> None:
    """Serve runs, states, diffs, metrics and integrity in a browser, and a JSON API (writes need a token)."""
    from projections import prefork

    # Listening first, before the heavy imports and the store's checks: a client that connects while the
    # server starts (or restarts) waits in the backlog, answered as soon as a worker is up, not refused.
    sock = prefork.listen(host, port)
    try:
        _serve(ctx, sock, host=host, allowed_hosts=allowed_hosts, token_file=token_file,
               read_token_file=read_token_file, seal=seal, old_seal=old_seal, public_key=public_key,
               analytics_dir=analytics_dir, live_poll=live_poll, hook_files=hook_files, no_drain=no_drain,
               drain_interval=drain_interval, workers=workers, forwarded_allow_ips=forwarded_allow_ips)
    finally:
        sock.close()


def _serve(ctx: click.Context, sock: socket.socket, *, host: str, allowed_hosts: tuple[str, ...],
           token_file: Path | None, read_token_file: Path | None, seal: Path | None, old_seal: Path | None,
           public_key: Path | None, analytics_dir: str | None, live_poll: float, hook_files: tuple[Path, ...],
           no_drain: bool, drain_interval: float, workers: int, forwarded_allow_ips: str | None) -> None:
    from projections import prefork
    from projections.serve import ServeConfig, create_app, is_loopback
    from projections.serve.access import Policy

    if old_seal is not None:
        if seal is None:
            seal = old_seal
        click.echo("Warning: `serve --checkpoint` and EVSTORE_SERVE_CHECKPOINT are deprecated; use --seal or "
                   "EVSTORE_SERVE_SEAL (a checkpoint is a projection's position, the signed digest of the log is a "
                   "seal).", err=True)
    token = _token(token_file)
    read_token = _token(read_token_file, "EVSTORE_SERVE_READ_TOKEN")
    named = _named_writers(ctx)
    if not is_loopback(host) and token is None and not named:
        raise EvstoreError(f"Refusing to listen on {host} without a token; set EVSTORE_SERVE_TOKEN or --token-file, "
                           "or serve on a loopback address (--host 127.0.0.1).")
    # Weak tokens are refused before anything is opened; the policy also words the start-up line.
    policy = Policy.of(host=host, token=token, read_token=read_token, allowed_hosts=allowed_hosts,
                       tokens=_Named(named))
    obj = ctx.find_root().obj
    store_url(ctx)  # serving never creates a store: a mistyped --url is an error, not an empty database
    # The folder `evstore hook claude-code` spools to for this store (same URL, EVSTORE_SPOOL_DIR, XDG rules).
    drain_dir = None if no_drain else spool.spool_dir(obj.get("url"))
    cfg = ServeConfig(url=obj.get("url"), token=token, read_token=read_token, host=host,
                      allowed_hosts=allowed_hosts, analytics_dir=analytics_dir, seal=seal,
                      public_key=public_key, live_poll=live_poll, synchronous=obj.get("synchronous"),
                      hook_files=hook_files or None, drain_dir=drain_dir, drain_interval=drain_interval)
    options = {"log_level": "warning", "timeout_graceful_shutdown": prefork.GRACE,
               "proxy_headers": forwarded_allow_ips is not None, "forwarded_allow_ips": forwarded_allow_ips or ""}
    shown = f"[{host}]" if ":" in host else host
    at = f"http://{shown}:{prefork.bound_port(sock)}/"
    if workers > 1:
        # Each worker builds its application (its engine, its connections) after the fork; the parent has
        # imported the modules they use once (gunicorn's --preload), so a worker answers a few tens of
        # milliseconds after it is forked.
        from projections.serve.app import preload

        preload(options)
        click.echo(f"evstore serving on {at} with {workers} workers ({policy.describe()}); Ctrl-C stops", err=True)
        prefork.serve(sock, functools.partial(create_app, cfg), workers=workers, options=options)
        return
    app = create_app(cfg)
    click.echo(f"evstore serving on {at} ({policy.describe()}); Ctrl-C stops", err=True)
    if drain_dir is not None:
        click.echo(f"draining the hook spool {drain_dir} every {drain_interval:g} s (--no-drain: off)", err=True)
    prefork.serve(sock, lambda: app, workers=1, options=options)


class _Named:
    """The store's named tokens as the start-up line words them (the server asks the store per request)."""

    def __init__(self, can: bool) -> None:
        self.can = can

    def find(self, secret: str) -> None:
        return None

    def can_write(self) -> bool:
        return self.can


def _named_writers(ctx: click.Context) -> bool:
    """Whether the store has a named token that may write (`evstore tokens add NAME --scope append`)."""
    from eventstore import tokens
    from eventstore.cli import open_store

    store = open_store(ctx)
    try:
        return tokens.write_tokens_in_force(store) > 0
    finally:
        store.close()
