<?php
// The dead-lettering round trip of clients/doc.go with php-amqplib (Debian
// php-amqplib). Run as: php client.php HOST PORT PREFIX
// It checks the AMQP field types php-amqplib reports for the x-death
// header and prints one line of JSON.
require_once '/usr/share/php/PhpAmqpLib/autoload.php';

use PhpAmqpLib\Connection\AMQPStreamConnection;
use PhpAmqpLib\Message\AMQPMessage;
use PhpAmqpLib\Package;
use PhpAmqpLib\Wire\AMQPAbstractCollection as C;
use PhpAmqpLib\Wire\AMQPTable;

[, $host, $port, $p] = $argv;

// php-amqplib keeps each field of a table or array as a (type, value)
// pair; value checks a pair's AMQP type and returns its value.
function value(?array $pair, int $type, string $what)
{
    if ($pair === null) {
        throw new RuntimeException("$what is missing");
    }
    [$t, $v] = $pair;
    if ($t !== $type) {
        throw new RuntimeException("$what has AMQP type $t, want $type");
    }
    return $v;
}

// pairs lists a table's or array's (type, value) pairs by key.
function pairs($collection): array
{
    $out = [];
    foreach ($collection as $k => $pair) {
        $out[$k] = $pair;
    }
    return $out;
}

$conn = new AMQPStreamConnection($host, (int)$port, 'guest', 'guest', '/');
$ch = $conn->channel();
$ch->exchange_declare("$p.in", 'direct', false, true, false);
$ch->exchange_declare("$p.dlx", 'direct', false, true, false);
$ch->queue_declare("$p.work", false, true, false, false, false, new AMQPTable([
    'x-dead-letter-exchange' => "$p.dlx",
    'x-dead-letter-routing-key' => "$p.dead",
]));
$ch->queue_declare("$p.dlq", false, true, false, false);
$ch->queue_bind("$p.work", "$p.in", "$p.key");
$ch->queue_bind("$p.dlq", "$p.dlx", "$p.dead");

$acked = 0;
$nacked = 0;
$ch->set_ack_handler(function () use (&$acked) { $acked++; });
$ch->set_nack_handler(function () use (&$nacked) { $nacked++; });
$ch->confirm_select();
$ch->basic_publish(new AMQPMessage("dead letter from $p", [
    'delivery_mode' => AMQPMessage::DELIVERY_MODE_PERSISTENT,
    'message_id' => "$p-1",
]), "$p.in", "$p.key");
$ch->wait_for_pending_acks(10);
if ($acked !== 1 || $nacked !== 0) {
    throw new RuntimeException("confirms: $acked acks, $nacked nacks, want 1 ack");
}

// consumeOne consumes the next message of q, without acking it.
function consumeOne($ch, string $q): AMQPMessage
{
    $got = null;
    $tag = $ch->basic_consume($q, '', false, false, false, false, function (AMQPMessage $m) use (&$got) {
        $got = $m;
    });
    while ($got === null) {
        $ch->wait(null, false, 10); // throws AMQPTimeoutException after 10 s
    }
    $ch->basic_cancel($tag);
    return $got;
}

$rejected = consumeOne($ch, "$p.work");
$rejected->reject(false);
$dl = consumeOne($ch, "$p.dlq");
$dl->ack();

$headers = $dl->get('application_headers');
if (!($headers instanceof AMQPTable)) {
    throw new RuntimeException('headers are ' . get_debug_type($headers) . ', want AMQPTable');
}
$h = pairs($headers);
$deaths = [];
foreach (pairs(value($h['x-death'] ?? null, C::T_ARRAY, 'x-death')) as $i => $pair) {
    $e = pairs(value($pair, C::T_TABLE, "x-death[$i]"));
    $keys = [];
    foreach (pairs(value($e['routing-keys'] ?? null, C::T_ARRAY, 'routing-keys')) as $j => $k) {
        $keys[] = value($k, C::T_STRING_LONG, "routing-keys[$j]");
    }
    $count = value($e['count'] ?? null, C::T_INT_LONGLONG, 'count');
    $time = value($e['time'] ?? null, C::T_TIMESTAMP, 'time');
    if (!is_int($count) || !is_int($time)) {
        throw new RuntimeException('count and time are ' . get_debug_type($count) . ', ' . get_debug_type($time) . ', want int');
    }
    $deaths[] = [
        'queue' => value($e['queue'] ?? null, C::T_STRING_LONG, 'queue'),
        'reason' => value($e['reason'] ?? null, C::T_STRING_LONG, 'reason'),
        'count' => $count,
        'exchange' => value($e['exchange'] ?? null, C::T_STRING_LONG, 'exchange'),
        'routing_keys' => $keys,
        'time' => $time,
    ];
}

echo json_encode([
    'client' => 'php-amqplib ' . Package::VERSION,
    'confirmed' => true,
    'rejected' => ['body' => $rejected->getBody(), 'redelivered' => (bool)$rejected->isRedelivered()],
    'dead_letter' => [
        'exchange' => $dl->getExchange(),
        'routing_key' => $dl->getRoutingKey(),
        'body' => $dl->getBody(),
        'delivery_mode' => $dl->get('delivery_mode'),
        'message_id' => $dl->get('message_id'),
    ],
    'x_death' => $deaths,
    'first_death' => [
        'queue' => value($h['x-first-death-queue'] ?? null, C::T_STRING_LONG, 'x-first-death-queue'),
        'reason' => value($h['x-first-death-reason'] ?? null, C::T_STRING_LONG, 'x-first-death-reason'),
        'exchange' => value($h['x-first-death-exchange'] ?? null, C::T_STRING_LONG, 'x-first-death-exchange'),
    ],
], JSON_THROW_ON_ERROR), "\n";

$ch->close();
$conn->close();
