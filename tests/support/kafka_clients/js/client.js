// kafkajs for tests/support/kafka_clients/client_kafkajs.py: one mode per run, JSON in (stdin) and out (stdout).
//   produce BOOTSTRAP TOPIC COMPRESSION IDEMPOTENT PARTITION   stdin: [record...] -> [[partition, offset]...]
//   consume BOOTSTRAP TOPIC PARTITION COUNT TIMEOUT_MS         -> [{partition, offset, record}...]
//   offset-for-time BOOTSTRAP TOPIC PARTITION TIMESTAMP_MS     -> offset (or null)
//   member BOOTSTRAP TOPIC GROUP   JSON lines: {"assigned": [...]}, {"consumed": ...} (each
//                                  committed before it is printed); "stop" on stdin leaves the group
// A record is {key, value (base64; key null or base64), headers: [[name, base64]...], timestamp_ms}.
'use strict';
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs');
CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy');

const COMPRESSIONS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy };
const [mode, bootstrap, ...args] = process.argv.slice(2);
// KAFKAJS_SECURITY (tests/support/kafka_clients/secure.py): {"ssl": {"ca", "cert", "key"} (file
// paths), "sasl": {"mechanism", "username", "password"}}, each optional.
const security = JSON.parse(process.env.KAFKAJS_SECURITY || '{}');
const readFile = (path) => require('fs').readFileSync(path);
const ssl = security.ssl && { ca: [readFile(security.ssl.ca)],
                              ...(security.ssl.cert ? { cert: readFile(security.ssl.cert), key: readFile(security.ssl.key) } : {}) };
const kafka = new Kafka({ clientId: 'tests-modern', brokers: bootstrap.split(','), logLevel: logLevel.ERROR,
                          retry: { retries: 8, initialRetryTime: 100 }, ssl, sasl: security.sasl });

const b64 = (buffer) => (buffer === null || buffer === undefined ? null : Buffer.from(buffer).toString('base64'));
const buf = (text) => (text === null ? null : Buffer.from(text, 'base64'));

function toRecord(partition, message) {
  return {
    partition, offset: Number(message.offset),
    record: {
      key: b64(message.key), value: b64(message.value), timestamp_ms: Number(message.timestamp),
      headers: Object.entries(message.headers || {}).map(([name, value]) => [name, b64(value)]),
    },
  };
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString());
}

async function produce(topic, compression, idempotent, partition) {
  const records = await readStdin();
  const producer = kafka.producer(idempotent === 'true' ? { idempotent: true, maxInFlightRequests: 1 } : {});
  await producer.connect();
  try {
    // One request: one batch per partition, so a record's offset is its batch's base offset
    // plus its index in the batch.
    const messages = records.map((r) => ({
      key: buf(r.key), value: buf(r.value), timestamp: String(r.timestamp_ms),
      headers: Object.fromEntries(r.headers.map(([name, value]) => [name, buf(value)])),
      partition: partition === 'any' ? undefined : Number(partition),
    }));
    const answers = await producer.send({ topic, messages, acks: -1, compression: COMPRESSIONS[compression] });
    const seen = {};
    const result = messages.map((m) => {
      const answer = answers.find((a) => m.partition === undefined || a.partition === m.partition);
      seen[answer.partition] = (seen[answer.partition] || 0) + 1;
      return [answer.partition, Number(answer.baseOffset) + seen[answer.partition] - 1];
    });
    process.stdout.write(JSON.stringify(result));
  } finally {
    await producer.disconnect();
  }
}

async function consume(topic, partition, count, timeoutMs) {
  const consumer = kafka.consumer({ groupId: `tests-modern-read-${process.pid}-${Date.now()}`, maxWaitTimeInMs: 500 });
  const found = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, Number(timeoutMs));
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition: p, message }) => {
          if (p !== Number(partition) || found.length >= Number(count)) return;
          found.push(toRecord(p, message));
          if (found.length >= Number(count)) { clearTimeout(timer); resolve(); }
        },
      });
    });
  } finally {
    await consumer.disconnect();
  }
  process.stdout.write(JSON.stringify(found));
}

async function offsetForTime(topic, partition, timestampMs) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const answers = await admin.fetchTopicOffsetsByTimestamp(topic, Number(timestampMs));
    const answer = answers.find((a) => a.partition === Number(partition));
    const offset = Number(answer.offset);
    process.stdout.write(JSON.stringify(offset < 0 ? null : offset));
  } finally {
    await admin.disconnect();
  }
}

async function member(topic, group) {
  // fetches wait at most 0.5 s: kafkajs heartbeats (and so hears of a rebalance) between them
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 });
  const say = (value) => process.stdout.write(JSON.stringify(value) + '\n');
  consumer.on(consumer.events.GROUP_JOIN, (event) => {
    say({ assigned: (event.payload.memberAssignment[topic] || []).map(Number) });
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic: t, partition, message }) => {
      await consumer.commitOffsets([{ topic: t, partition, offset: String(Number(message.offset) + 1) }]);
      say({ consumed: toRecord(partition, message) });
    },
  });
  process.stdin.on('data', async (data) => {
    if (data.toString().includes('stop')) {
      await consumer.disconnect();
      say({ stopped: true });
      process.exit(0);
    }
  });
}

const MODES = {
  produce: () => produce(...args),
  consume: () => consume(...args),
  'offset-for-time': () => offsetForTime(...args),
  member: () => member(...args),
};
MODES[mode]().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
