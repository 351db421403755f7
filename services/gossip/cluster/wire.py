"""The membership core's messages and states to and from ``cluster.proto``.

One function each way per type; the decoders check what a peer could get wrong (an
unknown kind or state, an unsorted member list) and raise :class:`WireError`, which the
shell counts and drops: a bad message from a peer never reaches the core.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.gossip.cluster.address_book import Entry
from services.gossip.membership import members as ml
from services.gossip.membership.messages import (
    Ack,
    Alive,
    Dead,
    Gossip,
    Message,
    Nack,
    Ping,
    PingReq,
    Rumour,
    State,
    Suspect,
)
from services.pb import cluster_pb2


class WireError(ValueError):
    """A message from a peer that does not decode to a valid core message."""


_KINDS: dict[type, int] = {Ping: 1, Ack: 2, Nack: 3, PingReq: 4, Gossip: 5}


def rumour_to_pb(r: Rumour) -> cluster_pb2.Rumour:
    by = r.by if isinstance(r, Suspect | Dead) else ""
    return cluster_pb2.Rumour(state=int(r.state), node=r.node, incarnation=r.incarnation, by=by)


def rumour_from_pb(pb: cluster_pb2.Rumour) -> Rumour:
    if pb.state == State.ALIVE:
        return Alive(pb.node, pb.incarnation)
    if pb.state == State.SUSPECT:
        return Suspect(pb.node, pb.incarnation, pb.by)
    if pb.state == State.DEAD:
        return Dead(pb.node, pb.incarnation, pb.by)
    raise WireError(f"unknown rumour state {pb.state}")


def message_to_pb(m: Message) -> cluster_pb2.DetectorMessage:
    pb = cluster_pb2.DetectorMessage(
        kind=_KINDS[type(m)],
        src=m.src,
        incarnation=m.incarnation,
        rumours=[rumour_to_pb(r) for r in m.rumours],
    )
    if not isinstance(m, Gossip):
        pb.seq = m.seq
    if isinstance(m, Ping | PingReq):
        pb.target = m.target
    return pb


def message_from_pb(pb: cluster_pb2.DetectorMessage) -> Message:
    if not pb.src:
        raise WireError("a detector message without its sender")
    rumours = tuple(rumour_from_pb(r) for r in pb.rumours)
    kind = pb.kind
    if kind == 1:
        return Ping(pb.src, pb.incarnation, pb.seq, pb.target, rumours)
    if kind == 2:
        return Ack(pb.src, pb.incarnation, pb.seq, rumours)
    if kind == 3:
        return Nack(pb.src, pb.incarnation, pb.seq, rumours)
    if kind == 4:
        return PingReq(pb.src, pb.incarnation, pb.seq, pb.target, rumours)
    if kind == 5:
        return Gossip(pb.src, pb.incarnation, rumours)
    raise WireError(f"unknown detector message kind {kind}")


def state_to_pb(m: ml.MemberList, book: Mapping[str, Entry]) -> cluster_pb2.MemberState:
    return cluster_pb2.MemberState(
        records=[
            cluster_pb2.MemberRecord(node=r.node, version=r.version, status=int(r.status))
            for r in m.records
        ],
        addresses=[
            cluster_pb2.Address(node=n, address=e.address, incarnation=e.incarnation)
            for n, e in sorted(book.items())
        ],
    )


def state_from_pb(pb: cluster_pb2.MemberState) -> tuple[ml.MemberList, dict[str, Entry]]:
    try:
        records = tuple(
            ml.Record(r.node, r.version, ml.Status(r.status))
            for r in sorted(pb.records, key=lambda r: r.node)
        )
        member_list = ml.check(ml.MemberList(records))
    except (ValueError, ml.InvalidMemberList) as exc:
        raise WireError(f"bad member list: {exc}") from exc
    book = {a.node: Entry(a.address, a.incarnation) for a in pb.addresses if a.node and a.address}
    return member_list, book
