#!/usr/bin/env bash
# scale.sh runs the scale scenarios of issue 12 with the broker's RSS: one
# queue vs 1,000 queues (one consumer each), fan-out to 100 queues, 10,000
# idle connections with heartbeats, and a 10M-message persistent backlog filled and
# drained, against a fresh brokerd per scenario and, unless OTHER is "-", a
# second broker (RabbitMQ) whose pid, if given, is sampled the same way.
#
#   bench/scale.sh amqp://guest:guest@127.0.0.1:5690/ [other-pid]
#   bench/scale.sh -                       # brokerd only
#   N=200000 CONNS=2000 HOLD=10s BACKLOG=1000000 bench/scale.sh -   # smaller
#   CLIENT=amqp091 bench/scale.sh ...      # amqp091-go for producers and consumers
#
# The default client is bench's raw client (the idle connections always
# are). brokerd is built from this tree and started on 127.0.0.1:$PORT
# (default 5680). Results go to stdout as one JSON line per run, tagged with
# the run and broker; progress to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:?usage: bench/scale.sh OTHER_AMQP_URL|- [OTHER_PID]}
other_pid=${2:-0}
client=${CLIENT:-raw}
n=${N:-1000000}
conns=${CONNS:-10000}
hold=${HOLD:-30s}
backlog=${BACKLOG:-10000000}
port=${PORT:-5680}
. bench/lib.sh

tag() { sed "s/^/{\"run\":\"$1\",\"broker\":\"$2\",\"r\":/; s/\$/}/"; }

run() { # name, bench args...: a fresh brokerd, then the other broker
  local name=$1; shift
  echo "== $name: $*" >&2
  start_brokerd
  "$tmp/bench" -json -client "$client" -url "$url" -broker-pid "$bpid" "$@" | tag "$name" brokerd
  if [ "$other" != - ]; then
    "$tmp/bench" -json -client "$client" -url "$other" -broker-pid "$other_pid" "$@" | tag "$name" other
  fi
}

run queues-1     -scenario queues -queues 1 -n "$n" -size 1024 -ack manual
run queues-1000  -scenario queues -queues 1000 -n "$n" -size 1024 -ack manual
run fanout-100   -scenario fanout -queues 100 -n $((n / 100)) -size 1024 -ack manual
run idle-conns   -scenario idle-conns -conns "$conns" -heartbeat 10 -duration "$hold" -rate 1000 -size 1024
run backlog      -scenario backlog -persistent -n "$backlog" -size 1024 -confirm 1000 -ack manual
