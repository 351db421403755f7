# Sourced by the cpu_per_*.sh scripts: start a fresh ternmq node in $D with the given extra
# config lines, wait for /health, stop it (its whole process group, by pid) on exit.
# Needs: ROOT D PORT HTTP MQLOAD set. Defines: NODE, pid_of SERVICE, ticks PID... (CPU ticks).
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
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
