"""Translation between the session's messages and their protobuf form (store, gossip).

Kept in one module so the wire form of a message is defined once: what the msgstore
persists and what gossip replicates must decode back to the same ``Message``.
"""

from __future__ import annotations

from services.listener.mqtt.types import NO_PROPERTIES, Properties
from services.listener.routing.model import SubOptions
from services.listener.session.messages import Message, OutboundMessage
from services.pb import common_pb2, gossip_pb2

_US = 1_000_000


def message_to_pb(msg: Message, node: str) -> common_pb2.MqttMessage:
    props = msg.properties
    pb = common_pb2.MqttMessage(
        msg_id=msg.msg_id,
        topic=msg.topic,
        mountpoint=msg.mountpoint,
        payload=msg.payload,
        qos=msg.qos,
        retain=msg.retain,
        publisher=msg.publisher,
        origin_node=node,
        published_us=int(msg.published_at * _US),
        expires_us=int(msg.expires_at * _US) if msg.expires_at is not None else 0,
    )
    if props is not NO_PROPERTIES:
        if props.payload_format_indicator is not None:
            pb.payload_format = props.payload_format_indicator
        if props.content_type is not None:
            pb.content_type = props.content_type
        if props.response_topic is not None:
            pb.response_topic = props.response_topic
        if props.correlation_data is not None:
            pb.correlation_data = props.correlation_data
        for key, value in props.user_properties:
            pb.user_properties.add(key=key, value=value)
    return pb


def message_from_pb(pb: common_pb2.MqttMessage) -> Message:
    props = NO_PROPERTIES
    if (
        pb.HasField("payload_format")
        or pb.content_type
        or pb.response_topic
        or pb.correlation_data
        or pb.user_properties
    ):
        props = Properties(
            payload_format_indicator=pb.payload_format if pb.HasField("payload_format") else None,
            content_type=pb.content_type or None,
            response_topic=pb.response_topic or None,
            correlation_data=pb.correlation_data or None,
            user_properties=tuple((u.key, u.value) for u in pb.user_properties),
        )
    return Message(
        msg_id=pb.msg_id,
        topic=pb.topic,
        payload=pb.payload,
        qos=pb.qos,
        retain=pb.retain,
        publisher=pb.publisher,
        mountpoint=pb.mountpoint,
        published_at=pb.published_us / _US,
        expires_at=pb.expires_us / _US if pb.expires_us else None,
        properties=props,
    )


def delivery_from_pb(pb: common_pb2.Delivery, seq: int | None, dup: bool) -> OutboundMessage:
    return OutboundMessage(
        message=message_from_pb(pb.msg),
        qos=pb.qos,
        retain=pb.retain,
        sub_ids=tuple(pb.sub_ids),
        seq=seq,
        dup=dup,
    )


def meta_key(mountpoint: str, name: str) -> bytes:
    """Gossip keys: ``mountpoint \\0 client_id`` (subs, sessions) or ``mountpoint \\0 topic``."""
    return f"{mountpoint}\0{name}".encode()


def split_meta_key(key: bytes) -> tuple[str, str]:
    mountpoint, _, name = key.decode().partition("\0")
    return mountpoint, name


def subs_to_pb(node: str, subs: dict[str, SubOptions]) -> bytes:
    record = gossip_pb2.SubscriberRecord(node=node)
    for topic_filter, opts in subs.items():
        record.subs.add(
            filter=topic_filter,
            qos=opts.qos,
            no_local=opts.no_local,
            retain_as_published=opts.retain_as_published,
            retain_handling=opts.retain_handling,
            sub_id=opts.sub_id or 0,
        )
    return bytes(record.SerializeToString())


def subs_from_pb(value: bytes) -> dict[str, SubOptions]:
    record = gossip_pb2.SubscriberRecord.FromString(value)
    return {
        e.filter: SubOptions(
            qos=e.qos,
            no_local=e.no_local,
            retain_as_published=e.retain_as_published,
            retain_handling=e.retain_handling,
            sub_id=e.sub_id or None,
            node=record.node,
        )
        for e in record.subs
    }
