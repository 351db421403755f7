#!/usr/bin/env bash
# One scenario (c) run (or (a) with SCENARIO=a) on a fresh ternmq node: throughput and CPU per
# message of the listener, the msgstore and the log converters, read from /proc around the
# run. For A/B comparisons of a change (run the variants interleaved, several times: this
# VM's spread is about ±6 %). CPU per message holds up better than throughput on a busy
# machine: it counts only what the broker's processes spent.
#
# Usage: bench/cpu_per_message.sh LABEL [CONF_LINE ...]
#   e.g. bench/cpu_per_message.sh spool-off "log.spool = off"
# Env: SCENARIO=c|a  SCRATCH=/tmp/ternmq-cpm  PORT=21883  HTTP=21888
#      MQLOAD=bench/results/.build/mqload
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LABEL=$1; shift
D=${SCRATCH:-/tmp/ternmq-cpm}; PORT=${PORT:-21883}; HTTP=${HTTP:-21888}
MQLOAD=${MQLOAD:-$ROOT/bench/results/.build/mqload}
. "$ROOT/bench/fresh_node.sh" "$@"
LISTENER=$(pid_of listener); MSGSTORE=$(pid_of msgstore)
CONVERTERS=$(pgrep -f "logspool --spool $D/log/spool" | tr '\n' ' ')
l0=$(ticks "$LISTENER"); s0=$(ticks "$MSGSTORE"); c0=$(ticks $CONVERTERS)
. "$ROOT/bench/scenarios.sh"
# shellcheck disable=SC2046  # the scenario's arguments are words
out=$(timeout 60 "$MQLOAD" --port "$PORT" --broker-pid "$LISTENER" --topic "cpm$$" --id "cpm$$" \
  $(args_for "${SCENARIO:-c}") 2>/dev/null | tail -n 1)
l1=$(ticks "$LISTENER"); s1=$(ticks "$MSGSTORE"); c1=$(ticks $CONVERTERS)
python3 - "$LABEL" "$out" $((l1 - l0)) $((s1 - s0)) $((c1 - c0)) <<'PY'
import json, sys
label, out, lt, st, ct = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:])
n = out["received"]
per = lambda ticks: f"{ticks / 100 / n * 1e6:.2f}"
print(f"{label}: {out['msgs_per_s']:,.0f} msg/s, lost {out['lost']}, µs CPU per message: "
      f"listener {per(lt)} ({lt / 100:.2f} s), msgstore {per(st)}, converters {per(ct)}")
PY
