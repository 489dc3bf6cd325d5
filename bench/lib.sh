# lib.sh is sourced by bench's scripts (scale.sh, acceptance.sh): it builds
# brokerd and bench from this tree into a temporary directory and starts a
# fresh brokerd on 127.0.0.1:$port.
#
# Sets: tmp (removed on exit, with brokerd stopped), url, and bpid once
# start_brokerd has run. Reads: port.

tmp=$(mktemp -d)
trap 'kill $bpid 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/brokerd" ./cmd/brokerd
go build -o "$tmp/bench" ./bench
url=amqp://guest:guest@127.0.0.1:$port/

# start_brokerd: stops the brokerd started before, if any, and starts one
# on an empty data directory; returns once it accepts connections.
start_brokerd() {
  kill ${bpid:-} 2>/dev/null || true; wait ${bpid:-} 2>/dev/null || true
  rm -rf "$tmp/data"
  if (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    echo "127.0.0.1:$port is taken by another process: stop it first (or set PORT)" >&2; exit 1
  fi
  "$tmp/brokerd" -listen 127.0.0.1:$port -mgmt-listen off -data "$tmp/data" >/dev/null 2>"$tmp/brokerd.log" &
  bpid=$!
  for _ in $(seq 3000); do
    kill -0 $bpid 2>/dev/null || { echo "brokerd exited" >&2; cat "$tmp/brokerd.log" >&2; exit 1; }
    (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && return
    sleep 0.01
  done
  echo "brokerd did not start" >&2; cat "$tmp/brokerd.log" >&2; exit 1
}
