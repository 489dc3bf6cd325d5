// The dead-lettering round trip of clients/doc.go with amqplib (npm), and
// its "publish, then close at once". Run as:
//
//	node client.js dead-letter HOST PORT PREFIX
//	node client.js publish-then-close HOST PORT PREFIX
//
// Each mode checks what it can in amqplib's own types and prints one line
// of JSON.
'use strict';
const amqp = require('amqplib');
const fs = require('fs');
const path = require('path');
// amqplib's "exports" do not include its package.json.
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve('amqplib')), 'package.json'))).version;

const [mode, host, port, p] = process.argv.slice(2);
const url = { protocol: 'amqp', hostname: host, port: Number(port), username: 'guest', password: 'guest', vhost: '/' };

// within rejects with what's name if promise has not settled after ms.
function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function want(value, type, what) {
  const got = Array.isArray(value) ? 'array' : value === null ? 'null' : typeof value;
  if (got !== type) throw new TypeError(`${what} is ${got}, want ${type}`);
  return value;
}

// consumeOne consumes the next message of q, without acking it.
async function consumeOne(ch, q) {
  let tag;
  const got = new Promise((resolve) => {
    tag = ch.consume(q, (msg) => resolve(msg), { noAck: false });
  });
  const msg = await within(10000, `consume from ${q}`, got);
  await ch.cancel((await tag).consumerTag);
  return msg;
}

async function deadLetter() {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await ch.assertExchange(`${p}.in`, 'direct', { durable: true });
  await ch.assertExchange(`${p}.dlx`, 'direct', { durable: true });
  await ch.assertQueue(`${p}.work`, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': `${p}.dlx`, 'x-dead-letter-routing-key': `${p}.dead` },
  });
  await ch.assertQueue(`${p}.dlq`, { durable: true });
  await ch.bindQueue(`${p}.work`, `${p}.in`, `${p}.key`);
  await ch.bindQueue(`${p}.dlq`, `${p}.dlx`, `${p}.dead`);

  // A confirm channel calls back with an error on basic.nack.
  await within(10000, 'publisher confirm', new Promise((resolve, reject) => {
    ch.publish(`${p}.in`, `${p}.key`, Buffer.from(`dead letter from ${p}`),
      { persistent: true, messageId: `${p}-1` }, (err) => (err ? reject(err) : resolve()));
  }));

  const rejected = await consumeOne(ch, `${p}.work`);
  ch.reject(rejected, false);
  const dl = await consumeOne(ch, `${p}.dlq`);
  ch.ack(dl);

  const h = want(dl.properties.headers, 'object', 'headers');
  const deaths = want(h['x-death'], 'array', 'x-death').map((d, i) => {
    want(d, 'object', `x-death[${i}]`);
    // amqplib decodes a timestamp field as { '!': 'timestamp', value }.
    const time = want(d.time, 'object', 'time');
    if (time['!'] !== 'timestamp') throw new TypeError(`time is ${JSON.stringify(time)}, want a timestamp`);
    return {
      queue: want(d.queue, 'string', 'queue'),
      reason: want(d.reason, 'string', 'reason'),
      count: want(d.count, 'number', 'count'),
      exchange: want(d.exchange, 'string', 'exchange'),
      routing_keys: want(d['routing-keys'], 'array', 'routing-keys').map((k) => want(k, 'string', 'routing-keys entry')),
      time: want(time.value, 'number', 'time value'),
    };
  });
  const first = {};
  for (const k of ['queue', 'reason', 'exchange']) {
    first[k] = want(h[`x-first-death-${k}`], 'string', `x-first-death-${k}`);
  }
  await ch.close();
  await conn.close();
  return {
    client: `amqplib ${version}`,
    confirmed: true,
    rejected: { body: rejected.content.toString(), redelivered: rejected.fields.redelivered },
    dead_letter: {
      exchange: dl.fields.exchange,
      routing_key: dl.fields.routingKey,
      body: dl.content.toString(),
      delivery_mode: dl.properties.deliveryMode,
      message_id: dl.properties.messageId,
    },
    x_death: deaths,
    first_death: first,
  };
}

// publishThenClose publishes ten messages and closes the connection without
// waiting: amqplib writes connection.close while the publishes may still be
// in flight, and the close must still complete with the broker's close-ok.
async function publishThenClose() {
  const q = `${p}.close`;
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.assertQueue(q, { durable: false });
  for (let i = 0; i < 10; i++) {
    ch.sendToQueue(q, Buffer.from(`message ${i}`));
  }
  // Without a listener, a socket error (EPIPE, ECONNRESET: the broker
  // hung up before reading the last frames) would end the process.
  const errors = [];
  conn.on('error', (err) => errors.push(err.message));
  const start = Date.now();
  try {
    await within(10000, 'connection.close after 10 publishes', conn.close());
  } catch (err) {
    throw new Error(`${err.message}; connection errors: [${errors.join(', ')}]`);
  }
  return { client: `amqplib ${version}`, closed: true, close_ms: Date.now() - start };
}

const modes = { 'dead-letter': deadLetter, 'publish-then-close': publishThenClose };
modes[mode]().then(
  (result) => {
    console.log(JSON.stringify(result));
    process.exit(0);
  },
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
