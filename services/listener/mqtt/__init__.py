"""Sans-IO MQTT 3.1 / 3.1.1 / 5.0 codec.

``types`` (packet values, enums), ``errors`` (reason-carrying exceptions), ``decoder``
(``Decoder.feed(bytes) -> list[Packet]``), ``encoder`` (``encode(packet, version)``,
``encode_publish`` fast path), ``topics`` (topic name/filter syntax, shared
subscriptions), ``properties`` and ``rules`` (what each packet type may carry).
Modules starting with ``_`` are internal.
"""

from __future__ import annotations

from .decoder import Decoder
from .encoder import encode, encode_publish, encode_publish_properties
from .errors import EncodeError, MQTTError

__all__ = [
    "Decoder",
    "EncodeError",
    "MQTTError",
    "encode",
    "encode_publish",
    "encode_publish_properties",
]
