#!/usr/bin/env bash
# compare.sh runs the README's benchmark table: each scenario against a fresh
# brokerd and against a second broker (e.g. RabbitMQ), side by side, and the
# TTL-precision run with the peak RSS of each broker.
#
#   bench/compare.sh amqp://guest:guest@127.0.0.1:5690/ [rabbitmq-pid]
#
# brokerd is built from this tree and started on 127.0.0.1:5680. Results go to
# stdout as one JSON line per run (see bench/main.go), tables to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:?usage: bench/compare.sh OTHER_AMQP_URL [OTHER_PID]}
other_pid=${2:-}
tmp=$(mktemp -d)
trap 'kill $bpid 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/brokerd" ./cmd/brokerd
go build -o "$tmp/bench" ./bench
url=amqp://guest:guest@127.0.0.1:5680/

start_brokerd() {
  kill ${bpid:-} 2>/dev/null || true; wait ${bpid:-} 2>/dev/null || true
  rm -rf "$tmp/data"
  "$tmp/brokerd" -listen 127.0.0.1:5680 -mgmt-listen off -data "$tmp/data" 2>"$tmp/brokerd.log" &
  bpid=$!
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/5680) 2>/dev/null && return; sleep 0.1; done
  echo "brokerd did not start" >&2; exit 1
}

# peak_rss PID FILE: samples the RSS (KiB) of PID every 100 ms into FILE's max.
peak_rss() {
  local pid=$1 out=$2 max=0 r
  while kill -0 "$pid" 2>/dev/null; do
    r=$(ps -o rss= -p "$pid" 2>/dev/null | tr -d ' ') || break
    [ -n "$r" ] && [ "$r" -gt "$max" ] && max=$r && echo "$max" > "$out"
    sleep 0.1
  done
}

run() { # name, bench args...
  local name=$1; shift
  echo "== $name: $*" >&2
  start_brokerd
  "$tmp/bench" -json -url "$url" "$@" | sed "s/^/{\"run\":\"$name\",\"broker\":\"brokerd\",\"r\":/; s/\$/}/"
  "$tmp/bench" -json -url "$other" "$@" | sed "s/^/{\"run\":\"$name\",\"broker\":\"other\",\"r\":/; s/\$/}/"
}

run e2e-noconfirm-autoack -scenario e2e -n 300000 -size 1024 -confirm 0 -ack auto
run e2e-confirm-manual   -scenario e2e -n 300000 -size 1024 -confirm 1000 -ack manual
run publish-confirm      -scenario publish -n 300000 -size 1024 -confirm 1000
run consume-ack          -scenario consume -n 300000 -size 1024 -ack manual -prefetch 1000
run e2e-fixed-rate       -scenario e2e -duration 20s -rate 10000 -size 1024 -confirm 1000 -ack manual

# TTL precision: 100k messages, random per-message TTL 0.1-5 s, random order.
ttl_args=(-scenario ttl-expire -n 100000 -size 1024 -ttl 100ms -ttl-max 5s -ttl-mode message -confirm 1000)
echo "== ttl-precision: ${ttl_args[*]}" >&2
start_brokerd
peak_rss "$bpid" "$tmp/rss-brokerd" & s1=$!
"$tmp/bench" -json -url "$url" "${ttl_args[@]}" | sed 's/^/{"run":"ttl-precision","broker":"brokerd","r":/; s/$/}/'
kill $s1 2>/dev/null || true
echo "{\"run\":\"ttl-precision\",\"broker\":\"brokerd\",\"peak_rss_kib\":$(cat "$tmp/rss-brokerd" 2>/dev/null || echo 0)}"
if [ -n "$other_pid" ]; then peak_rss "$other_pid" "$tmp/rss-other" & s2=$!; fi
"$tmp/bench" -json -url "$other" "${ttl_args[@]}" | sed 's/^/{"run":"ttl-precision","broker":"other","r":/; s/$/}/'
if [ -n "$other_pid" ]; then
  kill $s2 2>/dev/null || true
  echo "{\"run\":\"ttl-precision\",\"broker\":\"other\",\"peak_rss_kib\":$(cat "$tmp/rss-other" 2>/dev/null || echo 0)}"
fi
