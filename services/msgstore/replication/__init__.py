"""Replicated offline queues (``msgstore.replication_factor``): the pure protocol core.

``log`` is one replica's copy of a queue's positions and the rule for taking the
primary's appends; ``primary`` is the queue's primary, which numbers entries, sends them
and decides what is committed; ``failover`` chooses whose copy a new primary starts from.
No I/O: the msgstore's shell stores the messages by position and carries the messages
between nodes (DESIGN §4, "Queue replication").
"""
