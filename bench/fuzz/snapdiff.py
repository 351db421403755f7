"""Compare two tracemalloc snapshots of one service (``tracehook/sitecustomize.py``).

python -m bench.fuzz.snapdiff DIR listener            # first vs last
python -m bench.fuzz.snapdiff DIR listener 1 -1 --by traceback --top 10
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.snapdiff")
    ap.add_argument("directory", type=Path)
    ap.add_argument("service")
    ap.add_argument("first", type=int, nargs="?", default=0)
    ap.add_argument("last", type=int, nargs="?", default=-1)
    ap.add_argument("--by", choices=("lineno", "filename", "traceback"), default="lineno")
    ap.add_argument("--top", type=int, default=15)
    ns = ap.parse_args(argv)
    files = sorted(ns.directory.glob(f"{ns.service}-*.snap"))
    if len(files) < 2:
        print(f"fewer than two snapshots of {ns.service} in {ns.directory}", file=sys.stderr)
        return 2
    old = tracemalloc.Snapshot.load(str(files[ns.first]))
    new = tracemalloc.Snapshot.load(str(files[ns.last]))
    total = [sum(s.size for s in snap.statistics("filename")) for snap in (old, new)]
    print(f"{files[ns.first].name} -> {files[ns.last].name}: traced ", end="")
    print(f"{total[0] / 1e6:.1f} MB -> {total[1] / 1e6:.1f} MB")
    for stat in new.compare_to(old, ns.by)[: ns.top]:
        print(f"{stat.size_diff / 1e6:+8.2f} MB {stat.count_diff:+9d} objects")
        for line in stat.traceback.format()[-6 if ns.by == "traceback" else -1 :]:
            print(f"      {line.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
