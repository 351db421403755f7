"""The msgstore's metrics: what the store writes, how often it commits, what fsync costs.

Latencies are exposed as ``_sum``/``_count`` counter pairs (rate(sum)/rate(count) is the
mean) plus a ``_max`` gauge since start, which is what an operator tuning
``msgstore.fsync`` and ``msgstore.max_batch_delay`` needs without a histogram type.
"""

from __future__ import annotations

from collections.abc import Callable

from services.common.metrics import MetricsRegistry


class StoreMetrics:
    def __init__(self, registry: MetricsRegistry) -> None:
        r = registry
        self.writes = r.counter(
            "msgstore_writes_total", "Operations written (appends, acks, marks, opens, deletes)."
        )
        self.appends = r.counter("msgstore_appends_total", "Messages appended to queues.")
        self.append_bytes = r.counter("msgstore_append_bytes_total", "Bytes of messages appended.")
        self.rejected = r.counter(
            "msgstore_appends_rejected_total", "Appends refused, by status.", ["status"]
        )
        self.commits = r.counter("msgstore_commits_total", "Group commits (write transactions).")
        self.errors = r.counter(
            "msgstore_errors_total", "Store operations that failed, by op.", ["op"]
        )
        self.commit_sum = r.counter(
            "msgstore_commit_seconds_sum", "Time spent applying and committing groups."
        )
        self.fsyncs = r.counter("msgstore_fsync_seconds_count", "fsyncs of the store.")
        self.fsync_sum = r.counter("msgstore_fsync_seconds_sum", "Time spent in fsync.")
        self.fsync_max = r.gauge("msgstore_fsync_seconds_max", "Longest fsync since start.")
        self.registry = registry

    def gauges(
        self,
        queues: Callable[[], float],
        entries: Callable[[], float],
        size: Callable[[], float],
        used: Callable[[], float],
        limit: Callable[[], float],
    ) -> None:
        """Register the gauges read from the store when scraped."""
        r = self.registry
        r.gauge("msgstore_queues", "Persistent session queues.", fn=queues)
        r.gauge("msgstore_entries", "Unacknowledged messages in all queues.", fn=entries)
        r.gauge("msgstore_bytes", "Bytes of unacknowledged messages in all queues.", fn=size)
        r.gauge("msgstore_store_used_bytes", "Bytes the store file uses.", fn=used)
        r.gauge("msgstore_store_limit_bytes", "The store's map size (msgstore.map_size).", fn=limit)

    def fsynced(self, seconds: float) -> None:
        self.fsyncs.inc()
        self.fsync_sum.inc(seconds)
        if seconds > self.fsync_max.labels().value:
            self.fsync_max.set(seconds)


def replication_gauges(
    registry: MetricsRegistry,
    queues: Callable[[], float],
    replicated: Callable[[], float],
    lag: Callable[[], float],
    held: Callable[[], float] = lambda: 0.0,
) -> None:
    """Replicated queues (``msgstore.replication_factor`` > 1), read when scraped."""
    registry.gauge(
        "msgstore_replicated_queues", "Replicated queues this node is the primary of.", fn=queues
    )
    registry.gauge(
        "msgstore_replicated_entries",
        "Entries the replicas of this node's queues acknowledged since start.",
        fn=replicated,
    )
    registry.gauge(
        "msgstore_replica_lag_max",
        "Entries the most lagging replica of a queue replicated from here lacks.",
        fn=lag,
    )
    registry.gauge(
        "msgstore_replica_held_bytes",
        "Bytes of messages kept in memory until every replica of their queue holds them.",
        fn=held,
    )
