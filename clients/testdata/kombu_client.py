"""The dead-lettering round trip of clients/doc.go with kombu over py-amqp
(Debian python3-kombu). Run as: python3 kombu_client.py HOST PORT PREFIX

It checks the Python types kombu gives the x-death header and prints one
line of JSON.
"""
import datetime
import json
import sys

import kombu
from kombu import Connection, Consumer, Exchange, Producer, Queue


def want(value, typ, what):
    """Returns value after checking that it has the Python type typ."""
    if not isinstance(value, typ):
        raise TypeError("%s is %s, want %s" % (what, type(value).__name__, typ.__name__))
    return value


def consume_one(conn, channel, queue):
    """Consumes the next message of queue, without acking it."""
    got = []
    with Consumer(channel, queues=[queue], callbacks=[lambda body, m: got.append(m)], accept=None, prefetch_count=1):
        while not got:
            conn.drain_events(timeout=10)  # raises socket.timeout after 10 s
    return got[0]


def main():
    host, port, p = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # confirm_publish makes py-amqp select confirm mode and wait for each
    # publish's basic.ack (and raise MessageNacked on a basic.nack).
    with Connection(hostname=host, port=port, userid="guest", password="guest",
                    virtual_host="/", transport="pyamqp",
                    transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        ex_in = Exchange(p + ".in", type="direct", durable=True)
        dlx = Exchange(p + ".dlx", type="direct", durable=True)
        work = Queue(p + ".work", exchange=ex_in, routing_key=p + ".key", durable=True,
                     queue_arguments={"x-dead-letter-exchange": p + ".dlx",
                                      "x-dead-letter-routing-key": p + ".dead"})
        dlq = Queue(p + ".dlq", exchange=dlx, routing_key=p + ".dead", durable=True)
        for entity in (ex_in, dlx, work, dlq):
            entity(channel).declare()

        if channel.basic_publish != channel.basic_publish_confirm:
            raise RuntimeError("confirm_publish did not put the channel in confirm mode")
        Producer(channel, exchange=ex_in).publish(
            ("dead letter from " + p).encode(), routing_key=p + ".key",
            delivery_mode=2, message_id=p + "-1", timeout=10)

        rejected = consume_one(conn, channel, work)
        rejected.reject(requeue=False)
        dl = consume_one(conn, channel, dlq)
        dl.ack()

        h = want(dl.headers, dict, "headers")
        deaths = []
        for i, d in enumerate(want(h.get("x-death"), list, "x-death")):
            want(d, dict, "x-death[%d]" % i)
            deaths.append({
                "queue": want(d.get("queue"), str, "queue"),
                "reason": want(d.get("reason"), str, "reason"),
                "count": want(d.get("count"), int, "count"),
                "exchange": want(d.get("exchange"), str, "exchange"),
                "routing_keys": [want(k, str, "routing-keys entry")
                                 for k in want(d.get("routing-keys"), list, "routing-keys")],
                # py-amqp gives a naive datetime in UTC.
                "time": int(want(d.get("time"), datetime.datetime, "time")
                            .replace(tzinfo=datetime.timezone.utc).timestamp()),
            })
        print(json.dumps({
            "client": "kombu %s" % kombu.__version__,
            "confirmed": True,
            "rejected": {"body": rejected.body.decode(),
                         "redelivered": rejected.delivery_info["redelivered"]},
            "dead_letter": {
                "exchange": dl.delivery_info["exchange"],
                "routing_key": dl.delivery_info["routing_key"],
                "body": dl.body.decode(),
                "delivery_mode": dl.properties.get("delivery_mode"),
                "message_id": dl.properties.get("message_id"),
            },
            "x_death": deaths,
            "first_death": {k: want(h.get("x-first-death-" + k), str, "x-first-death-" + k)
                            for k in ("queue", "reason", "exchange")},
        }))


main()
