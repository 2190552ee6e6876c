"""Proof commands: verify-proof (offline: the file and the key, nothing else) and witness.

The store-side commands (keygen's note keys, checkpoint, prove) live here too, each in its own
function.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from eventstore.cli import cli
from eventstore.errors import EvstoreError

_VKEY = click.Path(exists=True, dir_okay=False, path_type=Path)


@cli.command("verify-proof")
@click.argument("proof_file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--vkey", "vkey", type=_VKEY, required=True,
              help="The log's verifier key (PREFIX.vkey of `evstore keygen`).")
@click.option("--witness-vkey", "witness_vkeys", type=_VKEY, multiple=True,
              help="Require a valid cosignature by this witness (its PREFIX.witness.vkey); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print what was proven as JSON.")
def verify_proof_command(proof_file: Path, vkey: Path, witness_vkeys: tuple[Path, ...], as_json: bool) -> None:
    """Check a proof file of `evstore prove` with nothing but the file and the log's key (no store,
    no network); exit 1 saying what does not hold."""
    from eventstore.tlog import note, proofs

    log = note.read_verifier_key(vkey)
    witnesses = [note.read_verifier_key(p) for p in witness_vkeys]
    try:
        data = proof_file.read_bytes()
    except OSError as exc:
        raise EvstoreError(f"Cannot read the proof file {proof_file}: {exc.strerror}.") from exc
    try:
        report = proofs.verify_proof(data, log, witnesses=witnesses)
    except EvstoreError as exc:
        raise type(exc)(f"{proof_file}: {exc} — the proof does not hold; do not trust this record.") from exc
    click.echo(json.dumps(report.to_dict()) if as_json else report.summary)
