"""Mutators: each breaks a valid packet sequence in one way a peer might.

A mutator takes the case's ``random.Random``, the sequence (one ``bytes`` per packet)
and the case's generator (for packets to splice in), and returns the new sequence. The
packet boundaries are kept only as far as the mutation leaves them: after a truncation
or a corrupt Remaining Length the broker sees a different framing than the generator
meant, which is the point. ``mutate`` applies a few, chosen by weight, and names them.

Worked example: ``truncate`` on ``[CONNECT, PUBLISH]`` may return
``[CONNECT, PUBLISH[:7]]``; ``corrupt_length`` rewrites the PUBLISH's Remaining Length
to ``ff ff ff ff 7f`` (five bytes: malformed).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from bench.fuzz.generate import Generator
from bench.fuzz.wire import MAX_REMAINING, header_len, string, varint

Packets = list[bytes]
Mutator = Callable[[random.Random, Packets, Generator], Packets]

INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF)
OVERSIZE_BODY = 256 * 1024  # most bytes of an oversize frame actually sent


def _pick(rng: random.Random, packets: Packets) -> int:
    """The index of a non-empty packet (every sequence starts with its CONNECT)."""
    full = [i for i, p in enumerate(packets) if p]
    return rng.choice(full) if full else 0


def bit_flip(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    i = _pick(rng, packets)
    data = bytearray(packets[i])
    if not data:
        return packets
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    packets[i] = bytes(data)
    return packets


def interesting_byte(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    i = _pick(rng, packets)
    data = bytearray(packets[i])
    if not data:
        return packets
    data[rng.randrange(len(data))] = rng.choice(INTERESTING)
    packets[i] = bytes(data)
    return packets


def corrupt_u16(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """A string length or packet id somewhere inside a packet becomes large, zero or odd."""
    i = _pick(rng, packets)
    data = bytearray(packets[i])
    if len(data) >= 4:
        pos = rng.randrange(2, len(data) - 1)
        data[pos : pos + 2] = rng.choice((0, 1, 0x7FFF, 0xFFFF, rng.randrange(65536))).to_bytes(
            2, "big"
        )
    packets[i] = bytes(data)
    return packets


def truncate(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    i = _pick(rng, packets)
    packets[i] = packets[i][: rng.randrange(max(1, len(packets[i])))]
    if rng.random() < 0.5:
        del packets[i + 1 :]  # the stream ends inside the frame
    return packets


def corrupt_length(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """Replace a Remaining Length: off by one, zero, huge, 5 bytes long, or not minimal."""
    i = _pick(rng, packets)
    pkt = packets[i]
    if not pkt:
        return packets
    n = header_len(pkt)
    body = pkt[n:]
    choice = rng.randrange(6)
    if choice == 0:
        length = varint(max(0, len(body) + rng.choice((-2, -1, 1, 2))))
    elif choice == 1:
        length = b"\x00"
    elif choice == 2:
        length = varint(rng.randrange(len(body) + 1, MAX_REMAINING + 1))
    elif choice == 3:
        length = b"\xff\xff\xff\xff\x7f"
    elif choice == 4:
        length = varint(len(body))[:-1] + bytes((varint(len(body))[-1] | 0x80,)) + b"\x00"
    else:
        length = b"\x80\x80\x80\x80"
    packets[i] = pkt[:1] + length + body
    return packets


def oversize(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """A PUBLISH declaring up to 256 MB; some of its body follows, rarely all of a 1 MB one."""
    if rng.random() < 0.1:
        declared = rng.randrange(512 * 1024, 1024 * 1024)
        sent = declared
    else:
        declared = rng.randrange(1024 * 1024, MAX_REMAINING + 1)
        sent = rng.randrange(1, OVERSIZE_BODY)
    head = string(gen.topic())
    body = head + bytes(max(0, sent - len(head)))
    packets.insert(rng.randrange(1, len(packets) + 1), b"\x30" + varint(declared) + body)
    return packets


def garbage(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """Random bytes after the CONNECT (or anywhere)."""
    at = 1 if rng.random() < 0.7 else rng.randrange(len(packets) + 1)
    packets.insert(at, rng.randbytes(rng.randrange(1, 256)))
    return packets


def duplicate(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    i = _pick(rng, packets)
    packets.insert(i, packets[i])
    return packets


def drop(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    if len(packets) > 1:
        del packets[_pick(rng, packets)]
    return packets


def swap(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    i, j = _pick(rng, packets), _pick(rng, packets)
    packets[i], packets[j] = packets[j], packets[i]
    return packets


def splice(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """A packet of another valid sequence, maybe of another protocol version."""
    other = gen.sequence()
    packets.insert(rng.randrange(len(packets) + 1), rng.choice(other))
    return packets


def first_byte(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """Another packet type, reserved flags set, or the reserved types 0 and 15."""
    i = _pick(rng, packets)
    pkt = packets[i]
    if pkt:
        packets[i] = bytes((rng.randrange(256),)) + pkt[1:]
    return packets


def protocol(rng: random.Random, packets: Packets, gen: Generator) -> Packets:
    """The CONNECT's protocol name, level or connect flags changed."""
    pkt = bytearray(packets[0])
    if not pkt:
        return packets
    n = header_len(bytes(pkt))
    name_len = int.from_bytes(pkt[n : n + 2], "big")
    level_at = n + 2 + name_len
    if level_at + 1 < len(pkt):
        if rng.random() < 0.5:
            pkt[level_at] = rng.choice((0, 1, 2, 3, 4, 5, 6, 0x83, 0xFF))
        else:
            pkt[level_at + 1] = rng.randrange(256)
    packets[0] = bytes(pkt)
    return packets


MUTATORS: dict[str, tuple[Mutator, int]] = {
    "bit_flip": (bit_flip, 20),
    "interesting_byte": (interesting_byte, 8),
    "corrupt_u16": (corrupt_u16, 8),
    "truncate": (truncate, 10),
    "corrupt_length": (corrupt_length, 10),
    "oversize": (oversize, 2),
    "garbage": (garbage, 8),
    "duplicate": (duplicate, 5),
    "drop": (drop, 5),
    "swap": (swap, 5),
    "splice": (splice, 6),
    "first_byte": (first_byte, 5),
    "protocol": (protocol, 4),
}
_NAMES = list(MUTATORS)
_WEIGHTS = [w for _, w in MUTATORS.values()]


def mutate(
    rng: random.Random, packets: Packets, gen: Generator, valid_share: float = 0.1
) -> tuple[Packets, list[str]]:
    """Apply 0 (``valid_share`` of cases), 1, 2 or 3 mutators; return them by name."""
    if rng.random() < valid_share:
        return packets, []
    names = rng.choices(_NAMES, _WEIGHTS, k=rng.choice((1, 1, 1, 2, 2, 3)))
    for name in names:
        packets = MUTATORS[name][0](rng, packets, gen)
        if not packets:
            packets = [b""]
    return packets, names
