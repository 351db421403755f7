"""The msgstore between nodes: replicated queues (``msgstore.replication_factor`` > 1)."""
