"""The quorum core's values as protobuf, and back (``services/pb/quorum.proto``)."""

from __future__ import annotations

from services.common.session_key import SessionKey
from services.pb import common_pb2, quorum_pb2
from services.registry.quorum.acceptor import Slot
from services.registry.quorum.messages import (
    Accept,
    AcceptReply,
    Ballot,
    Prepare,
    PrepareReply,
    Promise,
    Proposal,
    Refusal,
)
from services.registry.quorum.register import Entry


def key_pb(key: SessionKey) -> common_pb2.SessionKey:
    return common_pb2.SessionKey(mountpoint=key[0], client_id=key[1])


def key_of(pb: common_pb2.SessionKey) -> SessionKey:
    return (pb.mountpoint, pb.client_id)


def ballot_pb(b: Ballot) -> quorum_pb2.Ballot:
    return quorum_pb2.Ballot(counter=b.counter, incarnation=b.incarnation, node=b.node)


def ballot_of(pb: quorum_pb2.Ballot) -> Ballot:
    return Ballot(pb.counter, pb.incarnation, pb.node)


def entry_pb(e: Entry) -> quorum_pb2.Entry:
    return quorum_pb2.Entry(
        owner=e.owner,
        epoch=e.epoch,
        replicas=e.replicas,
        state=e.state,
        persistent=e.persistent,
        prior=e.prior,
    )


def entry_of(pb: quorum_pb2.Entry) -> Entry:
    return Entry(pb.owner, pb.epoch, tuple(pb.replicas), pb.state, pb.persistent, pb.prior)


def _value_pb(value: Entry | None) -> quorum_pb2.Entry | None:
    """An unset field stands for "never written"."""
    return entry_pb(value) if value is not None else None


def _value(holder: quorum_pb2.Promise | quorum_pb2.Proposal | quorum_pb2.Slot) -> Entry | None:
    return entry_of(holder.value) if holder.HasField("value") else None


def slot_pb(s: Slot) -> quorum_pb2.Slot:
    return quorum_pb2.Slot(
        promised=ballot_pb(s.promised), accepted=ballot_pb(s.accepted), value=_value_pb(s.value)
    )


def slot_of(pb: quorum_pb2.Slot) -> Slot:
    return Slot(ballot_of(pb.promised), ballot_of(pb.accepted), _value(pb))


def prepare_pb(m: Prepare) -> quorum_pb2.PrepareRequest:
    return quorum_pb2.PrepareRequest(ballot=ballot_pb(m.ballot), keys=[key_pb(k) for k in m.keys])


def prepare_of(pb: quorum_pb2.PrepareRequest) -> Prepare:
    return Prepare(ballot_of(pb.ballot), tuple(key_of(k) for k in pb.keys))


def accept_pb(m: Accept) -> quorum_pb2.AcceptRequest:
    proposals = []
    for p in m.proposals:
        proposals.append(quorum_pb2.Proposal(key=key_pb(p.key), value=_value_pb(p.value)))
    return quorum_pb2.AcceptRequest(
        ballot=ballot_pb(m.ballot), incarnation=m.incarnation, proposals=proposals
    )


def accept_of(pb: quorum_pb2.AcceptRequest) -> Accept:
    return Accept(
        ballot_of(pb.ballot),
        pb.incarnation,
        tuple(Proposal(key_of(p.key), _value(p)) for p in pb.proposals),
    )


def _refusals_pb(refusals: tuple[Refusal, ...]) -> list[quorum_pb2.Refusal]:
    return [quorum_pb2.Refusal(key=key_pb(r.key), promised=ballot_pb(r.promised)) for r in refusals]


def _refusals_of(pbs: list[quorum_pb2.Refusal]) -> tuple[Refusal, ...]:
    return tuple(Refusal(key_of(r.key), ballot_of(r.promised)) for r in pbs)


def prepare_reply_pb(r: PrepareReply) -> quorum_pb2.PrepareReply:
    promises = []
    for p in r.promises:
        promises.append(
            quorum_pb2.Promise(
                key=key_pb(p.key), accepted=ballot_pb(p.accepted), value=_value_pb(p.value)
            )
        )
    return quorum_pb2.PrepareReply(
        ballot=ballot_pb(r.ballot),
        node=r.node,
        incarnation=r.incarnation,
        promises=promises,
        refusals=_refusals_pb(r.refusals),
    )


def prepare_reply_of(pb: quorum_pb2.PrepareReply) -> PrepareReply:
    return PrepareReply(
        ballot_of(pb.ballot),
        pb.node,
        pb.incarnation,
        tuple(Promise(key_of(p.key), ballot_of(p.accepted), _value(p)) for p in pb.promises),
        _refusals_of(list(pb.refusals)),
    )


def accept_reply_pb(r: AcceptReply) -> quorum_pb2.AcceptReply:
    return quorum_pb2.AcceptReply(
        ballot=ballot_pb(r.ballot),
        node=r.node,
        incarnation=r.incarnation,
        accepted=[key_pb(k) for k in r.accepted],
        refusals=_refusals_pb(r.refusals),
    )


def accept_reply_of(pb: quorum_pb2.AcceptReply) -> AcceptReply:
    return AcceptReply(
        ballot_of(pb.ballot),
        pb.node,
        pb.incarnation,
        tuple(key_of(k) for k in pb.accepted),
        _refusals_of(list(pb.refusals)),
    )
