"""Settings of the registry service: its keys (declared once, see
services.common.settings) and :class:`RegistrySettings`, what the service reads.

The registry also reads a few listener keys that decide what a session *is*
(``persistent_client_expiration``, ``max_session_expiry_interval``,
``max_offline_messages``, ``allow_register_during_netsplit``) and the msgstore's
``msgstore.replication_factor``: one frozen object holds them all, so the rest of the
service never looks a key up by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.common.config import Config
from services.common.grpcutil import service_address
from services.common.settings import Setting
from services.common.typed_settings import computed, setting

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
        "registry.quorum_timeout",
        "duration",
        "1s",
        "How long one round of the session directory (a CONNECT's claim of its client id "
        "over a majority of the members) may wait for answers before it is tried again; "
        "the claim gives up after registry.rpc_timeout and the CONNECT gets 0x88.",
        minimum=0.01,
        maximum=60,
    ),
    Setting(
        "cluster.registry_listen",
        "address",
        "127.0.0.1:0",
        "Where this node's registry takes the other nodes' session-directory rounds and "
        "session handovers (host:port; every call must prove distributed_cookie). Port 0 "
        "takes a free port, which the cluster learns through gossip; on real hosts set a "
        "fixed one.",
    ),
    Setting(
        "registry.map_size",
        "size",
        "1GB",
        "Largest size of the registry's session table (its keys and values), and of the "
        "acceptor's votes in a cluster; a write past it is refused.",
        minimum=1024 * 1024,
    ),
]

NEVER = 0xFFFFFFFF


def _seconds(value: float) -> int:
    """A duration setting as MQTT expiry seconds (``never``, i.e. -1, becomes NEVER)."""
    if value < 0:
        return NEVER
    return min(int(value), NEVER)


def _unlimited_is_zero(value: int) -> int:
    """A message count where a negative value means no limit, as 0 (no limit) here."""
    return 0 if value < 0 else value


def _address(service: str) -> Callable[[Config], str]:
    def resolve(config: Config) -> str:
        return service_address(config, service)

    return resolve


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """Built once at start-up (``typed_settings.build``) and passed to what needs it."""

    node: str = setting("nodename")
    data_dir: Path = setting("data_dir", convert=Path)
    address: str = computed(_address("registry"))
    msgstore_address: str = computed(_address("msgstore"))
    gossip_address: str = computed(_address("gossip"))
    takeover_timeout: float = setting("registry.takeover_timeout")
    rpc_timeout: float = setting("registry.rpc_timeout")
    expiry_check_interval: float = setting("registry.expiry_check_interval")
    map_size: int = setting("registry.map_size")
    quorum_timeout: float = setting("registry.quorum_timeout")
    registry_listen: str = setting("cluster.registry_listen")
    cookie: str = setting("distributed_cookie")
    # seconds, NEVER = keep forever
    persistent_client_expiration: int = setting("persistent_client_expiration", convert=_seconds)
    # seconds, NEVER = no cap
    max_session_expiry_interval: int = setting("max_session_expiry_interval", convert=_seconds)
    # 0 = unlimited
    max_offline_messages: int = setting("max_offline_messages", convert=_unlimited_is_zero)
    max_online_messages: int = setting("max_online_messages")  # negative = unlimited
    max_inflight_messages: int = setting("max_inflight_messages")
    allow_register_during_netsplit: bool = setting("allow_register_during_netsplit")
    replication_factor: int = setting("msgstore.replication_factor")

    @property
    def max_online_len(self) -> int:
        """Queue limit while online: ``max_online_messages`` plus the inflight window;
        0 = unlimited."""
        if self.max_online_messages < 0:
            return 0
        return self.max_online_messages + self.max_inflight_messages

    @property
    def store_path(self) -> Path:
        return self.data_dir / "registry"

    @property
    def quorum_path(self) -> Path:
        """The acceptor's votes: apart from the session table, always synced."""
        return self.data_dir / "quorum"
