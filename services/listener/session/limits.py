"""Per-connection limits of the session state machine, read once from the configuration.

Theory of operation: the session never looks at the configuration itself; the server
builds one frozen ``SessionLimits`` per listener (``from_config``) and hands it to every
``Session`` of that listener. Sentinels are normalised here so the state machine only
deals with plain numbers: ``max_inflight_messages`` 0 (unlimited) becomes 65535, the
most packet identifiers a window can hold; ``max_online_messages`` -1 stays -1
(unlimited); ``max_session_expiry_interval`` "never" is -1 (no cap); ``max_message_size``
0 means no payload limit.

Worked example: ``max_inflight_messages = 0`` and a v5 client announcing Receive Maximum
10 give a delivery window of min(65535, 10) = 10 unacknowledged QoS 1/2 PUBLISHes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_PACKET_ID = 65535
"""Packet identifiers are 1..65535, so no window can be wider."""


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """What one listener allows its sessions; every field has the config key's meaning."""

    max_inflight_messages: int = 20
    max_online_messages: int = 1000
    retry_interval: float = 20.0
    keepalive_factor: float = 1.5
    max_keepalive: int = 65535
    max_client_id_size: int = 100
    allow_empty_client_id: bool = True
    max_message_size: int = 0
    max_packet_size: int = 268435455
    receive_max_broker: int = 100
    topic_alias_max_client: int = 100
    topic_alias_max_broker: int = 100
    max_qos: int = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    shared_subscription_available: bool = True
    upgrade_outgoing_qos: bool = False
    connect_timeout: float = 10.0
    max_session_expiry_interval: int = -1
    allowed_versions: frozenset[int] = frozenset({3, 4, 5})
    mountpoint: str = ""
    node: str = "ternmq@127.0.0.1"

    @property
    def inflight_window(self) -> int:
        """The broker's own cap on unacknowledged outbound QoS 1/2 messages."""
        if self.max_inflight_messages <= 0:
            return MAX_PACKET_ID
        return min(self.max_inflight_messages, MAX_PACKET_ID)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        listener_mountpoint: str,
        allowed_versions: frozenset[int],
    ) -> SessionLimits:
        """Limits for one listener from the keys declared in ``services/listener/config.py``."""
        expiry = float(config["max_session_expiry_interval"])
        return cls(
            max_inflight_messages=int(config["max_inflight_messages"]),
            max_online_messages=int(config["max_online_messages"]),
            retry_interval=float(config["retry_interval"]),
            keepalive_factor=float(config["keepalive_factor"]),
            max_keepalive=int(config["max_keepalive"]),
            max_client_id_size=int(config["max_client_id_size"]),
            allow_empty_client_id=bool(config["allow_empty_client_id"]),
            max_message_size=int(config["max_message_size"]),
            max_packet_size=int(config["max_packet_size"]),
            receive_max_broker=int(config["receive_max_broker"]),
            topic_alias_max_client=int(config["topic_alias_max_client"]),
            topic_alias_max_broker=int(config["topic_alias_max_broker"]),
            max_qos=int(config["max_qos"]),
            retain_available=bool(config["retain_available"]),
            wildcard_subscription_available=bool(config["wildcard_subscription_available"]),
            shared_subscription_available=bool(config["shared_subscription_available"]),
            upgrade_outgoing_qos=bool(config["upgrade_outgoing_qos"]),
            connect_timeout=float(config["connect_timeout"]),
            max_session_expiry_interval=-1 if expiry < 0 else min(int(expiry), 0xFFFFFFFF),
            allowed_versions=frozenset(allowed_versions),
            mountpoint=listener_mountpoint,
            node=str(config["nodename"]),
        )
