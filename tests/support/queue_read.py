"""A stand-in for the registry's msgstore calls in unit tests of the handover: only the
queue read, of a queue holding seqs 1..``last`` with ``delivered_upto`` marked."""

from __future__ import annotations

from services.common.session_key import SessionKey
from services.pb import msgstore_pb2
from services.registry.backends import Backends


class QueueRead(Backends):
    def __init__(self, last: int, delivered_upto: int = 0) -> None:  # no channels
        self.last = last
        self.delivered_upto = delivered_upto

    async def read_queue(
        self, key: SessionKey, epoch: int, after: int
    ) -> tuple[list[msgstore_pb2.QueueEntry], msgstore_pb2.QueueState]:
        entries = [msgstore_pb2.QueueEntry(seq=s) for s in range(after + 1, self.last + 1)]
        state = msgstore_pb2.QueueState(
            epoch=epoch, last_seq=self.last, delivered_upto=self.delivered_upto
        )
        return entries, state
