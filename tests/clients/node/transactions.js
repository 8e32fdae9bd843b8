// kafkajs transactions (its own protocol code: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
// TxnOffsetCommit, transactional Produce; read_committed Fetch with its aborted-transaction list), driven by
// tests/e2e/test_kafkajs_transactions.py. Each step is one JSON line on stdout; a step that waits for the
// caller's checks reads one line from stdin first.
//
// usage: node transactions.js commit-abort BOOTSTRAP TOPIC
//   a transactional producer commits 6 records over partitions 0 and 1, then aborts 4; a kafkajs read_committed
//   and a read_uncommitted consumer read the topic: {"step": "read", "committed": [...], "uncommitted": [...]}
// usage: node transactions.js pipeline BOOTSTRAP SOURCE SINK GROUP
//   consume-transform-produce: a consumer of GROUP (no auto-commit, read_committed) reads SOURCE; for each line
//   "N" on stdin a transaction writes "out-<value>" to SINK for the records it has not processed up to the N-th,
//   sends the consumer's next offsets with sendOffsets, says {"step": "offsets-sent", "offsets": {partition:
//   offset}}, and ends as the next line says: "commit" or "abort" ({"step": "committed"|"aborted"}). "exit" ends.
const readline = require("readline");
const { Kafka, logLevel } = require("kafkajs");

const [mode, bootstrap, ...args] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "kray-kafkajs-txn", brokers: [bootstrap], logLevel: logLevel.ERROR });
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (step) => console.log(JSON.stringify(step));
const order = (a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset);

async function nextLine() {
  const { value, done } = await lines.next();
  if (done) throw new Error("stdin closed");
  return value.trim();
}

function transactionalProducer() {
  return kafka.producer({ transactionalId: `kjs-${Date.now()}-${process.pid}`, idempotent: true,
                          maxInFlightRequests: 1 });
}

// Reads `topic` from the start in a group of its own until `expect` records came, then 1.5 s more for any that
// should not be there.
async function readAll(topic, readUncommitted, expect) {
  const consumer = kafka.consumer({ groupId: `${topic}-${readUncommitted ? "ru" : "rc"}`, readUncommitted,
                                    maxWaitTimeInMs: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${seen.length} of ${expect} records in 30 s`)), 30000);
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        seen.push({ partition, offset: message.offset, value: message.value.toString() });
        if (seen.length === expect) { clearTimeout(timer); setTimeout(resolve, 1500); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  return seen.sort(order).map((r) => r.value);
}

async function commitAbort(topic) {
  const producer = transactionalProducer();
  await producer.connect();
  const committed = await producer.transaction();
  for (let i = 0; i < 6; i++) {
    await committed.send({ topic, messages: [{ value: `committed-${i}`, partition: i % 2 }] });
  }
  await committed.commit();
  const aborted = await producer.transaction();
  await aborted.send({ topic, messages: [0, 1, 2, 3].map((i) => ({ value: `aborted-${i}`, partition: i % 2 })) });
  await aborted.abort();
  await producer.disconnect();
  const [rc, ru] = await Promise.all([readAll(topic, false, 6), readAll(topic, true, 10)]);
  say({ step: "read", committed: rc, uncommitted: ru });
}

async function pipeline(source, sink, groupId) {
  const producer = transactionalProducer();
  await producer.connect();
  const consumer = kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [source], fromBeginning: true });
  const records = [];
  let waiter = null;
  consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      records.push({ partition, offset: message.offset, value: message.value.toString() });
      if (waiter && records.length >= waiter.count) { waiter.resolve(); waiter = null; }
    },
  }).catch((e) => { console.error(e); process.exit(1); });
  const consumed = (count) => new Promise((resolve, reject) => {
    if (records.length >= count) return resolve();
    waiter = { count, resolve };
    setTimeout(() => reject(new Error(`only ${records.length} of ${count} records in 30 s`)), 30000);
  });

  let done = 0;
  for (;;) {
    const command = await nextLine();  // "N": process up to the N-th record; "exit"
    if (command === "exit") break;
    await consumed(Number(command));
    const batch = records.slice(done, Number(command));
    done = Number(command);
    const txn = await producer.transaction();
    const offsets = {};
    for (const r of batch) {
      await txn.send({ topic: sink, messages: [{ value: `out-${r.value}`, partition: r.partition }] });
      offsets[r.partition] = Math.max(offsets[r.partition] || 0, Number(r.offset) + 1);
    }
    await txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: source, partitions: Object.entries(offsets)
      .map(([partition, offset]) => ({ partition: Number(partition), offset: String(offset) })) }] });
    say({ step: "offsets-sent", offsets });
    const end = await nextLine();
    if (end === "commit") await txn.commit(); else await txn.abort();
    say({ step: end === "commit" ? "committed" : "aborted" });
  }
  await consumer.disconnect();
  await producer.disconnect();
  say({ step: "done" });
}

const modes = { "commit-abort": commitAbort, pipeline };
modes[mode](...args).then(() => process.exit(0)).catch((e) => { console.error(e); process.exit(1); });
