#!/usr/bin/env bash
# retry.sh runs the retry scenario (bench/retry.go) against a fresh brokerd
# (disk store) and a second broker (RabbitMQ 3.10: bench/rabbit-node.sh
# start) in one sitting: M messages (default 20,000, 1 KiB, persistent,
# durable classic queues, published at 2,000 msgs/s with confirms), each
# failing k times (k uniform in 1..3) before it is acked, in two backoff
# profiles:
#
#   linear  -retry-min 1s -retry-max 10s                      1 s, 2 s, 3 s
#   mix     -retry-min 1s -retry-multiplier 10 -retry-max 10s 1 s, 10 s, 10 s
#
# each waited out three ways where the broker can: brokerd's native
# retries (reject requeue=true; RabbitMQ 3.10 has none: its classic
# queues ignore x-delayed-retry-*), and on both brokers the TTL + DLX
# pattern with one wait queue and a per-message expiration, and with a
# wait queue per delay.
#
#   bench/retry.sh amqp://guest:guest@127.0.0.1:5690/
#   bench/retry.sh -                  # brokerd only
#   M=5000 RATE=1000 bench/retry.sh - # smaller
#
# brokerd is built from this tree and started on 127.0.0.1:$PORT (default
# 5680), fresh for each run. Results go to stdout as one JSON line per
# run, tagged with the run and broker; progress (and uptime before and
# after) to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:?usage: bench/retry.sh OTHER_AMQP_URL|-}
m=${M:-20000}
rate=${RATE:-2000}
port=${PORT:-5680}
. bench/lib.sh

tag() { sed "s/^/{\"run\":\"$1\",\"broker\":\"$2\",\"r\":/; s/\$/}/"; }

# one NAME BROKER URL VIA ARGS...
one() {
  local name=$1 broker=$2 u=$3 via=$4; shift 4
  echo "== $name $broker $via: $*" >&2
  "$tmp/bench" -json -url "$u" -scenario retry -retry-via "$via" -n "$m" -rate "$rate" \
    -persistent -confirm 1000 -prefetch 1000 "$@" | tag "$name-$via" "$broker"
}

uptime >&2
for profile in linear mix; do
  args=(-retry-min 1s -retry-max 10s)
  if [ $profile = mix ]; then args+=(-retry-multiplier 10); fi
  for via in native ttl-dlx ttl-dlx-levels; do
    start_brokerd
    one $profile brokerd "$url" $via "${args[@]}"
  done
  if [ "$other" != - ]; then
    for via in ttl-dlx ttl-dlx-levels; do
      one $profile other "$other" $via "${args[@]}"
    done
  fi
done
uptime >&2
