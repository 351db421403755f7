"""The listener's metrics: connections and packets, and what routing did with messages.

Per-packet and per-message counters are held as their children (one per packet type or
QoS, made up front), so the hot path does one ``inc`` and no label lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from services.common.metrics import Child, MetricsRegistry
from services.listener.mqtt.types import Packet

PACKET_NAMES: dict[type, str] = {cls: cls.__name__.upper() for cls in get_args(Packet)}
"""The ``type`` label of the packet counters, by packet class."""


class ListenerMetrics:
    """Connections, packets and bytes."""

    def __init__(self, m: MetricsRegistry) -> None:
        self.connections = m.gauge("connections", "Open MQTT connections")
        packets_in = m.counter("packets_received_total", "MQTT packets received", ["type"])
        packets_out = m.counter("packets_sent_total", "MQTT packets sent", ["type"])
        self.packets_in: dict[type, Child] = {
            cls: packets_in.labels(name) for cls, name in PACKET_NAMES.items()
        }
        self.packets_out: dict[type, Child] = {
            cls: packets_out.labels(name) for cls, name in PACKET_NAMES.items()
        }
        self.bytes_in = m.counter("bytes_received_total", "Bytes received from clients").labels()
        self.bytes_out = m.counter("bytes_sent_total", "Bytes sent to clients").labels()
        self.protocol_errors = m.counter(
            "protocol_errors_total", "Connections closed for malformed or forbidden packets"
        )
        self.refused = m.counter(
            "connections_refused_total",
            "Connections closed before their CONNECT was read (max_connections)",
            ["reason"],
        )


class RoutingMetrics:
    """Messages published, delivered, queued and dropped; the routing table's size."""

    def __init__(
        self,
        m: MetricsRegistry,
        sessions: Callable[[], int],
        subscriptions: Callable[[], int],
        retained: Callable[[], int],
    ) -> None:
        published = m.counter("messages_published_total", "PUBLISHes accepted", ["qos"])
        self.published = [published.labels(str(qos)) for qos in (0, 1, 2)]
        delivered = m.counter("messages_delivered_total", "PUBLISHes sent", ["qos"])
        self.delivered = [delivered.labels(str(qos)) for qos in (0, 1, 2)]
        self.dropped = m.counter("messages_dropped_total", "Deliveries dropped", ["reason"])
        self.shared_redelivered = m.counter(
            "shared_redelivered_total",
            "Shared groups' copies a member lost unacknowledged, given to another",
            ["reason"],
        )
        self.queued = m.counter("messages_queued_total", "Appends to session queues").labels()
        self.forwarded = m.counter(
            "messages_forwarded_total", "Copies sent to sessions on other nodes"
        ).labels()
        self.store_errors = m.counter("store_errors_total", "Failed queue appends").labels()
        m.gauge("sessions_online", "Sessions connected to this listener", fn=sessions)
        m.gauge("subscriptions", "Subscriptions in the routing table", fn=subscriptions)
        m.gauge("retained_messages", "Retained messages", fn=retained)
