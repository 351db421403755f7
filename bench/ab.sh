#!/usr/bin/env bash
# A/B of two checkouts on this machine, interleaved: CPU per message of scenarios (a) and (c)
# and CPU per connect of (d), each on a fresh node, alternating A and B REPS times, so drift
# in the machine's load hits both alike. Each checkout needs its own .venv/bin/ternmq (with
# the compiled modules built, for figures that mean anything) and bench/cpu_per_*.sh.
#
# Usage: bench/ab.sh A_ROOT B_ROOT [REPS]      e.g. bench/ab.sh /tmp/before . 3
# Env: MQLOAD (prebuilt mqload), CONNS (d's connections, default 10000), OUT (log file)
set -uo pipefail
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); REPS=${3:-3}
OUT=${OUT:-/dev/stdout}
for rep in $(seq "$REPS"); do
  for root in "$A" "$B"; do
    label="$(basename "$root")@$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo tree) #$rep"
    for scenario in a c; do
      PYTHONPATH=$root SCENARIO=$scenario SCRATCH=/tmp/ternmq-ab \
        bash "$root/bench/cpu_per_message.sh" "$label ($scenario)" >> "$OUT" 2>&1
    done
    PYTHONPATH=$root SCRATCH=/tmp/ternmq-ab bash "$root/bench/cpu_per_connect.sh" "$label (d)" \
      >> "$OUT" 2>&1
  done
done
