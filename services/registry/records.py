"""Sessions as protobuf: the admin view, the on-disk record, the gossip directory entry.

The registry's own table is stored as ``SessionInfo`` (the same message ``Sessions``
returns), so the disk format is versioned by the proto's rules, with no second schema.
"""

from __future__ import annotations

from services.common.session_key import SessionKey
from services.pb import common_pb2, gossip_pb2, registry_pb2
from services.registry.leadership import key_bytes
from services.registry.sessions import Session

SESSIONS_PREFIX = "sessions"
SUBS_PREFIX = "subs"


def pb_key(key: SessionKey) -> common_pb2.SessionKey:
    return common_pb2.SessionKey(mountpoint=key[0], client_id=key[1])


def from_pb_key(key: common_pb2.SessionKey) -> SessionKey:
    return (key.mountpoint, key.client_id)


def moved_command(key: SessionKey, route: str) -> registry_pb2.RegistryCommand:
    """Tell listeners that ``key``'s copies go to ``route`` (a node, or one of a node's
    listener processes) from now on."""
    return registry_pb2.RegistryCommand(moved=registry_pb2.Moved(key=pb_key(key), node=route))


def to_info(s: Session) -> registry_pb2.SessionInfo:
    return registry_pb2.SessionInfo(
        key=pb_key(s.key),
        node=s.node,
        listener_id=s.listener_id,
        online=s.online,
        epoch=s.epoch,
        session_expiry=s.session_expiry,
        connected_us=s.connected_us,
        disconnected_us=s.disconnected_us,
        peer=s.peer,
        username=s.username,
        proto_ver=s.proto_ver,
        persistent=s.persistent,
        queued=s.queued,
    )


def from_info(info: registry_pb2.SessionInfo) -> Session:
    return Session(
        key=from_pb_key(info.key),
        epoch=info.epoch,
        online=info.online,
        node=info.node,
        listener_id=info.listener_id,
        session_expiry=info.session_expiry,
        proto_ver=info.proto_ver,
        connected_us=info.connected_us,
        disconnected_us=info.disconnected_us,
        peer=info.peer,
        username=info.username,
        queued=info.queued,
    )


def directory_ops(
    key: SessionKey, session: Session | None, drop_subs: bool, replicas: list[str]
) -> list[gossip_pb2.MetaOp]:
    """Gossip writes for one session: its ``sessions`` record (or its deletion), ``subs``."""
    mk = key_bytes(key)
    ops = []
    if session is None:
        ops.append(gossip_pb2.MetaOp(prefix=SESSIONS_PREFIX, key=mk, delete=True))
    else:
        record = gossip_pb2.SessionRecord(
            node=session.node,
            epoch=session.epoch,
            online=session.online,
            session_expiry=session.session_expiry,
            disconnected_us=session.disconnected_us,
            listener_id=session.listener_id,
            replicas=replicas,
        )
        ops.append(
            gossip_pb2.MetaOp(prefix=SESSIONS_PREFIX, key=mk, value=record.SerializeToString())
        )
    if drop_subs:
        ops.append(gossip_pb2.MetaOp(prefix=SUBS_PREFIX, key=mk, delete=True))
    return ops


def subs_ops(keys: list[SessionKey]) -> list[gossip_pb2.MetaOp]:
    """Gossip deletes of these sessions' subscriptions (for sessions with no record)."""
    return [gossip_pb2.MetaOp(prefix=SUBS_PREFIX, key=key_bytes(k), delete=True) for k in keys]
