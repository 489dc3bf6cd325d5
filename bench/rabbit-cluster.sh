#!/usr/bin/env bash
# rabbit-cluster.sh starts or stops a 3-node RabbitMQ cluster on this host,
# for side-by-side figures with a 3-node brokerd cluster (issue 25):
#
#   bench/rabbit-cluster.sh start [dir]   # nodes rabbit1..3@$(hostname -s), AMQP 5691..5693
#   bench/rabbit-cluster.sh stop  [dir]
#
# Each node has its own node name, AMQP port, distribution port (25691..)
# and data directory under dir (default /tmp/rabbit-cluster), no plugins;
# rabbit2 and rabbit3 join rabbit1. Needs Debian's rabbitmq-server
# (RabbitMQ 3.10 on Debian 12): run as root, it uses root's Erlang cookie.
# Quorum queues are declared by the client (x-queue-type=quorum: bench
# -queue-type quorum), replicated on all three nodes.
set -euo pipefail
cmd=${1:-start}
dir=${2:-/tmp/rabbit-cluster}
bin=/usr/lib/rabbitmq/bin
host=$(hostname -s)
export HOME=${HOME:-/root}

node_env() {
  local i=$1
  export RABBITMQ_NODENAME=rabbit$i@$host
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=569$i
  export RABBITMQ_DIST_PORT=2569$i
  export RABBITMQ_MNESIA_BASE=$dir/n$i/mnesia
  export RABBITMQ_LOG_BASE=$dir/n$i/log
  export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/n$i/enabled_plugins
  export RABBITMQ_PID_FILE=$dir/n$i/pid
  export RABBITMQ_CONFIG_FILE=$dir/n$i/rabbitmq
}

case $cmd in
start)
  for i in 1 2 3; do
    mkdir -p "$dir/n$i/log"
    echo '[].' > "$dir/n$i/enabled_plugins"
    # loopback_users = none: guest may connect over 127.0.0.1 (the default
    # already allows it; kept explicit).
    printf 'loopback_users.guest = false\n' > "$dir/n$i/rabbitmq.conf"
    ( node_env $i; "$bin/rabbitmq-server" -detached )
  done
  for i in 1 2 3; do
    ( node_env $i; "$bin/rabbitmqctl" -n rabbit$i@$host wait "$dir/n$i/pid" --timeout 120 >/dev/null )
  done
  for i in 2 3; do
    ( node_env $i
      "$bin/rabbitmqctl" -n rabbit$i@$host stop_app >/dev/null
      "$bin/rabbitmqctl" -n rabbit$i@$host join_cluster rabbit1@$host >/dev/null
      "$bin/rabbitmqctl" -n rabbit$i@$host start_app >/dev/null )
  done
  ( node_env 1; "$bin/rabbitmqctl" -n rabbit1@$host cluster_status | grep -A4 'Running Nodes' )
  ;;
stop)
  for i in 3 2 1; do
    ( node_env $i; "$bin/rabbitmqctl" -n rabbit$i@$host stop >/dev/null 2>&1 || true )
  done
  ;;
*)
  echo "usage: $0 start|stop [dir]" >&2; exit 2
  ;;
esac
