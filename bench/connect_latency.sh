#!/usr/bin/env bash
# Sequential connect latency beside Mosquitto, in one run: bench/connect_latency.py against a
# fresh Mosquitto and a fresh ternmq node on loopback, one client at a time, for three cycles:
#   clean     CONNECT (clean session) -> CONNACK -> DISCONNECT
#   persist   the same with clean session 0 (ternmq: msgstore.fsync = always, the default;
#             Mosquitto: persistence off, as in run.sh), over 100 client ids in turn
#   reconnect persist with one client id, again and again: a device on a flaky link, a
#             `mosquitto_pub -i ID -c` loop (each CONNECT resumes what the last one left)
#   publish   CONNECT -> CONNACK -> PUBLISH QoS 1 -> PUBACK -> DISCONNECT (mosquitto_pub)
# COUNT cycles each (default 2000, after 50 of warm-up). Prints a table of p50/p99 with the
# ratios and the issue's targets, and writes one JSON line per run to
# bench/results/latency-<ts>-<commit>.jsonl (git-ignored). For ternmq it also reads /metrics
# around each run: write transactions per cycle of the registry, msgstore and gossip, the
# registry's mean commit (write + sync: the "one fsync" of the persistent target, the one
# write a persistent CONNECT waits for) and the msgstore's mean fsync.
#
# Usage: bench/connect_latency.sh [COUNT]
# Env:   ROUNDS=1 (brokers alternate their order each round)  MAX_SECONDS=300 (per run)
#        MOSQ_PORT=18831 TERNMQ_PORT=21893 TERNMQ_HTTP=21898 SCRATCH=/tmp/ternmq-latency
#        TERNMQ=<ternmq executable> (default .venv/bin/ternmq; the node runs this tree's code)
# Bounded: every run is capped by MAX_SECONDS (and `timeout`), every start by 60 s. Only the
# processes this script started are stopped, by pid (SIGTERM, then SIGKILL to their group).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
COUNT=${1:-2000}
ROUNDS=${ROUNDS:-1}
MAX_SECONDS=${MAX_SECONDS:-300}
MOSQ_PORT=${MOSQ_PORT:-18831}
TERNMQ_PORT=${TERNMQ_PORT:-21893}
TERNMQ_HTTP=${TERNMQ_HTTP:-21898}
SCRATCH=${SCRATCH:-/tmp/ternmq-latency}
TERNMQ=${TERNMQ:-$ROOT/.venv/bin/ternmq}
PY="$ROOT/.venv/bin/python"; [ -x "$PY" ] || PY=python3
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
OUT=${OUT:-$ROOT/bench/results/latency-$STAMP-$REV.jsonl}
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 2; }
[ -x "$MOSQUITTO" ] || die "mosquitto not found (apt-get install mosquitto)"
[ -x "$TERNMQ" ] || die "no ternmq at $TERNMQ (set TERNMQ=)"
mkdir -p "$SCRATCH" "$(dirname "$OUT")"

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
MAIN_PID=""
stop_main() {  # our own broker: SIGTERM, up to 20 s, then SIGKILL to its process group
  local pid=$MAIN_PID i
  MAIN_PID=""
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }; sleep 0.2; done
  log "pid $pid ignored SIGTERM for 20 s: SIGKILL to its group"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
trap stop_main EXIT

start_mosquitto() {
  local d=$1 i
  port_free "$MOSQ_PORT" || { log "port $MOSQ_PORT is busy"; return 1; }
  printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest none\nset_tcp_nodelay true\n' \
    "$MOSQ_PORT" > "$d/mosquitto.conf"
  setsid "$MOSQUITTO" -c "$d/mosquitto.conf" > "$d/node.out" 2>&1 &
  MAIN_PID=$!; PORT=$MOSQ_PORT
  for i in $(seq 1 100); do port_free "$MOSQ_PORT" || return 0; sleep 0.1; done
  log "mosquitto did not open $MOSQ_PORT"; return 1
}

start_ternmq() {
  local d=$1 i
  port_free "$TERNMQ_PORT" && port_free "$TERNMQ_HTTP" || { log "port $TERNMQ_PORT or $TERNMQ_HTTP is busy"; return 1; }
  rm -rf "$d/data" "$d/log"
  printf 'nodename = latency@127.0.0.1\ndata_dir = %s/data\nlog_dir = %s/log\nlistener.tcp.default = 127.0.0.1:%s\nlistener.http.default = 127.0.0.1:%s\nlog.console = off\n' \
    "$d" "$d" "$TERNMQ_PORT" "$TERNMQ_HTTP" > "$d/ternmq.conf"
  # from ROOT: the services run as `python -m`, which imports from the working directory
  (cd "$ROOT" && exec setsid "$TERNMQ" start --config "$d/ternmq.conf") > "$d/node.out" 2>&1 &
  MAIN_PID=$!; PORT=$TERNMQ_PORT
  for i in $(seq 1 120); do
    kill -0 "$MAIN_PID" 2>/dev/null || { log "ternmq exited during start"; return 1; }
    curl -sf -m 2 -o /dev/null "127.0.0.1:$TERNMQ_HTTP/health" && return 0
    sleep 0.5
  done
  log "ternmq /health not 200 after 60 s"; return 1
}

metrics() {  # the counters this script reads, as JSON ({} for Mosquitto)
  [ "$1" = ternmq ] || { echo '{}'; return; }
  curl -s -m 5 "127.0.0.1:$TERNMQ_HTTP/metrics" | python3 -c '
import json, sys
want = ("registry_commits_total", "registry_commit_seconds_total", "msgstore_commits_total",
        "gossip_commits_total", "msgstore_fsync_seconds_count", "msgstore_fsync_seconds_sum",
        "registry_takeovers_total")
out = {}
for line in sys.stdin:
    name, _, value = line.partition(" ")
    name = name.split("{")[0].removeprefix("ternmq_")
    if name in want:
        out[name] = out.get(name, 0.0) + float(value.split()[0])
print(json.dumps(out))'
}

run_cycles() {  # BROKER SCENARIO ROUND
  local b=$1 s=$2 r=$3 args line m0 m1
  case $s in
    clean) args="--clean 1" ;;
    persist) args="--clean 0" ;;
    reconnect) args="--clean 0 --ids 1" ;;
    publish) args="--clean 1 --publish" ;;
  esac
  m0=$(metrics "$b")
  # shellcheck disable=SC2086
  line=$(timeout $((MAX_SECONDS + 30)) "$PY" "$ROOT/bench/connect_latency.py" --port "$PORT" \
    --count "$COUNT" --max-seconds "$MAX_SECONDS" --label "$b-$s" --id-prefix "lat-$s-" $args 2> "$SCRATCH/$b-$s-$r.err" | tail -n 1)
  m1=$(metrics "$b")
  python3 - "$line" "$b" "$s" "$r" "$REV" "$m0" "$m1" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' >> "$OUT"
import json, sys
line, broker, scenario, rnd, rev, m0, m1, load = sys.argv[1:]
try:
    row = json.loads(line)
except ValueError:
    row = {"error": line[-300:] or "no output"}
row.update(broker=broker, scenario=scenario, round=int(rnd), commit=rev, load_after=float(load))
m0, m1 = json.loads(m0), json.loads(m1)
cycles = row.get("count", 0) + row.get("failures", 0)
if m1 and cycles:
    delta = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    row["commits_per_cycle"] = {
        k.split("_")[0]: round(delta.get(k, 0.0) / cycles, 2)
        for k in ("registry_commits_total", "msgstore_commits_total", "gossip_commits_total")
    }
    # a client that reconnects after its DISCONNECT resumes; it takes nothing over
    row["takeovers_per_cycle"] = round(delta.get("registry_takeovers_total", 0.0) / cycles, 2)
    n = delta.get("registry_commits_total", 0.0)
    if n:
        row["registry_commit_mean_us"] = round(delta["registry_commit_seconds_total"] / n * 1e6)
    n = delta.get("msgstore_fsync_seconds_count", 0.0)
    if n:
        row["msgstore_fsync_mean_us"] = round(delta["msgstore_fsync_seconds_sum"] / n * 1e6)
print(json.dumps(row))
PY
  log "$b $s: $(tail -n 1 "$OUT" | cut -c1-160)"
}

BUILD=$(find "$ROOT/services" -name '*.so' | head -n 1)
log "commit $REV, $([ -n "$BUILD" ] && echo compiled || echo pure-Python) build, $COUNT cycles, $ROUNDS round(s) -> $OUT"
for r in $(seq 1 "$ROUNDS"); do
  order="mosquitto ternmq"; [ $((r % 2)) -eq 0 ] && order="ternmq mosquitto"
  for b in $order; do
    d="$SCRATCH/$STAMP-$b-$r"; mkdir -p "$d"
    "start_$b" "$d" || { stop_main; die "could not start $b (see $d)"; }
    for s in clean persist reconnect publish; do run_cycles "$b" "$s" "$r"; done
    stop_main
  done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(b, s, k):
    v = [r[k] for r in rows if r["broker"] == b and r["scenario"] == s and k in r]
    return statistics.median(v) if v else None
fsync = med("ternmq", "persist", "registry_commit_mean_us")
targets = {
    "clean": ("connack_p50_us", lambda t, m: t <= 500, "p50 <= 500 us"),
    "persist": ("connack_p50_us", lambda t, m: fsync is not None and t <= fsync + 500,
                f"p50 <= one registry commit ({fsync} us) + 500 us"),
    "reconnect": ("connack_p50_us", lambda t, m: fsync is not None and t <= fsync + 500,
                  f"p50 <= one registry commit ({fsync} us) + 500 us"),
    "publish": ("cycle_p50_us", lambda t, m: t <= 2 * m, "cycle p50 <= 2x Mosquitto"),
}
print("| cycle | figure | Mosquitto | ternmq | ternmq / Mosquitto | target | met |")
print("|---|---|---|---|---|---|---|")
for s in ("clean", "persist", "reconnect", "publish"):
    key, ok, text = targets[s]
    for k in ("connack_p50_us", "connack_p99_us", "cycle_p50_us", "cycle_p99_us"):
        m, t = med("mosquitto", s, k), med("ternmq", s, k)
        if m is None or t is None:
            continue
        met = ("yes" if ok(t, m) else "no") if k == key else ""
        print(f"| {s} | {k[:-3].replace('_', ' ')} µs | {m:,.0f} | {t:,.0f} | {t / m:.2f} |"
              f" {text if k == key else ''} | {met} |")
for r in rows:
    if r["broker"] == "ternmq" and "commits_per_cycle" in r:
        print(f"ternmq {r['scenario']} round {r['round']}: write transactions per cycle "
              f"{r['commits_per_cycle']}; mean registry commit {r.get('registry_commit_mean_us')} µs,"
              f" msgstore fsync {r.get('msgstore_fsync_mean_us')} µs;"
              f" takeovers per cycle {r.get('takeovers_per_cycle')}")
bad = [r for r in rows if r.get("failures") or "error" in r]
for r in bad:
    print(f"{r['broker']} {r['scenario']}: failures {r.get('failures')} {r.get('error', '')}")
PY
