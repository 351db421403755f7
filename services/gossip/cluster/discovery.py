"""Redis discovery (``discovery = redis``): nodes find each other through a Redis.

Each node keeps its inter-node address under ``ternmq:discovery:CLUSTER:NODE`` with a
TTL (``discovery.redis_ttl``), renewed every third of it, and after each renewal lists
what the cluster's nodes have registered and hands it to the cluster shell
(``ClusterNode.discovered``), which joins them. ``CLUSTER`` is a hash of
``distributed_cookie``: nodes that could not talk to each other anyway register apart.
A node that dies is no longer listed once its TTL runs out; it stays a member (down)
until someone makes it leave, as with static seeds. A graceful stop deletes the key.

Redis is only the meeting point: when it is unreachable, a node that has joined keeps
its cluster, and one that has not stays unjoined (``/health`` 503) and tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from services.common.grpcutil import rpc_failed_as
from services.gossip.cluster.node import ClusterNode

PREFIX = "ternmq:discovery:"


def cluster_id(cookie: str) -> str:
    return hashlib.sha256(b"ternmq-discovery\0" + cookie.encode()).hexdigest()[:16]


class RedisDiscovery:
    def __init__(self, url: str, ttl: float, cookie: str, cluster: ClusterNode) -> None:
        self.url = url
        self.ttl = max(ttl, 3.0)
        self.cluster = cluster
        self.pattern = f"{PREFIX}{cluster_id(cookie)}:"
        self.key = self.pattern + cluster.node
        self.client: aioredis.Redis | None = None
        self.rounds = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.client = aioredis.Redis.from_url(
            self.url, socket_timeout=5, socket_connect_timeout=5, decode_responses=True
        )
        self._task = asyncio.create_task(self._run(), name="redis-discovery")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.client is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.client.delete(self.key)
            await self.client.aclose()

    def details(self) -> dict[str, object]:
        return {"redis": self.url, "rounds": self.rounds, "failures": self.failures}

    async def _run(self) -> None:
        while True:
            try:
                found = await self.look()
            except (RedisError, OSError) as exc:
                self.failures += 1
                rpc_failed_as("redis", "discovery", type(exc).__name__, str(exc), "warning")
                await asyncio.sleep(min(self.ttl / 3, 2.0))
                continue
            self.rounds += 1
            self.cluster.discovered(found)
            # until joined, look often; then renew every third of the TTL
            await asyncio.sleep(1.0 if not self.cluster.joined else self.ttl / 3)

    async def look(self) -> dict[str, str]:
        """Register (or renew) this node, then list every node registered: node -> address."""
        client = self.client
        assert client is not None
        await client.set(self.key, self.cluster.address, ex=int(self.ttl))
        keys = [k async for k in client.scan_iter(match=self.pattern + "*", count=1000)]
        if not keys:
            return {}
        values = await client.mget(keys)
        return {str(k)[len(self.pattern) :]: str(v) for k, v in zip(keys, values, strict=True) if v}
