"""The registry's per-client-id FIFO locks: order, independence of keys, cancellation."""

from __future__ import annotations

import asyncio

from services.registry.locks import KeyedLocks

A = ("", "a")
B = ("", "b")


def test_holders_of_one_key_run_one_at_a_time_in_arrival_order() -> None:
    async def main() -> list[str]:
        locks = KeyedLocks()
        order: list[str] = []

        async def worker(name: str, key: tuple[str, str]) -> None:
            async with locks.hold(key):
                order.append(f"{name}+")
                await asyncio.sleep(0.01)
                order.append(f"{name}-")

        await asyncio.gather(worker("1", A), worker("2", A), worker("3", A), worker("b", B))
        assert locks._held == {}  # nothing kept once nobody holds or waits
        return order

    order = asyncio.run(main())
    a_only = [o for o in order if not o.startswith("b")]
    assert a_only == ["1+", "1-", "2+", "2-", "3+", "3-"]
    assert order.index("b+") < order.index("1-")  # another key never waits


def test_a_cancelled_waiter_neither_holds_nor_blocks_the_lock() -> None:
    async def main() -> None:
        locks = KeyedLocks()
        entered: list[str] = []

        async def worker(name: str) -> None:
            async with locks.hold(A):
                entered.append(name)
                await asyncio.sleep(0.02)

        first = asyncio.create_task(worker("1"))
        await asyncio.sleep(0)
        second = asyncio.create_task(worker("2"))
        third = asyncio.create_task(worker("3"))
        await asyncio.sleep(0)
        second.cancel()
        await asyncio.gather(first, third, return_exceptions=True)
        assert second.cancelled() and entered == ["1", "3"] and locks._held == {}

    asyncio.run(main())


def test_a_waiter_cancelled_as_it_is_handed_the_lock_passes_it_on() -> None:
    async def main() -> None:
        locks = KeyedLocks()
        entered: list[str] = []

        async def worker(name: str) -> None:
            async with locks.hold(A):
                entered.append(name)

        await locks._acquire(A)  # held by the test
        second = asyncio.create_task(worker("2"))
        third = asyncio.create_task(worker("3"))
        await asyncio.sleep(0)
        locks._release(A)  # hands the lock to "2" ...
        second.cancel()  # ... which is cancelled before it runs
        await asyncio.gather(second, third, return_exceptions=True)
        assert entered == ["3"] and locks._held == {}

    asyncio.run(main())
