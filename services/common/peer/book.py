"""Where the other nodes' instances of one service take inter-node calls, from gossip.

Each instance writes a record (``quorum.RegistryRecord``: node, bound address,
incarnation) under its service's gossip prefix when it starts; every instance follows the
prefix and keeps one channel per peer. A stream that breaks is reopened with backoff; the
addresses already known stay in use meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

import grpc

from services.common.grpcutil import rpc_failed
from services.common.peer.channel import Caller, channel
from services.pb import gossip_pb2, gossip_pb2_grpc, quorum_pb2

StubT = TypeVar("StubT")


class PeerBook(Generic[StubT]):
    """Node name -> a stub to its instance, and the proof every call carries."""

    def __init__(
        self,
        node: str,
        cookie: str,
        address: str,
        prefix: str,
        make_stub: Callable[[grpc.aio.Channel], StubT],
    ) -> None:
        self.node = node
        self.prefix = prefix
        self.caller = Caller(cookie, node, address)
        self.addresses: dict[str, str] = {}
        self._make_stub = make_stub
        self._stubs: dict[str, tuple[str, StubT, grpc.aio.Channel]] = {}
        self.known = asyncio.Event()  # the first snapshot arrived

    def stub(self, node: str) -> StubT | None:
        address = self.addresses.get(node)
        if address is None:
            return None
        held = self._stubs.get(node)
        if held is not None and held[0] == address:
            return held[1]
        ch = channel(address)
        stub = self._make_stub(ch)
        self._stubs[node] = (address, stub, ch)
        if held is not None:
            asyncio.get_running_loop().create_task(held[2].close(None))
        return stub

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self.caller.metadata()

    def record(self, incarnation: int) -> gossip_pb2.MetaOp:
        """This instance's entry under the prefix."""
        rec = quorum_pb2.RegistryRecord(
            node=self.node, address=self.caller.address, incarnation=incarnation
        )
        return gossip_pb2.MetaOp(
            prefix=self.prefix, key=self.node.encode(), value=rec.SerializeToString()
        )

    def apply(self, update: gossip_pb2.MetaUpdate) -> None:
        node = update.key.decode()
        if node == self.node:
            return
        if update.deleted:
            self.addresses.pop(node, None)
        else:
            self.addresses[node] = quorum_pb2.RegistryRecord.FromString(update.value).address

    async def follow(self, gossip: gossip_pb2_grpc.GossipStub) -> None:
        backoff = 0.1
        while True:
            try:
                call = gossip.Watch(
                    gossip_pb2.WatchRequest(prefixes=[self.prefix]), wait_for_ready=True
                )
                async for event in call:
                    for update in event.updates:
                        self.apply(update)
                    if event.snapshot_done:
                        self.known.set()
                        backoff = 0.1
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.CANCELLED:
                    rpc_failed("gossip", "Watch", exc, "warning")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def close(self) -> None:
        for _, _, ch in self._stubs.values():
            await ch.close(None)
        self._stubs.clear()
