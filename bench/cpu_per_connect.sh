#!/usr/bin/env bash
# One (d)-style connect storm on a fresh ternmq node: connects/s and CPU per connect of the
# listener and the registry, read from /proc around the storm. For A/B comparisons of a
# change to the connect path (interleave the variants: storms on this VM vary ±12 %).
#
# Usage: bench/cpu_per_connect.sh LABEL [CONF_LINE ...]
# Env: SCRATCH=/tmp/ternmq-cpc  PORT=21883  HTTP=21888  MQLOAD=bench/results/.build/mqload
#      CONNS=10000
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LABEL=$1; shift
D=${SCRATCH:-/tmp/ternmq-cpc}; PORT=${PORT:-21883}; HTTP=${HTTP:-21888}; CONNS=${CONNS:-10000}
MQLOAD=${MQLOAD:-$ROOT/bench/results/.build/mqload}
. "$ROOT/bench/fresh_node.sh" "$@"
LISTENER=$(pid_of listener); REGISTRY=$(pid_of registry)
l0=$(ticks "$LISTENER"); r0=$(ticks "$REGISTRY")
# as scenario (d), held 2 s: the CPU read after it includes the disconnects
out=$(timeout 120 "$MQLOAD" --port "$PORT" --broker-pid "$LISTENER" --id "cpc$$" \
  --conns "$CONNS" --par 200 --duration 2 --connect-timeout 90 2>/dev/null | tail -n 1)
l1=$(ticks "$LISTENER"); r1=$(ticks "$REGISTRY")
python3 - "$LABEL" "$out" $((l1 - l0)) $((r1 - r0)) <<'PY'
import json, sys
label, out, lt, rt = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
n = out["connected"]
per = lambda seconds: f"{seconds / n * 1e6:.0f}"
print(f"{label}: {out['connects_per_s']:,.0f} connects/s ({n} of {out['conns']}), µs CPU per "
      f"connect: listener {per(out['broker_cpu_connect_s'])} during the storm, "
      f"{per(lt / 100)} with its disconnect; registry {per(rt / 100)} with its disconnect")
PY
