# The C accelerator of eventstore/tree.py's hashing (eventstore/_tree_native.c), when it was built.
from collections.abc import Sequence

OPENSSL_VERSION: str
SOURCE_SHA256: str

def leaf_hashes(leaf_data: Sequence[bytes], /) -> list[bytes]: ...
def parents(hashes: Sequence[bytes], rounds: int, /) -> list[bytes]: ...
