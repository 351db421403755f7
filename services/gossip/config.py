"""Settings of the gossip service: its keys (declared once, see
services.common.settings) and :class:`GossipSettings`, what the service reads of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.config import Config
from services.common.grpcutil import service_address
from services.common.settings import Setting
from services.common.typed_settings import computed, setting

SETTINGS: list[Setting] = [
    Setting(
        "cluster.listen",
        "address",
        "127.0.0.1:0",
        "This node's inter-node address (host:port): other members reach its gossip "
        "service here, and every call on it must prove distributed_cookie. Port 0 takes a "
        "free port (cluster show tells which); on real hosts set a fixed one, as "
        "VerneMQ's 44053.",
    ),
    Setting(
        "cluster.seeds",
        "str",
        "",
        "Comma-separated inter-node addresses (host:port) of members to join at start-up; "
        "empty: start alone, or wait for ternmq-admin cluster join.",
    ),
    Setting(
        "discovery",
        "enum",
        "static",
        "How a node finds its cluster: static (cluster.seeds, or ternmq-admin cluster "
        "join) or redis (nodes register their inter-node address in Redis with a TTL and "
        "join the members they find there).",
        choices=("static", "redis"),
    ),
    Setting(
        "discovery.redis_url",
        "str",
        "redis://127.0.0.1:6379/0",
        "The Redis that discovery = redis uses. Nodes with different distributed_cookie "
        "values register apart, so two clusters may share one Redis.",
    ),
    Setting(
        "discovery.redis_ttl",
        "duration",
        "30s",
        "How long a node's registration lives in Redis unless renewed (it is renewed every "
        "third of it); a node that died is no longer found after it.",
    ),
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
        "How long the tombstone of a deleted key is kept before garbage collection, on a "
        "node with peers (it lets peers that missed the delete learn of it). A node alone "
        "collects tombstones at the next gc_interval: no peer can bring a deleted value "
        "back. never keeps them forever.",
    ),
    Setting(
        "gossip.gc_interval",
        "duration",
        "1m",
        "How often expired tombstones are garbage collected.",
    ),
]


def _address(config: Config) -> str:
    return service_address(config, "gossip")


def _ttl(value: float) -> float | None:
    """``never`` (-1) becomes None: never collect."""
    return None if value < 0 else value


def _gc_interval(value: float) -> float:
    return max(0.1, value)


def _seeds(value: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in value.split(",") if s.strip())


@dataclass(frozen=True, slots=True)
class GossipSettings:
    """Built once at start-up (``typed_settings.build``) and passed to what needs it."""

    nodename: str = setting("nodename")
    cookie: str = setting("distributed_cookie")
    cluster_listen: str = setting("cluster.listen")
    seeds: tuple[str, ...] = setting("cluster.seeds", convert=_seeds)
    discovery: str = setting("discovery")
    redis_url: str = setting("discovery.redis_url")
    redis_ttl: float = setting("discovery.redis_ttl")
    data_dir: Path = setting("data_dir", convert=Path)
    address: str = computed(_address)
    map_size: int = setting("gossip.map_size")
    max_batch: int = setting("gossip.max_batch")
    watch_batch_size: int = setting("gossip.watch_batch_size")
    watch_batch_bytes: int = setting("gossip.watch_batch_bytes")
    tombstone_ttl_s: float | None = setting("gossip.tombstone_ttl", convert=_ttl)
    gc_interval_s: float = setting("gossip.gc_interval", convert=_gc_interval)

    @property
    def store_path(self) -> Path:
        return self.data_dir / "gossip"
