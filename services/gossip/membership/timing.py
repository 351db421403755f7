"""The failure detector's parameters, and the detection time they give.

Detection time, no message loss, healthy nodes (health multiplier 1), ``N`` members
(down ones included: they stay in the probe order), ``T`` the probe interval:

* **SIGKILL**, the inter-node connection closes: the shell calls ``peer_disconnected``
  and the node is down at once on every member that held a connection; the others learn
  it from the ``Dead`` rumour within about one ``gossip_interval``.
* **SIGSTOP** (no close; only probes tell), or a kill no connection reports: every live
  member probes the node within ``(N - 1)·T`` (each walks the others in a fixed order,
  one per period), that probe fails ``T`` later, and a suspicion times out at most
  ``suspicion_max`` after it started (earlier when other members confirm it), so
  **every live member declares it down within ``N·T + suspicion_max``**
  (:func:`detection_bound`). With the defaults: 1.4 s for 3 members, 1.8 s for 5,
  2.0 s for 6. Measured in the simulator (200 pauses each): every live member has it
  down after 0.72 s median, 0.98 s worst for 3 members; 0.78 s median, 1.2 s worst
  for 5.
* **Netsplit** (symmetric): up to 8 members, the majority side sees every minority node
  down within ``N·T + suspicion_max`` (a majority node always has a helper on its own
  side, whose nack keeps its health multiplier at 1). A node cut off *alone* gets no
  answer at all, blames itself (Lifeguard), and its multiplier climbs by one per failed
  probe up to ``max_multiplier`` ``M``; it loses its majority after failing to reach
  ``⌈N/2⌉`` peers, within ``T·(1 + Σ_{j=1..⌈N/2⌉} min(j, M)) + suspicion_max``; a
  minority node with partners does no worse. :func:`netsplit_bound` is the larger of the
  two: 1.6 s for 3 members, 2.2 s for 5 or 6 with the defaults.

A node whose health multiplier ``m`` rose (it missed answers it should have had) probes
every ``m·T`` and waits ``m·ack_timeout``, so its own detections slow down; under loss
the times are probabilistic (the simulator tests measure them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    """Seconds and counts; the defaults suit loopback (detection ≤ 2 s up to 6 members)."""

    probe_interval: float = 0.2
    ack_timeout: float = 0.1  # direct ping, then indirect probes
    nack_timeout: float = 0.07  # a helper's wait before it nacks
    indirect_probes: int = 3
    suspicion_min: float = 0.4
    suspicion_max: float = 0.8
    confirmations: int = 2  # independent suspecters that bring the timeout to the min
    gossip_interval: float = 0.1
    gossip_fanout: int = 3
    retransmit_mult: int = 4  # a rumour goes out retransmit_mult·⌈log10(N+1)⌉ times
    max_piggyback: int = 8
    max_multiplier: int = 4  # local health: probe timing stretched up to this factor
    stall_threshold: float = 0.25  # a tick this late means this node itself stalled

    def __post_init__(self) -> None:
        if not 0 < self.ack_timeout < self.ack_timeout + self.nack_timeout < self.probe_interval:
            raise ValueError("need 0 < ack_timeout, 0 < nack_timeout, sum < probe_interval")
        if not 0 < self.suspicion_min <= self.suspicion_max:
            raise ValueError("need 0 < suspicion_min <= suspicion_max")
        if min(self.gossip_interval, self.stall_threshold) <= 0:
            raise ValueError("intervals must be positive")
        if min(self.retransmit_mult, self.max_piggyback, self.max_multiplier) < 1:
            raise ValueError("counts must be at least 1")
        if min(self.indirect_probes, self.confirmations, self.gossip_fanout) < 0:
            raise ValueError("counts must not be negative")

    def retransmits(self, members: int) -> int:
        """How many times a rumour is passed on: enough to reach everyone w.h.p."""
        return self.retransmit_mult * max(1, math.ceil(math.log10(members + 1)))


def detection_bound(config: Config, members: int) -> float:
    """Seconds within which every live member declares a paused node down (no loss,
    healthy nodes, a stable membership of ``members`` nodes): ``N·T + suspicion_max``."""
    return members * config.probe_interval + config.suspicion_max


def netsplit_bound(config: Config, members: int) -> float:
    """Seconds after a symmetric partition (no loss) within which every minority node has
    lost its majority and every majority node sees the minority down (module doc)."""
    t, cap = config.probe_interval, config.max_multiplier
    alone = t * (1 + sum(min(j, cap) for j in range(1, (members + 1) // 2 + 1)))
    return max(detection_bound(config, members), alone + config.suspicion_max)
