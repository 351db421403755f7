"""The machine's floor for one round trip between two processes, as the lanes make them.

Why: every CONNECT crosses from the listener to the registry and back, and what that
costs depends on the machine before it depends on ternmq. On a VM whose idle vCPUs halt
without polling, waking a process on the other CPU is far dearer than the work it was
woken for. This times small frames echoed over a unix socket by a second process (uvloop
protocols at both ends, nothing else), sequentially, and reports the wall time and each
process's CPU per round trip; ``--same-cpu`` pins both to one CPU, which removes the
cross-CPU wake-up from each trip.

    python -m bench.process_rtt [--count 20000] [--same-cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench.msgstore_bench import cpu_seconds

HEADER = struct.Struct(">I")
PAYLOAD = b"x" * 100  # about a Register frame
ROOT = Path(__file__).resolve().parent.parent  # the echo process imports this module


class Framer(asyncio.Protocol):
    """Splits length-prefixed frames and hands each to ``on_frame``."""

    def __init__(self, on_frame: object) -> None:
        self.buf = bytearray()
        self.on_frame = on_frame
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's, not asyncio's

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + size:
                break
            frame = bytes(buf[HEADER.size : HEADER.size + size])
            del buf[: HEADER.size + size]
            self.on_frame(self, frame)  # type: ignore[operator]


def _echo(proto: Framer, frame: bytes) -> None:
    assert proto.transport is not None
    proto.transport.write(HEADER.pack(len(frame)) + frame)


async def _serve(path: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: Framer(_echo), path)
    print("ready", flush=True)
    async with server:
        await asyncio.sleep(3600)


async def _client(path: str, count: int) -> tuple[float, float]:
    """``count`` round trips on a new connection: (wall s, this process's CPU s)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bytes] | None = None

    def got(_proto: Framer, frame: bytes) -> None:
        assert waiter is not None
        waiter.set_result(frame)

    transport, _ = await loop.create_unix_connection(lambda: Framer(got), path)
    frame = HEADER.pack(len(PAYLOAD)) + PAYLOAD
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        waiter = loop.create_future()
        transport.write(frame)
        await waiter
    result = time.perf_counter() - wall, time.process_time() - cpu
    transport.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--same-cpu", action="store_true", help="both processes on CPU 0")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the echoing process
    args = parser.parse_args()
    if args.serve:
        uvloop.run(_serve(args.serve))
        return
    if args.same_cpu:
        os.sched_setaffinity(0, {0})  # the echo process inherits it
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "rtt.sock")
        echo = subprocess.Popen(
            [sys.executable, "-m", "bench.process_rtt", "--serve", path],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
            uvloop.run(_client(path, args.count // 10))  # warm-up, not counted
            before = cpu_seconds(echo.pid)
            wall, cpu = uvloop.run(_client(path, args.count))
            echo_cpu = cpu_seconds(echo.pid) - before
        finally:
            echo.kill()
            echo.wait()
    per = 1e6 / args.count
    print(
        json.dumps(
            {
                "same_cpu": args.same_cpu,
                "count": args.count,
                "wall_us_per_rtt": round(wall * per, 1),
                "client_cpu_us_per_rtt": round(cpu * per, 1),
                "echo_cpu_us_per_rtt": round(echo_cpu * per, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
