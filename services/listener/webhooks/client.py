"""Calling the webhook endpoints: one pooled HTTP client per listener process, a timeout
on every call, and the ``cache-control: max-age`` cache of ``ok`` answers.

The calls run on the event loop (``aiohttp``): a connection waiting for a hook has its
reading paused and costs nothing meanwhile, and no thread is blocked. Endpoints of one
hook are asked in the order they are configured until one says ``ok`` or refuses.

The endpoints can change while the process runs (``ternmq-admin webhooks register``,
see ``runtime``): the whole set is swapped at once, and the cache emptied so that a
deregistered endpoint's answers stop counting.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp

from services.common import log
from services.common.config import Config
from services.common.runtime_file import Watcher
from services.listener.webhooks import runtime
from services.listener.webhooks.spec import (
    AUTH_HOOKS,
    CACHED_HOOKS,
    NEXT,
    Decision,
    cache_key,
    parse_reply,
)

CACHE_MAX = 100_000  # answers kept; the oldest go first


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the configured webhook's NAME
    hook: str
    url: str
    base64_payload: bool = True
    source: str = "config"  # or "runtime": ternmq-admin webhooks register

    def row(self) -> dict[str, Any]:
        """As ``webhooks show`` and the runtime file have it."""
        return {
            "hook": self.hook,
            "endpoint": self.url,
            "name": self.name,
            "base64_payload": self.base64_payload,
            "source": self.source,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Endpoint:
        return cls(
            str(row.get("name", "")),
            str(row["hook"]),
            str(row["endpoint"]),
            bool(row.get("base64_payload", True)),
            str(row.get("source", "config")),
        )


def endpoints(config: Config) -> list[Endpoint]:
    """The configured webhooks (``webhooks.NAME.hook`` and ``.endpoint``), in name order."""
    found = []
    for key, hook in sorted(config.matching("webhooks.*.hook").items()):
        name = key.split(".")[1]
        url = config.explicit().get(f"webhooks.{name}.endpoint")
        if not hook or not url:
            continue
        b64 = config.explicit().get(f"webhooks.{name}.base64_payload")
        found.append(Endpoint(name, str(hook), str(url), True if b64 is None else bool(b64)))
    return found


class Webhooks:
    def __init__(
        self,
        hooks: list[Endpoint],
        timeout: float = 5.0,
        pool_max_connections: int = 100,
        pool_timeout: float = 60.0,
    ) -> None:
        self.cache: OrderedDict[str, tuple[float, Decision]] = OrderedDict()
        self.by_hook: dict[str, list[Endpoint]] = {}
        self.set_endpoints(hooks)
        self.timeout = timeout
        self.pool_max_connections = pool_max_connections
        self.pool_timeout = pool_timeout
        self.calls = 0
        self.cache_hits = 0
        self.failures = 0
        self._session: aiohttp.ClientSession | None = None
        self._warned: set[tuple[str, str]] = set()  # (hook, modifier) logged as ignored
        self.watcher: Watcher | None = None

    @classmethod
    def from_config(cls, config: Config) -> Webhooks:
        """The configured webhooks, then the node's runtime registrations, watched for
        changes while the event loop runs (a listener process)."""
        hooks = cls(
            endpoints(config),
            config["webhooks.timeout"],
            config["webhooks.pool_max_connections"],
            config["webhooks.pool_timeout"],
        )
        hooks.watcher = Watcher(runtime.runtime_file(config), hooks.apply_rows, "webhooks.runtime")
        hooks.watcher.check()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return hooks  # not a listener process: nothing to watch with
        hooks.watcher.start()
        return hooks

    def set_endpoints(self, hooks: list[Endpoint]) -> None:
        """Swap the whole set (a registration or deregistration at run time)."""
        by_hook: dict[str, list[Endpoint]] = {}
        for ep in hooks:
            by_hook.setdefault(ep.hook, []).append(ep)
        self.by_hook = by_hook
        self.cache.clear()

    def apply_rows(self, rows: list[dict[str, Any]]) -> None:
        self.set_endpoints([Endpoint.from_row(r) for r in rows])

    def has(self, hook: str) -> bool:
        return hook in self.by_hook

    def auth_hooks(self) -> bool:
        return any(h in self.by_hook for h in AUTH_HOOKS)

    def notify_hooks(self) -> bool:
        return any(h not in AUTH_HOOKS for h in self.by_hook)

    def base64_payload(self, hook: str) -> bool:
        eps = self.by_hook.get(hook)
        return eps[0].base64_payload if eps else True

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.pool_max_connections, keepalive_timeout=self.pool_timeout
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
        return self._session

    async def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self._session is not None:
            await self._session.close()

    async def ask(self, hook: str, body: dict[str, Any]) -> Decision:
        """The hook's decision: the first endpoint that does not say ``next``; ``next``
        when all do (or none is configured)."""
        key = cache_key(hook, body) if hook in CACHED_HOOKS else ""
        if key:
            hit = self.cache.get(key)
            if hit is not None and hit[0] > time.monotonic():
                self.cache_hits += 1
                return hit[1]
        for ep in self.by_hook.get(hook, ()):
            decision = await self._call(ep, body)
            if decision.result == "next":
                continue
            if key and decision.result == "ok" and decision.max_age > 0:
                self._keep(key, decision)
            return decision
        return NEXT

    def _keep(self, key: str, decision: Decision) -> None:
        cached = Decision(decision.result, dict(decision.modifiers), max_age=decision.max_age)
        self.cache[key] = (time.monotonic() + decision.max_age, cached)
        self.cache.move_to_end(key)
        while len(self.cache) > CACHE_MAX:
            self.cache.popitem(last=False)

    async def _call(self, ep: Endpoint, body: dict[str, Any]) -> Decision:
        self.calls += 1
        try:
            async with self._http().post(
                ep.url, json=body, headers={"vernemq-hook": ep.hook}
            ) as resp:
                raw = await resp.read()
                decision = parse_reply(resp.status, resp.headers.get("cache-control"), raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            decision = Decision("error", reason=why)
            self._failed(ep, why)
            return decision
        if decision.result == "error" and decision.reason.startswith(("HTTP ", "the answer")):
            self._failed(ep, decision.reason)  # the endpoint misbehaved; a refusal is not that
        return decision

    async def notify(self, hook: str, body: dict[str, Any]) -> None:
        """Tell every endpoint of ``hook``; their answers change nothing, their failures
        are logged."""
        for ep in self.by_hook.get(hook, ()):
            self.calls += 1
            try:
                async with self._http().post(
                    ep.url, json=body, headers={"vernemq-hook": hook}
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        self._failed(ep, f"HTTP {resp.status}")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                why = (
                    "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
                )
                self._failed(ep, why)

    def invalid(self, hook: str, reason: str) -> None:
        """An ``ok`` whose modifiers cannot be applied: refused, and logged as a failure."""
        eps = self.by_hook.get(hook)
        if eps:
            self._failed(eps[0], f"modifiers: {reason}")

    def ignored(self, hook: str, modifier: str, why: str) -> None:
        """A modifier ternmq accepts but cannot apply: said once per process and hook."""
        if (hook, modifier) in self._warned:
            return
        self._warned.add((hook, modifier))
        eps = self.by_hook.get(hook)
        log.emit(
            "webhook.failed",
            "warning",
            hook=hook,
            endpoint=eps[0].url if eps else "",
            reason=f"modifier {modifier} ignored: {why}",
        )

    def _failed(self, ep: Endpoint, reason: str) -> None:
        self.failures += 1
        log.emit(
            "webhook.failed",
            "warning",
            hook=ep.hook,
            endpoint=ep.url,
            reason=reason,
        )

    def show(self) -> list[dict[str, object]]:
        """The registered webhooks, as ``ternmq-admin webhooks show`` lists them."""
        return [ep.row() for eps in self.by_hook.values() for ep in eps]
