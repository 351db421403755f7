"""The listener's registry client against the real registry process, over both of its
transports: the gRPC ``Connections`` stream and the same stream framed on the registry's
unix socket (``services.common.framed``), which the listener uses on one node.

The registry runs with fake msgstore and gossip servers (see test_registry_service).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import grpc
import pytest

from services.common.framed import HELLO, REGISTRY_LANE, frame, socket_path
from services.listener.registry_client import RegistryClient, RegistryUnavailable
from services.pb import common_pb2, registry_pb2, registry_pb2_grpc
from tests.integration.test_registry_service import Node, make_node, wait_for  # noqa: F401

pytestmark = pytest.mark.integration
TRANSPORTS = ("grpc", "lane")

Outcome = registry_pb2.ConnectionResult | RegistryUnavailable


def register_op(cid: str, listener: str = "L1", expiry: int = 0) -> registry_pb2.ConnectionOp:
    return registry_pb2.ConnectionOp(
        register=registry_pb2.RegisterRequest(
            key=common_pb2.SessionKey(client_id=cid),
            node="t1@127.0.0.1",
            listener_id=listener,
            proto_ver=4,
            session_expiry=expiry,
        )
    )


async def outcome(client: RegistryClient, op: registry_pb2.ConnectionOp) -> Outcome:
    fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    client.submit(op, fut.set_result)
    return await fut


async def until(pred: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_client(
    node: Node,
    body: Callable[[RegistryClient, list[tuple[str, int]]], object],
    transport: str,
    deadline: float = 15.0,
) -> None:
    async def main() -> None:
        late: list[tuple[str, int]] = []
        channel = grpc.aio.insecure_channel(f"unix:{node.base}/registry.sock")
        client = RegistryClient(
            registry_pb2_grpc.RegistryStub(channel),
            lambda req, reply: late.append((req.key.client_id, reply.epoch)),
            deadline=deadline,
        )
        if transport == "lane":
            client.lane = socket_path(f"unix:{node.base}/registry.sock", REGISTRY_LANE)
        client.start()
        try:
            await asyncio.wait_for(client.connected.wait(), 15)
            await body(client, late)  # type: ignore[misc]
        finally:
            await client.stop()
            await channel.close()

    asyncio.run(main())


def test_concurrent_registrations_and_reports(
    make_node: Callable[..., Node],  # noqa: F811
    transport: str,
) -> None:
    node = make_node()

    async def body(client: RegistryClient, late: list[tuple[str, int]]) -> None:
        results = await asyncio.gather(*(outcome(client, register_op(f"c{i}")) for i in range(300)))
        assert all(isinstance(r, registry_pb2.ConnectionResult) for r in results)
        replies = [r.register for r in results if isinstance(r, registry_pb2.ConnectionResult)]
        assert all(r.ok for r in replies) and len({r.epoch for r in replies}) == 300
        downs = await asyncio.gather(
            *(
                outcome(
                    client,
                    registry_pb2.ConnectionOp(
                        disconnected=registry_pb2.DisconnectedRequest(
                            key=common_pb2.SessionKey(client_id=f"c{i}"),
                            epoch=r.epoch,
                            no_subscriptions=True,
                        )
                    ),
                )
                for i, r in enumerate(replies)
            )
        )
        assert all(
            isinstance(d, registry_pb2.ConnectionResult) and d.disconnected.ok for d in downs
        )
        assert late == []

    run_client(node, body, transport)
    assert node.details()["sessions"] == 0


def test_a_registration_given_up_on_is_reported_when_it_succeeds_late(
    make_node: Callable[..., Node],  # noqa: F811
    transport: str,
) -> None:
    node = make_node(**{"registry.takeover_timeout": "3s"})
    node.watch("L0")  # the old connection's listener never answers the takeover

    async def body(client: RegistryClient, late: list[tuple[str, int]]) -> None:
        first = await outcome(client, register_op("slow", "L0", expiry=0xFFFFFFFF))
        assert isinstance(first, registry_pb2.ConnectionResult) and first.register.ok
        started = time.monotonic()
        second = await outcome(client, register_op("slow", "L1", expiry=0xFFFFFFFF))
        assert isinstance(second, RegistryUnavailable) and second.code == "DEADLINE_EXCEEDED"
        assert time.monotonic() - started < 2.9  # given up before the takeover timed out
        await until(lambda: bool(late), "the late registration")
        assert late[0][0] == "slow" and late[0][1] > first.register.epoch

    run_client(node, body, transport, deadline=0.5)


def test_a_dead_registry_fails_pending_ops_and_the_stream_comes_back(
    make_node: Callable[..., Node],  # noqa: F811
    transport: str,
) -> None:
    node = make_node(**{"registry.takeover_timeout": "10s"})
    node.watch("L0")

    async def body(client: RegistryClient, late: list[tuple[str, int]]) -> None:
        held = await outcome(client, register_op("held", "L0", expiry=0xFFFFFFFF))
        assert isinstance(held, registry_pb2.ConnectionResult) and held.register.ok
        waiting = asyncio.ensure_future(outcome(client, register_op("held", "L1")))
        await asyncio.sleep(0.3)  # it waits for a takeover answer that never comes
        await asyncio.to_thread(node.kill)
        failed = await asyncio.wait_for(waiting, 10)
        assert isinstance(failed, RegistryUnavailable) and failed.code != "DEADLINE_EXCEEDED"
        refused = await outcome(client, register_op("meanwhile"))
        assert isinstance(refused, RegistryUnavailable)
        # reconnect attempts fail meanwhile; none may look connected, not even for a moment
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.connected.wait(), 1.5)
        await asyncio.to_thread(node.start)
        await asyncio.wait_for(client.connected.wait(), 15)
        again = await outcome(client, register_op("after"))
        assert isinstance(again, registry_pb2.ConnectionResult) and again.register.ok

    run_client(node, body, transport)


def test_a_registration_waiting_for_a_takeover_holds_back_no_other_connect(
    make_node: Callable[..., Node],  # noqa: F811
    transport: str,
) -> None:
    """The registry answers every batch at once (a receipt when nothing in it is done), so
    the ops behind a slow one leave and are answered one by one: a batch per CONNECT."""
    node = make_node(**{"registry.takeover_timeout": "10s"})
    node.watch("L0")  # the old connection's listener never answers the takeover

    async def body(client: RegistryClient, late: list[tuple[str, int]]) -> None:
        held = await outcome(client, register_op("held", "L0", expiry=0xFFFFFFFF))
        assert isinstance(held, registry_pb2.ConnectionResult) and held.register.ok
        waiting = asyncio.ensure_future(outcome(client, register_op("held", "L1")))
        batches = 0
        for i in range(20):
            quick = await outcome(client, register_op(f"q{i}"))
            assert isinstance(quick, registry_pb2.ConnectionResult) and quick.register.ok
            batches = batches or client.batches  # the first may have left with the waiting one
        assert not waiting.done()
        assert client.batches == batches + 19  # one batch per sequential op

    run_client(node, body, transport)


def test_broken_frames_end_their_own_stream_only(make_node: Callable[..., Node]) -> None:  # noqa: F811
    """A peer that breaks framing (a length over the limit, bytes that are no
    ConnectionOps, a frame cut short) loses its stream, logged as ``rpc.failed``; the
    registry keeps serving every other stream."""
    node = make_node()
    path = socket_path(f"unix:{node.base}/registry.sock", REGISTRY_LANE)
    assert path is not None

    def closed_after(data: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(path)
            assert sock.recv(4) == HELLO
            sock.sendall(data)
            if data.startswith(b"\x00\x00\x00\x10"):
                sock.shutdown(socket.SHUT_WR)  # the cut-short frame: its writer is gone
            assert sock.recv(100) == b""  # closed by the registry, nothing answered

    closed_after(b"\xff\xff\xff\xff")  # 4 GiB announced
    closed_after(frame(b"\xff\x01\x02garbage"))  # not a ConnectionOps
    closed_after(b"\x00\x00\x00\x10abc")  # 16 bytes announced, 3 sent
    wait_for(lambda: len(node.events("rpc.failed")) >= 3, "three rpc.failed events")
    reasons = [e["reason"] for e in node.events("rpc.failed")]
    assert any("over" in r for r in reasons) and any("DecodeError" in r for r in reasons)
    assert any("inside a frame" in r for r in reasons)

    async def body(client: RegistryClient, late: list[tuple[str, int]]) -> None:
        ok = await outcome(client, register_op("after-garbage"))
        assert isinstance(ok, registry_pb2.ConnectionResult) and ok.register.ok

    run_client(node, body, "lane")
