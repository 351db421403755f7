# shellcheck shell=bash
# The mqload arguments of each scenario, sourced by bench/run.sh. The same arguments are used for
# every broker; the letters follow the issue and /work/shared/tools/peers/run-bench.sh.
#   a   QoS 0 fan-in, 10 publishers -> 1 subscriber, 64-byte payloads, max rate (throughput)
#   a2  as a, at a fixed 10 x 200 = 2,000 msg/s (latency p99)
#   b   QoS 0 fan-out, 1 publisher -> 50 subscribers, max rate (deliveries/s)
#   c   QoS 1 pairwise, 10 -> 10, persistent sessions (clean 0), inflight 100, max rate
#   c2  as c at a fixed 10 x 200 msg/s (latency of the persistent QoS 1 path)
#   d   10,000 idle connections, 200 handshakes in parallel, held 5 s (RSS/conn, connects/s)
# Publishing lasts 10 s (drain up to 5 s) as in run-bench.sh.
args_for() {
  case $1 in
    a)  echo "--mode fanin  --pubs 10 --subs 1  --qos 0 --size 64 --rate 0   --duration 10 --drain 5" ;;
    a2) echo "--mode fanin  --pubs 10 --subs 1  --qos 0 --size 64 --rate 200 --duration 10 --drain 5" ;;
    b)  echo "--mode fanout --pubs 1  --subs 50 --qos 0 --size 64 --rate 0   --duration 10 --drain 5" ;;
    c)  echo "--mode pair   --pubs 10 --subs 10 --qos 1 --size 64 --rate 0   --inflight 100 --clean 0 --duration 10 --drain 5" ;;
    c2) echo "--mode pair   --pubs 10 --subs 10 --qos 1 --size 64 --rate 200 --inflight 100 --clean 0 --duration 10 --drain 5" ;;
    d)  echo "--conns 10000 --par 200 --duration 5 --connect-timeout 90" ;;
    smoke) echo "--mode fanin --pubs 10 --subs 1 --qos 0 --size 64 --rate 0 --duration 3 --drain 3" ;;
    *)  echo "unknown scenario '$1' (a a2 b c c2 d smoke)" >&2; return 2 ;;
  esac
}
