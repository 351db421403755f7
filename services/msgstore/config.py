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
        "How long a group commit may wait to gather more writes (0 = never wait).",
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
        "Copies of each persistent queue (R). 1 = no replication. Replicated queues are "
        "not built yet, so only 1 is accepted: more would promise copies that are not made.",
        minimum=1,
        maximum=1,
    ),
    Setting(
        "msgstore.write_quorum",
        "int",
        "1",
        "Copies that must be durable before a publisher is acknowledged (W <= R); "
        "only 1 until replicated queues are built.",
        minimum=1,
        maximum=1,
    ),
]


def _forever_if_never(seconds: float) -> float:
    """``never`` parses as -1."""
    return math.inf if seconds < 0 else seconds


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

    @property
    def store_path(self) -> Path:
        return self.data_dir / "msgstore"
