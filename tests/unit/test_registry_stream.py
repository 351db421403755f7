"""Both ends of the registry's ``Connections`` stream, in one process, on a stopped clock.

The event loop's clock never advances here, so a timer (a batching window) on either
side's path would never fire and the test would hang: that every op is answered shows
that none is there, without measuring any time. A watchdog thread ends a hung test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from services.common.metrics import MetricsRegistry
from services.common.typed_settings import build
from services.listener.registry_client import RegistryClient
from services.node.schema import schema
from services.pb import common_pb2, registry_pb2
from services.registry.backends import Backends
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.registrar import Registrar
from services.registry.servicer import RegistryServicer
from services.registry.sessions import Policy, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub

HANG = 30.0  # s of real time before the watchdog ends a hung test


class _StoppedClockLoop(asyncio.SelectorEventLoop):
    """A loop whose time stands still: no ``call_later`` ever comes due."""

    def time(self) -> float:
        return 1000.0


def run_stopped(body: Callable[[], Awaitable[None]]) -> None:
    loop = _StoppedClockLoop()
    task = loop.create_task(body())
    watchdog = threading.Timer(HANG, lambda: loop.call_soon_threadsafe(task.cancel))
    watchdog.start()
    try:
        loop.run_until_complete(task)
    finally:
        watchdog.cancel()
        loop.close()


def register_op(cid: str, op_id: int = 0) -> registry_pb2.ConnectionOp:
    return registry_pb2.ConnectionOp(
        id=op_id,
        register=registry_pb2.RegisterRequest(
            key=common_pb2.SessionKey(client_id=cid), node="n1", listener_id="L1", proto_ver=4
        ),
    )


# -- the registry's side --------------------------------------------------------------


class _NoBackends(Backends):
    """Clean sessions that replace nothing make no msgstore or gossip call."""

    def __init__(self) -> None:
        pass


class _Context:
    async def send_initial_metadata(self, metadata: object) -> None:
        pass


def _servicer() -> tuple[RegistryServicer, Registrar]:
    settings = build(RegistrySettings, schema().empty())
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    registrar = Registrar(settings, table, committer, _NoBackends(), WatchHub(), MetricsRegistry())
    registrar.reserved = 1 << 40  # no reservation write on the way
    return RegistryServicer(registrar, registrar.hub), registrar


async def _requests(
    queue: asyncio.Queue[registry_pb2.ConnectionOps | None],
) -> AsyncIterator[registry_pb2.ConnectionOps]:
    while (batch := await queue.get()) is not None:
        yield batch


def test_the_registry_answers_each_batch_at_once() -> None:
    async def body() -> None:
        servicer, registrar = _servicer()
        queue: asyncio.Queue[registry_pb2.ConnectionOps | None] = asyncio.Queue()
        answers = servicer.Connections(_requests(queue), _Context())
        for i in range(1, 21):
            await queue.put(registry_pb2.ConnectionOps(ops=[register_op(f"c{i}", i)]))
            answer = await anext(answers)
            assert [r.id for r in answer.results] == [i] and answer.results[0].register.ok
        await queue.put(None)
        await answers.aclose()
        await registrar.committer.close()

    run_stopped(body)


def test_a_batch_of_slow_ops_gets_a_receipt_and_its_results_later() -> None:
    """An op that must wait (here for the id's lock, as behind a takeover) does not hold
    the stream: its batch is answered at once, empty, so the listener sends the next."""

    async def body() -> None:
        servicer, registrar = _servicer()
        held = registrar.locks.hold(("", "slow"))
        await held.__aenter__()
        queue: asyncio.Queue[registry_pb2.ConnectionOps | None] = asyncio.Queue()
        answers = servicer.Connections(_requests(queue), _Context())
        await queue.put(registry_pb2.ConnectionOps(ops=[register_op("slow", 1)]))
        receipt = await anext(answers)
        assert list(receipt.results) == []
        await queue.put(registry_pb2.ConnectionOps(ops=[register_op("quick", 2)]))
        assert [r.id for r in (await anext(answers)).results] == [2]
        await held.__aexit__(None, None, None)
        assert [r.id for r in (await anext(answers)).results] == [1]
        await queue.put(None)
        await answers.aclose()
        await registrar.committer.close()

    run_stopped(body)


# -- the listener's side --------------------------------------------------------------


class _Call:
    """A Connections call whose answers the test sends by hand; it records the batches."""

    def __init__(self, requests: AsyncIterator[registry_pb2.ConnectionOps]) -> None:
        self.batches: asyncio.Queue[list[int]] = asyncio.Queue()
        self.answers: asyncio.Queue[registry_pb2.ConnectionResults] = asyncio.Queue()
        self._sender = asyncio.ensure_future(self._send(requests))

    async def _send(self, requests: AsyncIterator[registry_pb2.ConnectionOps]) -> None:
        async for batch in requests:
            await self.batches.put([op.id for op in batch.ops])

    async def initial_metadata(self) -> None:
        pass

    def done(self) -> bool:
        return False

    def cancel(self) -> None:
        self._sender.cancel()

    def __aiter__(self) -> _Call:
        return self

    async def __anext__(self) -> registry_pb2.ConnectionResults:
        return await self.answers.get()

    def answer(self, *ids: int, receipts: int = 1) -> None:
        results = [registry_pb2.ConnectionResult(id=i) for i in ids]
        self.answers.put_nowait(registry_pb2.ConnectionResults(results=results, receipts=receipts))


class _Stub:
    def __init__(self) -> None:
        self.calls: asyncio.Queue[_Call] = asyncio.Queue()

    def Connections(self, requests: AsyncIterator[registry_pb2.ConnectionOps]) -> _Call:
        call = _Call(requests)
        self.calls.put_nowait(call)
        return call


def _client(stub: _Stub) -> RegistryClient:
    return RegistryClient(stub, lambda req, reply: None)  # type: ignore[arg-type]


async def _submit(client: RegistryClient, cid: str) -> asyncio.Future[Any]:
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    client.submit(register_op(cid), fut.set_result)
    return fut


def test_a_lone_op_leaves_at_once_and_a_busy_stream_gathers() -> None:
    async def body() -> None:
        stub = _Stub()
        client = _client(stub)
        client.start()
        call = await stub.calls.get()
        await client.connected.wait()
        for n in range(1, 11):  # sequential: one op per batch, none waits
            done = await _submit(client, f"s{n}")
            (op_id,) = await call.batches.get()
            call.answer(op_id)
            await done
        assert client.batches == 10
        first = await _submit(client, "a")
        (a_id,) = await call.batches.get()
        # A second lone op leaves too: a client that reconnects at once does not wait
        # behind its previous connection's Disconnected.
        second = await _submit(client, "b")
        (b_id,) = await call.batches.get()
        rest = [await _submit(client, cid) for cid in ("c", "d")]
        await asyncio.sleep(0)  # a turn for a sender that would not wait
        assert call.batches.empty()  # two in flight: c and d gather behind them
        call.answer()  # a receipt without results answers a batch too
        gathered = await call.batches.get()
        assert len(gathered) == 2
        call.answer(a_id, receipts=0)  # a late result answers no batch
        await first
        e = await _submit(client, "e")
        await asyncio.sleep(0)
        assert call.batches.empty()  # e waits: [b] and [c, d] are in flight
        call.answer(*gathered)
        (e_id,) = await call.batches.get()  # and leaves on that receipt
        call.answer(b_id, e_id, receipts=2)
        await asyncio.gather(second, *rest, e)
        assert client.batches == 14
        await client.stop()

    run_stopped(body)
