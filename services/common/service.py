"""Running one service process: logging, uvloop, signals, graceful stop.

Every service's ``server.serve(config, stop)`` is an async function that starts serving,
waits for ``stop`` and shuts down within ``supervisor.shutdown_timeout``. This module
is the one place that turns SIGTERM/SIGINT into ``stop`` and an exception into an exit
status with a logged reason.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import uvloop

from services.common import live_settings, log
from services.common.child_process import supervised_by
from services.common.config import Config

Serve = Callable[[Config, asyncio.Event], Awaitable[None]]

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_FAILED = 1

# The services that log events per message: formatting those is worth another process.
SPOOLED = ("listener", "msgstore")


def setup_logging(service: str, config: Config, stem: str = "") -> None:
    log.setup(
        service=service,
        node=config["nodename"],
        log_dir=config["log_dir"],
        level=config["log.level"],
        console=config["log.console"],
        message_events=config["log.message_events"],
        rotate_size=config["log.rotate_size"],
        rotate_keep=config["log.rotate_keep"],
        spool=config["log.spool"] and service in SPOOLED,
        stem=stem,
    )


# The hot paths allocate many short-lived containers; CPython's default gen0 threshold
# (700) runs a collection every few dozen messages, a cost paid on every one of them.
GC_THRESHOLDS = (20_000, 20, 100)


def run(service: str, config: Config, serve: Serve, stem: str = "") -> int:
    """Run ``serve`` until SIGTERM/SIGINT; return the process exit status. ``stem``
    names the log file when the service runs as several processes."""
    setup_logging(service, config, stem)
    gc.set_threshold(*GC_THRESHOLDS)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if supervised_by() is None:
            # Supervised, SIGINT is already ignored (``adopt_supervision``): Ctrl-C
            # reaches the whole foreground process group, and the supervisor stops its
            # children in reverse order (listener first, msgstore last, so nothing the
            # listener still writes finds the store gone).
            loop.add_signal_handler(signal.SIGINT, stop.set)
        settings = live_settings.watch(config)  # ternmq-admin set, while this runs
        try:
            await serve(config, stop)
        finally:
            settings.stop()

    try:
        uvloop.run(main())
    except OSError as exc:
        log.emit("service.stopping", "error", reason=f"{type(exc).__name__}: {exc}")
        log.shutdown()
        print(f"ternmq {service}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    log.emit("service.stopping", reason="signal")
    log.shutdown()
    return EXIT_OK


def started(address: str) -> None:
    # What start-up built (modules, config, protobuf descriptors) lives as long as the
    # process: out of the collector's sight, full collections stay short.
    gc.freeze()
    log.emit("service.started", address=address, pid=os.getpid())
