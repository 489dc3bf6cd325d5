#!/usr/bin/env bash
# durable.sh runs the durable-store benchmark table (issue 7): 1 KiB
# persistent messages to durable queues with fsync before confirm, against a
# fresh brokerd on its disk store, brokerd on its memory store (publish
# only: the cost of durability) and a second broker (RabbitMQ, quorum
# queues), side by side, then the backlog runs (fill, broker RSS, disk
# bytes, time from start to serving with that backlog, drain).
#
#   bench/durable.sh amqp://guest:guest@127.0.0.1:5690/ [backlog-sizes]
#   bench/durable.sh - 1000000     # the backlog runs only
#   CLIENT=amqp091 bench/durable.sh ...   # with amqp091-go instead of the raw client
#   ROUNDS=5 bench/durable.sh ...         # each scenario 5 times, brokers taking turns
#
# On a small shared machine one run of a scenario can be off by 20 % or
# more either way; the README's table gives the median of ROUNDS=5.
#
# The default client is bench's raw AMQP client (-client raw): it costs the
# machine a small fraction of what amqp091-go does, so on 2 cores the figures
# are the brokers' and not the client's. client_cpu_s in each result says
# what the client used.
#
# brokerd is built from this tree and started on 127.0.0.1:5680. Results go
# to stdout as one JSON line per run, progress to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:?usage: bench/durable.sh OTHER_AMQP_URL [BACKLOG_SIZES]}
backlogs=${2:-1000000}
client=${CLIENT:-raw}
rounds=${ROUNDS:-1}
tmp=$(mktemp -d)
trap 'kill $bpid 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/brokerd" ./cmd/brokerd
go build -o "$tmp/bench" ./bench
url=amqp://guest:guest@127.0.0.1:5680/
printf '[storage]\nengine = "memory"\n' > "$tmp/memory.toml"

# start_brokerd [fresh|keep] [brokerd args...]: starts brokerd; started_ms
# is the time from exec to accepting connections.
start_brokerd() {
  local mode=$1; shift
  kill ${bpid:-} 2>/dev/null || true; wait ${bpid:-} 2>/dev/null || true
  [ "$mode" = fresh ] && rm -rf "$tmp/data"
  if (echo > /dev/tcp/127.0.0.1/5680) 2>/dev/null; then
    echo "127.0.0.1:5680 is taken by another process: stop it first" >&2; exit 1
  fi
  local t0; t0=$(date +%s%N)
  "$tmp/brokerd" -listen 127.0.0.1:5680 -mgmt-listen off -data "$tmp/data" "$@" >/dev/null 2>"$tmp/brokerd.log" &
  bpid=$!
  for _ in $(seq 3000); do
    kill -0 $bpid 2>/dev/null || { echo "brokerd exited" >&2; cat "$tmp/brokerd.log" >&2; exit 1; }
    (echo > /dev/tcp/127.0.0.1/5680) 2>/dev/null && { started_ms=$(( ($(date +%s%N) - t0) / 1000000 )); return; }
    sleep 0.01
  done
  echo "brokerd did not start" >&2; cat "$tmp/brokerd.log" >&2; exit 1
}

tag() { sed "s/^/{\"run\":\"$1\",\"broker\":\"$2\",\"round\":${3:-1},\"r\":/; s/\$/}/"; }

run() { # name, bench args...: ROUNDS rounds, the brokers taking turns
  local name=$1; shift
  for round in $(seq "$rounds"); do
    echo "== $name (round $round of $rounds): $*" >&2
    start_brokerd fresh
    "$tmp/bench" -json -client "$client" -url "$url" -persistent -queue-type quorum "$@" | tag "$name" brokerd-disk "$round"
    if [[ $name == publish* ]]; then
      start_brokerd fresh -config "$tmp/memory.toml"
      "$tmp/bench" -json -client "$client" -url "$url" -persistent -queue-type quorum "$@" | tag "$name" brokerd-memory "$round"
    fi
    "$tmp/bench" -json -client "$client" -url "$other" -persistent -queue-type quorum "$@" | tag "$name" other-quorum "$round"
  done
}

if [ "$other" != - ]; then
run publish-1p  -scenario publish -n 200000 -size 1024 -confirm 1000
run publish-4p  -scenario publish -n 200000 -size 1024 -confirm 1000 -producers 4
run consume     -scenario consume -n 200000 -size 1024 -ack manual -prefetch 1000
run dlx-reject  -scenario dlx-reject -n 100000 -size 1024 -confirm 1000
run e2e-5000    -scenario e2e -duration 20s -rate 5000 -size 1024 -confirm 1000 -ack manual
run ttl-expire  -scenario ttl-expire -n 100000 -size 1024 -confirm 1000 -ttl 1s
run maxlen      -scenario maxlen -n 100000 -size 1024 -confirm 1000 -max-length 1000
fi

# Backlogs: fill one queue, restart brokerd on it (time to serve), then
# drain; RSS and disk bytes after the fill and after the restart.
rss() { ps -o rss= -p "$1" | tr -d ' '; }
for n in $backlogs; do
  echo "== backlog $n" >&2
  start_brokerd fresh
  "$tmp/bench" -json -client "$client" -url "$url" -persistent -scenario publish -n "$n" -size 1024 -confirm 1000 -id backlog- -keep | tag "backlog-$n-fill" brokerd-disk
  echo "{\"run\":\"backlog-$n\",\"broker\":\"brokerd-disk\",\"rss_kib_after_fill\":$(rss $bpid),\"disk_bytes\":$(du -sb "$tmp/data" | cut -f1),\"payload_bytes\":$((n * 1024))}"
  start_brokerd keep
  echo "{\"run\":\"backlog-$n\",\"broker\":\"brokerd-disk\",\"start_to_serving_ms\":$started_ms,\"rss_kib_after_start\":$(rss $bpid)}"
  "$tmp/bench" -json -client "$client" -url "$url" -persistent -scenario drain -n "$n" -size 1024 -ack manual -prefetch 1000 -id backlog- | tag "backlog-$n-drain" brokerd-disk
done
