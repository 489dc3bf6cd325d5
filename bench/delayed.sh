#!/usr/bin/env bash
# delayed.sh measures scheduled delivery (issue 26) against brokerd on its
# disk store with default settings, a fresh data directory per run:
#
#   timing: N messages (default 100,000; 64 B, persistent, confirms in
#     windows of 1000) through a durable x-delayed-message exchange at
#     random delays uniform in 0.1-60 s (seed 1), consumed as they fall
#     due: lateness p50/p99/max, early, lost, duplicated; idle, then with
#     a background pair at 20,000 msgs/s on another queue.
#   scale: HOLD messages (default 10,000,000; 32 B, persistent) scheduled
#     1-2 h ahead (none falls due during the run): broker RSS after the
#     publish, then after a clean restart (SIGTERM) and after a kill -9,
#     each with the time from exec to accepting connections and the
#     exchange's messages_delayed (all of them must still be held).
#
#   bench/delayed.sh                     # both
#   ONLY=timing bench/delayed.sh         # or ONLY=scale
#   N=20000 HOLD=1000000 bench/delayed.sh   # smaller
#   RATE=10000 ONLY=timing bench/delayed.sh  # the timing runs' publish paced
#
# Each step prints `uptime` before and after it (the machine's load is part
# of the figure), and one JSON line per result on stdout; progress on
# stderr. The client is bench's raw client (CLIENT=amqp091 to change).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-100000}
hold=${HOLD:-10000000}
client=${CLIENT:-raw}
rate=${RATE:-0} # the timing runs' publish rate (0: as fast as the broker confirms)
only=${ONLY:-}
port=${PORT:-5680}
mport=${MGMT_PORT:-15680}
tmp=$(mktemp -d)
trap 'kill ${bpid:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/brokerd" ./cmd/brokerd
go build -o "$tmp/bench" ./bench
url=amqp://guest:guest@127.0.0.1:$port/
api=http://127.0.0.1:$mport/api

# start_brokerd fresh|keep: starts brokerd (on an empty data directory if
# fresh); started_ms is the time from exec to accepting AMQP connections.
start_brokerd() {
  [ "$1" = fresh ] && rm -rf "$tmp/data"
  if (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    echo "127.0.0.1:$port is taken by another process: stop it first (or set PORT)" >&2; exit 1
  fi
  local t0; t0=$(date +%s%N)
  "$tmp/brokerd" -listen 127.0.0.1:$port -mgmt-listen 127.0.0.1:$mport -data "$tmp/data" >/dev/null 2>>"$tmp/brokerd.log" &
  bpid=$!
  for _ in $(seq 6000); do
    kill -0 $bpid 2>/dev/null || { echo "brokerd exited" >&2; cat "$tmp/brokerd.log" >&2; exit 1; }
    (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && { started_ms=$(( ($(date +%s%N) - t0) / 1000000 )); return; }
    sleep 0.005
  done
  echo "brokerd did not start" >&2; cat "$tmp/brokerd.log" >&2; exit 1
}

# stop_brokerd TERM|KILL: stops it and waits for it to exit.
stop_brokerd() {
  kill -s "$1" $bpid; wait $bpid 2>/dev/null || true; bpid=
}

rss_kib() { awk '/^VmRSS:/ {print $2}' /proc/$bpid/status; }
load() { echo "{\"uptime\":\"$1: $(uptime | sed 's/^ *//')\"}"; }
delayed_count() { # messages_delayed of exchange $1, once the API answers
  for _ in $(seq 200); do
    if out=$(curl -sf -u guest:guest "$api/exchanges/%2F/$1"); then
      sed -n 's/.*"messages_delayed":\([0-9]*\).*/\1/p' <<<"$out"; return
    fi
    sleep 0.05
  done
  echo "management API did not answer" >&2; exit 1
}
recovery_log() { # the last start's recovery lines (index check, store recovery), as JSON strings
  grep -E 'msg="(index verified|store recovered)"' "$tmp/brokerd.log" | tail -2 | sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$/"/' | paste -sd, -
}
tag() { sed "s/^/{\"run\":\"$1\",\"r\":/; s/\$/}/"; }

timing() { # name, bench args...
  local name=$1; shift
  echo "== $name: $*" >&2
  start_brokerd fresh
  load "before $name"
  "$tmp/bench" -json -client "$client" -url "$url" -broker-pid $bpid -scenario delayed -persistent -confirm 1000 \
    -size 64 -n "$n" -delay-min 100ms -delay-max 60s -seed 1 -rate "$rate" "$@" | tag "$name"
  load "after $name"
  stop_brokerd TERM
}

if [ "$only" != scale ]; then
  timing delayed-idle
  timing delayed-bg20k -background -background-rate 20000
fi

if [ "$only" != timing ]; then
  echo "== scale: $hold messages scheduled 1-2 h ahead" >&2
  start_brokerd fresh
  load "before the scale publish"
  "$tmp/bench" -json -client "$client" -url "$url" -broker-pid $bpid -scenario delayed -hold -keep -id sched- \
    -persistent -confirm 1000 -size 32 -n "$hold" -delay-min 1h -delay-max 2h -timeout 2h | tag scale-publish
  load "after the scale publish"
  echo "{\"run\":\"scale-published\",\"rss_kib\":$(rss_kib),\"messages_delayed\":$(delayed_count sched-delayed),\"disk_bytes\":$(du -sb "$tmp/data" | cut -f1)}"
  sleep 10 # RSS once the publish's buffers have settled
  echo "{\"run\":\"scale-published-10s\",\"rss_kib\":$(rss_kib)}"
  for sig in TERM KILL; do
    stop_brokerd $sig
    start_brokerd keep
    echo "{\"run\":\"scale-restart-$sig\",\"start_to_serving_ms\":$started_ms,\"rss_kib\":$(rss_kib),\"messages_delayed\":$(delayed_count sched-delayed),\"recovery\":[$(recovery_log)]}"
    sleep 10
    echo "{\"run\":\"scale-restart-$sig-10s\",\"rss_kib\":$(rss_kib)}"
  done
  load "after the restarts"
  stop_brokerd TERM
fi
