"""The dead-lettering round trip of clients/doc.go with aio-pika (Debian
python3-aio-pika). Run as: python3 aiopika_client.py HOST PORT PREFIX

It checks the Python types aio-pika gives the x-death header and prints
one line of JSON.
"""
import asyncio
from collections.abc import Mapping
import datetime
import json
import sys

import aio_pika
from aio_pika import DeliveryMode, ExchangeType, Message


def want(value, typ, what):
    """Returns value after checking that it has the Python type typ."""
    if not isinstance(value, typ):
        raise TypeError("%s is %s, want %s" % (what, type(value).__name__, typ.__name__))
    return value


async def consume_one(queue):
    """Consumes the next message of queue, without acking it."""
    got = asyncio.get_running_loop().create_future()

    async def on_message(message):
        if not got.done():
            got.set_result(message)

    tag = await queue.consume(on_message)
    try:
        return await asyncio.wait_for(got, 10)
    finally:
        await queue.cancel(tag)


async def main():
    host, port, p = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    conn = await aio_pika.connect(host=host, port=port, login="guest", password="guest", virtualhost="/")
    async with conn:
        channel = await conn.channel(publisher_confirms=True)
        ex_in = await channel.declare_exchange(p + ".in", ExchangeType.DIRECT, durable=True)
        dlx = await channel.declare_exchange(p + ".dlx", ExchangeType.DIRECT, durable=True)
        work = await channel.declare_queue(p + ".work", durable=True, arguments={
            "x-dead-letter-exchange": p + ".dlx",
            "x-dead-letter-routing-key": p + ".dead",
        })
        dlq = await channel.declare_queue(p + ".dlq", durable=True)
        await work.bind(ex_in, p + ".key")
        await dlq.bind(dlx, p + ".dead")

        # On a channel with publisher_confirms, publish returns the broker's
        # basic.ack and raises DeliveryError on a basic.nack.
        confirm = await ex_in.publish(
            Message(("dead letter from " + p).encode(), delivery_mode=DeliveryMode.PERSISTENT,
                    message_id=p + "-1"),
            routing_key=p + ".key", timeout=10)
        if type(confirm).__name__ != "Ack":
            raise RuntimeError("publish confirmed with %r, want Basic.Ack" % (confirm,))

        rejected = await consume_one(work)
        await rejected.reject(requeue=False)
        dl = await consume_one(dlq)
        await dl.ack()

        # headers is aio-pika's HeaderProxy, a Mapping over pamqp's field table.
        h = want(dl.headers, Mapping, "headers")
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
                # pamqp gives a naive datetime in UTC.
                "time": int(want(d.get("time"), datetime.datetime, "time")
                            .replace(tzinfo=datetime.timezone.utc).timestamp()),
            })
        print(json.dumps({
            "client": "aio-pika %s" % aio_pika.__version__,
            "confirmed": True,
            "rejected": {"body": rejected.body.decode(), "redelivered": rejected.redelivered},
            "dead_letter": {
                "exchange": dl.exchange,
                "routing_key": dl.routing_key,
                "body": dl.body.decode(),
                "delivery_mode": int(dl.delivery_mode),
                "message_id": dl.message_id,
            },
            "x_death": deaths,
            "first_death": {k: want(h.get("x-first-death-" + k), str, "x-first-death-" + k)
                            for k in ("queue", "reason", "exchange")},
        }))


asyncio.run(main())
