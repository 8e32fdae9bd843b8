// Two kafkajs consumers in one group (`subscribe`, classic protocol) read a topic to its end and
// commit; prints one JSON line: each member's partitions and the records it consumed.
// usage: node consumer_group.js BOOTSTRAP TOPIC GROUP RECORDS
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, groupId, total] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "kray-kafkajs", brokers: [bootstrap], logLevel: logLevel.ERROR });

async function main() {
  const members = [0, 1].map(() => ({ consumer: kafka.consumer({ groupId }), partitions: [], seen: new Set() }));
  let consumed = 0;
  let done = () => {};
  // balanced: both members hold partitions and none twice (a member that has not yet seen the
  // generation its peer joined still holds every partition from when it was alone)
  const balanced = () => {
    const all = members.flatMap((x) => x.partitions);
    return members.every((x) => x.partitions.length > 0) && new Set(all).size === all.length;
  };
  const check = () => { if (consumed >= Number(total) && balanced()) done(); };
  for (const m of members) {
    m.consumer.on(m.consumer.events.GROUP_JOIN, (e) => {
      m.partitions = e.payload.memberAssignment[topic] || [];
      check();
    });
    await m.consumer.connect();
    await m.consumer.subscribe({ topics: [topic], fromBeginning: true });
  }
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${consumed} of ${total} records in 90 s, or the `
      + `members' partitions never split: ${JSON.stringify(members.map((x) => x.partitions))}`)), 90000);
    done = () => { clearTimeout(timer); resolve(); };
    for (const m of members) {
      m.consumer.run({
        eachMessage: async ({ partition, message }) => {
          const key = `${partition}:${message.offset}`;
          if (!m.seen.has(key)) { m.seen.add(key); consumed += 1; }
          check();
        },
      }).catch(reject);
    }
  });
  // the split as it was when balanced: the first member's LeaveGroup below hands every partition to the second
  const split = members.map((m) => [...m.partitions].sort());
  for (const m of members) await m.consumer.disconnect();  // commits what it consumed, then LeaveGroup
  console.log(JSON.stringify(members.map((m, i) => ({ partitions: split[i], records: [...m.seen] }))));
}

main().catch((e) => { console.error(e); process.exit(1); });
