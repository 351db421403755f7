#!/usr/bin/env bash
# What the test suite needs from Debian, installed when missing (make test runs this):
# the mosquitto clients, Java for Spark, Node for MQTT.js, Chromium for the browser test,
# HAProxy for deploy/haproxy.cfg, redis-server for discovery, iproute2 for the partition
# tests' namespaces, and a C compiler for the compiled modules. Needs root (or sudo) only
# when something is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v mosquitto_sub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "installing: ${need[*]}" >&2
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
