#!/usr/bin/env bash
# migrate.sh measures the README's "Migrating from RabbitMQ" (issue 27):
# a RabbitMQ 3.10 node (bench/rabbit-node.sh, AMQP 127.0.0.1:5690, fresh)
# with 5 durable queues holding N persistent messages in all (default
# 1,000,000; 256 B; N/5 each, published with confirms), producers
# publishing RATE msgs/s (default 2,000) into them throughout, moved to a
# fresh brokerd (disk store, AMQP 127.0.0.1:$PORT, API 127.0.0.1:$MGMT_PORT)
# by the README's steps:
#
#   1. rabbitmqctl export_definitions FILE          (RabbitMQ's)
#   2. brokerctl import_definitions FILE            (brokerd's)
#   3. brokerctl set_parameter shovel NAME '{...}'  (brokerd's; one per
#      queue, from the RabbitMQ queue to brokerd's, ack-mode on-confirm),
#      then watch /api/shovels and the queues' depths on both sides
#   4. switch the clients: the producers stop publishing to RabbitMQ and
#      start again against brokerd, continuing their numbering (once
#      RabbitMQ's queues are down by a quarter, or SWITCH_S seconds after
#      the shovels start, whichever comes first)
#   5. once RabbitMQ's queues are empty (rabbitmqctl list_queues name
#      messages: 0, unacknowledged included), brokerctl delete_shovel NAME
#
# then stops the producers and checks (bench/migrate check) that every
# message a broker confirmed is in brokerd, once, or more than once only
# with the extra copies marked redelivered, none lost, altered or in
# another queue. With MIGRATE_KILL=1, brokerd is killed (kill -9, by its
# PID) once the shovels have taken half of the backlog (RabbitMQ's queues
# below N/2, after the switch), and started again on the same data
# directory: the shovels resume on their own (stored parameters), the
# producers reconnect. The shovels run inside brokerd, so the kill takes
# their confirmed but not yet acknowledged messages with it: RabbitMQ
# delivers those again (redelivered) and brokerd gets a second copy, up
# to src-prefetch-count (1000) per shovel, which brokerd delivers flagged
# redelivered (the shovel marks what its source redelivered; RabbitMQ's
# shovel does not). check fails on any unmarked duplicate
# (duplicates_unmarked_shovelled counts those that came through the
# shovels).
#
#   bench/migrate.sh                          # 1M messages, 2k msgs/s
#   MIGRATE_KILL=1 bench/migrate.sh           # the same with a kill -9 of brokerd midway
#   N=50000 RATE=500 bench/migrate.sh         # smaller
#
# Knobs: N, RATE, MIGRATE_KILL, SWITCH_S (default 30), SIZE (256),
# MARKER_HEADER (a header by which the shovel marks a copy it forwards
# again, taken by the check as the redelivered flag; none by default),
# PORT (5680), MGMT_PORT (15680), RABBIT_DIR (the node's directory,
# default /tmp/migrate-rabbit, emptied first), LIMIT_S (3600: give up
# waiting for any step after this long). Needs root (the RabbitMQ node
# uses root's Erlang cookie) and ports 5690 and 25690 free.
#
# Results go to stdout as JSON lines (fill, each producer run, the move's
# events with their times, the check with move_s, shovel_s and
# shovel_msgs_per_s); progress to stderr every 5 s. Exits 1 if the check
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-1000000}
rate=${RATE:-2000}
kill_mid=${MIGRATE_KILL:-0}
switch_s=${SWITCH_S:-30}
size=${SIZE:-256}
port=${PORT:-5680}
mport=${MGMT_PORT:-15680}
rdir=${RABBIT_DIR:-/tmp/migrate-rabbit}
limit_s=${LIMIT_S:-3600}
nq=5

if (echo > /dev/tcp/127.0.0.1/5690) 2>/dev/null; then
  echo "127.0.0.1:5690 is taken (another RabbitMQ node?): stop it first" >&2; exit 1
fi
. bench/lib.sh
go build -o "$tmp/brokerctl" ./cmd/brokerctl
go build -o "$tmp/migrate" ./bench/migrate
ppid_=
cleanup() {
  if [ -n "$ppid_" ]; then kill "$ppid_" 2>/dev/null || true; wait "$ppid_" 2>/dev/null || true; fi
  kill ${bpid:-} 2>/dev/null || true
  bench/rabbit-node.sh stop "$rdir" || true
  rm -rf "$tmp"
}
trap cleanup EXIT

export HOME=${HOME:-/root}
rabbitmqctl() { /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "rabbit-bench@$(hostname -s)" "$@"; }
brokerctl() { "$tmp/brokerctl" --url "http://127.0.0.1:$mport" "$@"; }
mig() { local c=$1; shift; "$tmp/migrate" "$c" -queues $nq -size "$size" -state "$tmp/state.json" "$@"; }
rabbit=amqp://guest:guest@127.0.0.1:5690/
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
t0=$(now_ms)
event() { # name [json fields]: one line on stdout, with the time since the move began
  echo "{\"event\":\"$1\",\"t_s\":$(awk "BEGIN{printf \"%.1f\", ($(now_ms) - $t0) / 1000}")${2:+,$2}}"
  echo "== $1 ${2:-}" >&2
}

# brokerd_up fresh|keep: starts brokerd with its API (on an empty data
# directory if fresh); started_ms is the time from exec to serving AMQP.
brokerd_up() {
  [ "$1" = fresh ] && rm -rf "$tmp/data"
  if (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    echo "127.0.0.1:$port is taken by another process: stop it first (or set PORT)" >&2; exit 1
  fi
  local t; t=$(now_ms)
  "$tmp/brokerd" -listen 127.0.0.1:$port -mgmt-listen 127.0.0.1:$mport -data "$tmp/data" >/dev/null 2>>"$tmp/brokerd.log" &
  bpid=$!
  for _ in $(seq 6000); do
    kill -0 $bpid 2>/dev/null || { echo "brokerd exited" >&2; cat "$tmp/brokerd.log" >&2; exit 1; }
    (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && { started_ms=$(( $(now_ms) - t )); return; }
    sleep 0.01
  done
  echo "brokerd did not start" >&2; cat "$tmp/brokerd.log" >&2; exit 1
}

# producers_up VIA URL: starts the producers (in the background) against URL.
producers_up() {
  # The binary itself, not the mig function, so that $! is its PID.
  "$tmp/migrate" produce -queues $nq -size "$size" -state "$tmp/state.json" -url "$2" -via "$1" -rate "$rate" 2>>"$tmp/produce.log" &
  ppid_=$!
}
# producers_down: SIGTERM; they wait for their confirms and write the state.
producers_down() {
  kill -TERM "$ppid_"; wait "$ppid_"; ppid_=
}

# depth URL: ready messages in the queues, total (- if it cannot tell).
depth() { mig depth -url "$1" 2>/dev/null | cut -d' ' -f1 || echo -; }
# shovel_states: "running:5" etc., from brokerd's /api/shovels.
shovel_states() {
  curl -sf -u guest:guest "http://127.0.0.1:$mport/api/shovels" 2>/dev/null |
    grep -o '"state":"[a-z]*"' | cut -d'"' -f4 | sort | uniq -c | awk '{printf "%s%s:%s", (NR>1?",":""), $2, $1}' || true
}

echo "== RabbitMQ node in $rdir; brokerd on 127.0.0.1:$port (API :$mport); $n messages, $rate msgs/s, kill=$kill_mid" >&2
uptime >&2
rm -rf "$rdir"
bench/rabbit-node.sh start "$rdir" >&2
brokerd_up fresh

# The backlog, then the live producers on RabbitMQ.
mig fill -url "$rabbit" -n "$n"
producers_up rabbitmq "$rabbit"

# The move, as the README has it.
t0=$(now_ms)
event start "\"rabbitmq_ready\":$(depth $rabbit)"
rabbitmqctl export_definitions "$tmp/definitions.json"
brokerctl import_definitions "$tmp/definitions.json" >&2
event definitions-imported
t_shovels=$(now_ms)
for i in $(seq 0 $((nq - 1))); do
  q=migrate-q$i
  brokerctl set_parameter shovel "$q" \
    "{\"src-uri\":\"amqp://guest:guest@127.0.0.1:5690\",\"src-queue\":\"$q\",\"dest-uri\":\"amqp://\",\"dest-queue\":\"$q\",\"ack-mode\":\"on-confirm\"}" >&2
done
event shovels-created

switched=0 killed=0 last=0 lastb=- t_drained=
while :; do
  now=$(now_ms)
  (( now - t0 > limit_s * 1000 )) && { event gave-up; exit 1; }
  r=$(depth $rabbit)
  if (( now - last >= 5000 )); then
    b=$(depth $url) rateb=-
    # brokerd's growth: the shovels' rate, plus the producers' once switched.
    [ "$b" != - ] && [ "${lastb:--}" != - ] && rateb=$(( (b - lastb) * 1000 / (now - last) ))
    last=$now lastb=$b
    echo "migrate.sh: $(( (now - t0) / 1000 ))s  RabbitMQ ready $r  brokerd ready $b (+$rateb/s)  shovels $(shovel_states)  producers on $([ $switched = 1 ] && echo brokerd || echo RabbitMQ)" >&2
  fi
  if [ "$r" = - ]; then sleep 1; continue; fi
  if [ $switched = 0 ] && { (( r <= n * 3 / 4 )) || (( now - t_shovels >= switch_s * 1000 )); }; then
    producers_down
    producers_up brokerd "$url"
    switched=1
    event clients-switched "\"rabbitmq_ready\":$r"
  fi
  if [ $switched = 1 ] && [ "$kill_mid" = 1 ] && [ $killed = 0 ] && (( r <= n / 2 )); then
    kill -9 $bpid; wait $bpid 2>/dev/null || true
    event brokerd-killed "\"rabbitmq_ready\":$r"
    brokerd_up keep
    killed=1
    event brokerd-restarted "\"start_to_serving_ms\":$started_ms"
  fi
  if [ $switched = 1 ] && [ "$r" = 0 ]; then
    # Ready is 0: wait for the shovels' unacknowledged ones too.
    if rabbitmqctl list_queues name messages | awk 'NR>1 && $2 != 0 {busy=1} END {exit busy}'; then
      t_drained=$(now_ms)
      break
    fi
  fi
  # Once the clients have moved, RabbitMQ's queues can empty within a
  # second or two of a small run: look more often while the kill waits.
  if [ $switched = 1 ] && [ "$kill_mid" = 1 ] && [ $killed = 0 ]; then sleep 0.2; else sleep 1; fi
done
event rabbitmq-empty "\"shovels\":\"$(shovel_states)\",\"killed\":$killed"
if [ "$kill_mid" = 1 ] && [ $killed = 0 ]; then
  echo "migrate.sh: RabbitMQ's queues emptied before the kill point (below $((n / 2)) after the switch): no kill this run" >&2
fi
for i in $(seq 0 $((nq - 1))); do
  brokerctl delete_shovel "migrate-q$i" >&2
done
t_moved=$(now_ms)
event shovels-deleted "\"shovels\":\"$(shovel_states)\""
rabbitmqctl list_queues name messages >&2

# The clients would go on against brokerd; the bench stops them to check.
producers_down
cat "$tmp/produce.log" | grep -v '^migrate: produce' >&2 || true
brokerctl list_queues name messages >&2
uptime >&2
mig check -url "$url" -marker-header "${MARKER_HEADER:-}" -moved-from "$t0" -shovels-from "$t_shovels" -drained-at "$t_drained" -moved-at "$t_moved"
