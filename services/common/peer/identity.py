"""A node's identity: its name, and the incarnation of its data directory.

Why an incarnation: ids a node mints (ballots, epochs, DVV dots) must never repeat, not
even after its data directory is wiped and it comes back under the same name (DESIGN
§4). Counters kept in the data directory restart from zero with it; a random 64-bit
incarnation minted when the directory is first used does not, so every id that carries
it stays unique. A node keeps its incarnation across restarts (same directory); a
wiped or new directory gets a new one, which peers can also see (a node that lost its
state must not vote with a promise it no longer remembers).

The file ``data_dir/node_id`` holds ``nodename incarnation``. A data directory written
by another node name is refused: two names on one directory would share ids.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

FILE = "node_id"


class IdentityError(RuntimeError):
    """The data directory belongs to another node; the message says which."""


@dataclass(frozen=True, slots=True)
class Identity:
    node: str
    incarnation: int  # 1..2**64-1, minted once per data directory

    @property
    def tag(self) -> str:
        """``node#incarnation-hex``: unique across wipes, for logs and the member list."""
        return f"{self.node}#{self.incarnation:016x}"


def load_or_create(data_dir: Path, node: str) -> Identity:
    """The identity stored in ``data_dir``, minted (and fsynced) on first use."""
    path = data_dir / FILE
    if path.exists():
        stored_node, _, raw = path.read_text(encoding="utf-8").strip().rpartition(" ")
        if stored_node != node:
            raise IdentityError(
                f"{path}: this data directory belongs to node {stored_node!r}, not {node!r}"
            )
        return Identity(node, int(raw, 16))
    data_dir.mkdir(parents=True, exist_ok=True)
    identity = Identity(node, secrets.randbits(64) or 1)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{node} {identity.incarnation:016x}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # two services starting at once: one file wins, both read it
    return load_or_create(data_dir, node)
