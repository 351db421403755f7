"""A service's copy of the cluster view, followed from this node's gossip service.

Why: invariant I3. A node that does not see a majority of the members must refuse
CONNECT (3.1.1 code 3, 5.0 0x88; the registry) and PUBLISH, SUBSCRIBE and UNSUBSCRIBE
(the listener) unless the matching ``allow_*_during_netsplit`` is on, and so must a node
with ``cluster.seeds`` that has not joined yet. The view arrives on
``Gossip.WatchView``; while gossip is unreachable the last view stands (a gossip
restart must not flip availability), and the stream is reopened with backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from services.common.grpcutil import rpc_failed
from services.pb import gossip_pb2, gossip_pb2_grpc


@dataclass(frozen=True, slots=True)
class ClusterView:
    members: frozenset[str]
    up: frozenset[str]
    majority: bool
    joined: bool

    @classmethod
    def alone(cls, node: str) -> ClusterView:
        return cls(frozenset({node}), frozenset({node}), True, True)

    @property
    def serving(self) -> bool:
        """Whether registrations may go ahead without the netsplit option."""
        return self.majority and self.joined

    def refusal(self) -> str:
        if not self.joined:
            return "not joined to the cluster yet"
        down = ", ".join(sorted(self.members - self.up))
        reach = f"{len(self.up)} of {len(self.members)} members reachable"
        return f"netsplit: {reach} ({down} down)"


def from_pb(pb: gossip_pb2.ClusterView) -> ClusterView:
    return ClusterView(frozenset(pb.members), frozenset(pb.up), pb.majority, pb.joined)


class ViewFollower:
    def __init__(
        self,
        stub: gossip_pb2_grpc.GossipStub,
        node: str,
        on_change: Callable[[ClusterView], None] | None = None,
    ) -> None:
        self.stub = stub
        self.view = ClusterView.alone(node)
        self.updates = 0
        self.on_change = on_change
        self.known = asyncio.Event()  # the first view came, or gossip has no cluster

    async def first(self, timeout: float) -> bool:
        """Wait (bounded) until ``view`` is gossip's, not the placeholder; False if not."""
        try:
            await asyncio.wait_for(self.known.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        backoff = 0.1
        while True:
            try:
                call = self.stub.WatchView(gossip_pb2.WatchViewRequest(), wait_for_ready=True)
                async for pb in call:
                    self.view = from_pb(pb)
                    self.updates += 1
                    self.known.set()
                    if self.on_change is not None:
                        self.on_change(self.view)
                    backoff = 0.1
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    rpc_failed("gossip", "WatchView", exc, "debug")
                    self.known.set()
                    return  # a gossip service without a cluster: this node stays alone
                if exc.code() != grpc.StatusCode.CANCELLED:
                    rpc_failed("gossip", "WatchView", exc, "info")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
