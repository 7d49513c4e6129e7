#!/usr/bin/env node
// amqplib driver of the amqpq interop matrix.
//
// Reads one JSON request per line on stdin: {"id": n, "op": "queue_declare", "args": {...}}
// and answers {"id": n, "ok": true, "result": ...} or {"id": n, "ok": false, "error": {...}}.
// Asynchronous events are lines without an id: {"event": "delivery" | "return" | "cancel" |
// "confirm" | "channel-error" | "connection-close", ...}. Bodies travel as base64.
// The Python side (interop_tests/matrix/drivers/node_driver.py) maps the driver API onto this.
'use strict';

const readline = require('node:readline');

let amqp;
try {
  amqp = require('amqplib');
} catch (err) {
  process.stdout.write(`${JSON.stringify({ event: 'fatal', error: `amqplib not installed: ${err.message}` })}\n`);
  process.exit(3);
}

let conn = null;
let ch = null;
let confirmMode = false;
let connectionOpen = false;
// The error the broker closed the current channel with: a later call on that channel only
// gets amqplib's "Channel closed", so it reports this one, like the other clients do.
let channelClosedBy = null;

function send(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

function stringify(value) {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = stringify(v);
    return out;
  }
  return value;
}

function view(m) {
  const p = m.properties || {};
  return {
    body: m.content.toString('base64'),
    delivery_tag: m.fields.deliveryTag,
    redelivered: m.fields.redelivered,
    exchange: m.fields.exchange,
    routing_key: m.fields.routingKey,
    message_count: m.fields.messageCount === undefined ? null : m.fields.messageCount,
    consumer_tag: m.fields.consumerTag === undefined ? null : m.fields.consumerTag,
    properties: {
      content_type: p.contentType === undefined ? null : p.contentType,
      delivery_mode: p.deliveryMode === undefined ? null : p.deliveryMode,
      priority: p.priority === undefined ? null : p.priority,
      message_id: p.messageId === undefined ? null : p.messageId,
      correlation_id: p.correlationId === undefined ? null : p.correlationId,
      user_id: p.userId === undefined ? null : p.userId,
      headers: p.headers === undefined ? null : stringify(p.headers),
    },
  };
}

// 'Channel closed by server: 404 (NOT-FOUND) with message "NOT_FOUND - no queue ..."'
function describeError(err) {
  const match = /with message "([\s\S]*)"$/.exec(err.message || '');
  if (typeof err.code === 'number' && match) {
    return { kind: 'channel', code: err.code, text: match[1] };
  }
  return { kind: 'other', message: String(err.stack || err) };
}

function tagOnly(tag) {
  return { fields: { deliveryTag: tag } };
}

function publishOptions(props, mandatory) {
  const p = props || {};
  const opts = { mandatory: !!mandatory };
  if (p.content_type != null) opts.contentType = p.content_type;
  if (p.delivery_mode != null) opts.deliveryMode = p.delivery_mode;
  if (p.priority != null) opts.priority = p.priority;
  if (p.message_id != null) opts.messageId = p.message_id;
  if (p.correlation_id != null) opts.correlationId = p.correlation_id;
  if (p.user_id != null) opts.userId = p.user_id;
  if (p.headers != null) opts.headers = p.headers;
  return opts;
}

async function openChannel() {
  const channel = confirmMode ? await conn.createConfirmChannel() : await conn.createChannel();
  channelClosedBy = null;
  channel.on('error', (err) => {
    channelClosedBy = describeError(err);
    send({ event: 'channel-error', error: channelClosedBy });
  });
  channel.on('return', (m) =>
    send({
      event: 'return',
      reply_code: m.fields.replyCode,
      reply_text: m.fields.replyText,
      exchange: m.fields.exchange,
      routing_key: m.fields.routingKey,
      body: m.content.toString('base64'),
    }),
  );
  ch = channel;
}

// amqplib's own callback API test "find high watermark" and "set high watermark"
// (test/callback_api.js), on a connection of its own: sendToQueue on an exclusive queue until
// the writer's buffer is full (baseline), then connection.close() with all that still queued,
// so channel 0's Close goes out among channel 1's publishes; then a channel with
// highWaterMark = 2 * baseline takes that many sends without refusing one, and closes too.
// Reports what each close called back with and any 'error' event (ECONNRESET from a broker
// that resets a closing socket with unread bytes).
function callbackHighWatermark(url) {
  const cb = require('amqplib/callback_api');
  const msg = Buffer.from(`hwm-${Math.random().toString(36).slice(2)}`);
  const errorText = (err) => (err ? String(err.message || err) : null);
  const round = (channelOptions, fill) => new Promise((resolve, reject) => {
    cb.connect(url, (err, c) => {
      if (err) return reject(err);
      const seen = { error_events: [] };
      c.on('error', (e) => seen.error_events.push(errorText(e)));
      const opened = (err2, chan) => {
        if (err2) return reject(err2);
        chan.on('error', (e) => seen.error_events.push(errorText(e)));
        chan.assertQueue('', { exclusive: true }, (err3, ok) => {
          if (err3) return reject(err3);
          fill(chan, ok.queue, seen);
          const hung = setTimeout(() => {
            seen.close_error = 'close did not call back within 15 s';
            resolve(seen);
          }, 15000);
          c.close((err4) => {
            clearTimeout(hung);
            seen.close_error = errorText(err4);
            resolve(seen);
          });
        });
      };
      if (channelOptions) c.createChannel(channelOptions, opened);
      else c.createChannel(opened);
    });
  });
  return (async () => {
    const find = await round(null, (chan, queue, seen) => {
      let baseline = 0;
      while (chan.sendToQueue(queue, msg)) baseline++;
      seen.baseline = baseline;
    });
    const hwm = find.baseline * 2;
    const set = await round({ highWaterMark: hwm }, (chan, queue, seen) => {
      let refused = 0;
      for (let i = 0; i < hwm; i++) if (!chan.sendToQueue(queue, msg)) refused++;
      seen.sent = hwm;
      seen.refused = refused;
    });
    return { find, set };
  })();
}

const ops = {
  async callback_high_watermark({ url }) {
    return callbackHighWatermark(url);
  },
  async connect({ url, heartbeat, mechanism, confirms }) {
    confirmMode = !!confirms;
    const parsed = new URL(url);
    if (heartbeat != null) parsed.searchParams.set('heartbeat', String(heartbeat));
    const socketOptions = {};
    if (mechanism === 'AMQPLAIN') {
      socketOptions.credentials = amqp.credentials.amqplain(
        decodeURIComponent(parsed.username || 'guest'),
        decodeURIComponent(parsed.password || 'guest'),
      );
    }
    conn = await amqp.connect(parsed.toString(), socketOptions);
    connectionOpen = true;
    conn.on('error', () => {});
    conn.on('close', (err) => {
      connectionOpen = false;
      send({ event: 'connection-close', error: err ? String(err.message || err) : null });
    });
    await openChannel();
    return null;
  },
  negotiated() {
    const c = conn.connection;
    return { frame_max: c.frameMax, channel_max: c.channelMax, heartbeat: c.heartbeat };
  },
  server_properties() {
    return stringify(conn.connection.serverProperties);
  },
  is_open() {
    return connectionOpen;
  },
  async open_channel() {
    await openChannel();
    return null;
  },
  async close_channel() {
    await ch.close();
    return null;
  },
  async close() {
    await conn.close();
    connectionOpen = false;
    return null;
  },
  async update_secret({ new_secret, reason }) {
    await conn.updateSecret(Buffer.from(new_secret, 'utf8'), reason);
    return null;
  },
  async queue_declare({ name, passive, durable, exclusive, auto_delete, arguments: args }) {
    const ok = passive
      ? await ch.checkQueue(name)
      : await ch.assertQueue(name, {
          durable: !!durable,
          exclusive: !!exclusive,
          autoDelete: !!auto_delete,
          arguments: args || undefined,
        });
    return [ok.queue, ok.messageCount, ok.consumerCount];
  },
  async exchange_declare({ name, kind, passive }) {
    if (passive) await ch.checkExchange(name);
    else await ch.assertExchange(name, kind, { durable: false });
    return null;
  },
  async queue_bind({ queue, exchange, routing_key, arguments: args }) {
    await ch.bindQueue(queue, exchange, routing_key, args || undefined);
    return null;
  },
  async queue_unbind({ queue, exchange, routing_key, arguments: args }) {
    await ch.unbindQueue(queue, exchange, routing_key, args || undefined);
    return null;
  },
  async exchange_unbind({ destination, source, routing_key }) {
    await ch.unbindExchange(destination, source, routing_key);
    return null;
  },
  async queue_delete({ name, if_unused, if_empty }) {
    return (await ch.deleteQueue(name, { ifUnused: !!if_unused, ifEmpty: !!if_empty })).messageCount;
  },
  async queue_purge({ name }) {
    return (await ch.purgeQueue(name)).messageCount;
  },
  async recover() {
    await ch.recover();
    return null;
  },
  async qos({ prefetch_count }) {
    await ch.prefetch(prefetch_count);
    return null;
  },
  publish({ exchange, routing_key, body, properties, mandatory }) {
    const content = Buffer.from(body, 'base64');
    const opts = publishOptions(properties, mandatory);
    if (confirmMode) {
      ch.publish(exchange, routing_key, content, opts, (err) => send({ event: 'confirm', ack: !err }));
    } else {
      ch.publish(exchange, routing_key, content, opts);
    }
    return null;
  },
  async get({ queue, no_ack }) {
    const m = await ch.get(queue, { noAck: !!no_ack });
    return m === false ? null : view(m);
  },
  ack({ tag, multiple }) {
    ch.ack(tagOnly(tag), !!multiple);
    return null;
  },
  nack({ tag, multiple, requeue }) {
    ch.nack(tagOnly(tag), !!multiple, !!requeue);
    return null;
  },
  reject({ tag, requeue }) {
    ch.reject(tagOnly(tag), !!requeue);
    return null;
  },
  async consume({ queue, no_ack }) {
    let tag = null;
    const ok = await ch.consume(
      queue,
      (m) => {
        if (m === null) send({ event: 'cancel', tag });
        else send({ event: 'delivery', msg: view(m) });
      },
      { noAck: !!no_ack },
    );
    tag = ok.consumerTag;
    return tag;
  },
  async cancel({ tag }) {
    await ch.cancel(tag);
    return null;
  },
};

// Requests run one after another, in arrival order, like the synchronous Python API.
let chain = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (!line.trim()) return;
  const req = JSON.parse(line);
  chain = chain.then(async () => {
    const op = ops[req.op];
    if (!op) {
      send({ id: req.id, ok: false, error: { kind: 'other', message: `unknown op ${req.op}` } });
      return;
    }
    try {
      const result = await op(req.args || {});
      send({ id: req.id, ok: true, result: result === undefined ? null : result });
    } catch (err) {
      let error = describeError(err);
      if (error.kind !== 'channel' && channelClosedBy && channelClosedBy.kind === 'channel') {
        error = channelClosedBy;
      }
      send({ id: req.id, ok: false, error });
    }
  });
});
rl.on('close', () => {
  chain.then(async () => {
    if (connectionOpen) {
      try {
        await conn.close();
      } catch (_err) {
        // the process ends anyway
      }
    }
    process.exit(0);
  });
});
function amqplibVersion() {
  try {
    const path = require('node:path');
    const fs = require('node:fs');
    const main = require.resolve('amqplib');
    return JSON.parse(fs.readFileSync(path.join(path.dirname(main), 'package.json'), 'utf8')).version;
  } catch (_err) {
    return null;
  }
}
send({ event: 'ready', amqplib: amqplibVersion() });
