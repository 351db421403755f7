#!/usr/bin/env bash
# One scenario (c) run on a fresh ternmq node: throughput and CPU per message of the listener,
# the msgstore and the log converters, read from /proc around the run. For A/B comparisons of
# a change (run the variants interleaved, several times: this VM's spread is about ±6 %).
#
# Usage: bench/cpu_per_message.sh LABEL [CONF_LINE ...]
#   e.g. bench/cpu_per_message.sh spool-off "log.spool = off"
# Env: SCRATCH=/tmp/ternmq-cpm  PORT=21883  HTTP=21888  MQLOAD=bench/results/.build/mqload
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LABEL=$1; shift
D=${SCRATCH:-/tmp/ternmq-cpm}; PORT=${PORT:-21883}; HTTP=${HTTP:-21888}
MQLOAD=${MQLOAD:-$ROOT/bench/results/.build/mqload}
[ -x "$MQLOAD" ] || { echo "build mqload first (bench/run.sh does) or set MQLOAD" >&2; exit 2; }
rm -rf "$D"; mkdir -p "$D"
{
  echo "nodename = bench@127.0.0.1"
  echo "data_dir = $D/data"
  echo "log_dir = $D/log"
  echo "listener.tcp.default = 127.0.0.1:$PORT"
  echo "listener.http.default = 127.0.0.1:$HTTP"
  echo "log.console = off"
  for line in "$@"; do echo "$line"; done
} > "$D/ternmq.conf"
setsid "$ROOT/.venv/bin/ternmq" start --config "$D/ternmq.conf" > "$D/node.out" 2>&1 &
NODE=$!
trap 'kill -TERM -- -$NODE 2>/dev/null; wait $NODE 2>/dev/null' EXIT
for _ in $(seq 120); do curl -sf -o /dev/null "127.0.0.1:$HTTP/health" && break; sleep 0.5; done
pid_of() { curl -s "127.0.0.1:$HTTP/status" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["children"][sys.argv[1]]["pid"])' "$1"; }
LISTENER=$(pid_of listener); MSGSTORE=$(pid_of msgstore)
CONVERTERS=$(pgrep -f "logspool --spool $D/log/spool" | tr '\n' ' ')
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
l0=$(ticks "$LISTENER"); s0=$(ticks "$MSGSTORE"); c0=$(ticks $CONVERTERS)
out=$(timeout 60 "$MQLOAD" --port "$PORT" --broker-pid "$LISTENER" --topic "cpm$$" --id "cpm$$" \
  --mode pair --pubs 10 --subs 10 --qos 1 --size 64 --rate 0 --inflight 100 --clean 0 \
  --duration 10 --drain 5 2>/dev/null | tail -n 1)
l1=$(ticks "$LISTENER"); s1=$(ticks "$MSGSTORE"); c1=$(ticks $CONVERTERS)
python3 - "$LABEL" "$out" $((l1 - l0)) $((s1 - s0)) $((c1 - c0)) <<'PY'
import json, sys
label, out, lt, st, ct = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:])
n = out["received"]
per = lambda ticks: f"{ticks / 100 / n * 1e6:.2f}"
print(f"{label}: {out['msgs_per_s']:,.0f} msg/s, lost {out['lost']}, µs CPU per message: "
      f"listener {per(lt)} ({lt / 100:.2f} s), msgstore {per(st)}, converters {per(ct)}")
PY
