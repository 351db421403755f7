"""``python -m bench.fuzz``: mutated MQTT over real sockets against a running node.

    python -m bench.fuzz --port 1883 --http 127.0.0.1:8888 --cases 1000000 --out fuzz.json
    python -m bench.fuzz --port 1883 --replay 7:12345     # one case again, verbosely

Exit status 0 when every round trip went through, no service restarted and no case
found a fault; 1 otherwise (the JSON summary says which). See docs/fuzzing.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

from bench.fuzz.cases import make_case
from bench.fuzz.conn import Conn
from bench.fuzz.generate import Pools
from bench.fuzz.runner import Fuzzer, Options


def parse(argv: list[str]) -> tuple[Options, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1883, help="the node's MQTT port")
    ap.add_argument("--http", default="", help="the node's HTTP host:port (for /status)")
    ap.add_argument("--cases", type=int, default=10_000, help="cases per run")
    ap.add_argument("--runs", type=int, default=1, help="runs of --cases each, back to back")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=50, help="connections at once")
    ap.add_argument("--time-limit", type=float, default=0.0, help="seconds per run (0: none)")
    ap.add_argument("--roundtrip-every", type=int, default=500)
    ap.add_argument("--valid-share", type=float, default=0.1, help="cases left unmutated")
    ap.add_argument("--persistent-ids", type=int, default=500)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument(
        "--max-payload",
        type=int,
        default=16384,
        help="largest payload of a valid PUBLISH or will (the rare large ones)",
    )
    ap.add_argument("--settle", type=float, default=5.0, help="quiet seconds after each run")
    ap.add_argument("--out", type=Path, help="write the JSON summary here too")
    ap.add_argument("--replay", action="append", default=[], metavar="SEED:INDEX")
    ns = ap.parse_args(argv)
    opts = Options(
        host=ns.host,
        port=ns.port,
        http=ns.http,
        cases=ns.cases,
        runs=ns.runs,
        seed=ns.seed,
        parallel=ns.parallel,
        time_limit=ns.time_limit,
        roundtrip_every=ns.roundtrip_every,
        valid_share=ns.valid_share,
        pools=Pools(persistent_ids=ns.persistent_ids, topics=ns.topics, max_payload=ns.max_payload),
        settle=ns.settle,
    )
    return opts, ns


async def replay(opts: Options, refs: list[str]) -> int:
    for ref in refs:
        seed, _, index = ref.partition(":")
        c = make_case(int(seed), int(index), opts.pools, opts.valid_share)
        print(f"case {c.ref}: {list(c.mutations)}, ending {c.ending}, {len(c.chunks)} writes")
        print(f"  sent {c.data.hex()}")
        conn = await Conn.open(opts.host, opts.port, opts.case_timeout)
        for chunk in c.chunks:
            conn.write(chunk)
            await asyncio.sleep(0)
        conn.write_eof()
        closed = await conn.wait_closed(opts.case_timeout)
        conn.close()
        for first, body in conn.frames:
            print(f"  got type {first >> 4} flags {first & 15:#x} body {body[:64].hex()}")
        print(f"  {'closed by the broker' if closed else 'still open after EOF'}")
    return 0


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except OSError:
        return ""
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    opts, ns = parse(sys.argv[1:] if argv is None else argv)
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        uvloop.install()
    except ImportError:
        pass
    if ns.replay:
        return asyncio.run(replay(opts, ns.replay))
    summary = asyncio.run(Fuzzer(opts).run())
    summary["commit"] = commit()
    text = json.dumps(summary, indent=1)
    if ns.out:
        ns.out.write_text(text + "\n")
    print(text)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
