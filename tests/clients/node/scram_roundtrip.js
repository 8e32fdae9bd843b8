// kafkajs over SASL_SSL with SCRAM: produce RECORDS records, read them back in a consumer group,
// commit; prints one JSON line {"produced": n, "consumed": [values...]}. A refused login exits 2
// and prints the error's type and message, so the caller can tell refusal from any other failure.
// usage: node scram_roundtrip.js BOOTSTRAP CA_FILE MECHANISM USER PASSWORD TOPIC GROUP RECORDS
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, caFile, mechanism, username, password, topic, groupId, total] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: "kray-kafkajs-scram", brokers: [bootstrap], logLevel: logLevel.NOTHING,
  ssl: { ca: [fs.readFileSync(caFile, "utf-8")] },
  sasl: { mechanism, username, password },
  retry: { retries: 2 },
});

async function main() {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  const messages = [...Array(Number(total)).keys()].map((i) => ({ value: `v${i}` }));
  await producer.send({ topic, messages, acks: -1 });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const consumed = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${consumed.length} of ${total} records in 60 s`)), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        consumed.push(message.value.toString());
        if (consumed.length >= Number(total)) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ produced: messages.length, consumed }));
}

main().catch((e) => {
  console.error(JSON.stringify({ type: e.type || e.name, message: e.message }));
  process.exit(e.type === "SASL_AUTHENTICATION_FAILED" || /SASL|authenticat/i.test(e.message) ? 2 : 1);
});
