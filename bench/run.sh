#!/usr/bin/env bash
# Side-by-side load runs: ternmq and Mosquitto, same mqload scenarios, same machine, alternating.
#
# Usage: bench/run.sh [REPS] [SCENARIOS...]      e.g. bench/run.sh 3 a a2 b c d
#   default: REPS=3, scenarios a a2 b c d (see bench/scenarios.sh).
# Each run gets a freshly started broker (a fresh data dir for ternmq), so backlog or on-disk
# state from one run never leaks into the next. Output: one JSON line per run in
# bench/results/run-<UTC timestamp>-<commit>.jsonl, then `bench/summarize.py` prints the tables.
#
# Env:
#   BROKERS="mosquitto ternmq"   brokers to run (ternmq-noev is added for EVOFF_SCENARIOS;
#                                ternmq-p2 is ternmq with listener.processes = 2)
#   EVOFF_SCENARIOS="c"          scenarios also run on ternmq with log.message_events = off
#   TERNMQ_SET="k=v k2=v2"       extra conf lines for every ternmq node (recorded in the output)
#   PYSPY=1                      profile the ternmq listener with py-spy during each ternmq run
#                                (such rows are tagged "profiled" and left out of the medians)
#   PYSPY_SECONDS=10             py-spy sampling time
#   MOSQ_PORT=18830 TERNMQ_PORT=21883 TERNMQ_HTTP=21888   loopback ports
#   OUT=FILE                     output file (default bench/results/run-<ts>-<commit>.jsonl)
#   KEEP=1                       keep every ternmq scratch dir (default: only failed runs')
#   SCRATCH=/tmp/ternmq-bench    where node data dirs live while a run is on
#   MQLOAD=PATH                  a prebuilt mqload (default: built into bench/results/.build/)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/scenarios.sh
. "$HERE/scenarios.sh"

REPS=${1:-3}; shift || true
SCEN=("$@"); [ ${#SCEN[@]} -eq 0 ] && SCEN=(a a2 b c d)
read -r -a BROKERS <<< "${BROKERS:-mosquitto ternmq}"
read -r -a EVOFF <<< "${EVOFF_SCENARIOS-c}"
MOSQ_PORT=${MOSQ_PORT:-18830}
TERNMQ_PORT=${TERNMQ_PORT:-21883}
TERNMQ_HTTP=${TERNMQ_HTTP:-21888}
SCRATCH=${SCRATCH:-/tmp/ternmq-bench}
RESULTS="$HERE/results"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
OUT=${OUT:-$RESULTS/run-$STAMP-$REV.jsonl}
EVIDENCE="$RESULTS/evidence-$STAMP"
PYSPY_SECONDS=${PYSPY_SECONDS:-10}
RUN_TIMEOUT=150            # hard wall-clock bound on every mqload run
mkdir -p "$RESULTS" "$SCRATCH" "$(dirname "$OUT")"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true

die() { echo "run.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------- tools
build_mqload() {
  if [ -n "${MQLOAD:-}" ]; then [ -x "$MQLOAD" ] || die "MQLOAD=$MQLOAD is not executable"; return; fi
  local src=/work/shared/tools/mqload/mqload.c dir="$RESULTS/.build"
  MQLOAD="$dir/mqload"
  [ -f "$src" ] || die "mqload source not found at $src (set MQLOAD=)"
  if [ ! -x "$MQLOAD" ] || [ "$src" -nt "$MQLOAD" ]; then
    mkdir -p "$dir"
    gcc -O2 -g -Wall -Wextra -std=gnu11 -o "$MQLOAD" "$src" || die "mqload build failed"
  fi
}
command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || {
  log "installing mosquitto (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null \
    || die "could not install mosquitto"
}
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)
TERNMQ="$ROOT/.venv/bin/ternmq"
PY="$ROOT/.venv/bin/python"; [ -x "$PY" ] || PY=python3
build_mqload

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
await_port_free() {  # bounded: PORT_WAIT s; on failure say who holds it (never touch it)
  local i; for i in $(seq 1 $((${PORT_WAIT:-60} * 2))); do port_free "$1" && return 0; sleep 0.5; done
  START_ERR="port $1 still busy after ${PORT_WAIT:-60} s: $(ss -tlnpH "( sport = :$1 )" 2>/dev/null | tr -s ' ' | head -c 300)"
  log "$START_ERR"; return 1
}
wait_port() {  # bounded: 100 x 0.1 s
  local i; for i in $(seq 1 100); do port_free "$1" || return 0; sleep 0.1; done; return 1
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
sum_rss() { local p t=0 v; for p in "$@"; do v=$(rss_kb "$p"); t=$((t + ${v:-0})); done; echo "$t"; }
sum_cpu() { local p t=0 v; for p in "$@"; do v=$(cpu_ticks "$p"); t=$((t + ${v:-0})); done; echo "$t"; }

# Sample the summed RSS of PIDS every 0.25 s into FILE (peak), until killed or LIMIT s.
rss_sampler() {
  local file=$1 limit=$2; shift 2
  local peak=0 v end=$((SECONDS + limit))
  while [ $SECONDS -lt "$end" ]; do
    v=$(sum_rss "$@")  # rename: a reader never sees a half-written file
    [ "$v" -gt "$peak" ] && { peak=$v; echo "$peak" > "$file.tmp" && mv -f "$file.tmp" "$file"; }
    sleep 0.25
  done
}

stop_pid() {  # SIGTERM our own process, wait up to 20 s, then SIGKILL its process group
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "pid $pid ignored SIGTERM for 20 s: SIGKILL to its group"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  sleep 0.5
  return 1
}

# ---------------------------------------------------------------- brokers
# start_<broker> sets BPID (the measured process), NODE_PIDS and NODE_NAMES (all processes of
# the broker, and what each one is),
# MAIN_PID (what we stop), PORT and CONFIG_JSON, or returns non-zero.
start_mosquitto() {
  local d=$1
  await_port_free "$MOSQ_PORT" || return 1
  cat > "$d/mosquitto.conf" <<CONF
listener $MOSQ_PORT 127.0.0.1
allow_anonymous true
persistence false
log_dest none
set_tcp_nodelay true
CONF
  setsid "$MOSQUITTO" -c "$d/mosquitto.conf" > "$d/node.out" 2>&1 &
  MAIN_PID=$!; BPID=$MAIN_PID; NODE_PIDS=("$MAIN_PID"); NODE_NAMES=(mosquitto); PORT=$MOSQ_PORT
  CONFIG_JSON='{"persistence":false,"set_tcp_nodelay":true}'
  wait_port "$MOSQ_PORT" || { START_ERR="mosquitto did not open $MOSQ_PORT"; log "$START_ERR"; return 1; }
}

start_ternmq_variant() {  # DIR EVENTS(on|off)
  local d=$1 events=$2 i code status extra kv
  await_port_free "$TERNMQ_PORT" || return 1
  await_port_free "$TERNMQ_HTTP" || return 1
  rm -rf "$d/data" "$d/log"
  {
    echo "nodename = bench@127.0.0.1"
    echo "data_dir = $d/data"
    echo "log_dir = $d/log"
    echo "listener.tcp.default = 127.0.0.1:$TERNMQ_PORT"
    echo "listener.http.default = 127.0.0.1:$TERNMQ_HTTP"
    echo "log.console = off"
    echo "log.message_events = $events"
    for kv in ${TERNMQ_SET:-}; do echo "${kv%%=*} = ${kv#*=}"; done
  } > "$d/ternmq.conf"
  (cd "$ROOT" && exec setsid "$TERNMQ" start --config "$d/ternmq.conf") > "$d/node.out" 2>&1 &
  MAIN_PID=$!; PORT=$TERNMQ_PORT
  code=000
  for i in $(seq 1 120); do  # bounded: 60 s
    kill -0 "$MAIN_PID" 2>/dev/null || { START_ERR="ternmq exited during start"; log "$START_ERR"; return 1; }
    code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "127.0.0.1:$TERNMQ_HTTP/health" || true)
    [ "$code" = 200 ] && break
    sleep 0.5
  done
  [ "$code" = 200 ] || { START_ERR="ternmq /health not 200 after 60 s ($code)"; log "$START_ERR"; return 1; }
  status=$(curl -s -m 5 "127.0.0.1:$TERNMQ_HTTP/status") || return 1
  echo "$status" > "$d/status-start.json"
  BPID=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["children"]["listener"]["pid"])' \
         <<< "$status") || return 1
  read -r -a NODE_PIDS <<< "$MAIN_PID $(python3 -c \
    'import json,sys; print(" ".join(str(c["pid"]) for c in json.load(sys.stdin)["children"].values()))' \
    <<< "$status")"
  read -r -a NODE_NAMES <<< "supervisor $(python3 -c \
    'import json,sys; print(" ".join(json.load(sys.stdin)["children"]))' <<< "$status")"
  extra=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1].split()))' "${TERNMQ_SET:-}")
  CONFIG_JSON=$(python3 -c '
import json, sys
s = json.loads(sys.argv[1])
print(json.dumps({"message_events": sys.argv[2] == "on",
                  "fsync": s.get("services", {}).get("msgstore", {}).get("fsync"),
                  "extra": json.loads(sys.argv[3])}))' "$status" "$events" "$extra")
}
start_ternmq() { start_ternmq_variant "$1" on; }
start_ternmq-noev() { start_ternmq_variant "$1" off; }
# listener.processes = 2 (BROKERS="mosquitto ternmq ternmq-p2"): two listener processes
# sharing the port; the kernel spreads mqload's connections over them
start_ternmq-p2() { TERNMQ_SET="${TERNMQ_SET:-} listener.processes=2" start_ternmq_variant "$1" on; }

# ---------------------------------------------------------------- one run
meta() {
  python3 - "$MOSQUITTO" "$ROOT" <<'PY'
import json, os, platform, subprocess, sys
def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
print(json.dumps({"meta": {
    "cpu": cpu, "nproc": os.cpu_count(), "mem_kb": int(mem), "kernel": platform.release(),
    "python": sh(sys.argv[2] + "/.venv/bin/python", "-VV"),
    "mosquitto": sh(sys.argv[1], "-h").splitlines()[0] if sh(sys.argv[1], "-h") else "",
    "ternmq_rev": sh("git", "-C", sys.argv[2], "rev-parse", "--short", "HEAD"),
    "ternmq_dirty": bool(sh("git", "-C", sys.argv[2], "status", "--porcelain", "--", "services")),
}}))
PY
}

run_one() {  # REP SCENARIO BROKER
  local rep=$1 s=$2 b=$3 d line rss0 cpu0 cpu1 peakf sampler probe spy="" alive=1 restarts=0 status
  local -a ticks0=() detail=()
  local alive_left=""
  local load ok=1 why=""
  d="$SCRATCH/$STAMP/$s-$b-$rep"; mkdir -p "$d"
  BPID=""; MAIN_PID=""; NODE_PIDS=(); NODE_NAMES=(); CONFIG_JSON='{}'; START_ERR=""
  load=$(cut -d' ' -f1 /proc/loadavg)
  if ! "start_$b" "$d"; then
    [ -n "$MAIN_PID" ] && stop_pid "$MAIN_PID"
    line='{"error":"broker did not start"}'; ok=0; why="start failed: ${START_ERR:-see node.out}"
  else
    sleep 1
    rss0=$(sum_rss "${NODE_PIDS[@]}"); cpu0=$(sum_cpu "${NODE_PIDS[@]}")
    local i; for i in "${!NODE_PIDS[@]}"; do ticks0[i]=$(cpu_ticks "${NODE_PIDS[i]}"); done
    peakf="$d/rss-peak"; echo "$rss0" > "$peakf"
    rss_sampler "$peakf" $((RUN_TIMEOUT + 5)) "${NODE_PIDS[@]}" &
    sampler=$!
    "$PY" "$HERE/speed_probe.py" "$d/speed.json" --limit $((RUN_TIMEOUT + 5)) &
    probe=$!
    if [ "${PYSPY:-0}" = 1 ] && [ "${b#ternmq}" != "$b" ]; then
      # start sampling once the handshakes are done, for PYSPY_SECONDS of the publish phase
      ( sleep 1.5; exec timeout $((PYSPY_SECONDS + 20)) "$ROOT/.venv/bin/py-spy" record \
          --pid "$BPID" --duration "$PYSPY_SECONDS" --format raw --nonblocking \
          --output "$d/pyspy.folded" ) > "$d/pyspy.out" 2>&1 &
      spy=$!
    fi
    line=$(timeout "$RUN_TIMEOUT" "$MQLOAD" --port "$PORT" --broker-pid "$BPID" \
             --topic "tb$STAMP$rep$s" --id "tb$rep$s" $(args_for "$s") 2> "$d/mqload.err" | tail -n 1)
    [ -n "$line" ] || { line='{"error":"no output from mqload"}'; ok=0; why="mqload gave no output"; }
    [ -n "$spy" ] && wait "$spy"
    cpu1=$(sum_cpu "${NODE_PIDS[@]}")
    for i in "${!NODE_PIDS[@]}"; do  # name:cpu ticks during the run:RSS KiB at the end
      detail+=("${NODE_NAMES[i]:-pid${NODE_PIDS[i]}}:$(( $(cpu_ticks "${NODE_PIDS[i]}") - ticks0[i] )):$(rss_kb "${NODE_PIDS[i]}")")
    done
    kill "$sampler" "$probe" 2>/dev/null; wait "$sampler" "$probe" 2>/dev/null
    if [ "${b#ternmq}" != "$b" ]; then
      status=$(curl -s -m 5 "127.0.0.1:$TERNMQ_HTTP/status" || true)
      echo "$status" > "$d/status-end.json"
      curl -s -m 5 "127.0.0.1:$TERNMQ_HTTP/metrics" > "$d/metrics.txt" || true
      restarts=$(python3 -c 'import json,sys
try: print(sum(c["restarts"] for c in json.load(sys.stdin)["children"].values()))
except Exception: print(-1)' <<< "$status")
    fi
    kill -0 "$MAIN_PID" 2>/dev/null || alive=0
    local p; for p in "${NODE_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
    stop_pid "$MAIN_PID" || why="${why:+$why; }did not stop on SIGTERM"
    # every process of the broker must be gone before the next run starts (bounded: 20 s)
    for i in $(seq 1 100); do
      alive_left=""; for p in "${NODE_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive_left+=" $p"; done
      [ -z "$alive_left" ] && break; sleep 0.2
    done
    if [ -n "$alive_left" ]; then
      why="${why:+$why; }processes$alive_left outlived the stop by 20 s: SIGKILL"
      for p in $alive_left; do kill -KILL "$p" 2>/dev/null; done
    fi
  fi
  [ -n "$spy" ] && [ -s "$d/pyspy.folded" ] && cp "$d/pyspy.folded" "$RESULTS/pyspy-$STAMP-$s-$b-$rep.folded"
  line=$("$PY" "$HERE/summarize.py" wrap \
    --broker "$b" --scenario "$s" --rep "$rep" --loadavg "$load" --config "$CONFIG_JSON" \
    --node-rss-before "${rss0:-0}" --node-rss-peak "$(cat "${peakf:-/nonexistent}" 2>/dev/null || echo 0)" \
    --node-cpu-s "$(( ${cpu1:-0} - ${cpu0:-0} ))" --clk-tck "$(getconf CLK_TCK)" \
    --node-detail "${detail[*]}" \
    --alive "$alive" --restarts "$restarts" --profiled "$([ -n "$spy" ] && echo 1 || echo 0)" \
    --metrics "$d/metrics.txt" --speed "$d/speed.json" \
    --note "$why" --evidence "$EVIDENCE/$s-$b-$rep" <<< "$line")
  echo "$line" | tee -a "$OUT"
  if [ "${KEEP:-0}" = 1 ] || [[ "$line" == *'"failed": true'* ]]; then
    mkdir -p "$EVIDENCE/$s-$b-$rep"
    cp "$d"/*.conf "$d"/*.json "$d"/*.txt "$d/node.out" "$d/mqload.err" "$EVIDENCE/$s-$b-$rep/" 2>/dev/null
    for f in "$d"/log/*.jsonl; do [ -f "$f" ] && tail -n 200 "$f" > "$EVIDENCE/$s-$b-$rep/$(basename "$f")"; done
  fi
  rm -rf "$d"
}

# ---------------------------------------------------------------- main
log "writing $OUT (mqload: $MQLOAD)"
meta | tee -a "$OUT" >&2
for rep in $(seq 1 "$REPS"); do
  for s in "${SCEN[@]}"; do
    args_for "$s" > /dev/null || exit 2
    order=("${BROKERS[@]}")
    for e in "${EVOFF[@]}"; do
      [ "$e" = "$s" ] && [[ " ${order[*]} " == *" ternmq "* ]] && order+=(ternmq-noev)
    done
    # alternate who goes first, so neither broker always runs on a machine fresh from idle
    if [ $((rep % 2)) -eq 0 ]; then
      rev=(); for ((i=${#order[@]}-1; i>=0; i--)); do rev+=("${order[i]}"); done; order=("${rev[@]}")
    fi
    for b in "${order[@]}"; do
      log "rep $rep scenario $s broker $b"
      run_one "$rep" "$s" "$b"
    done
  done
done
rmdir "$SCRATCH/$STAMP" 2>/dev/null
log "done: $OUT"
"$PY" "$HERE/summarize.py" "$OUT"
