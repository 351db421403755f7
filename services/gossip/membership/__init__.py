"""Cluster membership, the pure part: the durable member list (a CRDT), the SWIM-style
failure detector (a state machine fed messages and ticks) and the node's view built from
both. No I/O and no clock: the gossip service's peer shell carries the messages, calls
``tick`` and persists the member list."""
