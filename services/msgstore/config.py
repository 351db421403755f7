"""Settings of the msgstore service: its keys (declared once, see
services.common.settings) and :class:`MsgstoreSettings`, what the service reads of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from services.common.config import Config
from services.common.grpcutil import service_address
from services.common.settings import Setting
from services.common.typed_settings import computed, setting

FsyncPolicy = Literal["always", "interval", "never"]

SETTINGS: list[Setting] = [
    Setting(
        "msgstore.fsync",
        "enum",
        "always",
        "When appended messages reach the disk. always: every group commit is fsynced "
        "before any publisher is acknowledged (nothing acknowledged is lost, even on power "
        "loss). interval: acknowledge after the write reaches the OS, fsync every "
        "msgstore.fsync_interval (a node crash loses nothing; a power loss or kernel crash "
        "may lose that window). never: leave it to the OS (same risks, unbounded window).",
        choices=("always", "interval", "never"),
    ),
    Setting(
        "msgstore.fsync_interval",
        "duration",
        "1s",
        "With msgstore.fsync = interval: the longest time between fsyncs.",
    ),
    Setting("msgstore.max_batch", "int", "4096", "Most operations in one group commit.", minimum=1),
    Setting(
        "msgstore.max_batch_delay",
        "duration",
        "2ms",
        "How long a group commit may wait for the next batch of a busy listener stream "
        "(one that sent a batch within the last 20 ms) to gather more writes (0 = never wait).",
    ),
    Setting(
        "msgstore.map_size",
        "size",
        "4GB",
        "LMDB map size: the largest the store may grow (at least 1MB). Once live messages "
        "fill 90% of it, appends are refused with a clear error (publishers get a negative "
        "acknowledgement); the last 10% lets acknowledgements and deletes drain it.",
    ),
    Setting(
        "msgstore.tombstone_ttl",
        "duration",
        "1m",
        "How long a deleted queue's tombstone (its epoch and last sequence number) is kept "
        "before it is removed: longer than any request that may still carry an older "
        "epoch. Epochs never repeat, so a queue created after that needs no tombstone. "
        "never keeps them forever.",
    ),
    Setting(
        "msgstore.replication_factor",
        "int",
        "1",
        "Copies of each persistent session's queue (R), on its owner (the primary) and the "
        "next R - 1 members on the client id's hash ring. 1 = no replication: the queue is "
        "unavailable while its node is down (a persistent session resuming elsewhere is "
        "refused with 0x88 until that node returns).",
        minimum=1,
        maximum=7,
    ),
    Setting(
        "msgstore.write_quorum",
        "int",
        "0",
        "Copies that must hold a message durably, under msgstore.fsync, before its "
        "publisher is acknowledged (W <= R). 0 = a majority of msgstore.replication_factor.",
        minimum=0,
        maximum=7,
    ),
    Setting(
        "msgstore.failover_timeout",
        "duration",
        "10s",
        "How long a publish waits for a replicated queue to reach msgstore.write_quorum "
        "copies (a replica down, a failover under way) before the publisher is refused: "
        "PUBACK 0x80 for MQTT 5, no PUBACK for 3.1.1 (it sends again). Never a success for "
        "a message that is not on W copies.",
        minimum=0.01,
    ),
    Setting(
        "cluster.msgstore_listen",
        "address",
        "127.0.0.1:0",
        "Where this node's msgstore takes replicated queues' appends, fences and reads from "
        "the other nodes (host:port; every call must prove distributed_cookie). Port 0 takes "
        "a free port, which the cluster learns through gossip; on real hosts set a fixed one.",
    ),
]


def _forever_if_never(seconds: float) -> float:
    """``never`` parses as -1."""
    return math.inf if seconds < 0 else seconds


def write_quorum(r: int, w: int) -> int:
    """W as configured, with 0 read as a majority of R."""
    return w or r // 2 + 1


def quorum_problem(r: int, w: int) -> str:
    """Why R and W cannot work together ("" when they can): copies that can never all
    exist would refuse every publish."""
    if w > r:
        return f"msgstore.write_quorum = {w} is more than msgstore.replication_factor = {r}"
    return ""


def _gossip_address(config: Config) -> str:
    return service_address(config, "gossip")


def _address(config: Config) -> str:
    return service_address(config, "msgstore")


@dataclass(frozen=True, slots=True)
class MsgstoreSettings:
    """Built once at start-up (``typed_settings.build``) and passed to what needs it."""

    nodename: str = setting("nodename")
    data_dir: Path = setting("data_dir", convert=Path)
    address: str = computed(_address)
    fsync: FsyncPolicy = setting("msgstore.fsync")
    fsync_interval: float = setting("msgstore.fsync_interval")
    max_batch: int = setting("msgstore.max_batch")
    max_batch_delay: float = setting("msgstore.max_batch_delay")
    map_size: int = setting("msgstore.map_size")
    tombstone_ttl: float = setting("msgstore.tombstone_ttl", convert=_forever_if_never)
    replication_factor: int = setting("msgstore.replication_factor")
    configured_quorum: int = setting("msgstore.write_quorum")
    failover_timeout: float = setting("msgstore.failover_timeout")
    listen: str = setting("cluster.msgstore_listen")
    cookie: str = setting("distributed_cookie")
    gossip_address: str = computed(_gossip_address)

    @property
    def write_quorum(self) -> int:
        return write_quorum(self.replication_factor, self.configured_quorum)

    @property
    def store_path(self) -> Path:
        return self.data_dir / "msgstore"
