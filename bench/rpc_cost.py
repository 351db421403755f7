"""CPU per message of a gRPC aio bidi stream against a plain uvloop socket, same machine.

Why this exists: the services talk over long-lived gRPC streams, and how much one stream
message costs decides how hard the hot paths must batch (the registry's ``Connections``
window, the msgstore stream's batches in flight). Both transports echo 200-byte messages
over a unix socket between two processes; the client sends one, waits for the echo, and
optionally sleeps ``gap`` seconds (a stream that is busy vs. one that idles between
messages: on a VM, waking a sleeping thread is itself expensive).

    .venv/bin/python bench/rpc_cost.py [--n 1000] [--gaps 0,0.002]

Prints one line per (transport, gap): wall time per round trip and the CPU time per round
trip of the client process and of the server process (all threads). Bounded: ``n`` round
trips per line, servers are this script's own children, stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator

import grpc
import uvloop

_SIZE = 200
_METHOD = "/bench.Echo/Stream"


def _ident(b: bytes) -> bytes:
    return b


async def _grpc_server(path: str) -> None:
    async def echo(requests: AsyncIterator[bytes], _ctx: object) -> AsyncIterator[bytes]:
        async for msg in requests:
            yield msg

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(
        echo, request_deserializer=_ident, response_serializer=_ident
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),)
    )
    server.add_insecure_port("unix:" + path)
    await server.start()
    await server.wait_for_termination()


async def _raw_server(path: str) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)

    server = await asyncio.start_unix_server(echo, path)
    await server.serve_forever()


async def _grpc_client(path: str, n: int, gap: float) -> tuple[float, float]:
    async with grpc.aio.insecure_channel("unix:" + path) as channel:
        stream = channel.stream_stream(
            _METHOD, request_serializer=_ident, response_deserializer=_ident
        )
        call = stream(None)  # no request iterator: the client writes with call.write
        msg = b"x" * _SIZE
        await call.write(msg)
        await call.read()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            await call.write(msg)
            await call.read()
            if gap:
                await asyncio.sleep(gap)
        result = time.perf_counter() - wall, time.process_time() - cpu
        await call.done_writing()
        return result


async def _raw_client(path: str, n: int, gap: float) -> tuple[float, float]:
    reader, writer = await asyncio.open_unix_connection(path)
    msg = b"x" * _SIZE
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        writer.write(msg)
        await reader.readexactly(_SIZE)
        if gap:
            await asyncio.sleep(gap)
    result = time.perf_counter() - wall, time.process_time() - cpu
    writer.close()
    return result


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _measure(transport: str, n: int, gap: float, tmp: str) -> str:
    path = os.path.join(tmp, f"{transport}.sock")
    server = subprocess.Popen([sys.executable, __file__, "--serve", transport, path])
    try:
        for _ in range(100):  # bounded wait for the socket
            if os.path.exists(path):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        client = _grpc_client if transport == "grpc" else _raw_client
        ticks = _cpu_ticks(server.pid)
        wall, cpu = uvloop.run(client(path, n, gap))
        server_cpu = (_cpu_ticks(server.pid) - ticks) / os.sysconf("SC_CLK_TCK")
    finally:
        server.terminate()
        server.wait(10)
    return (
        f"{transport:5} gap {gap * 1000:4.1f} ms: {wall / n * 1e6:6.0f} µs per round trip, "
        f"CPU per message: client {cpu / n * 1e6:5.0f} µs, server {server_cpu / n * 1e6:5.0f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--gaps", default="0,0.002")
    parser.add_argument("--serve", nargs=2, metavar=("TRANSPORT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        transport, path = args.serve
        uvloop.run(_grpc_server(path) if transport == "grpc" else _raw_server(path))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for gap in (float(g) for g in args.gaps.split(",")):
            for transport in ("raw", "grpc"):
                print(_measure(transport, args.n, gap, tmp), flush=True)


if __name__ == "__main__":
    main()
