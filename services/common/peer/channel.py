"""gRPC between nodes: a server that refuses calls without the cookie, and the calls' proof.

The check sits in one interceptor, in front of every inter-node method, so no servicer can
forget it; a refusal is logged once per call (``cluster.refused``) and answered
``UNAUTHENTICATED`` before the method runs, so a node with the wrong cookie changes
nothing. The proof (:mod:`services.common.peer.auth`) is made fresh for each call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.common import grpcutil, log
from services.common.peer import auth


class CookieCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc,type-arg]
    """Refuse every call whose metadata does not prove ``cookie``."""

    def __init__(self, cookie: str) -> None:
        self.cookie = cookie

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        verdict = auth.check(self.cookie, metadata, time.time())
        if verdict.ok:
            return await continuation(details)
        log.emit(
            "cluster.refused",
            "warning",
            peer=verdict.node,
            address=metadata.get(auth.ADDRESS_KEY, ""),
            method=details.method,
            reason=verdict.reason,
        )
        return _refusal(verdict.reason)


def _refusal(reason: str) -> grpc.RpcMethodHandler[Any, Any]:
    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"cluster: {reason}")

    return grpc.unary_unary_rpc_method_handler(refuse)


def create_server(cookie: str) -> grpc.aio.Server:
    return grpc.aio.server(interceptors=[CookieCheck(cookie)], options=grpcutil.SERVER_OPTIONS)


class Caller:
    """What this node attaches to each call to another node."""

    def __init__(self, cookie: str, node: str, address: str) -> None:
        self.cookie = cookie
        self.node = node
        self.address = address  # where the callee can call us back

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            *auth.credentials(self.cookie, self.node, time.time()),
            (auth.ADDRESS_KEY, self.address),
        )


def channel(address: str) -> grpc.aio.Channel:
    return grpcutil.channel(address)
