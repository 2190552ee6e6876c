"""Proof commands: verify-proof (offline: the file and the key, nothing else) and witness.

The store-side commands (keygen's note keys, checkpoint, prove) live here too, each in its own
function.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventstore import config
from eventstore.cli import cli
from eventstore.errors import EvstoreError

if TYPE_CHECKING:
    from eventstore.tlog.note import NoteSigner

_VKEY = click.Path(exists=True, dir_okay=False, path_type=Path)


@cli.command("verify-proof")
@click.argument("proof_file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--vkey", "vkey", type=_VKEY, required=True,
              help="The log's verifier key (PREFIX.vkey of `evstore keygen`).")
@click.option("--witness-vkey", "witness_vkeys", type=_VKEY, multiple=True,
              help="Require a valid cosignature by this witness (its PREFIX.witness.vkey); repeatable.")
@click.option("--origin", default=None, help="The log's origin line (default: the key's name, as evstore writes it).")
@click.option("--json", "as_json", is_flag=True, help="Print what was proven as JSON.")
def verify_proof_command(proof_file: Path, vkey: Path, witness_vkeys: tuple[Path, ...], origin: str | None,
                         as_json: bool) -> None:
    """Check an inclusion or consistency proof file with nothing but the file and the log's key (no
    store, no network); exit 1 saying what does not hold."""
    from eventstore.tlog import note, proofs

    log = note.read_verifier_key(vkey)
    witnesses = [note.read_verifier_key(p) for p in witness_vkeys]
    try:
        data = proof_file.read_bytes()
    except OSError as exc:
        raise EvstoreError(f"Cannot read the proof file {proof_file}: {exc.strerror}.") from exc
    try:
        report = proofs.verify_proof(data, log, witnesses=witnesses, origin=origin)
    except EvstoreError as exc:
        raise type(exc)(f"{proof_file}: {exc} — the proof does not hold; do not trust this record.") from exc
    click.echo(json.dumps(report.to_dict()) if as_json else report.summary)


@cli.group()
def witness() -> None:
    """Run a C2SP tlog-witness that cosigns checkpoints of the logs it trusts."""


@witness.command("serve")
@click.option("--key-file", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The witness's Ed25519 private key (PREFIX.key of `evstore keygen`).")
@click.option("--name", "name", default=None,
              help="The witness's key name (default: the name in PREFIX.witness.vkey beside the key).")
@click.option("--trust", "trust", type=_VKEY, multiple=True, required=True,
              help="A log's verifier key (its PREFIX.vkey): cosign that log's checkpoints; repeatable.")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The witness's state (SQLite file, created if missing).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
def witness_serve(key_file: Path, name: str | None, trust: tuple[Path, ...], db: Path, host: str, port: int) -> None:
    """Serve POST /add-checkpoint (C2SP tlog-witness): cosign each checkpoint of a trusted log that
    extends the last one cosigned for it."""
    import uvicorn

    from eventstore.tlog import note
    from eventstore.tlog.witness import Witness, witness_app

    signer = log_signer(key_file, name, witness=True)
    w = Witness(db, signer, [note.read_verifier_key(p) for p in trust])
    click.echo(f"witness {signer.verifier.vkey} on http://{host}:{port}/add-checkpoint for "
               f"{', '.join(sorted(w.trusted))}", err=True)
    uvicorn.run(witness_app(w), host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)


# ------------------------------------------------------------------ the store side: checkpoint, prove


def log_signer(key_file: Path, name: str | None, *, witness: bool = False) -> NoteSigner:
    """The log's note signing key (``witness``: a witness's cosigning key): the PEM private key of
    ``evstore keygen`` under ``name``, by default the name in ``PREFIX.vkey`` (``PREFIX.witness.vkey``)
    beside ``PREFIX.key``, whose key must match."""
    from eventstore.tlog import note

    sibling = key_file.with_name(key_file.name.removesuffix(".key") + (".witness.vkey" if witness else ".vkey"))
    who, keygen = ("witness", "`evstore keygen`") if witness else ("log key", "`evstore keygen --name NAME`")
    vkey = note.read_verifier_key(sibling) if sibling.exists() else None
    if name is None:
        if vkey is None:
            raise EvstoreError(f"The {who} has no name: give --name NAME, or keep {sibling.name} (of {keygen}) "
                               f"beside {key_file}.")
        name = vkey.name
    signer = note.NoteSigner.from_key_file(key_file, name, note.ALG_COSIGNATURE_V1 if witness else note.ALG_ED25519)
    if vkey is not None and vkey.name == name and vkey != signer.verifier:
        raise EvstoreError(f"{sibling} is not the {'witness' if witness else 'verifier'} key of {key_file}; keep the "
                           "files `evstore keygen` wrote together.")
    return signer


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvstoreError(f"Cannot read the {what} {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError as exc:
        raise EvstoreError(f"{path} is not a {what} (not UTF-8 text).") from exc


@cli.command("checkpoint")
@click.option("--key-file", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The log's Ed25519 private key (PREFIX.key of `evstore keygen`; its name is read from PREFIX.vkey).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the signed checkpoint (keep a copy away from the store).")
@click.option("--origin", default=None, help="The checkpoint's origin line (default: the key's name).")
@click.option("--name", "name", default=None, help="The key's name (default: the name in PREFIX.vkey).")
@click.option("--witness", "witnesses", multiple=True, metavar="URL",
              help="Ask the C2SP tlog-witness at URL to cosign (with --witness-vkey, in the same order); repeatable.")
@click.option("--witness-vkey", "witness_vkeys", type=_VKEY, multiple=True,
              help="The cosignature key (PREFIX.witness.vkey) of each --witness, in order.")
@click.pass_context
def checkpoint_command(ctx: click.Context, key_file: Path, out: Path, origin: str | None, name: str | None,
                       witnesses: tuple[str, ...], witness_vkeys: tuple[Path, ...]) -> None:
    """Sign the log's Merkle tree head as a C2SP checkpoint (a signed note), record it in the store and
    write it to --out; with --witness, add the witnesses' cosignatures (a refusal is an error)."""
    from eventstore import checkpoints
    from eventstore.cli import open_store
    from eventstore.tlog import note

    if len(witnesses) != len(witness_vkeys):
        raise click.UsageError(f"Give one --witness-vkey for each --witness ({len(witnesses)} --witness, "
                               f"{len(witness_vkeys)} --witness-vkey).")
    signer = log_signer(key_file, name)
    pairs = [(url, note.read_verifier_key(p)) for url, p in zip(witnesses, witness_vkeys, strict=True)]
    store = open_store(ctx)
    cosign = (lambda text, cp: checkpoints.cosign(store, text, cp, pairs)) if pairs else None
    made = checkpoints.make_checkpoint(store, signer, origin=origin, cosign=cosign)
    _write(out, made)
    cp = checkpoints.read_checkpoint(made)
    extra = f", cosigned by {', '.join(v.name for _, v in pairs)}" if pairs else ""
    click.echo(f"checkpoint {cp.origin} at {cp.size} events, root {cp.root.hex()[:16]}…{extra} -> {out}", err=True)


def _write(out: Path, text: str) -> None:
    """Write ``text`` to ``out`` whole (a temporary file renamed over it): never half a checkpoint."""
    import os

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise EvstoreError(f"Cannot write {out}: {exc.strerror}.") from exc


@cli.command("prove")
@click.argument("stream", required=False)
@click.option("--version", "version", type=click.IntRange(1, config.MAX_INT), default=None, help="The event's version in STREAM.")
@click.option("--event-id", "event_id", default=None, help="The event's id (instead of STREAM --version).")
@click.option("--checkpoint", "checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The signed checkpoint (of `evstore checkpoint`) to prove the event's inclusion in.")
@click.option("--consistency", "consistency", nargs=2, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="OLD NEW", help="Prove that the log of checkpoint NEW extends the one of checkpoint OLD.")
@click.pass_context
def prove(ctx: click.Context, stream: str | None, version: int | None, event_id: str | None,
          checkpoint: Path | None, consistency: tuple[Path, Path] | None) -> None:
    """Print an RFC 9162 proof as JSON: an event's inclusion in a checkpoint (STREAM --version V
    --checkpoint FILE), or --consistency OLD NEW; `evstore verify-proof` checks it offline."""
    from eventstore import checkpoints
    from eventstore.cli import open_store
    from eventstore.tlog.proofs import ConsistencyProof, InclusionProof

    proof: InclusionProof | ConsistencyProof
    if consistency:
        if stream or version is not None or event_id or checkpoint:
            raise click.UsageError("--consistency OLD NEW takes no STREAM, --version, --event-id or --checkpoint.")
        old, new = (_read_text(p, "checkpoint") for p in consistency)
        store = open_store(ctx)
        try:
            proof = checkpoints.consistency(store, old, new)
        except EvstoreError as exc:
            raise type(exc)(f"{consistency[0]} -> {consistency[1]}: {exc}") from exc
    else:
        if checkpoint is None:
            raise click.UsageError("--checkpoint FILE is required (or --consistency OLD NEW).")
        if event_id is None and (stream is None or version is None):
            raise click.UsageError("Give STREAM --version V, or --event-id ID.")
        if event_id is not None and (stream is not None or version is not None):
            raise click.UsageError("--event-id takes no STREAM or --version.")
        text = _read_text(checkpoint, "checkpoint")
        store = open_store(ctx)
        try:
            proof = checkpoints.inclusion(store, text, stream_id=stream, version=version, event_id=event_id)
        except EvstoreError as exc:
            raise type(exc)(f"{checkpoint}: {exc}") from exc
    click.echo(json.dumps(checkpoints.to_json(proof), ensure_ascii=False))
