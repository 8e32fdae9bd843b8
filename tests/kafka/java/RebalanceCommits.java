import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/** Three KIP-848 consumers (group.protocol=consumer) of one group, each committing synchronously after every
 *  small poll, the second and third joining while the first consumes: each rebalance moves partitions while
 *  commits are under way. Prints one JSON line: records consumed (distinct), commits that failed (by exception class), and whether
 *  the group's committed offsets reached the end of every partition. Run against Kafka 4.4 and against Kray. */
public class RebalanceCommits {
    static final int PARTITIONS = 6, RECORDS = 3000, MEMBERS = 3;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) p.send(new ProducerRecord<>(topic, i % PARTITIONS, "k" + i, "v" + i));
            p.flush();
        }
        Set<String> seen = ConcurrentHashMap.newKeySet();
        Map<String, AtomicInteger> failures = new ConcurrentHashMap<>();
        AtomicInteger commits = new AtomicInteger();
        long deadline = System.currentTimeMillis() + 60_000;
        ExecutorService pool = Executors.newFixedThreadPool(MEMBERS);
        Callable<Void> member = () -> {
            Properties cp = new Properties();
            cp.putAll(common);
            cp.put("group.id", group);
            cp.put("group.protocol", "consumer");
            cp.put("enable.auto.commit", "false");
            cp.put("auto.offset.reset", "earliest");
            cp.put("max.poll.records", "10");
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
                c.subscribe(List.of(topic));
                while (seen.size() < RECORDS && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<String, String> r : records) seen.add(r.partition() + ":" + r.offset());
                    if (!records.isEmpty()) {
                        try {
                            c.commitSync();
                            commits.incrementAndGet();
                        } catch (Exception e) {
                            failures.computeIfAbsent(e.getClass().getSimpleName() + ": " + e.getMessage(),
                                                     k -> new AtomicInteger()).incrementAndGet();
                        }
                        Thread.sleep(5);  // slow enough that the others join mid-way
                    }
                }
                c.commitSync(Duration.ofSeconds(10));
            }
            return null;
        };
        List<Future<Void>> members = new ArrayList<>();
        for (int i = 0; i < MEMBERS; i++) {
            while (seen.size() < i * RECORDS / (MEMBERS + 1) && System.currentTimeMillis() < deadline) Thread.sleep(10);
            members.add(pool.submit(member));
        }
        String error = null;
        try { for (Future<Void> m : members) m.get(90, TimeUnit.SECONDS); } catch (Exception e) { error = e.toString(); }
        pool.shutdownNow();
        boolean atEnd;
        try (Admin admin = Admin.create(common)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            atEnd = committed.size() == PARTITIONS && total == RECORDS;
        }
        StringBuilder f = new StringBuilder("{");
        for (Map.Entry<String, AtomicInteger> e : failures.entrySet()) {
            if (f.length() > 1) f.append(",");
            f.append('"').append(e.getKey().replace("\\", "\\\\").replace("\"", "'")).append("\":").append(e.getValue().get());
        }
        f.append("}");
        System.out.println("{\"consumed\":" + seen.size() + ",\"commits\":" + commits.get() + ",\"failures\":" + f
                           + ",\"committed_at_end\":" + atEnd + ",\"error\":" + (error == null ? "null" : "\"" + error.replace("\"", "'") + "\"") + "}");
    }
}
