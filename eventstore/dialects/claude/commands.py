"""Claude Code capture commands: ``ingest claude``, ``watch claude``, ``hook ...``, ``doctor``.

The dialect's command module: the one part of a dialect that may import click (never
``projections``; import-linter contracts in ``pyproject.toml``).  ``hook`` and ``doctor`` are
top-level commands registered in the ``evstore.commands`` entry-point group; ``evstore ingest
claude`` and ``watch claude`` call :func:`ingest_claude` and :func:`watch_claude`, which the
dialect names (:attr:`~eventstore.dialects.base.Dialect.ingest_command`, ``watch_command``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from eventstore.cli import open_store
from eventstore.errors import EvstoreError

# json, shutil and pathlib are imported where they are used: `evstore --help` imports this module
# to list `hook` and `doctor`, and should not pay for them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

#: Hook events the installed configuration subscribes to.
HOOK_EVENTS = ("SessionStart", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop",
               "PreCompact", "SessionEnd")


#: The path of ``evstore serve``'s hook endpoint, and the variable an http hook's token header reads.
HOOK_PATH = "/hooks/claude-code"
TOKEN_VAR = "EVSTORE_SERVE_TOKEN"


def _is_ours(hook: object) -> bool:
    if not isinstance(hook, dict):
        return False
    if hook.get("type") == "http":
        return str(hook.get("url", "")).endswith(HOOK_PATH)
    command = str(hook.get("command"))
    return ("evstore" in command or "eventstore" in command) and "hook claude-code" in command


def _url(ctx: click.Context) -> str | None:
    url: str | None = ctx.find_root().obj.get("url")
    return url


def _drain(ctx: click.Context, store: Any, *, scrub: bool = True, blob_threshold: int | None = None) -> Any:
    from eventstore import capture, spool

    return capture.drain(store, spool.spool_dir(_url(ctx)), scrub=scrub, blob_threshold=blob_threshold)


def ingest_claude(ctx: click.Context, paths: tuple[Path, ...], *, stream: str | None, as_json: bool,
                  scrub: bool, blob_threshold: int | None = None) -> None:
    """``evstore ingest claude FILE.jsonl|DIR``: archive transcripts (and drain the hook spool)."""
    import json

    from eventstore import capture
    from eventstore.display import printable

    if not paths:
        raise click.UsageError("give at least one transcript FILE.jsonl or folder (e.g. ~/.claude/projects)")
    store = open_store(ctx, create=True)
    _drain(ctx, store, scrub=scrub, blob_threshold=blob_threshold)
    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.progress import Progress

        bar = Progress(transient=True)
        task = bar.add_task("transcripts", total=None)
        bar.start()

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
    else:
        bar = None
    try:
        results = capture.ingest_transcripts(store, list(paths), scrub=scrub, progress=progress, stream=stream,
                                             blob_threshold=blob_threshold)
    finally:
        if bar is not None:
            bar.stop()
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_dict()))
        elif r.rewritten:
            click.echo(f"{r.file} -> {r.stream} @ {r.version} (prefix rewritten since it was recorded: "
                       "recorded as a finding, not merged)")
        else:
            note = "unchanged" if r.events == 0 else f"+{r.lines} lines, +{r.events} events"
            secrets = sum(1 for x in r.findings if x.code == "secret-scrubbed")
            flag = f", {secrets} secret(s) scrubbed" if secrets else ""
            click.echo(printable(f"{r.file} -> {r.stream} @ {r.version} ({note}{flag})"))
        for x in r.findings if not as_json else ():
            if x.code == "unreadable-line-over-limit":
                click.echo(printable(f"warning: {x.message}"), err=True)
    lines = sum(r.lines for r in results)
    size = sum(r.bytes for r in results)
    sessions = len({r.stream.split("/", 1)[0] for r in results})
    if not as_json:
        click.echo(f"archived {len(results)} transcript(s) of {sessions} session(s): {lines} new line(s), "
                   f"{size:,} new byte(s)", err=True)
    if not scrub:
        click.echo("warning: --no-scrub: secrets in these transcripts are stored as they were", err=True)


def watch_claude(ctx: click.Context, path: Path, *, interval: float, as_json: bool) -> None:
    """``evstore watch claude DIR``: record new transcript lines (and spooled hooks) as they come."""
    import json

    from eventstore import capture
    from eventstore.dialects.claude.secrets import Scrubber

    store = open_store(ctx, create=True)
    scrubber = Scrubber()
    seen: dict[Path, tuple[int, int]] = {}
    click.echo(f"watching {path} (claude); Ctrl-C stops", err=True)
    try:
        while True:
            _drain(ctx, store)
            for f in capture.transcript_files(path) if path.exists() else []:
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue
                sig = (st.st_mtime_ns, st.st_size)
                if seen.get(f) == sig:
                    continue
                try:
                    r = capture.ingest_transcript(store, f, scrubber=scrubber)
                except EvstoreError as exc:
                    click.echo(f"warning: {exc}", err=True)
                    continue
                seen[f] = sig
                if r.events:
                    click.echo(json.dumps(r.to_dict()) if as_json else
                               f"{r.file} -> {r.stream} @ {r.version} (+{r.lines} lines)")
            time.sleep(interval)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


@click.group()
def hook() -> None:
    """Claude Code hooks: spool, drain, install."""


@hook.command("claude-code")
@click.pass_context
def hook_claude_code(ctx: click.Context) -> None:
    """Spool one hook call from stdin (what Claude Code runs; always exit 0, silent)."""
    from eventstore.entry import run_hook

    run_hook(_url(ctx) or os.environ.get("EVSTORE_URL"))


@hook.command("drain")
@click.option("--json", "as_json", is_flag=True, help="Print what was recorded as JSON.")
@click.option("--quiet", is_flag=True, help="Print nothing (what hooks start in the background).")
@click.pass_context
def hook_drain(ctx: click.Context, as_json: bool, quiet: bool) -> None:
    """Record the spooled hook calls in the store (and the transcripts they point at)."""
    import json

    from eventstore import capture, spool
    from eventstore.cli import store_file
    from eventstore.errors import database_failure

    directory = spool.spool_dir(_url(ctx))
    lock = spool.drain_lock(directory)
    if lock is None:  # before opening the store: a burst of drains costs one
        if not quiet:
            click.echo("a drain of this spool is running already: it records what is waiting", err=True)
        return
    try:
        try:
            store = open_store(ctx, create=True)  # hooks may run before `evstore init`: a drain creates the store
        except BaseException:
            os.close(lock)
            raise
        result = capture.drain(store, directory, lock=lock)  # it lets the lock go
        from eventstore import remote

        remote.send_if_set(store)  # a team server set: send now (what fails waits, `evstore doctor` shows it)
    except Exception as exc:  # what stopped the drain goes where `evstore doctor` looks
        known = database_failure(exc, store_file(ctx))
        what = known or exc
        spool.log_drain_error(directory, "drain failed: " + (
            str(what) if isinstance(what, EvstoreError) else f"{type(exc).__name__}: {(str(exc) or '?').splitlines()[0]}"))
        if known is not None:
            raise known from exc
        raise
    if quiet:
        return
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    click.echo(f"recorded {result.hooks} hook call(s), {len(result.states)} state version(s), "
               f"{len(result.transcripts)} transcript update(s)")
    for err in result.errors:
        click.echo(f"warning: {err}", err=True)


def _settings_path(user: bool) -> Path:
    from pathlib import Path

    return (Path.home() / ".claude" / "settings.json") if user else Path(".claude") / "settings.json"


def evstore_argv() -> list[str]:
    """The absolute command line of the evstore that is running: the console script itself when
    ``sys.argv[0]`` is one (a venv that is not on Claude Code's PATH still works), else this
    Python interpreter with ``-m eventstore``."""
    exe = sys.argv[0]
    if os.path.basename(exe).startswith("evstore") and os.path.isfile(exe) and os.access(exe, os.X_OK):
        return [os.path.abspath(exe)]
    return [sys.executable, "-m", "eventstore"]


def url_file_for(url: str, *, write: bool = True) -> Path:
    """A file holding ``url`` alone, readable by its owner only (mode 0600), under
    ``$XDG_CONFIG_HOME/evstore/urls/`` and named by the URL's SHA-256: what an installed hook
    names with ``--url-file`` when the URL holds a password, so the password never lands in a
    settings file (which is often committed)."""
    import hashlib
    from pathlib import Path

    folder = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "evstore" / "urls"
    path = folder / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".url")
    if not write:
        return path
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, url.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def has_password(url: str) -> bool:
    """Whether a database URL holds a password (``scheme://user:PASSWORD@host/...`` or ``?password=``)."""
    from eventstore.config import url_has_password

    return url_has_password(url)


def hook_store_args(url: str | None, *, url_file: str | None = None, write: bool = True) -> tuple[list[str], str]:
    """The arguments by which an installed hook names its store, and a sentence saying how.
    A URL with a password is never written out: the hook reads it from ``url_file`` (the one
    ``--url-file`` named) or a file :func:`url_file_for` writes (unless not ``write``: a dry run)."""
    if url_file is not None:
        path = os.path.abspath(url_file)
        return ["--url-file", path], f"the hook reads the store's URL from {path}"
    if url is None:
        return [], ("the hook uses $EVSTORE_URL from Claude Code's environment, else ./.evstore/events.db in "
                    "the folder Claude Code runs in")
    if not has_password(url):
        return ["--url", url], f"the hook records into {url}"
    held = url_file_for(url, write=write)
    return ["--url-file", str(held)], (f"the store's URL holds a password, which is not written into the settings: "
                                       f"the hook reads the URL from {held} (mode 0600)")


def hook_command(url: str | None, *, url_file: str | None = None, write: bool = True) -> str:
    """The shell command line of the installed hook, every argument quoted for ``sh -c``
    (Claude Code runs a command hook through the shell)."""
    import shlex

    args, _ = hook_store_args(url, url_file=url_file, write=write)
    return shlex.join([*evstore_argv(), *args, "hook", "claude-code"])


def hook_entry(url: str | None, *, serve_url: str | None = None, url_file: str | None = None,
               write: bool = True) -> dict[str, Any]:
    """The hook Claude Code runs: ``evstore hook claude-code``, or with ``serve_url`` an http hook
    posting to ``evstore serve`` with the token from ``$EVSTORE_SERVE_TOKEN`` (Claude Code fills a
    header only from the variables the hook lists in ``allowedEnvVars``)."""
    if serve_url is None:
        return {"type": "command", "command": hook_command(url, url_file=url_file, write=write), "timeout": 15}
    return {"type": "http", "url": serve_url.rstrip("/") + HOOK_PATH, "timeout": 15,
            "headers": {"Authorization": f"Bearer ${TOKEN_VAR}"}, "allowedEnvVars": [TOKEN_VAR]}


def merged_settings(settings: dict[str, Any], hook: str | dict[str, Any], *, uninstall: bool) -> dict[str, Any]:
    """``settings`` with evstore's hook entries added (once) or removed; nothing else touched.
    ``hook``: the entry (:func:`hook_entry`), or a command line."""
    import json

    entry_hook = hook if isinstance(hook, dict) else {"type": "command", "command": hook, "timeout": 15}
    out: dict[str, Any] = json.loads(json.dumps(settings))
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise EvstoreError('settings "hooks" is not an object; fix it by hand first.')
    for name in HOOK_EVENTS:
        entries = [e for e in hooks.get(name, []) if isinstance(e, dict)]
        kept = []
        for entry in entries:
            inner = [h for h in entry.get("hooks", []) if not _is_ours(h)]
            if inner or not entry.get("hooks"):
                kept.append({**entry, "hooks": inner} if "hooks" in entry else entry)
        if not uninstall:
            kept.append({"matcher": "*", "hooks": [dict(entry_hook)]}
                        if name in ("PreToolUse", "PostToolUse", "PostToolUseFailure") else
                        {"hooks": [dict(entry_hook)]})
        if kept:
            hooks[name] = kept
        else:
            hooks.pop(name, None)
    if not hooks:
        out.pop("hooks")
    return out


@hook.command("install")
@click.option("--project", "scope", flag_value="project", default=True, help="./.claude/settings.json (default).")
@click.option("--user", "scope", flag_value="user", help="~/.claude/settings.json.")
@click.option("--dry-run", is_flag=True, help="Print the merged settings instead of writing them.")
@click.option("--uninstall", is_flag=True, help="Remove evstore's hooks (and nothing else).")
@click.option("--http", "serve_url", metavar="SERVE_URL", default=None,
              help="Install http hooks posting to `evstore serve` at SERVE_URL (e.g. http://127.0.0.1:8765) "
                   "with the token from $EVSTORE_SERVE_TOKEN, instead of the spooling command.")
@click.pass_context
def hook_install(ctx: click.Context, scope: str, dry_run: bool, uninstall: bool, serve_url: str | None) -> None:
    """Merge evstore's hooks into Claude Code's settings (a backup first; idempotent)."""
    import json
    import shutil

    if serve_url is not None and not serve_url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{serve_url!r} is not an http(s) URL; give the address `evstore serve` "
                                 "listens on, e.g. http://127.0.0.1:8765.", param_hint="--http")
    path = _settings_path(scope == "user")
    try:
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError) as exc:
        raise EvstoreError(f"{path}: cannot read it as JSON ({exc}); nothing was changed.") from exc
    if not isinstance(current, dict):
        raise EvstoreError(f"{path}: settings are not a JSON object; nothing was changed.")
    url = _url(ctx) or os.environ.get("EVSTORE_URL")
    if url is None and scope == "user":
        from eventstore.config import DEFAULT_URL, sqlite_file

        url = f"sqlite:///{sqlite_file(DEFAULT_URL).resolve()}"  # type: ignore[union-attr]
    url_file = ctx.find_root().obj.get("url_file")
    entry = hook_entry(url, serve_url=serve_url, url_file=url_file, write=not (dry_run or uninstall))
    merged = merged_settings(current, entry, uninstall=uninstall)
    text = json.dumps(merged, indent=2, ensure_ascii=False) + "\n"
    if dry_run:
        click.echo(text, nl=False)
        return
    if merged == current:
        click.echo(f"{path}: already {'without' if uninstall else 'with'} evstore's hooks; nothing to do")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        backup = path.with_name(f"{path.name}.evstore-backup-{time.strftime('%Y%m%dT%H%M%S')}")
        shutil.copy2(path, backup)
        click.echo(f"backup: {backup}", err=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    click.echo(f"{path}: evstore's hooks {'removed' if uninstall else 'installed'} ({', '.join(HOOK_EVENTS)})")
    if not uninstall and serve_url is None:
        click.echo(hook_store_args(url, url_file=url_file, write=False)[1], err=True)


@click.command()
@click.pass_context
def doctor(ctx: click.Context) -> None:
    """Check the hook spool: waiting records, claims a crashed drain left, recent hook and drain errors."""
    from eventstore import spool

    directory = spool.spool_dir(_url(ctx))
    click.echo(f"spool: {directory}")
    waiting = directory / spool.SPOOL
    n = sum(1 for _ in waiting.open("rb")) if waiting.exists() else 0
    claimed = sorted(directory.glob("claimed-*.jsonl")) if directory.is_dir() else []
    click.echo(f"waiting hook records: {n}; unfinished drains: {len(claimed)}")
    if directory.is_dir():
        lock = spool.drain_lock(directory)
        if lock is None:
            click.echo("drain: running now (evstore serve, watch or hook drain)")
        else:
            os.close(lock)
    failed = False
    for name, what in (("hook-errors.log", "hook errors"), (spool.DRAIN_ERRORS, "drain errors")):
        log = directory / name
        errors = log.read_text(encoding="utf-8", errors="replace").splitlines()[-10:] if log.exists() else []
        click.echo(f"{what}: {len(errors) and 'last ' + str(len(errors)) or 'none'}")
        for line in errors:
            click.echo(f"  {line}")
        failed = failed or bool(errors)
    drained = spool.last_drained(directory)
    click.echo(f"last complete drain: {drained or 'never'}")
    last = _last_error(directory / spool.DRAIN_ERRORS)
    if last is not None:
        at, message = last
        click.echo(f"last drain error: {at}: {message}")
        if drained is None or at > drained:  # ISO 8601 UTC stamps compare as text
            click.echo(f"drains are failing: none has run to its end since {at}; {n} hook record(s) wait in the "
                       "spool (nothing is lost: the next drain that succeeds records them).")
    failed = _remote_status(ctx) or failed
    if failed:
        ctx.exit(1)


def _remote_status(ctx: click.Context) -> bool:
    """The team server this machine sends to (eventstore/remote.py): backlog, oldest waiting event, last
    error; True when the last push failed."""
    from eventstore import remote
    from eventstore.cli import open_store
    from eventstore.errors import EvstoreError

    try:
        found = remote.configured()
    except EvstoreError as exc:
        click.echo(f"remote: {exc}")
        return True
    if found is None:
        click.echo("remote: none (records stay in this store; `evstore remote set URL --token-file FILE` sends "
                   "them to a team server)")
        return False
    try:
        st = remote.status(open_store(ctx))
    except EvstoreError as exc:
        click.echo(f"remote: {found.url} as machine {found.machine}; the local store cannot be read: {exc}")
        return True
    click.echo(f"remote: {found.url} as machine {found.machine}; backlog: {st['backlog']} event(s); last push: "
               f"{st['last_push_at'] or 'never'}")
    oldest = st["oldest_waiting"]
    if oldest is not None:
        click.echo(f"oldest waiting: position {oldest['position']} (stream {oldest['stream']}, recorded "
                   f"{oldest['recorded_at'][:19]}Z)")
    if st["last_error"]:
        click.echo(f"last push error: {st['last_error_at']}: {st['last_error']} (the backlog is kept; `evstore "
                   "push` retries)")
        return True
    return False


def _last_error(log: Path) -> tuple[str, str] | None:
    """(time, message) of the last line of a ``drain-errors.log`` (``<UTC time> pid N: message``)."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - 65536))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not lines:
        return None
    at, _, rest = lines[-1].partition(" ")
    message = rest.partition(": ")[2] if rest.startswith("pid ") else rest
    return at, message
