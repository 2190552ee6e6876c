"""Transparency-log formats, exactly as their public specifications write them.

- :mod:`eventstore.tlog.merkle`: RFC 9162 §2.1 Merkle tree hashes, inclusion and consistency proofs.
- :mod:`eventstore.tlog.note`: C2SP signed-note (Ed25519) and tlog-cosignature (timestamped Ed25519).
- :mod:`eventstore.tlog.checkpoint`: C2SP tlog-checkpoint bodies.
- :mod:`eventstore.tlog.proofs`: checking a proof file offline (``evstore verify-proof``).
- :mod:`eventstore.tlog.witness`: a C2SP tlog-witness (``evstore witness serve``) and its client.

Nothing here reads the store: these modules are what an auditor needs, and the store side
(tree maintained on append, checkpoints recorded) builds on them.
"""
