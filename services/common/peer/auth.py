"""The inter-node handshake: every call between nodes proves the ``distributed_cookie``.

Why not the cookie itself: it would cross the network in clear on every call. A caller
sends its node name, the time, and an HMAC-SHA256 of both under the cookie; the callee
recomputes it. A proof older than :data:`MAX_SKEW` seconds (or from further in the
future) is refused, which bounds a replay by someone who can read the link; links
that need more than that use mTLS. Pure: the clock is passed in.

Worked example: node ``a`` calls at t=1000 with ``("a", "1000", hmac(cookie, "a|1000"))``;
``b`` with the same cookie accepts it until t=1300; with another cookie it refuses and
logs ``cluster.refused`` naming ``a``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

MAX_SKEW = 300  # s
NODE_KEY = "ternmq-node"
TIME_KEY = "ternmq-time"
PROOF_KEY = "ternmq-proof"
ADDRESS_KEY = "ternmq-address"  # the caller's inter-node address, for logs and replies


def _mac(cookie: str, node: str, stamp: str) -> str:
    msg = f"ternmq-cluster-v1|{node}|{stamp}".encode()
    return hmac.new(cookie.encode(), msg, hashlib.sha256).hexdigest()


def credentials(cookie: str, node: str, now: float) -> tuple[tuple[str, str], ...]:
    """The metadata a call to another node carries."""
    stamp = str(int(now))
    return ((NODE_KEY, node), (TIME_KEY, stamp), (PROOF_KEY, _mac(cookie, node, stamp)))


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    node: str  # who the caller says it is ("" if it did not say)
    reason: str  # why it was refused


def check(cookie: str, metadata: dict[str, str], now: float) -> Verdict:
    """Whether a call's metadata proves the cookie."""
    node = metadata.get(NODE_KEY, "")
    stamp = metadata.get(TIME_KEY, "")
    proof = metadata.get(PROOF_KEY, "")
    if not (node and stamp and proof):
        return Verdict(False, node, "no cluster credentials")
    try:
        at = int(stamp)
    except ValueError:
        return Verdict(False, node, "malformed credentials")
    if abs(now - at) > MAX_SKEW:
        return Verdict(False, node, f"credentials {int(now - at)}s old (clock skew?)")
    if not hmac.compare_digest(proof, _mac(cookie, node, stamp)):
        return Verdict(False, node, "wrong distributed_cookie")
    return Verdict(True, node, "")
