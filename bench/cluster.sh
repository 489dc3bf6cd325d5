#!/usr/bin/env bash
# cluster.sh measures a 3-node brokerd cluster on 127.0.0.1 (issue 25),
# beside a 3-node RabbitMQ cluster's quorum queues when one runs
# (bench/rabbit-cluster.sh start: AMQP on 5691):
#
#   bench/cluster.sh [rounds]      # default 5 alternating rounds
#   RABBIT=- bench/cluster.sh      # brokerd only
#   N=1000000 BACKLOG=1000000 bench/cluster.sh
#
# Every round starts a fresh brokerd cluster (empty data directories) and
# runs, on the leader's node, through bench's raw client:
#   publish   persistent publishes with confirms (window 1000, 1 KiB) to a
#             quorum queue, N messages; the same against RabbitMQ
#   p99-5k    the same at a fixed 5,000 msgs/s for 20 s: confirm latency
#   drain     a BACKLOG-message backlog published, then drained with
#             manual acks (prefetch 1000): the drain's rate
#   restart   kill -9 of all three with the backlog's second copy queued,
#             all three started again: seconds from the last start to the
#             first message read
# Results: one JSON line per run on stdout, tagged; progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${N:-500000}
backlog=${BACKLOG:-1000000}
rabbit=${RABBIT:-amqp://guest:guest@127.0.0.1:5691/}
tmp=$(mktemp -d)
pids=()
stop_cluster() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_cluster; rm -rf "$tmp"' EXIT
go build -o "$tmp/brokerd" ./cmd/brokerd
go build -o "$tmp/bench" ./bench

for i in 1 2 3; do
  cat > "$tmp/n$i.toml" <<EOF
[storage]
data_dir = "$tmp/data$i"
[amqp]
listen = "127.0.0.1:578$i"
[mgmt]
listen = "off"
[cluster]
node_name = "n$i"
listen = "127.0.0.1:2578$i"
peers = ["n1=127.0.0.1:25781", "n2=127.0.0.1:25782", "n3=127.0.0.1:25783"]
EOF
done

start_node() { # i
  "$tmp/brokerd" -config "$tmp/n$1.toml" 2>>"$tmp/n$1.log" &
  pids[$1]=$!
}

# leader_port waits until a node logs that it serves clients and prints
# its AMQP port.
leader_port() {
  for _ in $(seq 3000); do
    for i in 1 2 3; do
      if [ -n "${pids[$i]:-}" ] && kill -0 "${pids[$i]}" 2>/dev/null &&
         [ "$(grep -c 'serving clients' "$tmp/n$i.log" 2>/dev/null || true)" -gt "$(grep -c 'stopped leading' "$tmp/n$i.log" 2>/dev/null || true)" ]; then
        echo 578$i; return
      fi
    done
    sleep 0.01
  done
  echo "no leader" >&2; tail -20 "$tmp"/n*.log >&2; exit 1
}

fresh_cluster() {
  stop_cluster
  rm -rf "$tmp"/data* "$tmp"/n*.log
  for i in 1 2 3; do start_node $i; done
}

tag() { sed "s/^/{\"run\":\"$1\",\"broker\":\"$2\",\"round\":$3,\"r\":/; s/\$/}/"; }
b() { "$tmp/bench" -json -client raw "$@"; }

for r in $(seq "$rounds"); do
  echo "== round $r" >&2
  fresh_cluster
  url=amqp://guest:guest@127.0.0.1:$(leader_port)/
  b -url "$url" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -n "$n" | tag publish brokerd "$r"
  if [ "$rabbit" != - ]; then
    b -url "$rabbit" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -n "$n" | tag publish rabbitmq "$r"
  fi
  b -url "$url" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -rate 5000 -duration 20s | tag p99-5k brokerd "$r"
  if [ "$rabbit" != - ]; then
    b -url "$rabbit" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -rate 5000 -duration 20s | tag p99-5k rabbitmq "$r"
  fi
done

echo "== drain and full restart" >&2
fresh_cluster
url=amqp://guest:guest@127.0.0.1:$(leader_port)/
b -url "$url" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -n "$backlog" -id drain -keep | tag fill brokerd 0
b -url "$url" -scenario drain -persistent -prefetch 1000 -ack manual -size 1024 -queue-type quorum -n "$backlog" -id drain -keep | tag drain brokerd 0
b -url "$url" -scenario publish -persistent -confirm 1000 -size 1024 -queue-type quorum -n "$backlog" -id restart -keep | tag fill brokerd 0
stop_cluster
for i in 1 2 3; do mv "$tmp/n$i.log" "$tmp/n$i.log.before"; done
for i in 1 2 3; do start_node $i; done
started=$(date +%s.%N)
url=amqp://guest:guest@127.0.0.1:$(leader_port)/
b -url "$url" -scenario drain -persistent -prefetch 1000 -ack manual -size 1024 -queue-type quorum -n "$backlog" -id restart -keep | tag drain-after-restart brokerd 0
serving=$(grep -h 'serving clients' "$tmp"/n*.log | tail -1 | sed 's/^time=\([^ ]*\).*/\1/')
echo "{\"run\":\"restart\",\"broker\":\"brokerd\",\"last_start\":\"$(date -u -d @"$started" +%FT%T.%3NZ)\",\"serving\":\"$serving\"}"
