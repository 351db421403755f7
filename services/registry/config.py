"""Settings of the registry service (declared once; see services.common.settings).

The registry also reads a few listener keys that decide what a session *is*
(``persistent_client_expiration``, ``max_session_expiry_interval``,
``max_offline_messages``, ``allow_register_during_netsplit``) and the msgstore's
``msgstore.replication_factor``; :func:`registry_config` gathers them in one frozen object
so the rest of the service never looks a key up by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.settings import Setting

SETTINGS: list[Setting] = [
    Setting(
        "registry.takeover_timeout",
        "duration",
        "5s",
        "How long a CONNECT that takes over a live session waits for the old connection "
        "to report it has closed (and flushed its store writes) before going ahead anyway.",
        minimum=0.01,
        maximum=300,
    ),
    Setting(
        "registry.rpc_timeout",
        "duration",
        "5s",
        "Deadline of each call to the msgstore and gossip services; a call that misses it "
        "fails the CONNECT with reason 0x88 (server unavailable).",
        minimum=0.01,
        maximum=300,
    ),
    Setting(
        "registry.expiry_check_interval",
        "duration",
        "1s",
        "How often offline sessions are checked for expiry (the expiry resolution).",
        minimum=0.01,
        maximum=3600,
    ),
    Setting(
        "registry.map_size",
        "size",
        "1GB",
        "Largest size of the registry's session table on disk (LMDB map size).",
        minimum=1024 * 1024,
    ),
]

NEVER = 0xFFFFFFFF


def _seconds(value: float) -> int:
    """A duration setting as MQTT expiry seconds (``never``, i.e. -1, becomes NEVER)."""
    if value < 0:
        return NEVER
    return min(int(value), NEVER)


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """Everything the registry reads from the node's configuration."""

    node: str
    data_dir: Path
    takeover_timeout: float
    rpc_timeout: float
    expiry_check_interval: float
    map_size: int
    persistent_client_expiration: int  # seconds, NEVER = keep forever
    max_session_expiry_interval: int  # seconds, NEVER = no cap
    max_offline_messages: int  # 0 = unlimited
    max_online_len: int  # queue limit while online: max_online_messages + window; 0 = unlimited
    allow_register_during_netsplit: bool
    replication_factor: int


def registry_config(config: Any) -> RegistryConfig:
    max_offline: int = config["max_offline_messages"]
    max_online: int = config["max_online_messages"]
    return RegistryConfig(
        node=config["nodename"],
        data_dir=Path(config["data_dir"]),
        takeover_timeout=float(config["registry.takeover_timeout"]),
        rpc_timeout=float(config["registry.rpc_timeout"]),
        expiry_check_interval=float(config["registry.expiry_check_interval"]),
        map_size=int(config["registry.map_size"]),
        persistent_client_expiration=_seconds(config["persistent_client_expiration"]),
        max_session_expiry_interval=_seconds(config["max_session_expiry_interval"]),
        max_offline_messages=0 if max_offline < 0 else max_offline,
        max_online_len=0 if max_online < 0 else max_online + config["max_inflight_messages"],
        allow_register_during_netsplit=bool(config["allow_register_during_netsplit"]),
        replication_factor=int(config["msgstore.replication_factor"]),
    )
