"""The gossip service's metrics, created once and handed to the parts that count."""

from __future__ import annotations

from collections.abc import Callable

from services.common.metrics import MetricsRegistry
from services.gossip.store import MetaStore


class GossipMetrics:
    def __init__(
        self, registry: MetricsRegistry, store: MetaStore, watchers: Callable[[], int]
    ) -> None:
        self.store = store
        self.keys = registry.gauge("gossip_keys", "Visible metadata keys per prefix.", ["prefix"])
        registry.gauge(
            "gossip_tombstones", "Deleted keys not yet garbage collected.", fn=store.tombstone_count
        )
        registry.gauge("gossip_watchers", "Open Watch streams.", fn=watchers)
        self.put_requests = registry.counter(
            "gossip_put_requests_total", "Put requests acknowledged."
        )
        self.put_ops = registry.counter(
            "gossip_put_ops_total", "Operations in acknowledged Puts.", ["prefix"]
        )
        self.commits = registry.counter("gossip_commits_total", "Durable group commits.")
        self.commit_errors = registry.counter(
            "gossip_commit_errors_total", "Group commits that failed; their Puts were refused."
        )
        self.watch_events = registry.counter("gossip_watch_events_total", "Watch events sent.")
        self.gc_collected = registry.counter(
            "gossip_gc_collected_total", "Tombstones garbage collected."
        )
        self.refresh()

    def refresh(self) -> None:
        """Key gauges follow the store; called after each commit (a few ``len`` calls)."""
        for prefix in self.store.resolvers:
            self.keys.labels(prefix).set(self.store.count(prefix))
