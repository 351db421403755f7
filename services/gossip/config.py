"""Settings of the gossip service (declared once; see services.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import Config
from services.common.settings import Setting

SETTINGS: list[Setting] = [
    Setting(
        "gossip.map_size",
        "size",
        "1GB",
        "LMDB map size of the metadata store (data_dir/gossip/): the largest it may grow. "
        "A full store refuses metadata writes with a clear error.",
    ),
    Setting(
        "gossip.max_batch",
        "int",
        "1024",
        "Most Put requests in one group commit (one fsync).",
        minimum=1,
    ),
    Setting(
        "gossip.watch_batch_size",
        "int",
        "1000",
        "Most updates in one Watch event (snapshot chunks and delta batches).",
        minimum=1,
    ),
    Setting(
        "gossip.watch_batch_bytes",
        "size",
        "4MB",
        "Largest Watch event, roughly, in bytes; a single larger value is still sent alone.",
        minimum=1024,
    ),
    Setting(
        "gossip.tombstone_ttl",
        "duration",
        "1h",
        "How long the tombstone of a deleted key is kept before garbage collection "
        "(it lets peers that missed the delete learn of it); never keeps them forever.",
    ),
    Setting(
        "gossip.gc_interval",
        "duration",
        "1m",
        "How often expired tombstones are garbage collected.",
    ),
]


@dataclass(frozen=True, slots=True)
class GossipSettings:
    """The gossip keys of a :class:`Config`, typed, read once at start-up."""

    map_size: int
    max_batch: int
    watch_batch_size: int
    watch_batch_bytes: int
    tombstone_ttl_s: float | None  # None: never collect
    gc_interval_s: float

    @classmethod
    def from_config(cls, config: Config) -> GossipSettings:
        ttl: float = config["gossip.tombstone_ttl"]
        return cls(
            map_size=config["gossip.map_size"],
            max_batch=config["gossip.max_batch"],
            watch_batch_size=config["gossip.watch_batch_size"],
            watch_batch_bytes=config["gossip.watch_batch_bytes"],
            tombstone_ttl_s=None if ttl < 0 else ttl,
            gc_interval_s=max(0.1, config["gossip.gc_interval"]),
        )
