#!/usr/bin/env bash
# acceptance.sh runs issue 12's throughput and latency scenarios (1 KiB
# bodies, bench's raw client, one producer and one consumer connection)
# against a fresh brokerd (disk store) and a second broker (RabbitMQ) in
# one sitting, the brokers taking turns in each round:
#
#   transient e2e, no confirms, auto-ack        (RabbitMQ: classic queue)
#   persistent publish, confirms (window 1000)  (RabbitMQ: quorum queue)
#   drain of a 1M persistent backlog, manual acks, prefetch 1000
#   dead-letter by reject, persistent, confirms
#   persistent e2e at a fixed 50,000 msgs/s, confirms, manual acks: latency
#
#   bench/acceptance.sh amqp://guest:guest@127.0.0.1:5690/ RABBIT_PID
#   ROUNDS=5 bench/acceptance.sh ...      # default 3
#   bench/acceptance.sh -                 # brokerd only
#
# Each result is bench's JSON line, tagged with the run, the broker and the
# round, plus broker_cpu_s: the broker process's user+system CPU during the
# run (from /proc, so the broker must run on this machine), beside the
# client's own client_cpu_s. brokerd is built from this tree and started on
# 127.0.0.1:$PORT (default 5680). Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:?usage: bench/acceptance.sh OTHER_AMQP_URL|- [OTHER_PID]}
other_pid=${2:-0}
rounds=${ROUNDS:-3}
port=${PORT:-5680}
. bench/lib.sh

# cpu PID: the process's user+system CPU in clock ticks (0 without a pid).
cpu() { if [ "$1" -gt 0 ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }
hz=$(getconf CLK_TCK)

# quiesce PID...: waits, up to 30 s, until none of the processes used more
# than 5 % of a core over half a second. A broker still digesting the run
# before (RabbitMQ collecting a deleted queue of a million messages,
# brokerd checkpointing) would otherwise take CPU from the next run, which
# is the other broker's as often as not.
quiesce() {
  local deadline=$((SECONDS + 30)) busy i p t0 t1
  while [ $SECONDS -lt $deadline ]; do
    t0=()
    for p in "$@"; do t0+=("$(cpu "$p")"); done
    sleep 0.5
    busy=0 i=0
    for p in "$@"; do
      t1=$(cpu "$p")
      if [ $((t1 - t0[i])) -gt $((hz / 40)) ]; then busy=1; fi
      i=$((i + 1))
    done
    if [ $busy = 0 ]; then return; fi
  done
  echo "acceptance.sh: a broker is still busy after 30 s; running anyway" >&2
}

# bench NAME BROKER ROUND URL PID ARGS...: one run, its line tagged, once
# both brokers are idle.
bench() {
  local name=$1 broker=$2 round=$3 u=$4 pid=$5; shift 5
  local c0 c1 line
  quiesce "$bpid" "$other_pid"
  c0=$(cpu "$pid")
  line=$("$tmp/bench" -json -client raw -url "$u" -broker-pid "$pid" "$@")
  c1=$(cpu "$pid")
  echo "$line" | sed "s/^/{\"run\":\"$name\",\"broker\":\"$broker\",\"round\":$round,\"broker_cpu_s\":$(awk "BEGIN{print ($c1-$c0)/$hz}"),\"r\":/; s/\$/}/"
}

# run NAME BROKERD_ARGS -- OTHER_ARGS: ROUNDS rounds, the brokers taking
# turns; brokerd fresh each time.
run() {
  local name=$1; shift
  local mine=() theirs=()
  while [ "$1" != -- ]; do mine+=("$1"); shift; done; shift
  theirs=("$@")
  for round in $(seq "$rounds"); do
    echo "== $name (round $round of $rounds)" >&2
    start_brokerd
    bench "$name" brokerd "$round" "$url" "$bpid" "${mine[@]}"
    if [ "$other" != - ]; then
      bench "$name" other "$round" "$other" "$other_pid" "${theirs[@]}"
    fi
  done
}

# drain NAME URL PID BROKER ROUND N QTYPE: fill N, then drain them.
drain() {
  local name=$1 u=$2 pid=$3 broker=$4 round=$5 n=$6 qt=$7
  "$tmp/bench" -json -client raw -url "$u" -persistent -queue-type "$qt" -scenario publish -n "$n" -confirm 1000 -id "acc-$round-" -keep >/dev/null
  bench "$name" "$broker" "$round" "$u" "$pid" -persistent -queue-type "$qt" -scenario drain -n "$n" -ack manual -prefetch 1000 -id "acc-$round-"
}

run transient-e2e -scenario e2e -ack auto -n 1000000 -- -scenario e2e -ack auto -n 1000000
run persistent-publish -scenario publish -persistent -confirm 1000 -n 500000 -- -scenario publish -persistent -confirm 1000 -queue-type quorum -n 200000
for round in $(seq "$rounds"); do
  echo "== drain-1M (round $round of $rounds)" >&2
  start_brokerd
  drain drain-1M "$url" "$bpid" brokerd "$round" 1000000 classic
  if [ "$other" != - ]; then
    drain drain-1M "$other" "$other_pid" other "$round" 1000000 quorum
  fi
done
run dlx-reject -scenario dlx-reject -persistent -confirm 1000 -n 200000 -- -scenario dlx-reject -persistent -confirm 1000 -queue-type quorum -n 100000
run e2e-50k -scenario e2e -persistent -confirm 1000 -ack manual -rate 50000 -duration 20s -- -scenario e2e -persistent -confirm 1000 -ack manual -rate 50000 -duration 20s -queue-type quorum
