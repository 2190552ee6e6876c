"""Proof commands: verify-proof (offline: the file and the key, nothing else) and witness.

The store-side commands (keygen's note keys, checkpoint, prove) live here too, each in its own
function.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

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


def _witness_signer(key_file: Path, name: str | None) -> NoteSigner:
    """The witness's cosigning key: the PEM private key of ``evstore keygen`` under ``name``, by
    default the name in ``PREFIX.witness.vkey`` beside ``PREFIX.key`` (whose key must match)."""
    from eventstore.tlog import note

    sibling = key_file.with_name(key_file.name.removesuffix(".key") + ".witness.vkey")
    vkey = note.read_verifier_key(sibling) if sibling.exists() else None
    if name is None:
        if vkey is None:
            raise EvstoreError(f"The witness has no name: give --name NAME, or keep {sibling.name} (of `evstore "
                               f"keygen`) beside {key_file}.")
        name = vkey.name
    signer = note.NoteSigner.from_key_file(key_file, name, note.ALG_COSIGNATURE_V1)
    if vkey is not None and vkey.name == name and vkey != signer.verifier:
        raise EvstoreError(f"{sibling} is not the witness key of {key_file}; keep the pair that `evstore keygen` "
                           f"wrote together.")
    return signer


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
@click.option("--port", default=8766, show_default=True, type=int, help="Port to listen on.")
def witness_serve(key_file: Path, name: str | None, trust: tuple[Path, ...], db: Path, host: str, port: int) -> None:
    """Serve POST /add-checkpoint (C2SP tlog-witness): cosign each checkpoint of a trusted log that
    extends the last one cosigned for it."""
    import uvicorn

    from eventstore.tlog import note
    from eventstore.tlog.witness import Witness, witness_app

    signer = _witness_signer(key_file, name)
    w = Witness(db, signer, [note.read_verifier_key(p) for p in trust])
    click.echo(f"witness {signer.verifier.vkey} on http://{host}:{port}/add-checkpoint for "
               f"{', '.join(sorted(w.trusted))}", err=True)
    uvicorn.run(witness_app(w), host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
