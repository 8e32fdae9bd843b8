// Apache Kafka's Java clients in the exactly-once read-process-write loop, as Kafka's documentation writes it:
// a read_committed group member (group.protocol=consumer) without auto-commit and a transactional producer; per
// transaction up to 100 records copied from SOURCE to SINK (same partition, same key and value) and the consumer's
// positions sent with them (sendOffsetsToTransaction). A transaction that fails is aborted (after a fatal error:
// a new producer) and the member starts again from the group's committed offsets (a new consumer).
// With a broker that finalizes transaction.version 2 the producer runs version 2 (an epoch bump at every end).
//
// usage: java EosPipeline BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID RECORDS
// stdin:  "hold"   the next transaction stops after its records and offsets are sent, prints "holding", and
//                  waits for "resume" (at most 60 s) before it commits
// stdout: "committed N" after each commit (N: records committed so far), "aborted REASON", and at the end one JSON
//         line {"committed": N, "aborts": [...]}; exit 0 once RECORDS records are committed.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosPipeline {
    static String bootstrap, source, sink, group, transactionalId;
    static volatile boolean hold = false;
    static volatile CountDownLatch resume = new CountDownLatch(1);

    public static void main(String[] args) throws Exception {
        bootstrap = args[0]; source = args[1]; sink = args[2]; group = args[3]; transactionalId = args[4];
        int total = Integer.parseInt(args[5]);
        Thread commands = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                for (String line; (line = in.readLine()) != null; ) {
                    if (line.trim().equals("hold")) hold = true;
                    if (line.trim().equals("resume")) resume.countDown();
                }
            } catch (Exception ignored) {
            }
        });
        commands.setDaemon(true);
        commands.start();
        List<String> aborts = new ArrayList<>();
        KafkaConsumer<byte[], byte[]> consumer = consumer();
        KafkaProducer<byte[], byte[]> producer = producer();
        int committed = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(300);
        while (committed < total && System.nanoTime() < deadline) {
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
            if (records.isEmpty()) continue;
            try {
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : records)
                    producer.send(new ProducerRecord<>(sink, r.partition(), r.key(), r.value()));
                Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
                for (TopicPartition tp : consumer.assignment())
                    positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
                if (hold) {
                    hold = false;
                    say("holding");
                    resume.await(60, TimeUnit.SECONDS);
                }
                commit(producer);
                committed += records.count();
                say("committed " + committed);
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                     | UnsupportedVersionException | InvalidProducerEpochException | TimeoutException e) {
                aborts.add(e.getClass().getSimpleName() + ": " + e.getMessage());
                say("aborted " + e.getClass().getSimpleName());
                producer.close(Duration.ofSeconds(5));   // fatal for this producer: a new one fences it and aborts
                producer = producer();
                consumer.close();
                consumer = consumer();
            } catch (KafkaException e) {
                aborts.add(e.getClass().getSimpleName() + ": " + e.getMessage());
                say("aborted " + e.getClass().getSimpleName());
                try {
                    producer.abortTransaction();
                } catch (KafkaException again) {
                    producer.close(Duration.ofSeconds(5));
                    producer = producer();
                }
                consumer.close();
                consumer = consumer();
            }
        }
        consumer.close();
        producer.close();
        StringBuilder json = new StringBuilder("{\"committed\": " + committed + ", \"aborts\": [");
        for (int i = 0; i < aborts.size(); i++)
            json.append(i > 0 ? ", " : "").append('"').append(aborts.get(i).replace("\\", "\\\\").replace("\"", "'")).append('"');
        say(json.append("]}").toString());
        System.exit(committed >= total ? 0 : 1);
    }

    /** commitTransaction, asked again while its outcome is not known yet (the coordinator moved: a timeout). */
    static void commit(KafkaProducer<byte[], byte[]> producer) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                if (System.nanoTime() > deadline) throw e;
            }
        }
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static KafkaConsumer<byte[], byte[]> consumer() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 100);
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(source));
        return c;
    }

    static KafkaProducer<byte[], byte[]> producer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 60000);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        producer.initTransactions();
        return producer;
    }
}
