#!/usr/bin/env bash
# rabbit-node.sh starts or stops one RabbitMQ node on this host, for
# side-by-side figures with brokerd (bench/retry.sh; compare.sh and the
# others take its URL):
#
#   bench/rabbit-node.sh start [dir]   # node rabbit-bench@$(hostname -s), AMQP 127.0.0.1:5690
#   bench/rabbit-node.sh stop  [dir]
#   bench/rabbit-node.sh pid   [dir]   # the node's OS pid (for -compare-pid)
#
# Its own node name, AMQP port 5690, distribution port 25690 and data
# directory under dir (default /tmp/rabbit-node), no plugins, default
# settings otherwise. Needs Debian's rabbitmq-server (RabbitMQ 3.10 on
# Debian 12): run as root, it uses root's Erlang cookie.
set -euo pipefail
cmd=${1:-start}
dir=${2:-/tmp/rabbit-node}
bin=/usr/lib/rabbitmq/bin
host=$(hostname -s)
export HOME=${HOME:-/root}
export RABBITMQ_NODENAME=rabbit-bench@$host
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=5690
export RABBITMQ_DIST_PORT=25690
export RABBITMQ_MNESIA_BASE=$dir/mnesia
export RABBITMQ_LOG_BASE=$dir/log
export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
export RABBITMQ_PID_FILE=$dir/pid
export RABBITMQ_CONFIG_FILE=$dir/rabbitmq

case $cmd in
start)
  mkdir -p "$dir/log"
  echo '[].' > "$dir/enabled_plugins"
  printf 'loopback_users.guest = false\n' > "$dir/rabbitmq.conf"
  "$bin/rabbitmq-server" -detached
  "$bin/rabbitmqctl" -n "$RABBITMQ_NODENAME" wait "$dir/pid" --timeout 120 >/dev/null
  "$bin/rabbitmqctl" -n "$RABBITMQ_NODENAME" version
  ;;
stop)
  "$bin/rabbitmqctl" -n "$RABBITMQ_NODENAME" stop >/dev/null 2>&1 || true
  ;;
pid)
  cat "$dir/pid"
  ;;
*)
  echo "usage: $0 start|stop|pid [dir]" >&2; exit 2
  ;;
esac
