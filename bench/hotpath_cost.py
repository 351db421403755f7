"""CPU per call of the pieces every persistent QoS 1 message in scenario (c) goes through.

Why this exists: on this 2-core VM the end-to-end figures of ``bench/run.sh`` move by
±20 % between runs of the same commit (the listener's CPU per message itself is
bimodal, ~27 or ~45 µs), so a change worth a few percent cannot be seen there. These
parts are measured alone, best of several repetitions, which repeats to a few percent:
the MQTT codec (a PUBLISH QoS 1 and its PUBACK, decoded from 100-frame bursts as the
listener reads them, and encoded), the three per-message events
(``message.published``, ``message.delivered``, ``message.acked``, written to a
temporary log directory, their share of the batched file writes included) and the
file write itself per byte.

    .venv/bin/python bench/hotpath_cost.py [--reps 7]

Prints one table; nothing is started, nothing listens.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

from services.common import log
from services.listener.mqtt import decoder as decoder_module
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.types import Puback, Publish

_BURST = 100  # frames per feed: the listener reads many frames per recv under load


def best_us(fn: Callable[[], None], calls: int, reps: int) -> float:
    """Best of ``reps`` timings of ``fn``, per one of its ``calls`` inner calls, in µs."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) / calls * 1e6


def codec(reps: int) -> list[tuple[str, float]]:
    publish = Publish("bench/3", b"x" * 64, 1, False, False, 1234)
    puback = Puback(1234)
    bursts = {
        "PUBLISH": encode(publish, 4) * _BURST,
        "PUBACK": encode(puback, 4) * _BURST,
    }
    rows = []
    for name, burst in bursts.items():
        dec = Decoder(None)
        dec.protocol_version = 4

        def feed(dec: Decoder = dec, burst: bytes = burst) -> None:
            for _ in range(200):
                dec.feed(burst)

        rows.append(
            (f"decode {name} (3.1.1, in a burst of {_BURST})", best_us(feed, 200 * _BURST, reps))
        )
    for name, packet in (("PUBLISH", publish), ("PUBACK", puback)):

        def enc(packet: Publish | Puback = packet) -> None:
            for _ in range(20_000):
                encode(packet, 4)

        rows.append((f"encode {name} (3.1.1)", best_us(enc, 20_000, reps)))
    return rows


def events(reps: int, log_dir: str) -> list[tuple[str, float]]:
    log.setup("listener", "bench@127.0.0.1", log_dir, console="off")
    published = log.emitter("message.published")
    delivered = log.emitter("message.delivered")
    acked = log.emitter("message.acked")
    msg_id = "bench-145a361bd-21634"
    calls: dict[str, Callable[[], None]] = {
        "message.published": lambda: published(msg_id, "mqload-p2", "tq/2", 1, False, 64, ""),
        "message.delivered": lambda: delivered(
            msg_id, "mqload-s2", "tq/2", 1, False, 21200, "mqload-p2", 13633
        ),
        "message.acked": lambda: acked(msg_id, "mqload-s2", 1, 21213),
    }
    rows = []
    for name, call in calls.items():

        def run(call: Callable[[], None] = call) -> None:
            for _ in range(20_000):
                call()

        rows.append((f"event {name} (formatted, buffered, written)", best_us(run, 20_000, reps)))
    log.shutdown()
    return rows


def file_write(reps: int, log_dir: str) -> list[tuple[str, float]]:
    """ns per byte of appending 18 KiB chunks (the listener's median log write under load)."""
    chunk = (b"x" * 249 + b"\n") * 75
    fd = os.open(os.path.join(log_dir, "write.bin"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:

        def run() -> None:
            for _ in range(2_000):
                os.write(fd, chunk)

        per_write_us = best_us(run, 2_000, reps)
    finally:
        os.close(fd)
    return [("log file append, per KiB (ext4 page cache, 18 KiB writes)", per_write_us / 18.75)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    compiled = not decoder_module.__file__ or decoder_module.__file__.endswith(".so")
    with tempfile.TemporaryDirectory() as tmp:
        rows = codec(args.reps) + events(args.reps, tmp) + file_write(args.reps, tmp)
    print(f"codec: {'compiled' if compiled else 'pure Python'}; best of {args.reps} repetitions")
    print("| part | µs per call |")
    print("|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
